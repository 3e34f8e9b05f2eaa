"""Normalisations by their algebra, whatever form the exporter wrote: each is one row-wise NPU operator.

Small ONNX models (``onnx.helper``) as tf2onnx and torch write them: Keras LayerNormalization in a ViT
block, RMSNorm (``x * rsqrt(mean(x^2) + eps) * g`` and ``x / sqrt(...) * g``), GroupNorm (torch's
Reshape -> InstanceNormalization -> Reshape -> Mul -> Add, and opset 18's GroupNormalization),
InstanceNormalization, L2 normalisation (``x / max(sqrt(sum(x^2)), eps)`` and torch's ReduceL2 -> Clip
-> Expand -> Div), against llvm (``build_reference``) and onnxruntime; no operator on the host, one
partition, and the normalisation one NPU operator."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from helpers import check_against_references  # tests/ is on sys.path
from onnx import TensorProto, helper
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm import relax

import tvm_npu
from tvm_npu.core.ops import Along, RowKind, RowwiseSpec

RTOL, ATOL = 1e-4, 1e-5


def _check(model: onnx.ModelProto, programs: int = 1) -> tvm_npu.BuildInfo:
    """NPU vs llvm and onnxruntime; no host operator, one partition, ``programs`` row programs."""
    info = check_against_references(model)
    assert len(_programs(info)) == programs, [type(o.spec).__name__ for p in info.plans for o in p.ops]
    return info


def _programs(info: tvm_npu.BuildInfo) -> list[RowwiseSpec]:
    return [o.spec for p in info.plans for o in p.ops
            if isinstance(o.spec, RowwiseSpec) and o.spec.kind == RowKind.PROGRAM]


def _tf2onnx_layer_norm(net: OnnxNet, x: str, dim: int, eps: float = 1e-3) -> str:
    """Keras LayerNormalization as tf2onnx writes it (``tf.nn.batch_normalization`` of the moments):
    ``x * (r * g) + (b - mean * (r * g))``, ``r = 1 / sqrt(mean((x - mean)^2) + eps)``."""
    g = net.const(net.rng.uniform(0.5, 1.5, dim))
    b = net.const(net.rng.standard_normal(dim) * 0.1)
    mean = net.node("ReduceMean", [x], axes=[-1], keepdims=1)
    diff = net.node("Sub", [x, mean])
    var = net.node("ReduceMean", [net.node("Mul", [diff, diff])], axes=[-1], keepdims=1)
    r = net.node("Reciprocal", [net.node("Sqrt", [net.node("Add", [var, net.const(np.float32(eps))])])])
    rg = net.node("Mul", [r, g])
    shift = net.node("Add", [net.node("Neg", [net.node("Mul", [mean, rg])]), b])
    return net.node("Add", [net.node("Mul", [x, rg]), shift])


def _dense(net: OnnxNet, x: str, cin: int, cout: int) -> str:
    w = net.const(net.rng.standard_normal((cin, cout)) / np.sqrt(cin))
    return net.node("Add", [net.node("MatMul", [x, w]), net.const(net.rng.standard_normal(cout) * 0.1)])


def test_keras_vit_block_layer_norms_as_tf2onnx_writes_them() -> None:
    """A ViT encoder block (tokens 16, dim 32, 2 heads): two tf2onnx layer norms, attention (the heads split
    by Reshape / Transpose, Softmax) and an MLP with erf-GELU; all on the NPU. Each norm's canonical form is a
    layer norm's, so it becomes ``layer_norm`` (one operator, the row-wise kind's layer norm)."""
    tokens, dim, heads = 16, 32, 2
    net = OnnxNet()
    h = _tf2onnx_layer_norm(net, "x", dim)
    split = net.const(np.array([1, tokens, heads, dim // heads]), np.int64)
    q, k, v = (net.node("Transpose", [net.node("Reshape", [_dense(net, h, dim, dim), split])], perm=[0, 2, 1, 3])
               for _ in range(3))
    scores = net.node("Mul", [net.node("MatMul", [q, net.node("Transpose", [k], perm=[0, 1, 3, 2])]),
                              net.const(np.float32(1 / np.sqrt(dim // heads)))])
    ctx = net.node("MatMul", [net.node("Softmax", [scores], axis=-1), v])
    merged = net.node("Reshape", [net.node("Transpose", [ctx], perm=[0, 2, 1, 3]),
                                  net.const(np.array([1, tokens, dim]), np.int64)])
    x1 = net.node("Add", ["x", _dense(net, merged, dim, dim)])
    m = _dense(net, _tf2onnx_layer_norm(net, x1, dim), dim, 2 * dim)
    erf = net.node("Erf", [net.node("Div", [m, net.const(np.float32(np.sqrt(2.0)))])])
    gelu = net.node("Mul", [net.node("Mul", [m, net.node("Add", [erf, net.const(np.float32(1))])]),
                            net.const(np.float32(0.5))])
    out = net.node("Add", [x1, _dense(net, gelu, 2 * dim, dim)])
    info = _check(net.model(out, [1, tokens, dim], [1, tokens, dim]), programs=0)
    norms = [o.spec for p in info.plans for o in p.ops if isinstance(o.spec, RowwiseSpec)]
    assert [n.kind for n in norms].count(RowKind.LAYER_NORM) == 2 and info.npu_ops["relax.nn.layer_norm"] == 2


@pytest.mark.parametrize("form", ["rsqrt", "divide"])
def test_rms_norm(form: str) -> None:
    """RMSNorm as ``x * (1 / sqrt(mean(x * x) + eps)) * g`` or ``x / sqrt(mean(x ** 2) + eps) * g``: the
    same program either way."""
    dim = 48
    net = OnnxNet()
    h = _dense(net, "x", dim, dim)
    square = net.node("Mul", [h, h]) if form == "rsqrt" else net.node("Pow", [h, net.const(np.float32(2))])
    ms = net.node("Add", [net.node("ReduceMean", [square], axes=[-1], keepdims=1), net.const(np.float32(1e-6))])
    if form == "rsqrt":
        normed = net.node("Mul", [h, net.node("Reciprocal", [net.node("Sqrt", [ms])])])
    else:
        normed = net.node("Div", [h, net.node("Sqrt", [ms])])
    y = net.node("Mul", [normed, net.const(net.rng.uniform(0.5, 1.5, dim))])
    info = _check(net.model(_dense(net, y, dim, dim), [1, 12, dim], [1, 12, dim]))
    (spec,) = _programs(info)
    assert [s.op.name for s in spec.program] == ["VMUL", "VRSUM", "VSCALE", "VRSQRT", "VMUL", "VMUL"]


def test_instance_norm() -> None:
    """ONNX InstanceNormalization (imported as mean / variance over H, W): rows of H * W per channel, the
    per-channel scale and bias one value per row."""
    net = OnnxNet()
    y = net.conv("x", 4, 8, 3, relu=False)
    scale, bias = net.const(net.rng.uniform(0.5, 1.5, 8)), net.const(net.rng.standard_normal(8) * 0.1)
    norm = net.node("InstanceNormalization", [y, scale, bias], epsilon=1e-5)
    info = _check(net.model(net.conv(norm, 8, 8, 1, relu=False), [1, 4, 6, 10], [1, 8, 6, 10]))
    (spec,) = _programs(info)
    assert (spec.rows, spec.cols) == (8, 60)


def test_group_norm_as_torch_exports_it() -> None:
    """torch's GroupNorm: Reshape (1, G, -1) -> InstanceNormalization (unit scale) -> Reshape back -> Mul,
    Add per channel; a U-Net style block (conv, group norm, swish, conv)."""
    c, groups = 16, 4
    net = OnnxNet()
    y = net.conv("x", 4, c, 3, relu=False)
    grouped = net.node("Reshape", [y, net.const(np.array([1, groups, -1]), np.int64)])
    norm = net.node("InstanceNormalization", [grouped, net.const(np.ones(groups)), net.const(np.zeros(groups))],
                    epsilon=1e-5)
    back = net.node("Reshape", [norm, net.const(np.array([1, c, 8, 8]), np.int64)])
    scaled = net.node("Mul", [back, net.const(net.rng.uniform(0.5, 1.5, (c, 1, 1)))])
    shifted = net.node("Add", [scaled, net.const(net.rng.standard_normal((c, 1, 1)) * 0.1)])
    act = net.node("Mul", [shifted, net.node("Sigmoid", [shifted])])
    info = _check(net.model(net.conv(act, c, 8, 3, relu=False), [1, 4, 8, 8], [1, 8, 8, 8]))
    (spec,) = _programs(info)
    assert (spec.rows, spec.cols) == (groups, c // groups * 64)


def test_group_normalization_opset_18() -> None:
    """ONNX GroupNormalization (opset 18, TVM's ``group_norm``): decomposed over the group view, one operator."""
    c, groups = 8, 2
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(rng.uniform(0.5, 1.5, groups).astype(np.float32), "g"),
             onnx.numpy_helper.from_array((rng.standard_normal(groups) * 0.1).astype(np.float32), "b")]
    node = helper.make_node("GroupNormalization", ["x", "g", "b"], ["y"], num_groups=groups, epsilon=1e-5)
    graph = helper.make_graph([node], "gn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    (spec,) = _programs(_check(model))
    assert (spec.rows, spec.cols) == (groups, c // groups * 36)


@pytest.mark.parametrize("form", ["sum_square_max", "reduce_l2_clip_expand"])
def test_l2_normalisation(form: str) -> None:
    """``x / max(sqrt(sum(x^2)), eps)``, and torch's ``F.normalize``: ReduceL2 -> Clip(min=eps) -> Expand -> Div."""
    dim, tokens = 40, 10
    net = OnnxNet()
    h = _dense(net, "x", dim, dim)
    if form == "sum_square_max":
        norm = net.node("ReduceSumSquare", [h], axes=[-1], keepdims=1)
        norm = net.node("Max", [net.node("Sqrt", [norm]), net.const(np.float32(1e-12))])
    else:
        norm = net.node("Clip", [net.node("ReduceL2", [h], axes=[-1], keepdims=1), net.const(np.float32(1e-12))])
        norm = net.node("Expand", [norm, net.const(np.array([1, tokens, dim]), np.int64)])
    y = net.node("Div", [h, norm])
    _check(net.model(_dense(net, y, dim, dim), [1, tokens, dim], [1, tokens, dim]))


def test_log_softmax_is_one_program() -> None:
    """``x - max - log(sum(exp(x - max)))``: with ``VLOG`` the whole log-softmax is one row program (it was a
    ``x - max`` program with the log-sum-exp on the host before the vector engine had a logarithm)."""
    net = OnnxNet()
    h = _dense(net, "x", 16, 16)
    d = net.node("Sub", [h, net.node("ReduceMax", [h], axes=[-1], keepdims=1)])
    last = net.const(np.array([-1]), np.int64)  # (opset 13: ReduceSum's axes are an input)
    lse = net.node("Log", [net.node("ReduceSum", [net.node("Exp", [d]), last], keepdims=1)])
    model = net.model(net.node("Sub", [d, lse]), [1, 4, 16], [1, 4, 16])
    x = np.random.default_rng(1).standard_normal((1, 4, 16)).astype(np.float32)
    ex, info = tvm_npu.build_with_info(model, "npu")
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ref = relax.VirtualMachine(tvm_npu.build_reference(model), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    assert info.host_ops == {} and info.partitions == 1
    assert [[s.op.name for s in p.program] for p in _programs(info)] == [["VRMAX", "VSUB", "VEXP", "VRSUM", "VLOG",
                                                                           "VSUB"]]


def test_a_vector_along_the_last_axis_after_a_norm_over_several_axes() -> None:
    """InstanceNorm (rows of H * W) then a multiply by a vector along W: the vector, repeated over H, is one
    per-position constant of the rows, so the multiply is a step of the same operator."""
    net = OnnxNet()
    y = net.conv("x", 4, 8, 3, relu=False)
    norm = net.node("InstanceNormalization", [y, net.const(np.ones(8)), net.const(np.zeros(8))], epsilon=1e-5)
    scaled = net.node("Mul", [norm, net.const(net.rng.uniform(0.5, 1.5, 10))])
    info = _check(net.model(scaled, [1, 4, 6, 10], [1, 8, 6, 10]))
    (spec,) = _programs(info)
    assert [(p.along, p.ref.shape) for p in spec.params] == [(Along.COLS, (60,))]
    assert len([o for p in info.plans for o in p.ops]) == 2


def test_l2_norm_over_the_channels_as_ssd_writes_it() -> None:
    """SSD's L2Norm, ``x / (sqrt(sum(x^2, axis=1)) + eps) * scale[c]`` after a conv (NCHW): the channels are no
    trailing axis, so the program runs on a transposing view (rows of C per pixel), one operator."""
    c = 16
    net = OnnxNet()
    y = net.conv("x", 4, c, 3)
    total = net.node("ReduceSum", [net.node("Mul", [y, y]), net.const(np.array([1]), np.int64)], keepdims=1)
    norm = net.node("Add", [net.node("Sqrt", [total]), net.const(np.float32(1e-10))])
    scaled = net.node("Mul", [net.node("Div", [y, norm]), net.const(net.rng.uniform(10, 20, (1, c, 1, 1)))])
    info = _check(net.model(net.conv(scaled, c, 8, 1, relu=False), [1, 4, 8, 8], [1, 8, 8, 8]))
    (spec,) = _programs(info)
    assert (spec.rows, spec.cols) == (64, c) and [p.along for p in spec.params] == [Along.COLS]


def test_layer_norm_over_axis_1() -> None:
    """A layer norm over axis 1 of (N, C, L) (a channels-first sequence model): a layer norm over the last
    axis of a transposing view."""
    net = OnnxNet()
    d = net.node("Sub", ["x", net.node("ReduceMean", ["x"], axes=[1], keepdims=1)])
    var = net.node("ReduceMean", [net.node("Mul", [d, d])], axes=[1], keepdims=1)
    y = net.node("Div", [d, net.node("Sqrt", [net.node("Add", [var, net.const(np.float32(1e-5))])])])
    y = net.node("Mul", [y, net.const(net.rng.uniform(0.5, 1.5, (1, 24, 1)))])
    info = _check(net.model(y, [2, 24, 10], [2, 24, 10]), programs=0)
    (spec,) = [o.spec for p in info.plans for o in p.ops]
    assert spec.kind == RowKind.LAYER_NORM and spec.cols == 24
