"""Softmax over any axis, and elementwise ops with a constant first operand, on the NPU.

A softmax over another axis than the last is read through a transposing view and written back
through the inverse one (the canonicalisation's ``permute_dims -> softmax(last) -> permute_dims``,
whose transposes are views inside a partition); ``c - x`` is ``(-1) * x + c`` and ``c / x`` is
``c * (1 / x)`` (``VRECIP``). Small ONNX models as torch's exporter writes them (``onnx.helper``),
against llvm (``build_reference``) and onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import tvm
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm import relax

import tvm_npu

RTOL, ATOL = 1e-4, 1e-5


def _check(model: onnx.ModelProto, host_ops: dict[str, int] | None = None, partitions: int = 1) -> tvm_npu.BuildInfo:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    ex, info = tvm_npu.build_with_info(model, "npu")
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ref = relax.VirtualMachine(tvm_npu.build_reference(model), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ort = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = ort.run(None, {"x": x})
    assert info.host_ops == (host_ops or {}), info.host_ops
    assert info.partitions == partitions, info.partitions
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
    return info


def _softmaxes(info: tvm_npu.BuildInfo) -> int:
    """Softmaxes the NPU runs."""
    return info.npu_ops.get("relax.nn.softmax", 0)


# ---- softmax over any axis ----------------------------------------------------------------------


@pytest.mark.parametrize("axis", [1, -2, -1])
def test_softmax_over_an_axis_of_a_conv_output(axis: int) -> None:
    """Conv (NCHW) -> Softmax(axis) -> Conv: the softmax over the channels (1), the rows (-2) or the
    columns (-1) is one NPU operator of the one partition."""
    net = OnnxNet()
    y = net.conv("x", 4, 8, 3, relu=False)
    s = net.node("Softmax", [y], axis=axis)
    out = net.conv(s, 8, 8, 1, relu=False)
    info = _check(net.model(out, [1, 4, 6, 10], [1, 8, 6, 10]))
    assert _softmaxes(info) == 1


@pytest.mark.parametrize("tail", ["conv", "matmul"])
def test_yolov8_dfl_softmax_over_axis_1(tail: str) -> None:
    """YOLOv8's distribution focal loss head: Conv -> Reshape (1, 16, 4, N) -> Softmax(axis=1) -> a 1x1
    Conv with the weights 0..15 (the expectation over the 16 bins), or a MatMul doing the same over a
    transposed view; all on the NPU."""
    n = 48
    net = OnnxNet()
    box = net.conv("x", 8, 64, 1, relu=False)  # (1, 64, 6, 8): 4 sides x 16 bins per anchor
    shaped = net.node("Reshape", [box, net.const(np.array([1, 16, 4, n]), np.int64)])
    prob = net.node("Softmax", [shaped], axis=1)
    bins = np.arange(16, dtype=np.float32)
    if tail == "conv":
        dist = net.node("Conv", [prob, net.const(bins.reshape(1, 16, 1, 1))])
        out = net.node("Reshape", [dist, net.const(np.array([1, 4, n]), np.int64)])
        out_shape = [1, 4, n]
    else:
        rows = net.node("Transpose", [prob], perm=[0, 2, 3, 1])  # (1, 4, N, 16)
        out = net.node("MatMul", [rows, net.const(bins.reshape(16, 1))])
        out_shape = [1, 4, n, 1]
    info = _check(net.model(out, [1, 8, 6, 8], out_shape))
    assert _softmaxes(info) == 1


def test_softmax_over_axis_minus_2_of_a_graph_input() -> None:
    """A softmax over axis -2 of a model input: the partition reads the input through a transposing view
    and writes its result back through the inverse view."""
    net = OnnxNet()
    s = net.node("Softmax", ["x"], axis=-2)
    out = net.node("Relu", [s])
    info = _check(net.model(out, [2, 5, 12], [2, 5, 12]))
    assert _softmaxes(info) == 1


def test_log_softmax_over_the_channels() -> None:
    """LogSoftmax over axis 1: with the vector engine's logarithm (``VLOG``) one row program read through a
    transposing view, in the conv's partition (it stayed on the host before; ``tests/e2e/test_log_softmax.py``)."""
    net = OnnxNet()
    y = net.conv("x", 4, 8, 1, relu=False)
    out = net.node("LogSoftmax", [y], axis=1)
    info = _check(net.model(out, [1, 4, 4, 4], [1, 8, 4, 4]))
    assert _softmaxes(info) == 0
    assert info.npu_ops.get("relax.log") == 1


# ---- elementwise ops with a constant first operand ---------------------------------------------


def test_one_minus_sigmoid() -> None:
    """``1 - sigmoid(conv(x))``: the conv's epilogue (sigmoid, then -1 * y + 1), exactly."""
    net = OnnxNet()
    y = net.conv("x", 4, 8, 3, relu=False)
    sig = net.node("Sigmoid", [y])
    out = net.node("Sub", [net.const(np.float32(1.0)), sig])
    info = _check(net.model(out, [1, 4, 8, 8], [1, 8, 8, 8]))
    assert sum(len(plan.ops) for plan in info.plans) == 1  # everything in the conv's epilogue


def test_two_over_x_squared_plus_one() -> None:
    """``2 / (x * x + 1)`` of a conv output: a square, + 1, a reciprocal and * 2 on the NPU."""
    net = OnnxNet()
    y = net.conv("x", 4, 8, 3, relu=False)
    sq = net.node("Mul", [y, y])
    den = net.node("Add", [sq, net.const(np.float32(1.0))])
    out = net.node("Div", [net.const(np.float32(2.0)), den])
    _check(net.model(out, [1, 4, 8, 8], [1, 8, 8, 8]))


@pytest.mark.parametrize("op", ["Sub", "Div", "Add", "Mul", "Max"])
def test_per_channel_constant_first(op: str) -> None:
    """``c op x`` with one constant per channel (``(1, C, 1, 1)``), of a conv output and of a model input."""
    net = OnnxNet()
    c = net.rng.uniform(0.5, 2.0, (1, 8, 1, 1)).astype(np.float32)
    y = net.node("Sigmoid", [net.conv("x", 4, 8, 3, relu=False)]) if op == "Div" else net.conv("x", 4, 8, 3, relu=False)
    out = net.node(op, [net.const(c), y])
    _check(net.model(out, [1, 4, 8, 8], [1, 8, 8, 8]))


def test_constant_minus_model_input() -> None:
    """``c - x`` and ``c / x`` of a model input alone: one elementwise NPU operator each."""
    net = OnnxNet()
    c = net.rng.uniform(0.5, 2.0, (1, 6, 1, 1)).astype(np.float32)
    d = net.node("Sub", [net.const(c), "x"])
    e = net.node("Sigmoid", [d])
    out = net.node("Div", [net.const(np.float32(3.0)), e])
    _check(net.model(out, [1, 6, 5, 7], [1, 6, 5, 7]))
