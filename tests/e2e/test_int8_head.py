"""The int8 classifier head of converter-made models (``... -> Q -> DQ -> Softmax -> Q``, issue 15) on the NPU.

The integer rewrite leaves the dequantize / quantize around the softmax as float32 arithmetic
(``relay_patterns/quantized.py``): ``(astype(x) - z) * s`` and, for any output scale,
``quantize(float32(y * float64(1 / s)), 1, z)``, exactly ONNX's quotient ``y / s``
(``relay_patterns/qdivide.py``). Checked on ``onnx.helper`` models (a lone head, and a MatMul in the
converter's form before it):

* no host operator and one NPU partition; NPU == llvm bit for bit;
* against onnxruntime at both levels: at most 1 step apart (its softmax rounds differently in float);
* a quantize by a scale that is not a power of two runs on the NPU too (the exact reciprocal multiply).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from helpers import ort_session
from onnx import TensorProto, helper, numpy_helper
from test_quantized_models import agreement, run_vm  # tests/e2e is on sys.path (pytest's prepend import)

import tvm_npu
from tvm_npu.tools.inspection import inspect_model

pytestmark = pytest.mark.slow  # quantized models built and run: the quick tier leaves it out

ROWS, CLASSES, FEATURES, SAMPLES = (2, 3), 10, 64, 4
#: (input scale, input zero point, output scale, output zero point, output type) of DQ -> Softmax -> Q:
#: TFLite's softmax output (1/256, -128), a scale that is not a power of two on the input, a power of two
#: that saturates (probabilities near 1 quantize above 127), a uint8 output.
HEADS = [(0.1, 3, 1 / 256, -128, "int8"), (0.0873, -5, 1 / 256, -128, "int8"), (0.05, 0, 2**-7, 0, "int8"),
         (0.07, 10, 1 / 256, 0, "uint8")]
ONNX_TYPES = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}


def _const(name: str, value: object, dtype: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def head_model(s_in: float, z_in: int, s_out: float, z_out: int, out_type: str = "int8", *,
               matmul: bool = False) -> onnx.ModelProto:
    """int8 ``x -> DQ -> Softmax -> Q``; with ``matmul`` the converter's classifier before it:
    ``DQ(x) @ DQ(W per column) + DQ(int32 bias) -> Q -> DQ`` (x of ``FEATURES`` values per row)."""
    rng = np.random.default_rng(7)
    inits = [_const("s_in", s_in, "float32"), _const("z_in", z_in, "int8"),
             _const("s_out", s_out, "float32"), _const("z_out", z_out, out_type)]
    nodes = []
    logits = "x"
    if matmul:
        s_x, s_w = np.float32(0.05), rng.uniform(0.002, 0.004, CLASSES).astype(np.float32)
        inits += [_const("s_x", s_x, "float32"), _const("z_x", -3, "int8"),
                  _const("w", rng.integers(-127, 128, (FEATURES, CLASSES)), "int8"), _const("s_w", s_w, "float32"),
                  _const("z_w", np.zeros(CLASSES), "int8"), _const("b", rng.integers(-2000, 2000, CLASSES), "int32"),
                  _const("s_b", s_x * s_w, "float32"), _const("z_b", np.zeros(CLASSES), "int32")]
        nodes += [helper.make_node("DequantizeLinear", ["x", "s_x", "z_x"], ["xf"]),
                  helper.make_node("DequantizeLinear", ["w", "s_w", "z_w"], ["wf"], axis=1),
                  helper.make_node("DequantizeLinear", ["b", "s_b", "z_b"], ["bf"], axis=0),
                  helper.make_node("MatMul", ["xf", "wf"], ["mm"]), helper.make_node("Add", ["mm", "bf"], ["yf"]),
                  helper.make_node("QuantizeLinear", ["yf", "s_in", "z_in"], ["logits"])]
        logits = "logits"
    nodes += [helper.make_node("DequantizeLinear", [logits, "s_in", "z_in"], ["lf"]),
              helper.make_node("Softmax", ["lf"], ["p"], axis=-1),
              helper.make_node("QuantizeLinear", ["p", "s_out", "z_out"], ["y"])]
    shape = [*ROWS, FEATURES if matmul else CLASSES]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.INT8, shape)],
                              [helper.make_tensor_value_info("y", ONNX_TYPES[out_type], [*ROWS, CLASSES])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def int8_inputs(model: onnx.ModelProto, count: int = SAMPLES) -> list[np.ndarray]:
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    rng = np.random.default_rng(100)
    return [rng.integers(-128, 128, shape).astype(np.int8) for _ in range(count)]


def onnxruntime(model: onnx.ModelProto, inputs: Sequence[np.ndarray], *, basic: bool) -> np.ndarray:
    session = ort_session(model, basic=basic)
    return np.concatenate([session.run(None, {"x": x})[0] for x in inputs])


def check_numbers(model: onnx.ModelProto, target: str = "npu") -> tvm_npu.BuildInfo:
    """NPU == llvm bit for bit and within 1 step of onnxruntime at both levels; returns the build's info."""
    executable, info = tvm_npu.build_with_info(model, target)
    inputs = int8_inputs(model)
    npu = run_vm(executable, inputs)
    llvm = run_vm(tvm_npu.build_reference(model), inputs)
    exact = agreement(npu, llvm)
    assert exact.same == exact.total, f"NPU vs llvm: {exact}"
    for basic in (True, False):
        ort = agreement(npu, onnxruntime(model, inputs, basic=basic))
        assert ort.max_steps <= 1, f"NPU vs onnxruntime ({'BASIC' if basic else 'default level'}): {ort}"
    assert len(np.unique(npu)) > 3, "a head whose outputs are all alike checks nothing"
    return info


@pytest.mark.parametrize("target", ["npu", "npu -fusion=0"])
@pytest.mark.parametrize("head", HEADS, ids=lambda h: f"{h[0]}_{h[1]}_{h[2]:.6g}_{h[3]}_{h[4]}")
def test_head_runs_in_one_npu_partition(head: tuple, target: str) -> None:
    info = check_numbers(head_model(*head), target)
    assert info.host_ops == {} and info.partitions == 1, (info.host_ops, info.partitions)


def test_matmul_head_runs_with_the_classifier() -> None:
    """The MatMul's requantised logits, their dequantization, the softmax and its quantize: one partition."""
    info = check_numbers(head_model(0.2, 10, 1 / 256, -128, matmul=True))
    assert info.host_ops == {} and info.partitions == 1, (info.host_ops, info.partitions)


def test_quantize_by_another_scale_runs_on_the_npu() -> None:
    """The NPU multiplies by float64(1 / s) and rounds once, ONNX's quotient exactly: the head stays in one
    partition (issue 24: the power-of-two rule went; tests/relay_patterns/test_lone_quantize.py checks the
    quotient)."""
    model = head_model(0.1, 3, 0.0041, -128)
    info = check_numbers(model)
    assert info.host_ops == {} and info.partitions == 1, (info.host_ops, info.partitions)
    assert all(op.where == "NPU" for op in inspect_model(model).operators)
