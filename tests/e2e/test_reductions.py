"""Plain reductions (``ReduceMean`` / ``ReduceSum`` / ``ReduceMax`` / ``ReduceMin``) as NPU row programs
whose result is one value per row (issue 26 item 4, issue 24 item 4).

A reduction over trailing axes is a row program that ends in its per-row value (the template writes a
``rows x 1`` result, a view gives it the reduced shape); over leading contiguous axes (axis 1 of
``[N, T, C]``, the token mean of a ViT head) it reads its rows through a transposing view. A mean over
H and W of NCHW stays the NPU's global average pool. fp32 against llvm (``build_reference``) and
onnxruntime (rtol 1e-4 / atol 1e-5); the 8-bit form ``DQ -> Reduce -> Q`` (onnxruntime's QDQ) runs as
the float program between the NPU's dequantize and quantize, bit-exact with llvm and per layer within
the standard against onnxruntime (>= 99.9 % identical, at most one step).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import ort_session
from onnx import TensorProto, helper, numpy_helper
from test_quantized_models import run_vm  # tests/e2e is on sys.path (pytest's prepend import)

import tvm_npu

RTOL, ATOL = 1e-4, 1e-5
OPS = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin")


def _reduce(op: str, x: str, y: str, axes: list[int], keepdims: int, opset: int,
            inits: list[onnx.TensorProto]) -> onnx.NodeProto:
    """The reduction as the opset writes it: ``axes`` an attribute (opset 13, but ReduceSum's an input), an
    input from opset 18."""
    if opset >= 18 or op == "ReduceSum":
        inits.append(numpy_helper.from_array(np.asarray(axes, np.int64), f"{y}_axes"))
        return helper.make_node(op, [x, f"{y}_axes"], [y], keepdims=keepdims)
    return helper.make_node(op, [x], [y], axes=axes, keepdims=keepdims)


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], shape: list[int], axes: list[int],
           keepdims: int, opset: int) -> onnx.ModelProto:
    reduced = {a % len(shape) for a in axes}
    out = [1 if i in reduced else d for i, d in enumerate(shape) if keepdims or i not in reduced]
    graph = helper.make_graph(nodes, "reduction", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def float_model(op: str, shape: list[int], axes: list[int], keepdims: int, opset: int = 13,
                square: bool = False) -> onnx.ModelProto:
    """``Reduce(x)`` (or ``Reduce(x * x)``: an elementwise prologue fused into the program)."""
    nodes, inits, x = [], [], "x"
    if square:
        nodes.append(helper.make_node("Mul", ["x", "x"], ["sq"]))
        x = "sq"
    nodes.append(_reduce(op, x, "y", axes, keepdims, opset, inits))
    return _model(nodes, inits, shape, axes, keepdims, opset)


def quantized_model(op: str, shape: list[int], axes: list[int], keepdims: int, opset: int = 13,
                    s_out: float = 0.0110741) -> onnx.ModelProto:
    """``Q -> DQ -> Reduce -> Q -> DQ`` with int8 scales as ``quantize_static`` writes them (float in and out)."""
    inits = [numpy_helper.from_array(np.asarray(v, dt), n) for n, v, dt in
             (("s_in", 0.0231337, np.float32), ("z_in", 3, np.int8), ("s_out", s_out, np.float32),
              ("z_out", -5, np.int8))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xf"]),
             _reduce(op, "xf", "r", axes, keepdims, opset, inits),
             helper.make_node("QuantizeLinear", ["r", "s_out", "z_out"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "s_out", "z_out"], ["y"])]
    return _model(nodes, inits, shape, axes, keepdims, opset)


def _data(shape: list[int], seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _build(model: onnx.ModelProto, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, tvm_npu.BuildInfo]:
    """NPU, llvm and onnxruntime (as written: float DQ -> op -> Q) outputs, and the build's info."""
    ex, info = tvm_npu.build_with_info(model, "npu")
    out = run_vm(ex, [x])
    ref = run_vm(tvm_npu.build_reference(model), [x])
    (expected,) = ort_session(model, basic=True).run(None, {"x": x})
    return out, ref, expected, info


def _npu_reductions(info: tvm_npu.BuildInfo) -> int:
    return sum(n for op, n in info.npu_ops.items() if op in ("relax.mean", "relax.sum", "relax.max", "relax.min"))


# ---- fp32 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("shape", "axes", "keepdims", "opset"), [
    ([4, 8, 24], [-1], 0, 13),
    ([4, 8, 24], [2], 1, 18),
    ([2, 6, 5, 7], [2, 3], 1, 18),
    ([2, 16, 48], [1], 0, 13),
    ([2, 16, 48], [1], 1, 18),
])
def test_reduction_fp32(op: str, shape: list[int], axes: list[int], keepdims: int, opset: int) -> None:
    """Over the last axes or a leading one, keepdims 0/1, both opsets: one NPU operator, no host call."""
    model = float_model(op, shape, axes, keepdims, opset)
    x = _data(shape)
    out, ref, expected, info = _build(model, x)
    assert info.host_ops == {}, info.host_ops
    assert info.partitions == 1
    assert _npu_reductions(info) == 1, info.npu_ops
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


def test_mean_of_squares_fuses_its_prologue() -> None:
    """``ReduceMean(x * x)`` over the last axis (an RMS statistic): the multiply is a step of the program."""
    from tvm_npu.compiler.driver import partition_plans

    model = float_model("ReduceMean", [8, 40], [-1], 0, square=True)
    x = _data([8, 40])
    out, ref, expected, info = _build(model, x)
    assert info.host_ops == {} and info.partitions == 1
    (plan,) = partition_plans(model)
    assert [type(op.spec).__name__ for op in plan.ops] == ["RowwiseSpec"], plan.ops
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax"])
def test_reduction_over_every_axis(op: str) -> None:
    """No ``axes`` (opset 13): every axis, one row: ``[2, 3, 20] -> [1, 1, 1]``."""
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "all",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 20])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = _data([2, 3, 20])
    out, ref, expected, info = _build(model, x)
    assert info.host_ops == {} and _npu_reductions(info) == 1, (info.host_ops, info.npu_ops)
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("keepdims", [0, 1])
def test_spatial_mean_stays_a_global_average_pool(keepdims: int) -> None:
    """A mean over H and W of NCHW is not made a row program: it keeps the global average pool form."""
    from tvm_npu.compiler.driver import partition_plans

    model = float_model("ReduceMean", [1, 8, 6, 6], [2, 3], keepdims)
    x = _data([1, 8, 6, 6])
    out, ref, expected, info = _build(model, x)
    assert info.host_ops == {} and info.partitions == 1
    kinds = {type(op.spec).__name__ for plan in partition_plans(model) for op in plan.ops}
    assert "PoolSpec" in kinds and "RowwiseSpec" not in kinds, kinds
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


# ---- 8-bit: DQ -> Reduce -> Q ----------------------------------------------------------------------


def _steps(a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    return np.abs(np.rint((a.astype(np.float64) - b) / scale)).astype(np.int64)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("shape", "axes", "keepdims", "opset"), [
    ([64, 32, 24], [-1], 0, 13),
    ([4, 24, 40], [1], 0, 18),
    ([4, 24, 40], [1], 1, 13),
])
def test_quantized_reduction(op: str, shape: list[int], axes: list[int], keepdims: int, opset: int) -> None:
    """``DQ -> Reduce -> Q`` on the NPU (no host call), bit-exact with llvm, within the standard of onnxruntime.
    The scales are calibration-like (a ratio of two nice decimals, 0.023 / 0.17, puts 1 in 170 integer sums
    exactly on a rounding tie, where onnxruntime's float summation order decides: 0.2 % one step apart)."""
    s_out = 0.0110741 if op != "ReduceSum" else 0.1712893
    model = quantized_model(op, shape, axes, keepdims, opset, s_out=s_out)
    x = _data(shape, seed=4)
    out, ref, expected, info = _build(model, x)
    assert info.host_ops == {}, info.host_ops
    assert _npu_reductions(info) == 1, info.npu_ops
    np.testing.assert_array_equal(out, ref)
    steps = _steps(out, expected, s_out)
    assert steps.max() <= 1 and (steps == 0).mean() >= 0.999, (steps.max(), (steps == 0).mean())


# ---- the corpus Keras ViT (tf2onnx): its token mean, and its layer norms chopped by Q/DQ ----------------


def test_vit_encoder_runs_without_host_calls(tmp_path: object) -> None:
    """fp32: the final ``ReduceMean(axes=[1], keepdims=0)`` over the tokens was the one host call; int8
    (``quantize_static``): each layer norm's ``DQ -> ReduceMean -> Q`` were 11. Now none, one partition each,
    the int8 output bit-exact with llvm."""
    from tvm_npu.testing.corpus import vit_encoder
    from tvm_npu.tools.quantize import quantize_model

    model = vit_encoder()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = _data(shape, seed=0)
    out, ref, expected, info = _build(model, x)
    assert info.host_ops == {} and info.partitions == 1, (info.host_ops, info.partitions)
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
    qmodel = onnx.load(str(quantize_model(model, tmp_path / "vit.int8.onnx", random=8, seed=0)))
    out, ref, _, info = _build(qmodel, x)
    assert info.host_ops == {} and info.partitions == 1, (info.host_ops, info.partitions)
    assert _npu_reductions(info) >= 11, info.npu_ops  # (a mean of 8-bit values as an exact integer sum)
    np.testing.assert_array_equal(out, ref)
