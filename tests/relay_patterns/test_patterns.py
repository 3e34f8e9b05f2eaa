"""The npu.* pattern table: what is offloaded, what stays on the host, and the specs it extracts."""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
import tvm_npu.relay_patterns.patterns as patterns_mod
from tvm import relax
from tvm.relax.backend.pattern_registry import get_patterns_with_prefix
from tvm_npu.relay_patterns import HostFallbackWarning, canonicalize_passes, extract_op, pattern_table

from tvm_npu.config import DType, NpuTarget, parse_target
from tvm_npu.core.ops import (
    Broadcast,
    Conv2dSpec,
    ElementwiseSpec,
    EpiKind,
    MatmulSpec,
    PoolKind,
    PoolSpec,
    TensorRef,
)

F32 = "float32"
RNG = np.random.default_rng(0)
ACTS = ("relu", "clip", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu", "power")
#: Activations matched as several Relax ops (tests/relay_patterns/test_exporter_forms.py tests them).
COMPOSITE_ACTS = ("hardswish", "hardsigmoid")
LIGHT = Path(onnx.__file__).parent / "backend/test/data/light"


# ---- helpers ---------------------------------------------------------------------------------


def tensor(name: str, shape: Sequence[object], dtype: str = F32) -> relax.Var:
    return relax.Var(name, relax.TensorType(shape, dtype))


def const(shape: Sequence[int], dtype: str = F32) -> relax.Expr:
    return relax.const(RNG.standard_normal(shape).astype(dtype))


def build(params: Sequence[relax.Var], body: Callable[..., relax.Expr]) -> tvm.IRModule:
    """A one-function module whose dataflow block emits every op ``body`` builds (via ``emit``)."""
    bb = relax.BlockBuilder()
    with bb.function("main", list(params)):
        with bb.dataflow():
            out = bb.emit_output(body(bb.emit, *params))
        bb.emit_func_output(out)
    return bb.get()


def partition(mod: tvm.IRModule, target: str | NpuTarget = "npu") -> tvm.IRModule:
    table = pattern_table(parse_target(target))
    mod = relax.transform.FuseOpsByPattern(table, bind_constants=True, annotate_codegen=False)(mod)
    return relax.transform.MergeCompositeFunctions()(mod)


def _local_composites(func: relax.Function) -> list[tuple[str, relax.Function]]:
    """Composite functions called in an NPU region, one entry per call."""
    local, calls = {}, []
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b.value, relax.Function):
                local[b.var] = (str(b.value.attrs["Composite"]), b.value)
            elif isinstance(b.value, relax.Call) and b.value.op in local:
                calls.append(local[b.value.op])
    return calls


def offloaded(mod: tvm.IRModule) -> tuple[list[tuple[str, relax.Function]], collections.Counter, int]:
    """(composites run on the NPU, one per call; ops left on the host; number of NPU region calls)."""
    composites, host, regions = [], collections.Counter(), 0
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            v = b.value
            if not isinstance(v, relax.Call):
                continue
            if isinstance(v.op, tvm.ir.Op):
                host[v.op.name] += 1
            elif isinstance(v.op, tvm.ir.GlobalVar) and "Codegen" in (mod[v.op].attrs or {}):
                regions += 1
                composites += _local_composites(mod[v.op])
            else:
                host[str(v.op)] += 1
    return composites, host, regions


def names(mod: tvm.IRModule) -> list[str]:
    return [n for n, _ in offloaded(mod)[0]]


def host_ops(mod: tvm.IRModule) -> collections.Counter:
    return offloaded(mod)[1]


def only_spec(mod: tvm.IRModule, prefix: str = "c") -> tuple[str, object, dict[str, np.ndarray]]:
    """Extract the single offloaded composite (params named in0, in1, ...; output "out")."""
    (name, func), = offloaded(mod)[0]
    op = extract_op(func, [f"in{i}" for i in range(len(func.params))], "out", prefix)
    return name, op.spec, op.constants


def activation(emit: Callable, name: str | None, x: relax.Expr) -> relax.Expr:
    if name is None:
        return x
    if name == "clip":
        return emit(relax.op.clip(x, 0.0, 6.0))
    if name == "power":  # a constant scalar exponent becomes the step's parameter
        return emit(relax.op.power(x, relax.const(-0.75, "float32")))
    op = {"relu": relax.op.nn.relu, "sigmoid": relax.op.sigmoid, "tanh": relax.op.tanh, "gelu": relax.op.nn.gelu,
          "gelu_tanh": relax.op.nn.gelu_tanh, "silu": relax.op.nn.silu}
    return emit(op[name](x))


def variant(op: str, bias: bool, residual: bool, act: str | None) -> str:
    return "npu." + "_".join(p for p in (op, "bias" if bias else "", "add" if residual else "", act or "") if p)


# ---- the table --------------------------------------------------------------------------------


def test_registry_lists_the_default_table_in_priority_order() -> None:
    registered = [p.name for p in get_patterns_with_prefix("npu")]
    assert registered == [name for name, *_ in pattern_table(NpuTarget())]
    assert all(n.startswith("npu.") for n in registered)


def test_longest_chains_come_first() -> None:
    table = [name for name, *_ in pattern_table(NpuTarget())]
    pos = table.index
    assert pos("npu.conv2d_bias_add_relu") < pos("npu.conv2d_bias_relu") < pos("npu.conv2d_bias") < pos("npu.conv2d")
    assert pos("npu.conv2d") < pos("npu.max_pool2d") < pos("npu.add") < pos("npu.relu")
    assert len(table) == len(set(table))


def test_fusion0_table_has_only_bare_ops() -> None:
    bare = {name for name, *_ in pattern_table(parse_target("npu -fusion=0"))}
    assert bare == {
        "npu.conv2d", "npu.matmul", "npu.max_pool2d", "npu.avg_pool2d", "npu.adaptive_avg_pool2d", "npu.mean",
        "npu.add", "npu.subtract", "npu.multiply", "npu.maximum", "npu.minimum", *(f"npu.{a}" for a in ACTS),
        "npu.constant_divide",  # c / x: a reciprocal and a multiply
        "npu.sqrt",  # a power by 0.5
        *(f"npu.{a}" for a in COMPOSITE_ACTS),
        "npu.conv2d_pad", "npu.qadd", "npu.astype",  # an 8-bit conv's zero-point padding, an 8-bit add, a cast
        "npu.qmul",  # an 8-bit product (relay_patterns/qbinary.py, VQMUL)
        "npu.max_pool2d_pad",  # a constant pad the max pool's padding reads (VMAXPOOL_PAD)
        "npu.lut",  # an 8-bit table lookup (relay_patterns/qlut.py)
        "npu.softmax", "npu.layer_norm",  # the row-wise operators
        "npu.dequantize", "npu.quantize_scaled", "npu.quantize",  # the float forms of a lone DQ / Q
        "npu.concat", *(f"npu.view_{v}" for v in ("reshape", "flatten", "squeeze", "expand_dims", "permute_dims",
                                                   "strided_slice", "take", "broadcast_to")),
        "npu.resize",  # a linear resize the canonicalisation left for the resize operator
        "npu.resize2d",  # always refused, with the reason (the NPU forms are made by canonicalisation)
    }
    fused = {name for name, *_ in pattern_table(parse_target("npu -fusion=1"))}
    # (bias, residual, activation) chains other than the bare op per conv2d / matmul, 8 requantised conv2d and
    # 4 matmul forms, a clipped 8-bit add, a clipped 8-bit product and a clipped integer quantize
    chains = 2 * 2 * (len(ACTS) + len(COMPOSITE_ACTS) + 1) - 1
    assert bare < fused and len(fused - bare) == 2 * chains + 8 + 4 + 1 + 1 + 1


def test_fusion0_every_op_is_its_own_composite_in_one_region() -> None:
    x = tensor("x", (1, 3, 8, 8))

    def body(emit, x):
        y = emit(relax.op.nn.conv2d(x, const((4, 3, 3, 3)), padding=1))
        return emit(relax.op.nn.relu(emit(relax.op.add(y, const((1, 4, 1, 1))))))

    mod = build([x], body)
    composites, host, regions = offloaded(partition(mod, "npu -fusion=0"))
    assert [n for n, _ in composites] == ["npu.conv2d", "npu.add", "npu.relu"]
    assert not host and regions == 1
    assert names(partition(mod, "npu -fusion=1")) == ["npu.conv2d_bias_relu"]


# ---- conv2d -----------------------------------------------------------------------------------


@pytest.mark.parametrize("act", [None, *ACTS])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d_epilogue_subsets(bias: bool, residual: bool, act: str | None) -> None:
    x, r = tensor("x", (1, 3, 8, 8)), tensor("r", (1, 4, 8, 8))

    def body(emit, x, r):
        y = emit(relax.op.nn.conv2d(x, const((4, 3, 3, 3)), padding=1))
        if bias:
            y = emit(relax.op.add(y, const((1, 4, 1, 1))))
        if residual:
            y = emit(relax.op.add(r, y))  # operand order does not matter
        return activation(emit, act, y)

    mod = partition(build([x, r], body))
    assert names(mod) == [variant("conv2d", bias, residual, act)]
    assert not host_ops(mod)
    _, spec, _ = only_spec(mod)
    kinds = [e.kind for e in spec.epilogue]
    expected = [EpiKind.BIAS] * bias + [EpiKind.ADD] * residual + ([EpiKind(act)] if act else [])
    assert kinds == expected


def test_conv2d_extraction_relayouts_weight_and_flattens_bias() -> None:
    x, r = tensor("x", (1, 9, 10, 12)), tensor("r", (1, 5, 6, 6))
    w = RNG.standard_normal((3, 2, 9, 5)).astype(F32)  # HWIO
    b = RNG.standard_normal((1, 5, 1, 1)).astype(F32)

    def body(emit, x, r):
        y = emit(relax.op.nn.conv2d(x, relax.const(w), strides=(2, 2), padding=(1, 0, 2, 1), dilation=(1, 2),
                                    kernel_layout="HWIO"))
        y = emit(relax.op.add(emit(relax.op.add(y, relax.const(b))), r))
        return emit(relax.op.clip(y, 0.0, 6.0))

    name, spec, consts = only_spec(partition(build([x, r], body)), "cv")
    assert name == "npu.conv2d_bias_add_clip"
    assert isinstance(spec, Conv2dSpec)
    assert spec.data == TensorRef("in0", (1, 9, 10, 12), DType.FP32, "NCHW")
    assert spec.out == TensorRef("out", (1, 5, 6, 6), DType.FP32, "NCHW")
    assert spec.weight == TensorRef("cv_0", (5, 9, 3, 2), DType.FP32, "OIHW")
    np.testing.assert_array_equal(consts["cv_0"], w.transpose(3, 2, 0, 1))
    assert (spec.strides, spec.padding, spec.dilation, spec.groups) == ((2, 2), (1, 0, 2, 1), (1, 2), 1)
    bias, res, clip = spec.epilogue
    assert bias.operand == TensorRef("cv_1", (5,), DType.FP32) and bias.broadcast == Broadcast.CHANNEL
    np.testing.assert_array_equal(consts["cv_1"], b.reshape(5))
    assert res.operand == TensorRef("in1", (1, 5, 6, 6), DType.FP32, "NCHW") and res.broadcast == Broadcast.FULL
    assert (clip.kind, clip.lo, clip.hi) == (EpiKind.CLIP, 0.0, 6.0)
    assert set(consts) == {"cv_0", "cv_1"}


@pytest.mark.parametrize("bias_shape", [(6,), (1, 1, 1, 6)])
def test_depthwise_nhwc_conv_with_channel_last_bias(bias_shape: tuple[int, ...]) -> None:
    x = tensor("x", (1, 8, 8, 6))
    w = RNG.standard_normal((3, 3, 1, 6)).astype(F32)  # HWIO, I = C / groups

    def body(emit, x):
        y = emit(relax.op.nn.conv2d(x, relax.const(w), padding=1, groups=6, data_layout="NHWC",
                                    kernel_layout="HWIO"))
        return emit(relax.op.nn.relu(emit(relax.op.add(y, const(bias_shape)))))

    name, spec, consts = only_spec(partition(build([x], body)))
    assert name == "npu.conv2d_bias_relu"
    assert spec.groups == 6 and spec.layout == "NHWC" and spec.out.layout == "NHWC"
    assert spec.weight.shape == (6, 1, 3, 3)
    np.testing.assert_array_equal(consts["c_0"], w.transpose(3, 2, 0, 1))
    assert consts["c_1"].shape == (6,)


def test_conv2d_bias_along_width_is_not_a_channel_bias() -> None:
    """NCHW + const[C] broadcasts along W: it must not be fused as a per-channel bias."""
    x = tensor("x", (1, 3, 8, 8))

    def body(emit, x):
        y = emit(relax.op.nn.conv2d(x, const((8, 3, 3, 3)), padding=1))
        return emit(relax.op.add(y, const((8,))))

    mod = partition(build([x], body))
    composites, host, regions = offloaded(mod)
    assert [n for n, _ in composites] == ["npu.conv2d", "npu.add"] and regions == 1 and not host
    add = extract_op(composites[1][1], ["t"], "out", "k").spec
    assert isinstance(add, ElementwiseSpec) and add.out.layout.index("C") == 3


def test_conv2d_non_constant_weight_needs_oihw() -> None:
    x, w_oihw, w_hwio = tensor("x", (1, 3, 8, 8)), tensor("w", (4, 3, 3, 3)), tensor("v", (3, 3, 3, 4))
    mod = partition(build([x, w_oihw], lambda emit, x, w: emit(relax.op.nn.conv2d(x, w))))
    name, spec, consts = only_spec(mod)
    assert name == "npu.conv2d" and spec.weight == TensorRef("in1", (4, 3, 3, 3), DType.FP32, "OIHW") and not consts
    mod = partition(build([x, w_hwio], lambda emit, x, w: emit(relax.op.nn.conv2d(x, w, kernel_layout="HWIO"))))
    assert names(mod) == [] and host_ops(mod) == {"relax.nn.conv2d": 1}


def test_int8_conv_with_int32_result_is_accepted() -> None:
    x = tensor("x", (1, 16, 8, 8), "int8")

    def body(emit, x):
        y = emit(relax.op.nn.conv2d(x, const((16, 16, 1, 1), "int8"), out_dtype="int32"))
        return emit(relax.op.nn.relu(emit(relax.op.add(y, const((1, 16, 1, 1), "int32")))))

    name, spec, consts = only_spec(partition(build([x], body)))
    assert name == "npu.conv2d_bias_relu"
    assert (spec.data.dtype, spec.weight.dtype, spec.out.dtype) == (DType.INT8, DType.INT8, DType.INT32)
    assert consts["c_1"].dtype == np.int32


@pytest.mark.parametrize(
    ("dtype", "out_dtype"), [("float16", None), ("int8", "int8"), ("int8", "float32"), ("int32", None)]
)
def test_unsupported_conv_dtypes_stay_on_host(dtype: str, out_dtype: str | None) -> None:
    x = tensor("x", (1, 4, 8, 8), dtype)
    mod = partition(build([x], lambda emit, x: emit(relax.op.nn.conv2d(x, const((4, 4, 3, 3), dtype),
                                                                       out_dtype=out_dtype))))
    assert names(mod) == [] and host_ops(mod) == {"relax.nn.conv2d": 1}


def test_dynamic_shapes_stay_on_host() -> None:
    n = tvm.tirx.Var("n", "int64")
    x = tensor("x", (n, 3, 8, 8))

    def body(emit, x):
        return emit(relax.op.nn.relu(emit(relax.op.nn.conv2d(x, const((4, 3, 3, 3))))))

    mod = partition(build([x], body))
    assert names(mod) == [] and host_ops(mod) == {"relax.nn.conv2d": 1, "relax.nn.relu": 1}


def test_conv_too_big_for_the_sram_stays_on_host() -> None:
    """A 40x40 kernel needs 6400 bytes of weights per (out, in) channel pair: more than 4096."""
    x = tensor("x", (1, 1, 40, 40))
    big = build([x], lambda emit, x: emit(relax.op.nn.conv2d(x, const((1, 1, 40, 40)))))
    small = build([x], lambda emit, x: emit(relax.op.nn.conv2d(x, const((1, 1, 3, 3)))))
    assert names(partition(big)) == ["npu.conv2d"]
    with pytest.warns(HostFallbackWarning, match=r"conv2d with output \[1, 1, 1, 1\].*-max-sram-bytes=4096"):
        assert names(partition(big, "npu -max-sram-bytes=4096")) == []
    assert names(partition(small, "npu -max-sram-bytes=4096")) == ["npu.conv2d"]


def test_intermediate_used_outside_is_not_fused() -> None:
    x = tensor("x", (1, 3, 8, 8))

    def body(emit, x):
        y = emit(relax.op.nn.conv2d(x, const((4, 3, 3, 3)), padding=1))
        return emit(relax.Tuple([y, emit(relax.op.nn.relu(y))]))

    mod = partition(build([x], body))
    assert sorted(names(mod)) == ["npu.conv2d", "npu.relu"]


# ---- matmul -----------------------------------------------------------------------------------


@pytest.mark.parametrize("act", [None, "relu", "gelu"])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("bias_shape", [None, (16,), (1, 16)])
def test_matmul_epilogue_subsets(bias_shape: tuple[int, ...] | None, residual: bool, act: str | None) -> None:
    a, r = tensor("a", (8, 32)), tensor("r", (8, 16))

    def body(emit, a, r):
        y = emit(relax.op.matmul(a, const((32, 16))))
        if bias_shape:
            y = emit(relax.op.add(y, const(bias_shape)))
        if residual:
            y = emit(relax.op.add(y, r))
        return activation(emit, act, y)

    name, spec, consts = only_spec(partition(build([a, r], body)))
    assert name == variant("matmul", bias_shape is not None, residual, act)
    assert isinstance(spec, MatmulSpec) and spec.mnk == (8, 16, 32) and not spec.transpose_b
    if bias_shape:
        assert consts["c_1"].shape == (16,) and spec.epilogue[0].broadcast == Broadcast.CHANNEL


def test_matmul_folds_transposed_constant_weight() -> None:
    a = tensor("a", (4, 32))
    w = RNG.standard_normal((16, 32)).astype(F32)  # [N, K]
    mod = partition(build([a], lambda emit, a: emit(relax.op.matmul(a, emit(relax.op.permute_dims(relax.const(w)))))))
    name, spec, consts = only_spec(mod)
    assert name == "npu.matmul" and not host_ops(mod)
    assert spec.transpose_b and spec.b == TensorRef("c_0", (16, 32), DType.FP32) and spec.mnk == (4, 16, 32)
    np.testing.assert_array_equal(consts["c_0"], w)


def test_batched_matmul_with_tensor_operands() -> None:
    a, b = tensor("a", (2, 8, 32)), tensor("b", (2, 32, 16))
    name, spec, consts = only_spec(partition(build([a, b], lambda emit, a, b: emit(relax.op.matmul(a, b)))))
    assert name == "npu.matmul" and spec.batch == 2 and spec.b.name == "in1" and spec.a.layout == "" and not consts


@pytest.mark.parametrize(
    ("dtype", "out_dtype", "offloaded_as"), [("int8", "int32", "npu.matmul"), ("float16", None, None)]
)
def test_matmul_dtypes(dtype: str, out_dtype: str | None, offloaded_as: str | None) -> None:
    a = tensor("a", (8, 32), dtype)
    mod = partition(build([a], lambda emit, a: emit(relax.op.matmul(a, const((32, 16), dtype), out_dtype=out_dtype))))
    assert names(mod) == ([offloaded_as] if offloaded_as else [])
    if offloaded_as:
        _, spec, _ = only_spec(mod)
        assert (spec.a.dtype, spec.b.dtype, spec.out.dtype) == (DType.INT8, DType.INT8, DType.INT32)


@pytest.mark.parametrize(("a_shape", "b_shape"), [((8,), (8, 4)), ((2, 2, 2, 4, 8), (8, 4)), ((4, 8), (2, 8, 4)),
                                                  ((2, 2, 4, 8), (2, 8, 4))])
def test_unsupported_matmul_ranks_stay_on_host(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    a, b = tensor("a", a_shape), tensor("b", b_shape)
    mod = partition(build([a, b], lambda emit, a, b: emit(relax.op.matmul(a, b))))
    assert names(mod) == [] and host_ops(mod) == {"relax.matmul": 1}


# ---- pooling ----------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_pools(layout: str) -> None:
    shape = (1, 4, 9, 9) if layout == "NCHW" else (1, 9, 9, 4)
    x = tensor("x", shape)
    axes = [2, 3] if layout == "NCHW" else [1, 2]

    def body(emit, x):
        m = emit(relax.op.nn.max_pool2d(x, 3, strides=2, padding=1, layout=layout))
        a = emit(relax.op.nn.avg_pool2d(x, 2, strides=1, padding=1, count_include_pad=True, layout=layout))
        g = emit(relax.op.nn.adaptive_avg_pool2d(x, 1, layout=layout))
        return emit(relax.Tuple([m, a, g, emit(relax.op.mean(x, axes, keepdims=True))]))

    composites, host, _ = offloaded(partition(build([x], body)))
    assert not host
    assert sorted(n for n, _ in composites) == ["npu.adaptive_avg_pool2d", "npu.avg_pool2d", "npu.max_pool2d",
                                               "npu.mean"]
    specs = {n: extract_op(f, ["x"], "y", "k").spec for n, f in composites}
    assert all(isinstance(s, PoolSpec) and s.layout == layout and s.out.layout == layout for s in specs.values())
    mp, ap = specs["npu.max_pool2d"], specs["npu.avg_pool2d"]
    assert (mp.kind, mp.kernel, mp.strides, mp.padding) == (PoolKind.MAX, (3, 3), (2, 2), (1, 1, 1, 1))
    assert (ap.kind, ap.count_include_pad) == (PoolKind.AVG, True)
    for n in ("npu.adaptive_avg_pool2d", "npu.mean"):
        assert (specs[n].kind, specs[n].kernel, specs[n].out.dim("H")) == (PoolKind.AVG, (9, 9), 1)


@pytest.mark.parametrize(
    "make",
    [
        lambda x: relax.op.nn.max_pool2d(x, 2, strides=2, ceil_mode=True),
        lambda x: relax.op.nn.avg_pool2d(x, 2, dilation=2),
        lambda x: relax.op.nn.adaptive_avg_pool2d(x, 2),
        lambda x: relax.op.mean(x, [2, 3], keepdims=False),
        lambda x: relax.op.mean(x, [1], keepdims=True),
    ],
    ids=["ceil_mode", "dilation", "adaptive_2x2", "mean_no_keepdims", "mean_channels"],
)
def test_unsupported_pools_stay_on_host(make: Callable[[relax.Expr], relax.Expr]) -> None:
    x = tensor("x", (1, 4, 9, 9))
    mod = partition(build([x], lambda emit, x: emit(make(x))))
    assert names(mod) == [] and sum(host_ops(mod).values()) == 1


def test_float16_and_8bit_max_pools_run_on_the_npu_other_types_stay_on_the_host() -> None:
    for dtype in ("float16", "int8", "uint8"):
        x = tensor("x", (1, 4, 8, 8), dtype)
        assert names(partition(build([x], lambda emit, x: emit(relax.op.nn.max_pool2d(x, 2))))) == ["npu.max_pool2d"]
    for dtype in ("int32", "float64"):
        x = tensor("x", (1, 4, 8, 8), dtype)
        assert names(partition(build([x], lambda emit, x: emit(relax.op.nn.max_pool2d(x, 2))))) == []
    x = tensor("x", (1, 4, 8, 8), "int8")  # an 8-bit average needs a requantisation rule: stays on the host
    assert names(partition(build([x], lambda emit, x: emit(relax.op.nn.avg_pool2d(x, 2))))) == []


# ---- elementwise ------------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "kind"), [("add", EpiKind.ADD), ("subtract", EpiKind.SUB), ("multiply", EpiKind.MUL),
                                          ("maximum", EpiKind.MAX), ("minimum", EpiKind.MIN)])
def test_binary_of_two_tensors(op: str, kind: EpiKind) -> None:
    x, y = tensor("x", (2, 5, 3)), tensor("y", (2, 5, 3))
    name, spec, _ = only_spec(partition(build([x, y], lambda emit, x, y: emit(getattr(relax.op, op)(x, y)))))
    assert name == f"npu.{op}" and isinstance(spec, ElementwiseSpec)
    assert spec.data.name == "in0" and spec.epilogue[0].kind == kind
    assert spec.epilogue[0].operand.name == "in1" and spec.epilogue[0].broadcast == Broadcast.FULL


@pytest.mark.parametrize(
    ("x_shape", "c_shape", "layout"),
    [
        ((1, 6, 4, 4), (1, 6, 1, 1), "NCHW"),
        ((1, 4, 4, 6), (6,), "NHWC"),
        ((3, 6), (1, 6), "NC"),
        ((3, 6), (3, 1), "CN"),
    ],
)
def test_binary_with_channel_constant(x_shape: tuple[int, ...], c_shape: tuple[int, ...], layout: str) -> None:
    x = tensor("x", x_shape)
    c = RNG.standard_normal(c_shape).astype(F32)
    name, spec, consts = only_spec(partition(build([x], lambda emit, x: emit(relax.op.multiply(relax.const(c), x)))))
    assert name == "npu.multiply" and spec.out.layout == layout and spec.data.layout == layout
    step = spec.epilogue[0]
    assert step.kind == EpiKind.MUL and step.broadcast == Broadcast.CHANNEL
    assert step.operand.shape == (spec.out.dim("C"),)
    np.testing.assert_array_equal(consts[step.operand.name], c.reshape(-1))


def test_scalar_constant_becomes_a_filled_channel_vector() -> None:
    x = tensor("x", (1, 6, 4, 4))
    name, spec, consts = only_spec(partition(build([x], lambda emit, x: emit(relax.op.add(x, relax.const(0.5, F32))))))
    step = spec.epilogue[0]
    assert name == "npu.add" and step.kind == EpiKind.BIAS and step.broadcast == Broadcast.CHANNEL
    np.testing.assert_array_equal(consts[step.operand.name], np.full(spec.out.dim("C"), 0.5, np.float32))


@pytest.mark.parametrize(
    "make",
    [
        # the row-wise kind normalises along the last axis only (the canonicalisation moves another axis there)
        lambda x, y: relax.op.nn.softmax(x, axis=1),
        lambda x, y: relax.op.subtract(y, x),  # a full tensor subtracted from a per-channel one (the data broadcasts)
        lambda x, y: relax.op.divide(x, y),  # a tensor divided by a tensor
        lambda x, y: relax.op.erf(x),  # erf alone (only inside a gelu)
    ],
    ids=["softmax_axis1", "tensor_broadcast", "tensor_divide", "erf"],
)
def test_unsupported_elementwise_stays_on_host(make: Callable) -> None:
    x, y = tensor("x", (1, 6, 4, 4)), tensor("y", (1, 6, 1, 1))
    mod = partition(build([x, y], lambda emit, x, y: emit(make(x, y))))
    assert names(mod) == [] and sum(host_ops(mod).values()) == 1


@pytest.mark.parametrize("op", ["subtract", "divide"])
def test_constant_first_operand(op: str) -> None:
    """``c - x`` is ``(-1) * x + c`` and ``c / x`` is ``c * (1 / x)``: steps on ``x``, ``c`` per channel."""
    x = tensor("x", (1, 6, 4, 4))
    c = RNG.uniform(0.5, 2.0, (1, 6, 1, 1)).astype(F32)
    make = getattr(relax.op, op)
    name, spec, consts = only_spec(partition(build([x], lambda emit, x: emit(make(relax.const(c), x)))))
    assert name == ("npu.subtract" if op == "subtract" else "npu.constant_divide") and spec.data.shape == (1, 6, 4, 4)
    if op == "subtract":
        neg, add = spec.epilogue
        assert neg.kind == EpiKind.MUL and add.kind == EpiKind.BIAS
        np.testing.assert_array_equal(consts[neg.operand.name], np.full(6, -1, F32))
        np.testing.assert_array_equal(consts[add.operand.name], c.reshape(-1))
    else:
        recip, mul = spec.epilogue
        assert recip.kind == EpiKind.RECIP and recip.operand is None and mul.kind == EpiKind.MUL
        np.testing.assert_array_equal(consts[mul.operand.name], c.reshape(-1))


def test_constant_broadcast_along_two_axes_is_stored_full_size() -> None:
    """(Swin's relative position bias over the windows) the constant is materialised in the output's shape."""
    x = tensor("x", (1, 6, 4, 4))
    c = RNG.standard_normal((1, 6, 4, 1)).astype(F32)
    _, spec, consts = only_spec(partition(build([x], lambda emit, x: emit(relax.op.add(x, relax.const(c))))))
    (step,) = spec.epilogue
    assert step.operand.shape == (1, 6, 4, 4)
    np.testing.assert_array_equal(consts[step.operand.name], np.broadcast_to(c, (1, 6, 4, 4)))


@pytest.mark.parametrize("act", ACTS)
def test_unary_ops(act: str) -> None:
    x = tensor("x", (4, 8))
    name, spec, consts = only_spec(partition(build([x], lambda emit, x: activation(emit, act, x))))
    assert name == f"npu.{act}" and [e.kind for e in spec.epilogue] == [EpiKind(act)] and not consts


def test_elementwise_chain_is_one_region() -> None:
    x, y = tensor("x", (2, 16)), tensor("y", (2, 16))

    def body(emit, x, y):
        return emit(relax.op.sigmoid(emit(relax.op.multiply(emit(relax.op.add(x, y)), relax.const(2.0, F32)))))

    composites, host, regions = offloaded(partition(build([x, y], body)))
    assert [n for n, _ in composites] == ["npu.add", "npu.multiply", "npu.sigmoid"]
    assert regions == 1 and not host


# ---- extraction -------------------------------------------------------------------------------


def _anonymous(value: object) -> object:
    """The spec with every tensor name blanked (check-time names differ from codegen names)."""
    if isinstance(value, TensorRef):
        return dataclasses.replace(value, name="")
    if isinstance(value, tuple):
        return tuple(_anonymous(v) for v in value)
    if dataclasses.is_dataclass(value):
        return dataclasses.replace(value, **{f.name: _anonymous(getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
    return value


def test_check_builds_the_same_spec_as_the_codegen(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr(patterns_mod, "fits", lambda spec, hw, options: seen.append(spec) or True)
    x, r = tensor("x", (1, 4, 8, 8)), tensor("r", (1, 8, 8, 8))

    def body(emit, x, r):
        y = emit(relax.op.nn.conv2d(x, const((3, 3, 4, 8)), padding=1, kernel_layout="HWIO"))
        return emit(relax.op.nn.relu(emit(relax.op.add(emit(relax.op.add(y, const((1, 8, 1, 1)))), r))))

    _, spec, _ = only_spec(partition(build([x, r], body)))
    assert _anonymous(spec) in [_anonymous(s) for s in seen]


def test_extract_rejects_what_it_cannot_describe() -> None:
    x = tensor("x", (2, 8))
    bb = relax.BlockBuilder()
    with bb.function("f", [x]):
        out = bb.emit(relax.op.nn.softmax(x, axis=0))  # the NPU normalises along the last axis only
        bb.emit_func_output(out)
    func = bb.get()["f"]
    with pytest.raises(ValueError, match="softmax"):
        extract_op(func, ["x"], "y", "k")
    with pytest.raises(ValueError, match="argument names"):
        extract_op(func, [], "y", "k")


# ---- ONNX models ------------------------------------------------------------------------------


@functools.cache
def _onnx_model(name: str) -> tuple[tvm.IRModule, collections.Counter]:
    import tvm.relax.frontend.onnx as relax_onnx

    model = onnx.load(str(LIGHT / f"light_{name}.onnx"))
    mod = relax_onnx.from_onnx(model, keep_params_in_input=False)
    mod = tvm.transform.Sequential(canonicalize_passes())(mod)
    return mod, collections.Counter(n.op_type for n in model.graph.node)


def _report(model: str, fusion: int) -> tuple[collections.Counter, collections.Counter]:
    mod, onnx_ops = _onnx_model(model)
    composites, host, regions = offloaded(partition(mod, f"npu -fusion={fusion}"))
    npu = collections.Counter(n for n, _ in composites)
    print(f"\n{model} fusion={fusion}: {sum(npu.values())} NPU ops in {regions} regions {dict(npu)}; "
          f"host {dict(host)}; onnx {dict(onnx_ops)}")
    return npu, host


def test_resnet50() -> None:
    npu, host = _report("resnet50", 1)
    assert npu == {"npu.conv2d_bias_relu": 33, "npu.conv2d_bias_add_relu": 16, "npu.conv2d_bias": 4,
                   "npu.max_pool2d": 1, "npu.avg_pool2d": 1, "npu.matmul_bias": 1, "npu.softmax": 1,
                   "npu.view_reshape": 3}  # the reshapes around the classifier are views
    assert sum(v for k, v in npu.items() if k.startswith("npu.conv2d")) == _onnx_model("resnet50")[1]["Conv"] == 53
    assert host == {}
    npu0, host0 = _report("resnet50", 0)
    assert npu0["npu.conv2d"] == 53 and npu0["npu.add"] == 53 + 16 + 1 and npu0["npu.relu"] == 49
    assert host0 == host


def test_squeezenet() -> None:
    npu, host = _report("squeezenet", 1)
    assert npu == {"npu.conv2d_bias_relu": 26, "npu.max_pool2d": 3, "npu.mean": 1, "npu.softmax": 1,
                   "npu.concat": 8, "npu.view_reshape": 2}  # the fire modules' concats are written in place
    assert host == {}  # inference dropout is removed


def test_shufflenet_channel_shuffles_and_concats_are_partitioned() -> None:
    """Every channel shuffle (reshape -> transpose -> reshape) and concat joins the NPU partition
    (as views, ``graph.py``), and the batch-norm divisions become multiplications: nothing is left."""
    npu, host = _report("shufflenet", 1)
    assert npu["npu.view_permute_dims"] == 16 and npu["npu.view_reshape"] == 2 * 16 + 3  # 3 outside the shuffles
    assert npu["npu.concat"] == 3
    assert host == {}
