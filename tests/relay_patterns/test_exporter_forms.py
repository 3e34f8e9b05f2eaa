"""ONNX graphs as PyTorch's exporter and tf2onnx write them: each form lands on the NPU (no host
operator for it) and computes what llvm and onnxruntime compute.

Built with ``onnx.helper`` in the exporters' styles: shape arithmetic (``Shape -> Gather ->
Unsqueeze -> Concat -> Reshape`` and tf2onnx's ``Shape -> Cast -> Slice -> Concat``), ReLU6 as
``Clip`` with min/max inputs (and the older attribute form, ``Max`` / ``Min``, ``Relu`` + ``Min``),
HardSigmoid, HardSwish (the operator and the older ``x * HardSigmoid(x)``), swish as ``Sigmoid`` +
``Mul`` in both operand orders, explicit ``Pad`` before a conv or a pool (asymmetric included, and
of an 8-bit tensor), and an NHWC graph input transposed to NCHW before the first conv.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from tvm import relax

import tvm_npu
from tvm_npu.compiler.onnx_import import fold_shapes, prepare
from tvm_npu.core.ops import EpiKind

RTOL, ATOL = 1e-4, 1e-5
SHAPE = (1, 8, 10, 10)
rng = np.random.default_rng(7)


def _init(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _weights(out_c: int = 8, in_c: int = 8, k: int = 3) -> list[onnx.TensorProto]:
    w = (rng.standard_normal((out_c, in_c, k, k)) / np.sqrt(in_c * k * k)).astype(np.float32)
    return [_init("w", w), _init("b", rng.standard_normal(out_c).astype(np.float32) * 0.5)]


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], shape: tuple[int, ...] = SHAPE,
           opset: int = 17) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "exporter_form", [oh.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _conv(inp: str = "x", out: str = "c", **attrs: object) -> onnx.NodeProto:
    return oh.make_node("Conv", [inp, "w", "b"], [out], **({"pads": [1, 1, 1, 1]} | attrs))


def _build(model: onnx.ModelProto, shape: tuple[int, ...] = SHAPE, scale: float = 3.0
           ) -> tuple[tvm_npu.BuildInfo, list]:
    """Build for the NPU; check the result against llvm and onnxruntime; return the build info and
    the epilogue kinds of every NPU operator."""
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the importer's "Field 'shape' ... missing"
        ex, info = tvm_npu.build_with_info(model)
        ref_ex = tvm_npu.build_reference(model)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ref = relax.VirtualMachine(ref_ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    return info, [[e.kind for e in op.spec.epilogue] for plan in info.plans for op in plan.ops]


# ------------------------------------------------------------------------------- shape subgraphs


def _flatten_head(style: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """conv -> global pool -> reshape to [N, C] by a computed shape -> matmul (a classifier head)."""
    if style == "torch":  # x.view(x.size(0), -1)
        shape_nodes = [oh.make_node("Shape", ["p"], ["s"]),
                       oh.make_node("Gather", ["s", "zero"], ["n"], axis=0),
                       oh.make_node("Unsqueeze", ["n", "axes0"], ["nu"]),
                       oh.make_node("Concat", ["nu", "minus1"], ["shape"], axis=0)]
        inits = [_init("zero", np.array(0, np.int64)), _init("axes0", np.array([0], np.int64))]
    else:  # tf2onnx: tf.reshape(x, [tf.shape(x)[0], -1]) with the int32 shape arithmetic cast around it
        shape_nodes = [oh.make_node("Shape", ["p"], ["s"]),
                       oh.make_node("Cast", ["s"], ["s32"], to=TensorProto.INT32),
                       oh.make_node("Slice", ["s32", "start", "end", "axes32"], ["n"]),
                       oh.make_node("Cast", ["n"], ["n64"], to=TensorProto.INT64),
                       oh.make_node("Concat", ["n64", "minus1"], ["shape"], axis=0)]
        inits = [_init("start", np.array([0], np.int32)), _init("end", np.array([1], np.int32)),
                 _init("axes32", np.array([0], np.int32))]
    nodes = [_conv(), oh.make_node("Relu", ["c"], ["r"]), oh.make_node("GlobalAveragePool", ["r"], ["p"]),
             *shape_nodes, oh.make_node("Reshape", ["p", "shape"], ["flat"]),
             oh.make_node("MatMul", ["flat", "fc"], ["y"])]
    fc = (rng.standard_normal((8, 16)) / np.sqrt(8)).astype(np.float32)
    return nodes, [*_weights(), *inits, _init("minus1", np.array([-1], np.int64)), _init("fc", fc)]


@pytest.mark.parametrize("style", ["torch", "tf2onnx"])
def test_shape_subgraph_is_folded_before_import(style: str) -> None:
    nodes, inits = _flatten_head(style)
    model = _model(nodes, inits)
    prepared = prepare(model)
    assert {n.op_type for n in prepared.graph.node} == {"Conv", "Relu", "GlobalAveragePool", "Reshape", "MatMul"}
    shape = next(t for t in prepared.graph.initializer if t.name == "shape")
    assert numpy_helper.to_array(shape).tolist() == [1, -1]
    assert len(model.graph.node) == len(nodes)  # the caller's model is not modified
    info, _ = _build(model)
    assert info.host_macs == 0 and "relax.matmul" in info.npu_ops and "relax.nn.conv2d" in info.npu_ops
    assert set(info.host_ops) <= {"relax.reshape"}  # a relabelling of dims at most, no shape arithmetic


def test_shape_of_a_dynamic_input_is_left_alone() -> None:
    nodes, inits = _flatten_head("torch")
    graph = oh.make_graph(nodes, "dyn", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 10, 10])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    assert fold_shapes(model) == 0 and any(n.op_type == "Shape" for n in model.graph.node)


def test_quantize_nodes_are_not_folded() -> None:
    """Constant-folding a weight's DequantizeLinear would turn the 8-bit weight into a float one."""
    nodes = [oh.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"]),
             oh.make_node("Conv", ["x", "wf"], ["y"], pads=[1, 1, 1, 1])]
    inits = [_init("wq", rng.integers(-100, 100, (8, 8, 3, 3)).astype(np.int8)),
             _init("ws", np.array(0.01, np.float32)), _init("wz", np.array(0, np.int8))]
    prepared = prepare(_model(nodes, inits))
    assert [n.op_type for n in prepared.graph.node] == ["DequantizeLinear", "Conv"]


# ------------------------------------------------------------------------------- activations


_CLIP_BOUNDS = [_init("lo", np.array(0.0, np.float32)), _init("hi", np.array(6.0, np.float32))]
ACTIVATION_FORMS = {
    # name: (nodes after the conv's output "c", extra initializers, opset, epilogue kind)
    "relu6_clip_inputs": ([oh.make_node("Clip", ["c", "lo", "hi"], ["y"])], _CLIP_BOUNDS, 17, EpiKind.CLIP),
    "relu6_clip_attributes": ([oh.make_node("Clip", ["c"], ["y"], min=0.0, max=6.0)], [], 10, EpiKind.CLIP),
    "clip_min_only": ([oh.make_node("Clip", ["c", "lo"], ["y"])], _CLIP_BOUNDS[:1], 17, EpiKind.MAX),
    "relu6_max_min": ([oh.make_node("Max", ["c", "lo"], ["m"]), oh.make_node("Min", ["m", "hi"], ["y"])],
                      _CLIP_BOUNDS, 17, EpiKind.CLIP),
    "relu6_relu_min": ([oh.make_node("Relu", ["c"], ["m"]), oh.make_node("Min", ["m", "hi"], ["y"])],
                       _CLIP_BOUNDS, 17, EpiKind.CLIP),
    "hardsigmoid": ([oh.make_node("HardSigmoid", ["c"], ["y"], alpha=0.25, beta=0.4)], [], 17, EpiKind.HSIGMOID),
    "hardswish": ([oh.make_node("HardSwish", ["c"], ["y"])], [], 17, EpiKind.HSWISH),
    "hardswish_as_mul": ([oh.make_node("HardSigmoid", ["c"], ["h"], alpha=1 / 6, beta=0.5),
                          oh.make_node("Mul", ["c", "h"], ["y"])], [], 13, EpiKind.HSWISH),
    "hardswish_as_mul_swapped": ([oh.make_node("HardSigmoid", ["c"], ["h"], alpha=1 / 6, beta=0.5),
                                  oh.make_node("Mul", ["h", "c"], ["y"])], [], 13, EpiKind.HSWISH),
    "swish_x_times_sigmoid": ([oh.make_node("Sigmoid", ["c"], ["s"]), oh.make_node("Mul", ["c", "s"], ["y"])], [],
                              17, EpiKind.SILU),
    "swish_sigmoid_times_x": ([oh.make_node("Sigmoid", ["c"], ["s"]), oh.make_node("Mul", ["s", "c"], ["y"])], [],
                              17, EpiKind.SILU),
}


@pytest.mark.parametrize("form", sorted(ACTIVATION_FORMS))
def test_activation_is_one_step_of_the_conv_epilogue(form: str) -> None:
    nodes, inits, opset, kind = ACTIVATION_FORMS[form]
    info, epilogues = _build(_model([_conv(), *nodes], [*_weights(), *inits], opset=opset))
    assert info.host_ops == {} and info.partitions == 1
    assert epilogues == [[EpiKind.BIAS, kind]]


@pytest.mark.parametrize("form", ["relu6_clip_inputs", "hardswish", "hardsigmoid", "swish_sigmoid_times_x"])
def test_activation_on_its_own_is_one_npu_step(form: str) -> None:
    nodes, inits, opset, kind = ACTIVATION_FORMS[form]
    rename = [oh.make_node(n.op_type, ["x" if i == "c" else i for i in n.input], list(n.output)) for n in nodes]
    for new, old in zip(rename, nodes, strict=True):
        new.attribute.extend(old.attribute)
    info, epilogues = _build(_model(rename, inits, opset=opset))
    assert info.host_ops == {} and epilogues == [[kind]]


def test_swish_after_a_matmul() -> None:
    nodes = [oh.make_node("MatMul", ["x", "fc"], ["c"]), oh.make_node("Sigmoid", ["c"], ["s"]),
             oh.make_node("Mul", ["s", "c"], ["y"])]
    fc = (rng.standard_normal((24, 40)) / np.sqrt(24)).astype(np.float32)
    info, epilogues = _build(_model(nodes, [_init("fc", fc)], shape=(20, 24)), shape=(20, 24))
    assert info.host_ops == {} and epilogues == [[EpiKind.SILU]]


# ------------------------------------------------------------------------------- explicit pads


def _pad(pads: list[int], value: float | None = None, mode: str = "constant") -> tuple[onnx.NodeProto, list]:
    inputs = ["x", "pads"] + (["pad_value"] if value is not None else [])
    inits = [_init("pads", np.array(pads, np.int64))]
    if value is not None:
        inits.append(_init("pad_value", np.array(value, np.float32)))
    return oh.make_node("Pad", inputs, ["xp"], mode=mode), inits


@pytest.mark.parametrize("pads, strides", [
    ([0, 0, 1, 1, 0, 0, 1, 1], [1, 1]),  # PyTorch F.pad / ZeroPad2d
    ([0, 0, 0, 0, 0, 0, 1, 1], [2, 2]),  # TF "SAME" with stride 2: bottom / right only
    ([0, 0, 1, 0, 0, 0, 0, 1], [1, 1]),  # top and right
])
def test_pad_folds_into_the_conv(pads: list[int], strides: list[int]) -> None:
    pad, inits = _pad(pads, 0.0)
    model = _model([pad, _conv("xp", "y", pads=[0, 0, 0, 0], strides=strides)], [*_weights(), *inits])
    assert [n.op_type for n in prepare(model).graph.node] == ["Conv"]
    info, _ = _build(model)
    assert info.host_ops == {}
    (plan,) = info.plans
    top, left, bottom, right = plan.ops[0].spec.padding
    assert (top, left, bottom, right) == (pads[2], pads[3], pads[6], pads[7])


@pytest.mark.parametrize("pool, value, relu", [
    ("AveragePool", 0.0, False),  # the padding's zeros are counted
    ("MaxPool", -np.inf, False),
    ("MaxPool", 0.0, True),  # a zero pad of a non-negative value
])
def test_pad_folds_into_the_pool(pool: str, value: float, relu: bool) -> None:
    pad, inits = _pad([0, 0, 0, 0, 0, 0, 1, 1], value)
    pre = [oh.make_node("Relu", ["x"], ["xr"])] if relu else []
    if relu:
        pad.input[0] = "xr"
    nodes = [*pre, pad, oh.make_node(pool, ["xp"], ["y"], kernel_shape=[3, 3], strides=[2, 2])]
    model = _model(nodes, inits)
    assert [n.op_type for n in prepare(model).graph.node] == [*(["Relu"] if relu else []), pool]
    info, _ = _build(model)
    assert info.host_ops == {}


#: What stays on the host per case: the importer's call_tir where the pad is not topi's constant pad of
#: positive widths, ``nn.pad`` where it is one but its reader cannot take it, nothing where the reader can
#: (a zero pad of a signed map before a max pool: the pool's padding reads the zero, ``VMAXPOOL_PAD``).
HOSTED = {"reflect": {"relax.call_tir": 1}, "negative": {"relax.call_tir": 1},
          "wider_than_window": {"relax.nn.pad": 1}, "maxpool_zero_pad_of_signed": {}}


@pytest.mark.parametrize("case", list(HOSTED))
def test_pads_the_onnx_fold_cannot_prove(case: str) -> None:
    pads, mode, value, consumer = [0, 0, 1, 1, 0, 0, 1, 1], "constant", 0.0, "Conv"
    if case == "reflect":
        mode, value = "reflect", None
    elif case == "negative":
        pads = [0, 0, 1, -1, 0, 0, 1, 1]
    elif case == "wider_than_window":
        pads = [0, 0, 3, 3, 0, 0, 3, 3]
    else:
        consumer = "MaxPool"
    pad, inits = _pad(pads, value, mode)
    if consumer == "Conv":
        nodes, inits = [pad, _conv("xp", "y", pads=[0, 0, 0, 0])], [*_weights(), *inits]
    else:
        nodes = [pad, oh.make_node("MaxPool", ["xp"], ["y"], kernel_shape=[3, 3], strides=[2, 2])]
    model = _model(nodes, inits)
    assert "Pad" in [n.op_type for n in prepare(model).graph.node]
    info, _ = _build(model)
    assert info.host_ops == HOSTED[case]  # at most the pad; the conv / pool runs on the NPU
    assert info.npu_ops.get("relax.nn.conv2d", 0) + info.npu_ops.get("relax.nn.max_pool2d", 0) == 1


# ------------------------------------------------------------------------------- NHWC input


def test_nhwc_input_transpose_folds_into_the_first_conv() -> None:
    """tf2onnx: an NHWC graph input transposed to NCHW for the first conv; the conv reads NHWC."""
    nodes = [oh.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]), _conv("t", "c"),
             oh.make_node("Relu", ["c"], ["y"])]
    shape = (1, 10, 10, 8)
    info, epilogues = _build(_model(nodes, _weights(), shape=shape), shape=shape)
    assert info.host_ops == {} and info.layout_transforms == 0 and epilogues == [[EpiKind.BIAS, EpiKind.RELU]]
    (plan,) = info.plans
    assert plan.ops[0].spec.data.layout == "NHWC" and plan.ops[0].spec.out.layout == "NCHW"


def _npu_and_llvm(model: onnx.ModelProto, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, tvm_npu.BuildInfo]:
    """The NPU build's and the llvm build's outputs on ``x``, and the NPU build's info."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ex, info = tvm_npu.build_with_info(model)
        ref_ex = tvm_npu.build_reference(model)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ref = relax.VirtualMachine(ref_ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    return got, ref, info


@pytest.mark.parametrize("form", ["int8_pad_with_zero_point", "float_pad_between_dq_and_q"])
def test_pad_of_a_quantized_tensor_folds_into_the_8bit_conv(form: str) -> None:
    """QDQ: a pad of the 8-bit tensor with its zero point (or of the dequantized value with 0, then
    quantized again) is the 8-bit convolution's own padding with the zero point."""
    sx, zx, sy, zy = 0.05, 3, 0.08, -2
    wq = rng.integers(-60, 60, (8, 8, 3, 3)).astype(np.int8)
    inits = [_init("sx", np.array(sx, np.float32)), _init("zx", np.array(zx, np.int8)),
             _init("sy", np.array(sy, np.float32)), _init("zy", np.array(zy, np.int8)),
             _init("wq", wq), _init("ws", np.array(0.01, np.float32)), _init("wz", np.array(0, np.int8)),
             _init("pads", np.array([0, 0, 1, 0, 0, 0, 1, 1], np.int64))]
    if form == "int8_pad_with_zero_point":
        pad = [oh.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
               oh.make_node("Pad", ["xq", "pads", "zx"], ["xpq"], mode="constant"),
               oh.make_node("DequantizeLinear", ["xpq", "sx", "zx"], ["xp"])]
    else:
        inits.append(_init("zero", np.array(0.0, np.float32)))
        pad = [oh.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
               oh.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
               oh.make_node("Pad", ["xd", "pads", "zero"], ["xpd"], mode="constant"),
               oh.make_node("QuantizeLinear", ["xpd", "sx", "zx"], ["xpq"]),
               oh.make_node("DequantizeLinear", ["xpq", "sx", "zx"], ["xp"])]
    nodes = [*pad, oh.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"]),
             oh.make_node("Conv", ["xp", "w"], ["c"], strides=[2, 2]),
             oh.make_node("QuantizeLinear", ["c", "sy", "zy"], ["cq"]),
             oh.make_node("DequantizeLinear", ["cq", "sy", "zy"], ["y"])]
    model = _model(nodes, inits)
    assert "Pad" not in [n.op_type for n in prepare(model).graph.node]
    x = (rng.standard_normal(SHAPE) * 2).astype(np.float32)
    got, ref, info = _npu_and_llvm(model, x)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got, ref)  # the integer kernels, bit for bit
    np.testing.assert_allclose(got, sess.run(None, {"x": x})[0], atol=sy * 1.01, rtol=0)  # at most one step
    assert "relax.call_tir" not in info.host_ops and "relax.nn.conv2d" not in info.host_ops
    (plan,) = info.plans
    conv = next(op.spec for op in plan.ops if hasattr(op.spec, "pad_value"))
    assert conv.padding == (1, 0, 1, 1) and conv.pad_value == zx and conv.data.dtype.is_quantized


def _qdq_inits(zx: int = -1, zr: int = -128) -> list[onnx.TensorProto]:
    return [_init("sx", np.array(0.05, np.float32)), _init("zx", np.array(zx, np.int8)),
            _init("sr", np.array(0.04, np.float32)), _init("zr", np.array(zr, np.int8)),
            _init("wq", rng.integers(-60, 60, (8, 8, 3, 3)).astype(np.int8)),
            _init("ws", np.array(0.01, np.float32)), _init("wz", np.array(0, np.int8)),
            _init("zero", np.array(0.0, np.float32))]


def _run_int8(model: onnx.ModelProto, shape: tuple[int, ...]) -> tvm_npu.BuildInfo:
    """Build an int8-in, int8-out model; NPU == llvm bit for bit, onnxruntime within one step."""
    x = rng.integers(-128, 128, shape).astype(np.int8)
    got, ref, info = _npu_and_llvm(model, x)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, ref)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    return info


def _int8_model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], shape: tuple[int, ...]
                ) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "converter_form", [oh.make_tensor_value_info("x", TensorProto.INT8, list(shape))],
                          [oh.make_tensor_value_info("y", TensorProto.INT8, None)], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def test_nhwc_pad_before_the_input_transpose_folds_into_the_first_conv() -> None:
    """tf2onnx ``--tflite`` (ResNet-50's stem): the int8 NHWC input dequantized, padded in NHWC with 0.0,
    quantized again, transposed to NCHW, then the 7x7 conv. The pad moves past the Q and the Transpose
    (its pads permuted) into the conv; the Q(DQ(x)) pair left behind is ``x`` (the QDQ rewrite drops it)."""
    shape = (1, 12, 12, 8)
    inits = [*_qdq_inits(), _init("pads", np.array([0, 2, 1, 0, 0, 1, 2, 0], np.int64))]
    nodes = [oh.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xd"]),
             oh.make_node("Pad", ["xd", "pads", "zero"], ["xpd"], mode="constant"),
             oh.make_node("QuantizeLinear", ["xpd", "sx", "zx"], ["xpq"]),
             oh.make_node("Transpose", ["xpq"], ["t"], perm=[0, 3, 1, 2]),
             oh.make_node("DequantizeLinear", ["t", "sx", "zx"], ["td"]),
             oh.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"]),
             oh.make_node("Conv", ["td", "w"], ["c"], strides=[2, 2]),
             oh.make_node("QuantizeLinear", ["c", "sr", "zr"], ["y"])]
    model = _int8_model(nodes, inits, shape)
    assert "Pad" not in [n.op_type for n in prepare(model).graph.node]
    info = _run_int8(model, shape)
    assert info.host_ops == {}
    (conv,) = [op.spec for plan in info.plans for op in plan.ops]  # no transpose of its own
    assert conv.padding == (2, 1, 1, 2) and conv.pad_value == -1
    assert conv.data.view is not None and conv.data.view.dims[1] == ((8, 1),)  # reads the NHWC input in place


@pytest.mark.parametrize("zr, folds", [(-128, True), (-100, False)])
def test_pad_of_a_quantized_relu_folds_into_the_maxpool(zr: int, folds: bool) -> None:
    """tf2onnx's ``DQ -> Pad(0.0) -> Q -> DQ -> MaxPool``: exact to fold at the ONNX level when the
    dequantized tensor is never negative, i.e. its zero point is the type's minimum (a quantized ReLU's);
    with any other zero point 0.0 exceeds some values, so the pad stays a pad, which the max pool's
    padding then reads (an 8-bit ``VMAXPOOL_PAD`` padding with the zero point): on the NPU either way."""
    shape = (1, 8, 10, 10)
    inits = [*_qdq_inits(zr=zr), _init("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))]
    nodes = [oh.make_node("DequantizeLinear", ["x", "sr", "zr"], ["xd"]),
             oh.make_node("Pad", ["xd", "pads", "zero"], ["xpd"], mode="constant"),
             oh.make_node("QuantizeLinear", ["xpd", "sr", "zr"], ["xpq"]),
             oh.make_node("DequantizeLinear", ["xpq", "sr", "zr"], ["xp"]),
             oh.make_node("MaxPool", ["xp"], ["m"], kernel_shape=[3, 3], strides=[2, 2]),
             oh.make_node("QuantizeLinear", ["m", "sr", "zr"], ["y"])]
    model = _int8_model(nodes, inits, shape)
    assert ("Pad" not in [n.op_type for n in prepare(model).graph.node]) == folds
    info = _run_int8(model, shape)
    assert info.host_ops == {}
    assert info.npu_ops.get("relax.nn.max_pool2d") == 1
    assert ("relax.nn.pad" in info.npu_ops) != folds


@pytest.mark.parametrize("same", [True, False])
def test_requantize_pair_with_the_same_parameters_is_dropped(same: bool) -> None:
    """``Q(DQ(x, s, z), s, z)`` is ``x`` exactly: nothing runs for it; with another scale it is a
    requantisation, an operator of its own on the NPU (a 256-entry table, ``relay_patterns/qlut.py``)."""
    shape = (1, 8, 6, 6)
    inits = _qdq_inits()
    nodes = [oh.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xd"]),
             oh.make_node("QuantizeLinear", ["xd", "sx" if same else "sr", "zx"], ["xq"]),
             oh.make_node("DequantizeLinear", ["xq", "sx" if same else "sr", "zx"], ["xd2"]),
             oh.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"]),
             oh.make_node("Conv", ["xd2", "w"], ["c"], pads=[1, 1, 1, 1]),
             oh.make_node("QuantizeLinear", ["c", "sr", "zr"], ["y"])]
    info = _run_int8(_int8_model(nodes, inits, shape), shape)
    ops = [op for plan in info.plans for op in plan.ops]
    if same:
        assert info.host_ops == {} and len(ops) == 1
    else:
        assert info.host_ops == {} and len(ops) == 2
        assert [e.kind.value for e in ops[0].spec.epilogue] == ["lut"], ops[0].spec


def test_inverted_residual_block_is_one_partition_with_the_add_fused() -> None:
    """MobileNetV2's residual as torch writes it, ``x + conv(relu6(conv(x)))`` with ReLU6 as Clip and
    ``x`` the previous block's project conv (no activation), which the next block reads too: one
    partition, and the add goes into this block's project conv's epilogue (the pattern offers it to
    ``x``'s conv first, which cannot take it; the plan's fusion takes the other operand)."""
    inits = [*_weights(), *_CLIP_BOUNDS,
             _init("w1", (rng.standard_normal((8, 8, 1, 1)) / np.sqrt(8)).astype(np.float32))]
    nodes = [_conv("x", "x0"), _conv("x0", "h0"), oh.make_node("Clip", ["h0", "lo", "hi"], ["h1"]),
             oh.make_node("Conv", ["h1", "w1", "b"], ["h2"]), oh.make_node("Add", ["x0", "h2"], ["s"]),
             oh.make_node("Conv", ["s", "w1"], ["y"])]
    info, epilogues = _build(_model(nodes, inits))
    assert info.host_ops == {} and info.partitions == 1
    assert epilogues == [[EpiKind.BIAS], [EpiKind.BIAS, EpiKind.CLIP], [EpiKind.BIAS, EpiKind.ADD], []]


def test_what_prepare_leaves_alone() -> None:
    """A pad read by two operators, and a Clip whose bound is computed at run time, are not rewritten."""
    pad, inits = _pad([0, 0, 1, 1, 0, 0, 1, 1], 0.0)
    nodes = [pad, _conv("xp", "a", pads=[0, 0, 0, 0]), _conv("xp", "b", pads=[0, 0, 0, 0]),
             oh.make_node("ReduceMin", ["x"], ["lo"], keepdims=0), oh.make_node("Add", ["a", "b"], ["s"]),
             oh.make_node("Clip", ["s", "lo"], ["y"])]
    prepared = prepare(_model(nodes, [*_weights(), *inits], opset=17))
    assert [n.op_type for n in prepared.graph.node] == [n.op_type for n in nodes]
