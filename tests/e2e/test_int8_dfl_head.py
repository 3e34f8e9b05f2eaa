"""YOLOv8's DFL head in int8 (issue 24): 8-bit box logits reshaped, transposed, dequantized, a softmax over the
bins (axis 1), quantized, and the fixed 1x1 convolution by the bin indices.

The dequantize is moved ahead of the transpose and the quantize after the softmax's inverse transpose
(``relay_patterns/dequantize_views.py``), so both read their tensors in order instead of through transposing
strides. Checked on an ``onnx.helper`` model quantized both by ``quantize_static`` and in the TFLite form: no
host operator beyond the model's float-input quantize / float-output dequantize, the NPU equal to the llvm
build bit for bit, every quantized layer within the numerics standard against onnxruntime, and fewer NPU
cycles than with the rewrite turned off (the same build otherwise)."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

import tvm_npu
from tvm_npu.testing.layerwise import IDENTICAL, MAX_STEPS, layer_check
from tvm_npu.testing.tflite_form import tflite_form
from tvm_npu.tools.bench import profile_model
from tvm_npu.tools.quantize import quantize_model

pytestmark = pytest.mark.slow  # two int8 models built four times each and simulated

BINS, ANCHORS, CHANNELS = 16, 64, 32
BOUNDARY = ("relax.quantize", "relax.dequantize")
REWRITE = "npu.canonicalize.dequantize-views"


def dfl_model() -> onnx.ModelProto:
    """float ``x -> Conv 1x1 (4 * BINS boxes) -> Reshape [1, 4, BINS, A] -> Transpose [1, BINS, 4, A] -> Softmax(axis 1)
    -> Conv 1x1 by the bin indices`` (A = 8 x 8 anchors), as the YOLOv8 exporters write the head."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (4 * BINS, CHANNELS, 1, 1)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.5, 4 * BINS).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([1, 4, BINS, ANCHORS], np.int64), "shape"),
             numpy_helper.from_array(np.arange(BINS, dtype=np.float32).reshape(1, BINS, 1, 1), "bins")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["boxes"]),
             helper.make_node("Reshape", ["boxes", "shape"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Softmax", ["t"], ["p"], axis=1),
             helper.make_node("Conv", ["p", "bins"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CHANNELS, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, ANCHORS])
    graph = helper.make_graph(nodes, "dfl", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def quantized(form: str) -> tuple[onnx.ModelProto, np.ndarray]:
    model = dfl_model()
    x = np.random.default_rng(0).standard_normal((1, CHANNELS, 8, 8)).astype(np.float32)
    if form == "tflite":
        return tflite_form(model), np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    with tempfile.TemporaryDirectory(prefix="dfl-int8.") as tmp:
        qmodel = onnx.load(str(quantize_model(model, Path(tmp) / "dfl.onnx", random=8, seed=0)))
    return onnx.shape_inference.infer_shapes(qmodel), x  # (the layer check reads every tensor's type)


def _built(model: onnx.ModelProto, x: np.ndarray) -> tuple[tvm_npu.BuildInfo, np.ndarray, int]:
    """(build info, NPU output, NPU cycles)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        executable, info = tvm_npu.build_with_info(model, "npu")
    outputs, prof, _ = profile_model(executable, [x], trace=True)
    return info, outputs[0], prof.report().cycles


@pytest.mark.parametrize("form", ["quantize_static", "tflite"])
def test_dfl_head_in_order_and_exact(form: str) -> None:
    model, x = quantized(form)
    info, got, cycles = _built(model, x)
    host = {op: n - (op in BOUNDARY) for op, n in info.host_ops.items()}
    assert not {op: n for op, n in host.items() if n > 0} and info.partitions == 1, (info.host_ops, info.partitions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = profile_model(tvm_npu.build_reference(model), [x])[0][0]
    assert np.array_equal(got, ref), f"{np.mean(got != ref):.2%} of the outputs differ from llvm"
    assert len(np.unique(got)) > 3, "a head whose outputs are all alike checks nothing"
    with tvm.transform.PassContext(disabled_pass=[REWRITE]):
        _, unmoved, cycles_unmoved = _built(model, x)
    assert np.array_equal(unmoved, got)
    assert cycles < cycles_unmoved, (cycles, cycles_unmoved)
    summary = layer_check(model, model.graph.input[0].name, x, "npu")["summary"]["basic"]
    assert summary["min_identical"] >= IDENTICAL and summary["max_steps"] <= MAX_STEPS, summary
