"""tvm_npu.compiler.qoperator: QOperator ONNX models rewritten into QDQ form compute what onnxruntime computes
on the original, import into TVM, and whatever has no QDQ form is refused in one line."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

from tvm_npu.compiler.driver import load_model
from tvm_npu.compiler.qoperator import has_qoperator_nodes, to_qdq

MS = "com.microsoft"
F32 = TensorProto.FLOAT
QOPERATOR_OPS = {
    "QLinearConv",
    "QLinearMatMul",
    "QGemm",
    "ConvInteger",
    "QLinearAdd",
    "QLinearMul",
    "QLinearSigmoid",
    "QLinearLeakyRelu",
    "QLinearGlobalAveragePool",
    "QLinearAveragePool",
    "QLinearConcat",
}


# ---- helpers ---------------------------------------------------------------------------------


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: dict[str, np.ndarray],
    opset: int = 13,
) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(v, k) for k, v in initializers.items()]
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])


def _tensor(name: str, elem: int, shape: Sequence[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, list(shape))


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime on the CPU, fusing QDQ groups into its QOperator kernels as it does by default, but
    keeping int8 activations int8: by default on x86 it first turns int8 QDQ into uint8, and on a CPU
    without AVX-VNNI its uint8 x int8 kernels saturate pairs of products to int16 (many steps off
    where an int8 QLinearConv of the original model is exact)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.qdqisint8allowed", "1")
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _steps(model: onnx.ModelProto) -> list[float]:
    """The quantization step of each graph output: its DequantizeLinear's scale, or 1 for integers."""
    producers = {out: n for n in model.graph.node for out in n.output}
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    steps = []
    for out in model.graph.output:
        node = producers[out.name]
        steps.append(float(inits[node.input[1]]) if node.op_type == "DequantizeLinear" else 1.0)
    return steps


def _agreement(
    original: onnx.ModelProto, rewritten: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]
) -> tuple[int, int]:
    """(equal elements, elements) of every output of both models under onnxruntime over ``feeds``;
    fails when an element differs by more than one quantization step."""
    equal = total = 0
    for feed in feeds:
        for a, b, step in zip(_run(original, feed), _run(rewritten, feed), _steps(original), strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64)) / step
            assert diff.max(initial=0) <= 1 + 1e-6, f"{diff.max()} steps apart"
            equal += int((a == b).sum())
            total += a.size
    return equal, total


def _assert_agrees(original: onnx.ModelProto, rewritten: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> None:
    equal, total = _agreement(original, rewritten, feeds)
    assert equal >= 0.999 * total, f"only {equal} of {total} elements equal"


def _assert_valid_qdq(model: onnx.ModelProto) -> None:
    """Checker-clean, no QOperator node left, and TVM's ONNX frontend imports it."""
    onnx.checker.check_model(model, full_check=True)
    assert not has_qoperator_nodes(model)
    assert not {n.op_type for n in model.graph.node} & QOPERATOR_OPS
    assert isinstance(from_onnx(model, keep_params_in_input=False), tvm.IRModule)


class _Reader(CalibrationDataReader):
    """Seeded normal calibration batches for one input."""

    def __init__(self, name: str, shape: Sequence[int], seed: int, batches: int = 8) -> None:
        rng = np.random.default_rng(seed)
        self._batches = iter([{name: rng.normal(size=shape).astype(np.float32)} for _ in range(batches)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def _quantize(
    model: onnx.ModelProto, shape: Sequence[int], seed: int, per_channel: bool, activation: QuantType
) -> onnx.ModelProto:
    """onnxruntime's static quantization of a float model (input ``x``) in QOperator format."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "quant.onnx")
        onnx.save(model, src)
        quantize_static(
            src,
            dst,
            _Reader("x", shape, seed),
            quant_format=QuantFormat.QOperator,
            per_channel=per_channel,
            activation_type=activation,
            weight_type=QuantType.QInt8,
        )
        return onnx.load(dst)


def _feeds(shape: Sequence[int], seed: int, n: int = 4) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(size=shape).astype(np.float32)} for _ in range(n)]


def _conv_matmul_gemm(seed: int, bias: bool) -> onnx.ModelProto:
    """Conv(+bias) -> Relu -> Flatten -> MatMul -> Gemm(+bias, transB), every stage a graph output."""
    rng = np.random.default_rng(seed)
    inits = {
        "w1": (0.3 * rng.normal(size=(8, 3, 3, 3))).astype(np.float32),
        "w2": (0.1 * rng.normal(size=(8 * 6 * 6, 10))).astype(np.float32),
        "w3": (0.3 * rng.normal(size=(5, 10))).astype(np.float32),
    }
    if bias:
        inits |= {"b1": rng.normal(size=8).astype(np.float32), "b3": rng.normal(size=5).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w1", *(["b1"] if bias else [])], ["c"], name="conv1"),
        helper.make_node("Relu", ["c"], ["r"], name="relu1"),
        helper.make_node("Flatten", ["r"], ["f"], name="flat", axis=1),
        helper.make_node("MatMul", ["f", "w2"], ["m"], name="mm"),
        helper.make_node("Gemm", ["m", "w3", *(["b3"] if bias else [])], ["y"], name="fc", transB=1),
    ]
    outputs = [_tensor("r", F32, [16, 8, 6, 6]), _tensor("m", F32, [16, 10]), _tensor("y", F32, [16, 5])]
    return _model(nodes, [_tensor("x", F32, [16, 3, 8, 8])], outputs, inits)


# ---- onnxruntime's own QOperator models ------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("activation", [QuantType.QUInt8, QuantType.QInt8], ids=["u8", "s8"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_quantize_static_conv_matmul_gemm(per_channel: bool, activation: QuantType, bias: bool) -> None:
    quantized = _quantize(_conv_matmul_gemm(0, bias), [16, 3, 8, 8], 1, per_channel, activation)
    assert {"QLinearConv", "QLinearMatMul", "QGemm"} <= {n.op_type for n in quantized.graph.node}
    before = quantized.SerializeToString()
    rewritten = to_qdq(quantized)
    assert quantized.SerializeToString() == before  # the input model is left alone
    _assert_valid_qdq(rewritten)
    biases = [n for n in rewritten.graph.node if n.name.endswith("/DequantizeLinear_bias")]
    assert len(biases) == (2 if bias else 0)  # the conv's and the gemm's
    _assert_agrees(quantized, rewritten, _feeds([16, 3, 8, 8], 2))


def test_rewrite_keeps_names_and_initializers() -> None:
    quantized = _quantize(_conv_matmul_gemm(0, True), [16, 3, 8, 8], 1, True, QuantType.QUInt8)
    rewritten = to_qdq(quantized)
    original_inits = [t.name for t in quantized.graph.initializer]
    names = [t.name for t in rewritten.graph.initializer]
    assert names[: len(original_inits)] == original_inits and len(set(names)) == len(names)
    assert [o.name for o in rewritten.graph.output] == [o.name for o in quantized.graph.output]
    nodes = {n.name: n for n in rewritten.graph.node}
    # the float op keeps the QOperator node's name; what surrounds it is named after it
    assert nodes["conv1_quant"].op_type == "Conv"
    assert nodes["conv1_quant/DequantizeLinear_w"].input[0] == "w1_quantized"  # weights are not copied
    assert nodes["conv1_quant/DequantizeLinear_w"].attribute[0].i == 0  # per output channel
    assert nodes["mm_quant/DequantizeLinear_b"].attribute[0].i == 1  # per column of a 2-D b
    assert nodes["fc_quant/DequantizeLinear_b"].attribute[0].i == 0  # per row of a transposed B
    bias = nodes["conv1_quant/DequantizeLinear_bias"]
    inits = {t.name: numpy_helper.to_array(t) for t in rewritten.graph.initializer}
    expected = inits["x_scale"].astype(np.float32) * inits["w1_scale"]
    assert inits[bias.input[1]].dtype == np.float32 and np.array_equal(inits[bias.input[1]], expected)
    assert inits[bias.input[2]].dtype == np.int32 and not inits[bias.input[2]].any()


def test_quantize_static_elementwise_ops() -> None:
    """Conv -> LeakyRelu -> Add -> Mul -> Sigmoid -> Concat -> AveragePool -> GlobalAveragePool."""
    rng = np.random.default_rng(3)
    inits = {f"w{i}": (0.3 * rng.normal(size=(4, 3, 3, 3))).astype(np.float32) for i in (1, 2)}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c1"], ["l"], name="lrelu", alpha=0.2),
        helper.make_node("Add", ["l", "c2"], ["a"], name="add"),
        helper.make_node("Mul", ["a", "c2"], ["m"], name="mul"),
        helper.make_node("Sigmoid", ["m"], ["s"], name="sig"),
        helper.make_node("Concat", ["s", "a"], ["cat"], name="cat", axis=1),
        helper.make_node("AveragePool", ["cat"], ["p"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["p"], ["y"], name="gap"),
    ]
    shape = [8, 3, 8, 8]
    outputs = [_tensor("p", F32, [8, 8, 8, 8]), _tensor("y", F32, [8, 8, 1, 1])]
    model = _model(nodes, [_tensor("x", F32, shape)], outputs, inits)
    for activation in (QuantType.QUInt8, QuantType.QInt8):
        quantized = _quantize(model, shape, 4, False, activation)
        assert QOPERATOR_OPS - {"QLinearMatMul", "QGemm", "ConvInteger"} <= {n.op_type for n in quantized.graph.node}
        rewritten = to_qdq(quantized)
        _assert_valid_qdq(rewritten)
        _assert_agrees(quantized, rewritten, _feeds(shape, 5))


@settings(max_examples=25, deadline=None)
@given(
    channels=st.tuples(st.integers(1, 6), st.integers(1, 9)),
    kernel=st.integers(1, 3),
    stride=st.integers(1, 2),
    pad=st.integers(0, 1),
    depthwise=st.booleans(),
    per_channel=st.booleans(),
    activation=st.sampled_from([QuantType.QUInt8, QuantType.QInt8]),
    seed=st.integers(0, 2**16),
)
def test_quantize_static_convs(
    channels: tuple[int, int],
    kernel: int,
    stride: int,
    pad: int,
    depthwise: bool,
    per_channel: bool,
    activation: QuantType,
    seed: int,
) -> None:
    cin, cout = channels
    group = cin if depthwise else 1
    cout = cin if depthwise else cout
    rng = np.random.default_rng(seed)
    inits = {
        "w": (0.5 * rng.normal(size=(cout, cin // group, kernel, kernel))).astype(np.float32),
        "b": rng.normal(size=cout).astype(np.float32),
    }
    conv = helper.make_node(
        "Conv", ["x", "w", "b"], ["y"], name="conv", group=group, strides=[stride] * 2, pads=[pad] * 4
    )
    shape = [2, cin, 7, 7]
    out = (7 + 2 * pad - kernel) // stride + 1
    model = _model([conv], [_tensor("x", F32, shape)], [_tensor("y", F32, [2, cout, out, out])], inits)
    quantized = _quantize(model, shape, seed + 1, per_channel, activation)
    assert "QLinearConv" in {n.op_type for n in quantized.graph.node}
    rewritten = to_qdq(quantized)
    _assert_valid_qdq(rewritten)
    _assert_agrees(quantized, rewritten, _feeds(shape, seed + 2))


# ---- hand-written QOperator models -------------------------------------------------------------


def _qlinear_conv_model(opset: int, domain: str = "") -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """uint8 QLinearConv with per-channel weight scales, a scalar weight zero point and [1]-shaped
    input quantization parameters, then a QLinearAdd (com.microsoft) without its output zero point."""
    rng = np.random.default_rng(7)
    inits = {
        "xs": np.array([0.05], np.float32),
        "xz": np.array([120], np.uint8),
        "w": rng.integers(0, 256, (6, 3, 3, 3)).astype(np.uint8),
        "ws": rng.uniform(0.001, 0.004, 6).astype(np.float32),
        "wz": np.array(128, np.uint8),
        "ys": np.array(0.1, np.float32),
        "yz": np.array(128, np.uint8),
        "b": rng.integers(-2000, 2000, 6).astype(np.int32),
        "zs": np.array(0.15, np.float32),
    }
    nodes = [
        helper.make_node(
            "QLinearConv",
            ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
            ["c"],
            name="qconv",
            domain=domain,
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("QLinearAdd", ["c", "ys", "yz", "c", "ys", "yz", "zs"], ["y"], name="qadd", domain=MS),
    ]
    model = _model(
        nodes, [_tensor("x", TensorProto.UINT8, [2, 3, 6, 6])], [_tensor("y", TensorProto.UINT8, [2, 6, 6, 6])], inits
    )
    model.opset_import[0].version = opset
    feeds = {"x": rng.integers(0, 256, (2, 3, 6, 6)).astype(np.uint8)}
    return model, feeds


@pytest.mark.parametrize("domain", ["", MS], ids=["onnx", "com.microsoft"])
def test_hand_written_qlinear_conv(domain: str) -> None:
    model, feeds = _qlinear_conv_model(13, domain)
    rewritten = to_qdq(model)
    _assert_valid_qdq(rewritten)
    _assert_agrees(model, rewritten, [feeds])
    nodes = {n.name: n for n in rewritten.graph.node}
    w_zero_point = nodes["qconv/DequantizeLinear_w"].input[2]
    assert w_zero_point != "wz"  # broadcast to the six channels of the scale
    assert {n.op_type for n in rewritten.graph.node} == {"DequantizeLinear", "Conv", "Add", "QuantizeLinear"}


def test_old_opset_is_upgraded_for_per_axis_dequantize() -> None:
    model, feeds = _qlinear_conv_model(11)
    rewritten = to_qdq(model)
    assert [o.version for o in rewritten.opset_import if o.domain == ""] == [13]
    _assert_valid_qdq(rewritten)
    _assert_agrees(model, rewritten, [feeds])


def test_a_model_that_cannot_reach_opset_13_is_a_one_line_error() -> None:
    model, _ = _qlinear_conv_model(9)  # QLinearConv has no opset 9 version to convert from
    with pytest.raises(ValueError, match="cannot upgrade the ONNX model from opset 9 to 13") as info:
        to_qdq(model)
    assert "\n" not in str(info.value)


def test_hand_written_qlinear_matmul_and_qgemm() -> None:
    """QLinearMatMul with a [1, N] per-column b scale; QGemm (B not transposed, per-column, int32 C)
    with a float output (no y_scale / y_zero_point); an int8 QLinearLeakyRelu without zero points
    (the output keeps the input's type)."""
    rng = np.random.default_rng(8)
    inits = {
        "as": np.array(0.02, np.float32),
        "az": np.array(3, np.int8),
        "b": rng.integers(-127, 128, (32, 12)).astype(np.int8),
        "bs": rng.uniform(0.002, 0.01, (1, 12)).astype(np.float32),
        "bz": np.zeros((1, 12), np.int8),
        "ms": np.array(0.08, np.float32),
        "mz": np.array(-5, np.int8),
        "g": rng.integers(-127, 128, (12, 7)).astype(np.int8),
        "gs": rng.uniform(0.002, 0.01, 7).astype(np.float32),
        "gz": np.zeros(7, np.int8),
        "c": rng.integers(-3000, 3000, 7).astype(np.int32),
    }
    nodes = [
        helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ms", "mz"], ["m"], name="qmm"),
        helper.make_node("QGemm", ["m", "ms", "mz", "g", "gs", "gz", "c"], ["y"], name="qgemm", domain=MS),
        helper.make_node("QLinearLeakyRelu", ["m", "ms", "", "as", ""], ["l"], name="qlrelu", domain=MS, alpha=0.3),
    ]
    outputs = [
        _tensor("m", TensorProto.INT8, [9, 12]),
        _tensor("y", F32, [9, 7]),
        _tensor("l", TensorProto.INT8, [9, 12]),
    ]
    model = _model(nodes, [_tensor("a", TensorProto.INT8, [9, 32])], outputs, inits)
    rewritten = to_qdq(model)
    _assert_valid_qdq(rewritten)
    a = np.random.default_rng(9).integers(-128, 128, (9, 32)).astype(np.int8)
    (m0, y0, l0), (m1, y1, l1) = _run(model, {"a": a}), _run(rewritten, {"a": a})
    for q0, q1 in ((m0, m1), (l0, l1)):
        assert q1.dtype == np.int8 and (q0 == q1).mean() >= 0.999 and np.abs(q0.astype(int) - q1).max() <= 1
    np.testing.assert_allclose(y1, y0, rtol=1e-5, atol=1e-5)
    gemm = next(n for n in rewritten.graph.node if n.op_type == "Gemm")
    assert gemm.name == "qgemm" and gemm.output[0] == "y"


# ---- ConvInteger -------------------------------------------------------------------------------


def _conv_integer_reference(x: np.ndarray, w: np.ndarray, xz: int, wz: np.ndarray, pad: int) -> np.ndarray:
    """Exact int64 convolution (stride 1) of x - xz and w - wz, padding contributing 0."""
    xi = np.pad(x.astype(np.int64) - xz, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    wi = w.astype(np.int64) - wz.astype(np.int64).reshape(-1, 1, 1, 1)
    kh, kw = wi.shape[2:]
    windows = np.lib.stride_tricks.sliding_window_view(xi, (kh, kw), axis=(2, 3))
    return np.einsum("nchwij,mcij->nmhw", windows, wi)


def _conv_integer_model(w: np.ndarray, wz: np.ndarray, x_shape: Sequence[int]) -> onnx.ModelProto:
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], name="cint", pads=[1, 1, 1, 1])
    y_shape = [x_shape[0], w.shape[0], *x_shape[2:]]
    inits = {"w": w, "xz": np.array(100, np.uint8), "wz": wz}
    return _model([node], [_tensor("x", TensorProto.UINT8, x_shape)], [_tensor("y", TensorProto.INT32, y_shape)], inits)


@pytest.mark.parametrize("per_channel_zero_point", [False, True], ids=["scalar_zp", "per_channel_zp"])
def test_conv_integer_small_kernels_run_exactly_in_float32(per_channel_zero_point: bool) -> None:
    rng = np.random.default_rng(10)
    w = rng.integers(0, 256, (5, 4, 3, 3)).astype(np.uint8)
    wz = rng.integers(100, 156, 5).astype(np.uint8) if per_channel_zero_point else np.array(131, np.uint8)
    model = _conv_integer_model(w, wz, [2, 4, 6, 6])
    rewritten = to_qdq(model)
    _assert_valid_qdq(rewritten)
    conv = next(n for n in rewritten.graph.node if n.op_type == "Conv")
    assert "Cast" not in {n.op_type for n in rewritten.graph.node[: list(rewritten.graph.node).index(conv)]}
    x = rng.integers(0, 256, (2, 4, 6, 6)).astype(np.uint8)
    expected = _conv_integer_reference(x, w, 100, wz, 1)
    (y,) = _run(rewritten, {"x": x})
    assert y.dtype == np.int32 and np.array_equal(y, expected)
    if not per_channel_zero_point:  # onnxruntime's ConvInteger takes a scalar weight zero point only
        assert np.array_equal(_run(model, {"x": x})[0], expected)


def test_conv_integer_large_kernels_run_in_float64() -> None:
    """Weights whose partial sums can pass 2**24 make float32 inexact: the Conv runs in float64."""
    rng = np.random.default_rng(11)
    w = rng.integers(128, 256, (3, 256, 3, 3)).astype(np.uint8)
    wz = np.array(0, np.uint8)
    model = _conv_integer_model(w, wz, [1, 256, 4, 4])
    rewritten = to_qdq(model)
    _assert_valid_qdq(rewritten)
    assert [n.op_type for n in rewritten.graph.node].count("Cast") == 3
    x = rng.integers(200, 256, (1, 256, 4, 4)).astype(np.uint8)
    expected = _conv_integer_reference(x, w, 100, wz, 1)
    assert (expected.astype(np.float32).astype(np.int64) != expected).any()  # float32 cannot hold the result
    ex = relax.build(from_onnx(rewritten, keep_params_in_input=False), tvm.target.Target({"kind": "llvm"}))
    y = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert y.dtype == np.int32 and np.array_equal(y, expected)


# ---- what is left alone and what is refused --------------------------------------------------


def test_models_without_qoperator_nodes_come_back_unchanged() -> None:
    model = _conv_matmul_gemm(0, True)
    assert not has_qoperator_nodes(model) and to_qdq(model) is model
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(model, os.path.join(tmp, "f.onnx"))
        quantize_static(
            os.path.join(tmp, "f.onnx"),
            os.path.join(tmp, "qdq.onnx"),
            _Reader("x", [16, 3, 8, 8], 1),
            quant_format=QuantFormat.QDQ,
        )
        qdq = onnx.load(os.path.join(tmp, "qdq.onnx"))
    assert to_qdq(qdq) is qdq
    rng = np.random.default_rng(12)
    inits = {"b": rng.integers(-128, 128, (8, 4)).astype(np.int8), "az": np.array(3, np.uint8)}
    node = helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"], name="mmi")
    integer = _model(
        [node], [_tensor("a", TensorProto.UINT8, [2, 8])], [_tensor("y", TensorProto.INT32, [2, 4])], inits
    )
    assert to_qdq(integer) is integer


def _single_node(node: onnx.NodeProto) -> onnx.ModelProto:
    inits = {
        "s": np.array(0.1, np.float32),
        "z": np.array(0, np.uint8),
        "w": np.ones((4, 4), np.uint8),
    }
    x = _tensor("x", TensorProto.UINT8, [2, 4, 3, 3])
    return _model([node], [x], [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)


@pytest.mark.parametrize(
    ("node", "reason"),
    [
        (helper.make_node("QAttention", ["x", "w"], ["y"], name="attn", domain=MS), "no QDQ equivalent"),
        (helper.make_node("QLinearSoftmax", ["x", "s", "z", "s", "z"], ["y"], name="soft", domain=MS), "no QDQ"),
        (
            helper.make_node("QGemm", ["x", "s", "z", "w", "s", "z"], ["y"], name="gemm", domain=MS, alpha=0.5),
            "alpha=0.5",
        ),
        (
            helper.make_node(
                "QLinearGlobalAveragePool", ["x", "s", "z", "s", "z"], ["y"], name="gap", domain=MS, channels_last=1
            ),
            "channels_last=1",
        ),
    ],
    ids=["QAttention", "QLinearSoftmax", "QGemm_alpha", "channels_last"],
)
def test_unsupported_qoperator_nodes_are_one_line_errors(node: onnx.NodeProto, reason: str) -> None:
    model = _single_node(node)
    assert has_qoperator_nodes(model)
    with pytest.raises(ValueError) as info:
        to_qdq(model)
    message = str(info.value)
    assert "\n" not in message and reason in message
    assert f"{node.op_type} node {node.name!r}" in message
    assert "accepted QOperator ops: ConvInteger, QGemm, QLinearAdd," in message


@pytest.mark.parametrize(
    ("scales", "reason"),
    [
        ({"as": np.full(5, 0.1, np.float32)}, "per-row scales of input a"),
        ({"bs": np.full((2, 1, 3), 0.1, np.float32)}, "'bs' of shape [2, 1, 3] is neither per-tensor nor 3 channels"),
    ],
    ids=["per_row_a", "per_batch_b"],
)
def test_quantization_parameters_without_a_per_axis_form_are_refused(
    scales: dict[str, np.ndarray], reason: str
) -> None:
    inits = {
        "as": np.array(0.1, np.float32),
        "z": np.array(0, np.uint8),
        "b": np.ones((2, 4, 3), np.uint8),
        "bs": np.array(0.1, np.float32),
    } | scales
    node = helper.make_node("QLinearMatMul", ["a", "as", "z", "b", "bs", "z", "as", "z"], ["y"], name="qmm")
    a = _tensor("a", TensorProto.UINT8, [2, 5, 4])
    model = _model([node], [a], [_tensor("y", TensorProto.UINT8, [2, 5, 3])], inits)
    with pytest.raises(ValueError, match="cannot rewrite QLinearMatMul node 'qmm' into QDQ form") as info:
        to_qdq(model)
    assert reason in str(info.value) and "\n" not in str(info.value)


def test_load_model_imports_qoperator_models() -> None:
    quantized = _quantize(_conv_matmul_gemm(0, True), [16, 3, 8, 8], 1, True, QuantType.QInt8)
    with pytest.raises(tvm.error.OpNotImplemented):
        from_onnx(quantized, keep_params_in_input=False)
    mod = load_model(quantized)
    assert "R.dequantize" in mod.script() and "R.quantize" in mod.script()
