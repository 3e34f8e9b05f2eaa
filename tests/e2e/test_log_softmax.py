"""Log-softmax on the NPU: one row-wise operator (``VRMAX, VSUB, VEXP, VRSUM, VLOG, VSUB``) whatever form the
model writes it in: ONNX ``LogSoftmax`` over the last axis or the channels of a conv output, a CRNN / CTC
head (``MatMul -> LogSoftmax(axis=2)``), ``x - max - log(sum(exp(x - max)))`` written out, and
``Log(Softmax(x))``. Small ONNX models (``onnx.helper``) against llvm (``build_reference``) and onnxruntime,
no operator on the host."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from helpers import check_against_references  # tests/ is on sys.path
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm.script import relax as R
from tvm_npu.relay_patterns.log_softmax import log_softmax_as_primitives

import tvm_npu
from tvm_npu.core.ops import RowKind, RowwiseSpec

RTOL, ATOL = 1e-4, 1e-5
LOG_SOFTMAX = ["VRMAX", "VSUB", "VEXP", "VRSUM", "VLOG", "VSUB"]


def _check(model: onnx.ModelProto, scale: float = 1.0) -> tvm_npu.BuildInfo:
    """NPU vs llvm and onnxruntime (inputs ``scale`` times a standard normal); no host operator, one partition."""
    return check_against_references(model, scale=scale)


def _programs(info: tvm_npu.BuildInfo) -> list[list[str]]:
    """The step opcodes of every row program the NPU runs."""
    return [[s.op.name for s in o.spec.program] for p in info.plans for o in p.ops
            if isinstance(o.spec, RowwiseSpec) and o.spec.kind == RowKind.PROGRAM]


def _dense(net: OnnxNet, x: str, cin: int, cout: int) -> str:
    return net.node("MatMul", [x, net.const(net.rng.standard_normal((cin, cout)) / np.sqrt(cin))])


@pytest.mark.parametrize("axis", [-1, 1])
def test_log_softmax_of_a_conv_output(axis: int) -> None:
    """Conv (NCHW) -> LogSoftmax over the columns (-1) or the channels (1, read through a transposing view)."""
    net = OnnxNet()
    y = net.node("LogSoftmax", [net.conv("x", 4, 8, 3, relu=False)], axis=axis)
    info = _check(net.model(y, [1, 4, 6, 10], [1, 8, 6, 10]))
    assert _programs(info) == [LOG_SOFTMAX]


def test_crnn_ctc_head() -> None:
    """A CRNN's CTC head: per time step class scores (``MatMul``, 37 classes) -> LogSoftmax(axis=2), large
    logits included (the max is subtracted before the exponent)."""
    net = OnnxNet()
    y = net.node("LogSoftmax", [net.node("Add", [_dense(net, "x", 48, 37), net.const(net.rng.standard_normal(37))])],
                 axis=2)
    info = _check(net.model(y, [26, 1, 48], [26, 1, 37]), scale=8.0)
    assert _programs(info) == [LOG_SOFTMAX]


def test_decomposed_forms_are_the_same_program() -> None:
    """``x - max - log(sum(exp(x - max)))`` as an exporter writes it out, and ``Log(Softmax(x))``: both the
    one program of ``LogSoftmax``."""
    for form in ("decomposed", "log_of_softmax"):
        net = OnnxNet()
        h = _dense(net, "x", 16, 16)
        if form == "decomposed":
            d = net.node("Sub", [h, net.node("ReduceMax", [h], axes=[-1], keepdims=1)])
            last = net.const(np.array([-1]), np.int64)  # (opset 13: ReduceSum's axes are an input)
            y = net.node("Sub", [d, net.node("Log", [net.node("ReduceSum", [net.node("Exp", [d]), last],
                                                              keepdims=1)])])
        else:
            y = net.node("Log", [net.node("Softmax", [h], axis=-1)])
        info = _check(net.model(y, [1, 4, 16], [1, 4, 16]))
        assert _programs(info) == [LOG_SOFTMAX], form


def test_unstable_form_runs_as_written() -> None:
    """``x - log(sum(exp(x)))`` (no max subtracted) is another expression: a program of its own, computed as
    written (so it agrees with the reference where the reference does)."""
    net = OnnxNet()
    h = _dense(net, "x", 16, 16)
    last = net.const(np.array([-1]), np.int64)
    y = net.node("Sub", [h, net.node("Log", [net.node("ReduceSum", [net.node("Exp", [h]), last], keepdims=1)])])
    info = _check(net.model(y, [1, 4, 16], [1, 4, 16]))
    assert _programs(info) == [["VEXP", "VRSUM", "VLOG", "VSUB"]]


def test_only_what_the_npu_takes_is_written_out() -> None:
    """float16, or an axis of one element, keeps TVM's ``log_softmax``; float32 becomes the primitive form;
    ``npu.canonicalize.log-softmax`` disabled keeps the operator (then on the host)."""
    @R.function
    def f(x: R.Tensor((4, 16), "float32"), h: R.Tensor((4, 16), "float16"), o: R.Tensor((4, 1), "float32")):
        with R.dataflow():
            a = R.nn.log_softmax(x, axis=-1)
            b = R.nn.log_softmax(h, axis=-1)
            c = R.nn.log_softmax(o, axis=1)
            d = R.log(R.nn.softmax(x, axis=0))
            R.output(a, b, c, d)
        return (a, b, c, d)

    text = log_softmax_as_primitives(f).script()
    assert text.count("R.nn.log_softmax") == 2 and "R.nn.softmax" not in text and text.count("R.log(") == 2
    net = OnnxNet()
    model = net.model(net.node("LogSoftmax", [_dense(net, "x", 16, 16)], axis=-1), [1, 4, 16], [1, 4, 16])
    with tvm.transform.PassContext(disabled_pass=["npu.canonicalize.log-softmax"]):
        _, info = tvm_npu.build_with_info(model, "npu")
    assert info.host_ops == {"relax.nn.log_softmax": 1}
