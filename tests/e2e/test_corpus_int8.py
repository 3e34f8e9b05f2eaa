"""The exporter-style corpus in int8, quantized both by onnxruntime's ``quantize_static`` and in the TFLite
converter + tf2onnx form (issue 24): nothing on the host beyond the model's own float-input quantize and
float-output dequantize, one NPU partition, the same integers as the llvm build, and every quantized layer
within the numerics standard against onnxruntime (``benchmarks/converter_corpus.py`` prints the table)."""

from __future__ import annotations

import functools
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

import tvm_npu
from tvm_npu.testing.corpus import CORPUS
from tvm_npu.testing.layerwise import IDENTICAL, MAX_STEPS, layer_check
from tvm_npu.testing.tflite_form import tflite_form
from tvm_npu.tools.bench import profile_model
from tvm_npu.tools.quantize import quantize_model

pytestmark = pytest.mark.slow  # 14 int8 networks built twice (NPU and llvm) and simulated

FORMS = ("quantize_static", "tflite")
CASES = [f"{name}-{form}" for name in CORPUS for form in FORMS]
#: The boundary every quantized model needs on the host whatever the compiler does (one of each at most).
BOUNDARY = ("relax.quantize", "relax.dequantize")


@functools.cache
def quantized(case: str) -> tuple[onnx.ModelProto, np.ndarray]:
    """(the int8 model, its input): the benchmark's seeded image, NHWC for the TFLite form."""
    name, form = case.split("-")
    model = CORPUS[name]()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    if form == "tflite":
        return tflite_form(model), np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    with tempfile.TemporaryDirectory(prefix="corpus-int8.") as tmp:
        qmodel = onnx.load(str(quantize_model(model, Path(tmp) / f"{name}.onnx", random=8, seed=0)))
    return onnx.shape_inference.infer_shapes(qmodel), x


@functools.cache
def built(case: str) -> tuple[tvm_npu.BuildInfo, np.ndarray, np.ndarray]:
    """(build info, NPU output, llvm output) of one case, once for the tests that read it."""
    model, x = quantized(case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        executable, info = tvm_npu.build_with_info(model, "npu")
        reference = tvm_npu.build_reference(model)
    return info, profile_model(executable, [x])[0][0], profile_model(reference, [x])[0][0]


@pytest.mark.parametrize("case", CASES)
def test_only_the_boundary_stays_on_the_host(case: str) -> None:
    info = built(case)[0]
    host = dict(info.host_ops)
    for op in BOUNDARY:
        host[op] = host.get(op, 0) - 1
    extra = {op: n for op, n in host.items() if n > 0}
    assert not extra and info.partitions == 1, f"{case}: on the host {info.host_ops}, {info.partitions} partitions"


@pytest.mark.parametrize("case", CASES)
def test_bit_exact_with_llvm(case: str) -> None:
    _, got, ref = built(case)
    assert got.shape == ref.shape and np.array_equal(got, ref), \
        f"{case}: {np.mean(got != ref):.2%} of the outputs differ, by up to {np.max(np.abs(got - ref))}"


@pytest.mark.parametrize("case", ["pp_lcnet-tflite", "efficientnet-quantize_static", "yolov8-tflite"])
def test_every_layer_within_the_standard_against_onnxruntime(case: str) -> None:
    """Each quantized layer compiled alone on onnxruntime's own input for it, against onnxruntime's float
    path (ORT_ENABLE_BASIC). (The whole corpus: ``benchmarks/converter_corpus.py --layers``.)"""
    model, x = quantized(case)
    summary = layer_check(model, model.graph.input[0].name, x, "npu")["summary"]["basic"]
    assert summary["min_identical"] >= IDENTICAL and summary["max_steps"] <= MAX_STEPS, f"{case}: {summary}"
