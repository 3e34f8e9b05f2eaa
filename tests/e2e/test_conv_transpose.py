"""ONNX ConvTranspose on the NPU: one ordinary convolution per output phase, interleaved by views.

Small models as torch's exporter writes them (``onnx.helper``): strides 1-4, kernels 2-4 (smaller than
the stride too), pads, output_padding, groups (depthwise too), dilation, bias or none, ``auto_pad`` and
``output_shape``. Each runs with no host operator in one partition and matches llvm
(``build_reference``, where the transposed convolution is TVM's own) and onnxruntime within the fp32
standard; the NPU does the layer's own MACs, none on inserted zeros. A QDQ transposed convolution runs
as 8-bit phase convolutions, bit-exact with llvm and within a step of onnxruntime."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
import tvm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm import relax
from tvm_npu.relay_patterns import HostFallbackWarning

import tvm_npu

RTOL, ATOL = 1e-4, 1e-5
SWITCH = "npu.canonicalize.conv-transpose"


def _model(cin: int, cout: int, size: tuple[int, int], k: tuple[int, int], head: bool = True, tail: bool = True,
           bias: bool = True, relu: bool = False, **attrs: object) -> onnx.ModelProto:
    """[conv ->] ConvTranspose(attrs) [-> relu] [-> conv]: the input has 4 channels with a head conv."""
    net = OnnxNet()
    x = net.conv("x", 4, cin, 3) if head else "x"
    group = int(attrs.get("group", 1))
    w = net.const(net.rng.standard_normal((cin, cout // group, *k)) / np.sqrt(cin * k[0] * k[1] / 4))
    inputs = [x, w] + ([net.const(net.rng.standard_normal(cout) * 0.5)] if bias else [])
    y = net.node("ConvTranspose", inputs, **attrs)
    if relu:
        y = net.node("Relu", [y])
    if tail:
        y = net.conv(y, cout, 3, 3, relu=False)
    return net.model(y, [1, 4 if head else cin, *size], [1, 3 if tail else cout, None, None])


def _run(model: onnx.ModelProto, *, disabled: tuple[str, ...] = (),
         target: str = "npu") -> tuple[tvm_npu.BuildInfo, np.ndarray, np.ndarray]:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    with tvm.transform.PassContext(disabled_pass=list(disabled)):
        ex, info = tvm_npu.build_with_info(model, target)
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    return info, out, x


def _check(model: onnx.ModelProto) -> tvm_npu.BuildInfo:
    info, out, x = _run(model)
    ref = relax.VirtualMachine(tvm_npu.build_reference(model), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ort = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = ort.run(None, {"x": x})
    assert info.host_ops == {}, info.host_ops
    assert info.partitions == 1, info.partitions
    assert out.shape == expected.shape, (out.shape, expected.shape)
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
    return info


#: (name, channels in/out, input size, kernel, attributes); all exact (every phase has the same size)
#: except those marked in UNEVEN, whose shorter phases compute one more row / column that is cropped.
CASES = [
    ("stride1", 8, 8, (6, 6), (3, 3), dict(strides=[1, 1], pads=[1, 1, 1, 1])),
    ("k2_s2", 8, 6, (6, 7), (2, 2), dict(strides=[2, 2])),
    ("k4_s2_p1", 8, 6, (6, 6), (4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ("k3_s2_p1_op1", 8, 6, (5, 6), (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    ("k3_s3", 6, 8, (4, 5), (3, 3), dict(strides=[3, 3])),
    ("k2_s3_kernel_below_stride", 6, 8, (4, 4), (2, 2), dict(strides=[3, 3])),
    ("k4_s4", 8, 4, (3, 4), (4, 4), dict(strides=[4, 4])),
    ("k2_s4_no_bias", 8, 4, (3, 3), (2, 2), dict(strides=[4, 4]), False),
    ("groups2", 8, 6, (5, 5), (4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1], group=2)),
    ("depthwise", 8, 8, (5, 5), (4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1], group=8)),
    ("dilation2", 6, 6, (5, 5), (3, 3),
     dict(strides=[2, 2], pads=[2, 2, 2, 2], dilations=[2, 2], output_padding=[1, 1])),
    ("asymmetric_pads", 6, 6, (5, 6), (3, 3), dict(strides=[2, 2], pads=[0, 1, 1, 0], output_padding=[0, 1])),
    ("rectangular", 6, 6, (4, 6), (3, 2), dict(strides=[2, 1], pads=[1, 0, 0, 1])),
    ("k3_s2_p1_uneven", 8, 6, (5, 5), (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ("same_upper", 6, 6, (5, 5), (3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ("output_shape", 6, 6, (5, 5), (3, 3), dict(strides=[2, 2], output_shape=[10, 9])),
    ("output_shape_beyond", 6, 6, (4, 4), (2, 2), dict(strides=[2, 2], output_shape=[9, 9])),
]
#: The cases the quick tier runs (the rest are marked slow: every case builds and runs a model twice).
QUICK = {"k2_s2", "k4_s2_p1", "k2_s3_kernel_below_stride", "depthwise", "k3_s2_p1_uneven", "output_shape"}
UNEVEN = {"k3_s2_p1_uneven", "output_shape", "asymmetric_pads", "k3_s3", "output_shape_beyond", "same_upper"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=() if c[0] in QUICK else pytest.mark.slow, id=c[0])
                                  for c in CASES])
def test_conv_transpose_runs_on_the_npu(case: tuple) -> None:
    """0 host calls, 1 partition, NPU = llvm = onnxruntime within rtol 1e-4 / atol 1e-5."""
    _, cin, cout, size, k, attrs, *rest = case
    _check(_model(cin, cout, size, k, bias=rest[0] if rest else True, **attrs))


def test_dbnet_style_head() -> None:
    """DBNet's probability head as torch exports it: conv -> BN -> ReLU -> ConvTranspose(k2 s2) -> BN -> ReLU ->
    ConvTranspose(k2 s2) -> Sigmoid. The batch-norm after the transposed convolution is folded into its
    phases' weights and bias (no elementwise pass over the interleaved map is left for it)."""
    net = OnnxNet()
    rng = net.rng

    def bn(x: str, ch: int) -> str:
        return net.node("BatchNormalization", [x, *(net.const(v) for v in (
            rng.uniform(0.5, 1.5, ch), rng.standard_normal(ch) * 0.1, rng.standard_normal(ch) * 0.1,
            rng.uniform(0.5, 1.5, ch)))])

    y = net.node("Conv", ["x", net.const(rng.standard_normal((4, 16, 3, 3)) / 12)], pads=[1, 1, 1, 1])
    y = net.node("Relu", [bn(y, 4)])
    y = net.node("ConvTranspose", [y, net.const(rng.standard_normal((4, 4, 2, 2)) / 2), net.const(np.ones(4))],
                 strides=[2, 2])
    y = net.node("Relu", [bn(y, 4)])
    y = net.node("ConvTranspose", [y, net.const(rng.standard_normal((4, 1, 2, 2)) / 2), net.const(np.zeros(1))],
                 strides=[2, 2])
    info = _check(net.model(net.node("Sigmoid", [y]), [1, 16, 6, 6], [1, 1, 24, 24]))
    assert info.npu_ops.get("relax.nn.conv2d") == 1 + 4 + 4, info.npu_ops
    assert "relax.nn.batch_norm" not in info.npu_ops and "relax.multiply" not in info.npu_ops, info.npu_ops


@pytest.mark.slow
@pytest.mark.parametrize("head,tail,relu", [(False, False, False), (True, False, True), (False, True, True)])
def test_alone_first_last_and_with_relu(head: bool, tail: bool, relu: bool) -> None:
    """The layer as the partition's input reader, as its result, and with a ReLU applied per phase."""
    _check(_model(6, 8, (5, 6), (4, 4), head=head, tail=tail, relu=relu, strides=[2, 2], pads=[1, 1, 1, 1]))


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CASES if c[0] in ("k2_s2", "k4_s2_p1", "k2_s3_kernel_below_stride",
                                                               "k4_s4", "k3_s2_p1_uneven")],
                         ids=lambda c: c[0])
def test_npu_macs_are_the_layers_own(case: tuple) -> None:
    """The phase convolutions do exactly the transposed convolution's MACs (what the host is charged with
    when the rewrite is off), none on inserted zeros; an uneven layer's shorter phases add one row or
    column, no more."""
    name, cin, cout, size, k, attrs, *_ = case
    model = _model(cin, cout, size, k, **attrs)
    on, _, _ = _run(model)
    off, _, _ = _run(model, disabled=(SWITCH,))
    assert off.host_ops == {"relax.nn.conv2d_transpose": 1}
    own = off.host_macs
    assert own > 0 and on.host_macs == 0
    extra = on.npu_macs - off.npu_macs - own
    if name in UNEVEN:
        s = attrs["strides"][0]
        per_row = own // (size[0] * s)  # about one output row's MACs
        assert 0 < extra <= 2 * s * per_row, (extra, own)
    else:
        assert extra == 0, (extra, own)


@pytest.mark.parametrize("layout", ["nchw", pytest.param("nhwc", marks=pytest.mark.slow)])
def test_host_fallback_in_either_layout(layout: str) -> None:
    """With the rewrite off the layer runs on the host, correct in either activation layout (the layout stage
    keeps a transposed convolution NCHW: TVM cannot legalise it in NHWC), and its neighbours on the NPU."""
    model = _model(8, 6, (5, 6), (4, 4), strides=[2, 2], pads=[1, 1, 1, 1])
    info, out, x = _run(model, disabled=(SWITCH,), target=f"npu -layout-pref={layout}")
    assert info.host_ops.get("relax.nn.conv2d_transpose") == 1, info.host_ops
    (expected,) = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(1, 4), s=st.integers(1, 4), d=st.integers(1, 2), data=st.data())
def test_random_transposed_convs(k: int, s: int, d: int, data: st.DataObject) -> None:
    """Random kernels, strides, dilations, pads, output paddings, groups and biases."""
    pads = [data.draw(st.integers(0, (k - 1) * d)) for _ in range(4)]
    op = [data.draw(st.integers(0, s - 1)) for _ in range(2)]  # (TVM's importer takes it below the stride only)
    group = data.draw(st.sampled_from([1, 2, 4]))
    size = (data.draw(st.integers(2, 6)), data.draw(st.integers(2, 6)))
    out = [(size[i] - 1) * s - pads[i] - pads[i + 2] + (k - 1) * d + 1 + op[i] for i in range(2)]
    if min(out) < 1:
        return
    bias = data.draw(st.booleans())
    _check(_model(4, 8, size, (k, k), head=False, bias=bias, strides=[s, s], pads=pads, output_padding=op,
                  dilations=[d, d], group=group))


# ---- 8-bit -------------------------------------------------------------------------------------------------


def _qdq_model(k: int, s: int, p: int, op: int, cin: int = 8, cout: int = 8, size: int = 6,
               group: int = 1, relu: bool = True) -> onnx.ModelProto:
    """Q(x) -> DQ -> ConvTranspose(DQ(W int8 per-channel on axis 1), DQ(bias int32, s_x * s_w)) -> Relu -> Q -> DQ,
    as onnxruntime's quantizer writes a QDQ ConvTranspose."""
    rng = np.random.default_rng(3)
    sx, sy = np.float32(0.05), np.float32(0.08)
    w = rng.standard_normal((cin, cout // group, k, k)).astype(np.float32) * 0.3
    sw = (np.abs(w).max(axis=(0, 2, 3)) / 127).astype(np.float32)  # per output channel of a group (axis 1)
    wq = np.clip(np.round(w / sw.reshape(1, -1, 1, 1)), -127, 127).astype(np.int8)
    sb = (sx * np.tile(sw, group)).astype(np.float32)
    bias = np.round(rng.standard_normal(cout) * 2 / sb).astype(np.int32)
    inits = [numpy_helper.from_array(v, n) for v, n in (
        (sx, "sx"), (np.int8(3), "zx"), (wq, "wq"), (sw, "sw"), (np.zeros(cout // group, np.int8), "zw"),
        (bias, "bq"), (sb, "sb"), (np.zeros(cout, np.int32), "zb"), (sy, "sy"), (np.int8(-5), "zy"))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], axis=1),
             helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["bd"], axis=0),
             helper.make_node("ConvTranspose", ["xd", "wd", "bd"], ["t"], strides=[s, s], pads=[p] * 4,
                              output_padding=[op, op], group=group),
             helper.make_node("Relu" if relu else "Identity", ["t"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    graph = helper.make_graph(nodes, "qdq_convt", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 [1, cin, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, None, None])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("k,s,p,op,group,relu", [
    (2, 3, 0, 0, 1, True), pytest.param(4, 2, 1, 0, 1, True, marks=pytest.mark.slow),
    pytest.param(3, 2, 1, 1, 1, False, marks=pytest.mark.slow),
    pytest.param(4, 2, 1, 0, 2, True, marks=pytest.mark.slow)])
def test_qdq_conv_transpose_in_8_bit(k: int, s: int, p: int, op: int, group: int, relu: bool) -> None:
    """8-bit phase convolutions (empty phases: the requantised bias; the ReLU a clamp of each phase's
    requantisation): bit-exact with llvm, and at least 99.9% of the outputs equal to onnxruntime's, none
    more than one step apart."""
    model = _qdq_model(k, s, p, op, group=group, relu=relu)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HostFallbackWarning)  # every phase convolution becomes an integer one
        info, out, x = _run(model)
    assert "relax.nn.conv2d_transpose" not in info.host_ops, info.host_ops
    assert info.npu_ops.get("relax.nn.conv2d", 0) == min(k, s) ** 2  # one per phase that some tap reaches
    ref = relax.VirtualMachine(tvm_npu.build_reference(model), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_array_equal(out, ref)
    (expected,) = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=["CPUExecutionProvider"]).run(None, {"x": x})
    steps = np.round(np.abs(out - expected) / np.float32(0.08)).astype(np.int64)
    assert steps.max() <= 1, steps.max()
    assert np.mean(steps == 0) >= 0.999, np.mean(steps == 0)
