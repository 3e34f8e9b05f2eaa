"""8-bit and fp16 operators, compiled as the compiler compiles them and simulated, against numpy.

The 8-bit references are written independently of ``simulator/quant.py`` (the rule the
simulator and the templates share, so a bug in it would go unnoticed by comparing them):
integer convolutions and matmuls in int64, then the requantisation and the rescaled add
element by element with ``np.float32`` scalars and Python's ``round`` (ties to even).
8-bit and int32 results must be bit-exact on every tile tried: the planner's choice, its
choice on a tight SRAM budget, the rest of its shortlist and the tile with the smallest
reduction extent (partial sums accumulated in SRAM over several passes), or, in the
hypothesis tests, any tile that fits. fp16 convolutions and matmuls round an fp32
accumulator, so they are compared with the tolerance :func:`assert_fp16_close` derives;
fp16 pooling and casts are exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace

import numpy as np
import pytest
from helpers import conv, matmul, pool, simulate, tight_budget
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm_npu.relay_patterns.extract import _check_dtypes, check_padding
from tvm_npu.simulator.quant import add_params
from tvm_npu.tir_schedules import tile_search

from tvm_npu.config import ACCUMULATOR, CompilerOptions, DType, HardwareConfig
from tvm_npu.core.ops import (
    Broadcast,
    Conv2dSpec,
    ElementwiseSpec,
    EpiKind,
    Epilogue,
    MatmulSpec,
    OpSpec,
    PoolKind,
    PoolSpec,
    TensorRef,
)
from tvm_npu.core.tiles import ConvTile, MatmulTile, TileParams

HW = HardwareConfig()
#: A 4 x 4 array: reduction tiles are multiples of the array's rows, so only here do the small
#: channel counts of these tests split into several passes accumulated in SRAM.
SMALL_ARRAY = HardwareConfig(mac_rows=4, mac_cols=4)
OPTS = CompilerOptions()
I8, U8, I32, F16, F32 = DType.INT8, DType.UINT8, DType.INT32, DType.FP16, DType.FP32
Env = dict[str, np.ndarray]
SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


# ------------------------------------------------------------------------------ specs
def qrange(dtype: DType) -> tuple[int, int]:
    info = np.iinfo(dtype.np)
    return int(info.min), int(info.max)


@dataclass(frozen=True)
class Requant:
    """A REQUANT step: to ``dtype`` with this zero point and clamp (multipliers come from the env)."""

    dtype: DType
    zero_point: int
    lo: int
    hi: int


@dataclass(frozen=True)
class QAdd:
    """A QADD step: ``floats`` = (scale_a, scale_b, offset) as :func:`add_params` computes them."""

    dtype: DType
    floats: tuple[float, float, float]
    lo: int
    hi: int


def int_epilogue(out: TensorRef, channels: int, bias: bool, requant: Requant | None,
                 qadd: QAdd | None) -> tuple[Epilogue, ...]:
    """[BIAS] [REQUANT [QADD]] as the pattern table emits them; the residual is the requantised type."""
    steps = []
    if bias:
        steps.append(Epilogue(EpiKind.BIAS, TensorRef("bias", (channels,), I32), Broadcast.CHANNEL))
    if requant is not None:
        steps.append(Epilogue(EpiKind.REQUANT, TensorRef("mult", (channels,), F32), Broadcast.CHANNEL,
                              ints=(requant.zero_point, requant.lo, requant.hi), dtype=requant.dtype))
        if qadd is not None:
            res = TensorRef("res", out.shape, requant.dtype, out.layout)
            steps.append(Epilogue(EpiKind.QADD, res, ints=(qadd.lo, qadd.hi), dtype=qadd.dtype, floats=qadd.floats))
    return tuple(steps)


def out_dtype(acc: DType, requant: Requant | None, qadd: QAdd | None) -> DType:
    """The type the last step leaves."""
    if qadd is not None:
        return qadd.dtype
    return acc if requant is None else requant.dtype


def qconv(in_dt: DType, c: int, o: int, h: int, w: int | None = None, *, pad_value: int = 0, bias: bool = False,
          requant: Requant | None = None, qadd: QAdd | None = None, **geometry: object) -> Conv2dSpec:
    """An 8-bit conv2d (``geometry`` as for :func:`helpers.conv`), int8 weights, int32 accumulator."""
    f = conv(c, o, h, w, **geometry)  # type: ignore[arg-type]
    out = replace(f.out, dtype=out_dtype(I32, requant, qadd))
    return replace(f, data=replace(f.data, dtype=in_dt), weight=replace(f.weight, dtype=I8), out=out,
                   pad_value=pad_value, epilogue=int_epilogue(out, o, bias, requant, qadd))


def qmatmul(a_dt: DType, m: int, n: int, k: int, *, bias: bool = False, requant: Requant | None = None,
            qadd: QAdd | None = None, **shape: object) -> MatmulSpec:
    """An 8-bit matmul (``shape`` as for :func:`helpers.matmul`), int8 ``b``; multipliers per column."""
    f = matmul(m, n, k, **shape)  # type: ignore[arg-type]
    out = replace(f.out, dtype=out_dtype(I32, requant, qadd))
    return replace(f, a=replace(f.a, dtype=a_dt), b=replace(f.b, dtype=I8), out=out,
                   epilogue=int_epilogue(out, n, bias, requant, qadd))


def qadd_eltwise(in_dt: DType, shape: tuple[int, ...], layout: str, qadd: QAdd) -> ElementwiseSpec:
    """``out = QADD(a, b)``: the 8-bit residual add that has no producer to fuse into."""
    a = TensorRef("a", shape, in_dt, layout)
    step = Epilogue(EpiKind.QADD, replace(a, name="b"), ints=(qadd.lo, qadd.hi), dtype=qadd.dtype,
                    floats=qadd.floats)
    return ElementwiseSpec("qadd", TensorRef("y", shape, qadd.dtype, layout), data=a, epilogue=(step,))


def retyped(spec: OpSpec, dtype: DType, head: Sequence[Epilogue] = ()) -> OpSpec:
    """A float32 spec from :mod:`helpers` with every tensor in ``dtype`` and ``head`` steps first."""
    tensors = {f.name: replace(v, dtype=dtype) for f in fields(spec)
               if isinstance(v := getattr(spec, f.name), TensorRef)}
    steps = tuple(e if e.operand is None else replace(e, operand=replace(e.operand, dtype=dtype))
                  for e in spec.epilogue)
    return replace(spec, **tensors, epilogue=(*head, *steps))


def accepted(spec: OpSpec) -> OpSpec:
    """``spec`` after the pattern table's own dtype and padding checks (``_check_dtypes`` is the list
    of what the NPU accepts): every case here is one the compiler can emit."""
    main = spec.data if isinstance(spec, Conv2dSpec | PoolSpec | ElementwiseSpec) else spec.a
    acc = ACCUMULATOR[main.dtype] if isinstance(spec, Conv2dSpec | MatmulSpec) else main.dtype
    _check_dtypes(spec, acc)
    check_padding(spec)
    return spec


# ------------------------------------------------------------------------------ tiles
def _reduction(tile: TileParams) -> int:
    """Input channels (conv) or k (matmul) per pass: below the full extent, partial sums accumulate."""
    if isinstance(tile, ConvTile):
        return tile.tic
    return tile.tk if isinstance(tile, MatmulTile) else 0


def fitting(spec: OpSpec, hw: HardwareConfig = HW, opts: CompilerOptions = OPTS) -> list[TileParams]:
    """Every candidate tile that fits the SRAM (narrow ones too, unlike ``tile_search.legal``)."""
    return [t for t in tile_search.candidates(spec, hw, opts)
            if tile_search.footprint(spec, t, hw) <= hw.max_sram_bytes]


def shortlist(spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions) -> list[TileParams]:
    """The tiles the tile search estimates with the flow model."""
    return [t for t, _, _ in tile_search._shortlist(spec, hw, tile_search.legal(spec, hw, opts))]


def tile_variants(spec: OpSpec) -> list[tuple[TileParams, HardwareConfig]]:
    """The tiles a compile may use: see the module docstring."""
    tight = tight_budget(spec, OPTS.pipeline_stages, HW)
    found = [(tile_search.choose(spec, HW, OPTS), HW), (tile_search.choose(spec, tight, OPTS), tight)]
    found += [(t, HW) for t in shortlist(spec, HW, OPTS)[:2]]
    # the shortest reduction tile, with the largest other extents (the fewest instructions)
    streamed = min(fitting(spec, SMALL_ARRAY),
                   key=lambda t: (_reduction(t), -tile_search.footprint(spec, t, SMALL_ARRAY)))
    found.append((streamed, SMALL_ARRAY))
    return list(dict.fromkeys(found))


# ------------------------------------------------------------------------------ inputs
def int_env(spec: OpSpec, rng: np.random.Generator, per_channel: bool = True) -> Env:
    """8-bit tensors over their whole range, int32 biases, float32 multipliers log-uniform in
    [1e-4, 1e-1] (one value repeated unless ``per_channel``)."""
    env: Env = {}
    for t in spec.inputs:
        if t.dtype.is_quantized:
            lo, hi = qrange(t.dtype)
            env[t.name] = rng.integers(lo, hi, t.shape, endpoint=True).astype(t.dtype.np)
        elif t.dtype == I32:
            env[t.name] = rng.integers(-(2**15), 2**15, t.shape).astype(np.int32)
        else:
            m = 10.0 ** rng.uniform(-4, -1, t.shape if per_channel else 1)
            env[t.name] = np.broadcast_to(m, t.shape).astype(np.float32)
    return env


def float_env(spec: OpSpec, rng: np.random.Generator) -> Env:
    """Normal inputs in their own float type, weights scaled by 1/sqrt(fan-in) so outputs are O(1)."""
    fan_in = {}
    if isinstance(spec, Conv2dSpec):
        fan_in[spec.weight.name] = int(np.prod(spec.weight.shape[1:]))
    elif isinstance(spec, MatmulSpec):
        fan_in[spec.b.name] = spec.mnk[2]
    return {t.name: (rng.standard_normal(t.shape) / np.sqrt(fan_in.get(t.name, 1))).astype(t.dtype.np)
            for t in spec.inputs}


# ------------------------------------------------------------------------- references
def to_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "NCHW" else x.transpose(0, 3, 1, 2)


def from_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "NCHW" else x.transpose(0, 2, 3, 1)


def conv_direct(spec: Conv2dSpec, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The convolution in the arrays' own (wide: int64 or float64) type, padding reading
    ``spec.pad_value``; in the output's layout."""
    x = to_nchw(x, spec.data.layout)
    (pt, pl, pb, pr), (sh, sw), (dh, dw) = spec.padding, spec.strides, spec.dilation
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=spec.pad_value)
    oh, ow, g = spec.out.dim("H"), spec.out.dim("W"), spec.groups
    cg, og = x.shape[1] // g, w.shape[0] // g
    out = np.zeros((x.shape[0], w.shape[0], oh, ow), x.dtype)
    for gi in range(g):
        for ky in range(spec.kernel[0]):
            for kx in range(spec.kernel[1]):
                patch = xp[:, gi * cg:(gi + 1) * cg, ky * dh: ky * dh + (oh - 1) * sh + 1: sh,
                           kx * dw: kx * dw + (ow - 1) * sw + 1: sw]
                out[:, gi * og:(gi + 1) * og] += np.einsum("nchw,oc->nohw", patch, w[gi * og:(gi + 1) * og, :, ky, kx])
    return from_nchw(out, spec.layout)


def matmul_direct(spec: MatmulSpec, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a @ (np.swapaxes(b, -1, -2) if spec.transpose_b else b)


def per_channel(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = -1
    return v.reshape(shape)


def requantize_ref(acc: np.ndarray, mult: np.ndarray, axis: int, zero_point: int, lo: int, hi: int) -> np.ndarray:
    """``clip(round_half_even(f32(acc) * m[c]) + zp, lo, hi)``, one element at a time: a float32
    product of float32 scalars, Python's ``round`` (ties to even), the zero point added exactly."""
    out = np.empty(acc.shape, np.int64)
    for idx in np.ndindex(*acc.shape):
        scaled = np.float32(acc[idx]) * mult[idx[axis]]
        assert isinstance(scaled, np.float32)
        out[idx] = min(max(round(float(scaled)) + zero_point, lo), hi)
    return out


def qadd_ref(a: np.ndarray, b: np.ndarray, scale_a: float, scale_b: float, offset: float, lo: int,
             hi: int) -> np.ndarray:
    """``clip(round_half_even((offset + f32(a) * sa) + f32(b) * sb), lo, hi)``, float32 scalars in that order."""
    sa, sb, off = np.float32(scale_a), np.float32(scale_b), np.float32(offset)
    out = np.empty(a.shape, np.int64)
    for idx in np.ndindex(*a.shape):
        total = (off + np.float32(a[idx]) * sa) + np.float32(b[idx]) * sb
        assert isinstance(total, np.float32)
        out[idx] = min(max(round(float(total)), lo), hi)
    return out


def int_reference(spec: OpSpec, env: Mapping[str, np.ndarray]) -> np.ndarray:
    """What an 8-bit operator computes: the exact int64 accumulator, then its epilogue."""
    if isinstance(spec, Conv2dSpec):
        value = conv_direct(spec, env[spec.data.name].astype(np.int64), env[spec.weight.name].astype(np.int64))
        axis = spec.layout.index("C")
    elif isinstance(spec, MatmulSpec):
        value = matmul_direct(spec, env[spec.a.name].astype(np.int64), env[spec.b.name].astype(np.int64))
        axis = value.ndim - 1
    else:
        value, axis = env[spec.data.name].astype(np.int64), 0
    for e in spec.epilogue:
        assert e.operand is not None
        operand = env[e.operand.name]
        if e.kind == EpiKind.BIAS:
            value = value + per_channel(operand.astype(np.int64), value.ndim, axis)
        elif e.kind == EpiKind.REQUANT:
            value = requantize_ref(value, operand, axis, *e.ints)
        elif e.kind == EpiKind.QADD:
            value = qadd_ref(value, operand, *e.floats, *e.ints)
        else:  # pragma: no cover - a new 8-bit step needs a reference here
            raise NotImplementedError(e.kind)
    lo, hi = qrange(spec.out.dtype)
    assert lo <= value.min() and value.max() <= hi, "the inputs must not overflow the output type"
    return value.astype(spec.out.dtype.np)


def maxpool_ref(spec: PoolSpec, x: np.ndarray) -> np.ndarray:
    """Max over every window of the (unpadded) input, in the output's layout."""
    floor = -(2**40)  # below every 8-bit and fp16 value; no window may see only padding
    (pt, pl, pb, pr), (sh, sw), (oh, ow) = spec.padding, spec.strides, (spec.out.dim("H"), spec.out.dim("W"))
    xp = np.pad(to_nchw(x.astype(np.float64), spec.data.layout), ((0, 0), (0, 0), (pt, pb), (pl, pr)),
                constant_values=floor)
    win = np.lib.stride_tricks.sliding_window_view(xp, spec.kernel, axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow]
    out = win.max((-1, -2))
    assert out.min() > floor
    return from_nchw(out, spec.layout).astype(x.dtype)


def assert_exact(out: np.ndarray, expected: np.ndarray, what: object) -> None:
    assert out.dtype == expected.dtype and out.shape == expected.shape, (out.dtype, out.shape, expected.shape)
    np.testing.assert_array_equal(out, expected, err_msg=str(what))


def check_int(spec: OpSpec, env: Env, tiles: Sequence[tuple[TileParams, HardwareConfig]]) -> None:
    """Every tile of ``spec`` gives exactly :func:`int_reference`."""
    expected = int_reference(accepted(spec), env)
    for tile, hw in tiles:
        assert_exact(simulate(spec, tile, hw, env), expected, f"{spec.name} {tile} on {hw.max_sram_bytes} B")


# --------------------------------------------------------------------- hypothesis specs
@st.composite
def requants(draw: st.DrawFn) -> Requant:
    """To int8 or uint8, any zero point; the clamp full, narrowed by a folded relu (lo = zero point)
    or by a folded clip (lo = zero point, hi anywhere above)."""
    dtype = draw(st.sampled_from([I8, U8]))
    qlo, qhi = qrange(dtype)
    zp = draw(st.integers(qlo, qhi))
    clamp = draw(st.sampled_from(["full", "relu", "clip"]))
    lo = qlo if clamp == "full" else zp
    hi = draw(st.integers(zp, qhi)) if clamp == "clip" else qhi
    return Requant(dtype, zp, lo, hi)


log_scales = st.floats(-3.0, 0.0).map(lambda e: 10.0**e)


@st.composite
def qadds(draw: st.DrawFn, in_dt: DType) -> QAdd:
    """Random scales and zero points of a, b and the sum, folded by :func:`add_params`; the sum in
    either 8-bit type, its clamp full or narrowed by a folded relu."""
    out_dt = draw(st.sampled_from([I8, U8]))
    (alo, ahi), (ylo, yhi) = qrange(in_dt), qrange(out_dt)
    za, zb, zy = draw(st.integers(alo, ahi)), draw(st.integers(alo, ahi)), draw(st.integers(ylo, yhi))
    floats = add_params(draw(log_scales), za, draw(log_scales), zb, draw(log_scales), zy)
    lo = zy if draw(st.booleans()) else ylo
    return QAdd(out_dt, floats, lo, yhi)


@st.composite
def qconv_specs(draw: st.DrawFn) -> Conv2dSpec:
    in_dt = draw(st.sampled_from([I8, U8]))
    layout = draw(st.sampled_from(["NCHW", "NHWC"]))
    k, stride, dilation = draw(st.sampled_from([1, 3])), draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 1, 2]))
    mode = draw(st.sampled_from(["dense", "dense", "depthwise", "grouped"]))
    if mode == "depthwise":
        c = o = groups = draw(st.integers(1, 24))
    elif mode == "grouped":
        groups = draw(st.sampled_from([2, 3, 4]))
        c, o = (groups * draw(st.integers(1, 24 // groups)) for _ in range(2))
    else:
        groups = 1
        c, o = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    pads = tuple(draw(st.integers(0, dilation * (k - 1))) for _ in range(4))
    extent = dilation * (k - 1) + 1
    h = draw(st.integers(max(1, extent - pads[0] - pads[2]), 12))
    w = draw(st.integers(max(1, extent - pads[1] - pads[3]), 12))
    requant = draw(st.none() | requants())
    qadd = draw(st.none() | qadds(requant.dtype)) if requant is not None else None
    return qconv(in_dt, c, o, h, w, k=k, stride=stride, dilation=dilation, pad=pads, groups=groups,
                 n=draw(st.sampled_from([1, 1, 2])), layout=layout,
                 data_layout=draw(st.sampled_from([layout, "NCHW", "NHWC"])) if groups == 1 else layout,
                 pad_value=draw(st.integers(*qrange(in_dt))), bias=draw(st.booleans()), requant=requant, qadd=qadd)


@st.composite
def qmatmul_specs(draw: st.DrawFn) -> MatmulSpec:
    m, n, k = (draw(st.integers(1, 40)) for _ in range(3))
    requant = draw(st.none() | requants())
    qadd = draw(st.none() | qadds(requant.dtype)) if requant is not None else None
    return qmatmul(draw(st.sampled_from([I8, U8])), m, n, k, bias=draw(st.booleans()), requant=requant, qadd=qadd,
                   batch=draw(st.sampled_from([0, 0, 2, 3])), batch_b=draw(st.booleans()),
                   transpose_b=draw(st.booleans()))


SHAPES = [((1, 8, 5, 7), "NCHW"), ((2, 6, 5, 24), "NHWC"), ((3, 40), "NC"), ((1, 17, 3), "NCW"), ((50,), "C")]


@st.composite
def qadd_specs(draw: st.DrawFn) -> ElementwiseSpec:
    in_dt = draw(st.sampled_from([I8, U8]))
    shape, layout = draw(st.sampled_from(SHAPES))
    return qadd_eltwise(in_dt, shape, layout, draw(qadds(in_dt)))


@st.composite
def maxpool_specs(draw: st.DrawFn) -> PoolSpec:
    dtype = draw(st.sampled_from([I8, U8]))
    layout = draw(st.sampled_from(["NCHW", "NHWC"]))
    c, h, w = draw(st.integers(1, 24)), draw(st.integers(2, 12)), draw(st.integers(2, 12))
    data_layout = draw(st.sampled_from([layout, "NCHW", "NHWC"]))
    if draw(st.booleans()):
        f = pool(c, h, w, kind="max", global_=True, layout=layout, data_layout=data_layout)
    else:
        k = draw(st.integers(2, min(h, w, 3)))
        pads = tuple(draw(st.integers(0, k - 1)) for _ in range(4))
        f = pool(c, h, w, kind="max", k=k, stride=draw(st.integers(1, 3)), pad=pads, layout=layout,
                 data_layout=data_layout, n=draw(st.sampled_from([1, 2])))
    return retyped(f, dtype)  # type: ignore[return-value]


# ------------------------------------------------------------------- 8-bit, hypothesis
def _random_tile_case(spec: OpSpec, per_channel: bool, seed: int, stages: int, data: st.DataObject) -> None:
    """``spec`` on one random fitting tile (any pipeline depth, either array size), random inputs."""
    hw = data.draw(st.sampled_from([HW, SMALL_ARRAY]), label="machine")
    tile = data.draw(st.sampled_from(fitting(spec, hw, CompilerOptions(pipeline_stages=stages))), label="tile")
    check_int(spec, int_env(spec, np.random.default_rng(seed), per_channel), [(tile, hw)])


@settings(max_examples=100, **SETTINGS)
@given(spec=qconv_specs(), per_channel=st.booleans(), seed=st.integers(0, 2**32 - 1),
       stages=st.sampled_from([1, 2, 3]), data=st.data())
@pytest.mark.slow
def test_conv2d_8bit_random(spec: Conv2dSpec, per_channel: bool, seed: int, stages: int,
                            data: st.DataObject) -> None:
    _random_tile_case(spec, per_channel, seed, stages, data)


@settings(max_examples=60, **SETTINGS)
@given(spec=qmatmul_specs(), per_channel=st.booleans(), seed=st.integers(0, 2**32 - 1),
       stages=st.sampled_from([1, 2, 3]), data=st.data())
def test_matmul_8bit_random(spec: MatmulSpec, per_channel: bool, seed: int, stages: int,
                            data: st.DataObject) -> None:
    _random_tile_case(spec, per_channel, seed, stages, data)


@settings(max_examples=50, **SETTINGS)
@given(spec=qadd_specs(), seed=st.integers(0, 2**32 - 1), stages=st.sampled_from([1, 2, 3]), data=st.data())
def test_qadd_elementwise_random(spec: ElementwiseSpec, seed: int, stages: int, data: st.DataObject) -> None:
    _random_tile_case(spec, True, seed, stages, data)


@settings(max_examples=40, **SETTINGS)
@given(spec=maxpool_specs(), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_maxpool_8bit_random(spec: PoolSpec, seed: int, data: st.DataObject) -> None:
    tile = data.draw(st.sampled_from(fitting(accepted(spec))), label="tile")
    x = int_env(spec, np.random.default_rng(seed))[spec.data.name]
    assert_exact(simulate(spec, tile, HW, {spec.data.name: x}), maxpool_ref(spec, x), tile)


# ---------------------------------------------------------------------- 8-bit, fixed
INT_CASES: dict[str, OpSpec] = {
    "conv_k3_i8_c16_o24_h10_bias_requant_relu": qconv(
        I8, 16, 24, 10, pad_value=-7, bias=True, requant=Requant(I8, -3, -3, 127)),
    "conv_k3s2_u8_c12_o20_h11_nhwc_bias_requant_u8": qconv(
        U8, 12, 20, 11, stride=2, pad=1, layout="NHWC", pad_value=131, bias=True, requant=Requant(U8, 120, 0, 255)),
    "conv_k3_u8_c24_o16_h12_nhwc_to_nchw_int32": qconv(U8, 24, 16, 12, layout="NCHW", data_layout="NHWC",
                                                       pad_value=77, bias=True),
    "conv_k1_i8_c24_o24_h9_requant_u8_clip": qconv(I8, 24, 24, 9, k=1, requant=Requant(U8, 0, 0, 100)),
    "dw3_u8_c24_h12_bias_requant_relu": qconv(U8, 24, 24, 12, groups=24, pad_value=255, bias=True,
                                              requant=Requant(U8, 17, 17, 255)),
    "dw3s2_i8_c16_h9_nhwc_requant": qconv(I8, 16, 16, 9, stride=2, pad=1, groups=16, layout="NHWC",
                                          pad_value=-128, requant=Requant(I8, 5, -128, 127)),
    "g4_i8_c16_o24_h8_bias_int32": qconv(I8, 16, 24, 8, groups=4, pad_value=3, bias=True),
    # a depthwise kernel over the whole image: the shape of the importer's quantized global average pool
    "gap_as_dw7_u8_c24_h7": qconv(U8, 24, 24, 7, k=7, pad=0, groups=24, bias=True, requant=Requant(U8, 9, 0, 255)),
    # a residual block's second conv: [BIAS, REQUANT, QADD] as the fusion produces it
    "conv_k3_i8_c16_o16_h8_residual_relu": qconv(
        I8, 16, 16, 8, pad_value=-2, bias=True, requant=Requant(I8, 4, -128, 127),
        qadd=QAdd(I8, add_params(0.05, 4, 0.07, -9, 0.09, -20), -20, 127)),
    "conv_k1s2_u8_c24_o12_h12_nhwc_residual": qconv(
        U8, 24, 12, 12, k=1, stride=2, pad=0, layout="NHWC", requant=Requant(U8, 128, 0, 255),
        qadd=QAdd(U8, add_params(0.11, 128, 0.02, 100, 0.1, 130), 0, 255)),
    "mm_i8_33x20x70_bias_requant": qmatmul(I8, 33, 20, 70, bias=True, requant=Requant(I8, -1, -128, 127)),
    "mm_u8_9x40x64_tb_bias_requant_u8_relu": qmatmul(U8, 9, 40, 64, transpose_b=True, bias=True,
                                                     requant=Requant(U8, 3, 3, 255)),
    "bmm_i8_2x12x24x36_int32": qmatmul(I8, 12, 24, 36, batch=2),
    "bmm_u8_3x8x16x48_shared_b_requant_residual": qmatmul(
        U8, 8, 16, 48, batch=3, batch_b=False, requant=Requant(U8, 60, 0, 255),
        qadd=QAdd(U8, add_params(0.3, 60, 0.25, 128, 0.4, 70), 70, 255)),
    "qadd_i8_1x24x6x6_relu": qadd_eltwise(I8, (1, 24, 6, 6), "NCHW",
                                          QAdd(I8, add_params(0.02, -3, 0.035, 7, 0.04, -10), -10, 127)),
    "qadd_u8_to_i8_2x5x5x16_nhwc": qadd_eltwise(U8, (2, 5, 5, 16), "NHWC",
                                                QAdd(I8, add_params(0.5, 128, 0.25, 120, 0.6, 0), -128, 127)),
}


def _requantised(spec: OpSpec) -> bool:
    return any(e.kind == EpiKind.REQUANT for e in spec.epilogue)


@pytest.mark.parametrize(("name", "per_channel"), [(n, True) for n in INT_CASES]
                         + [(n, False) for n, s in INT_CASES.items() if _requantised(s)])
def test_8bit_op_on_every_tile(name: str, per_channel: bool) -> None:
    """Fixed 8-bit cases (per-channel and per-tensor multipliers) on every tile of :func:`tile_variants`."""
    spec = INT_CASES[name]
    tiles = tile_variants(spec)
    # (grouped convolutions never split their input channels)
    if isinstance(spec, MatmulSpec) or (isinstance(spec, Conv2dSpec) and spec.groups == 1):
        full = spec.in_channels if isinstance(spec, Conv2dSpec) else spec.mnk[2]
        assert min(_reduction(t) for t, _ in tiles) < full, "no tile streams the reduction"
    check_int(spec, int_env(spec, np.random.default_rng(len(name)), per_channel), tiles)


INT_POOLS: dict[str, OpSpec] = {
    "max3s2p1_i8_c24_h11_nhwc": retyped(pool(24, 11, k=3, stride=2, pad=1, layout="NHWC"), I8),
    "max2_u8_c16_h8_nchw_to_nhwc": retyped(pool(16, 8, k=2, layout="NHWC", data_layout="NCHW"), U8),
    "gmax_u8_n2_c24_h6": retyped(pool(24, 6, global_=True, n=2), U8),
}


@pytest.mark.parametrize("name", list(INT_POOLS))
def test_maxpool_8bit_on_every_tile(name: str) -> None:
    """8-bit max pooling keeps its type and is exact (padding never wins)."""
    spec = accepted(INT_POOLS[name])
    assert isinstance(spec, PoolSpec)
    x = int_env(spec, np.random.default_rng(len(name)))[spec.data.name]
    for tile, hw in tile_variants(spec):
        assert_exact(simulate(spec, tile, hw, {spec.data.name: x}), maxpool_ref(spec, x), f"{name} {tile}")


def _rule_conv(in_dt: DType, requant: Requant, mult: Sequence[float], bias: Sequence[int]) -> tuple[Conv2dSpec, Env]:
    """A 1x1 convolution of one input channel holding every value of ``in_dt`` (16 x 16) with unit
    weights: output channel ``i`` requantises exactly ``x + bias[i]`` with ``mult[i]``."""
    o = len(mult)
    spec = qconv(in_dt, 1, o, 16, k=1, pad=0, bias=True, requant=requant)
    lo, _ = qrange(in_dt)
    env = {"x": np.arange(lo, lo + 256).reshape(1, 1, 16, 16).astype(in_dt.np), "w": np.ones((o, 1, 1, 1), np.int8),
           "bias": np.asarray(bias, np.int32), "mult": np.asarray(mult, np.float32)}
    return spec, env


#: (multiplier, bias, pins) per output channel of :func:`_rule_conv`, each aimed at one detail of the
#: rule; ``pins`` maps an input value to the rounded ``f32(x + bias) * m`` (before zero point and clamp).
RULE_CHANNELS: dict[str, tuple[float, int, dict[int, int]]] = {
    # odd accumulators are ties: to even, both signs
    "half": (0.5, 0, {1: 0, 3: 2, 5: 2, -1: 0, -3: -2, -5: -2}),
    "quarter": (0.25, 2, {0: 0, 4: 2, -4: 0, -8: -2}),
    # 2**24 + 2**17 + 1 is not a float32: it rounds to the tie 64.5 (-> 64; float64 arithmetic gives 65)
    "f32_acc": (2.0**-18, 2**24 + 2**17, {0: 64, 1: 64, 2: 65}),
    # 3 * m is 0.5 + 1.5e-8 exactly, 0.5 in float32 (-> 0; float64 arithmetic gives 1)
    "f32_product": (float(np.float32(1 / 6)), 0, {3: 0, -3: 0, 9: 2}),
    "identity": (1.0, 0, {}),  # crosses the narrowed clamps
    "saturate_hi": (1.0, 1000, {}),
    "saturate_lo": (1.0, -1000, {}),
    "near_half": (1e-4, 5000, {}),
}


@pytest.mark.parametrize("in_dt", [I8, U8], ids=["int8", "uint8"])
@pytest.mark.parametrize(("out_dt", "zp", "lo", "hi"), [(I8, 0, -128, 127), (I8, 1, 1, 127), (I8, -5, -5, 20),
                                                         (U8, 128, 0, 255), (U8, 3, 3, 255)])
def test_requantisation_ties_and_saturation(in_dt: DType, out_dt: DType, zp: int, lo: int, hi: int) -> None:
    """Every input value through each channel of :data:`RULE_CHANNELS`, with odd zero points (added
    after rounding: rounding ``v + zp`` instead differs on ties) and narrowed clamps."""
    mult, bias, pins = zip(*RULE_CHANNELS.values(), strict=True)
    spec, env = _rule_conv(in_dt, Requant(out_dt, zp, lo, hi), mult, bias)
    expected = int_reference(accepted(spec), env)
    x = env["x"][0, 0]
    for i, pinned in enumerate(pins):  # the reference itself, where the values were chosen
        for value, q in pinned.items():
            if (x == value).any():
                assert expected[0, i][x == value][0] == min(max(q + zp, lo), hi), (i, value)
    names = list(RULE_CHANNELS)
    assert (expected[0, names.index("saturate_hi")] == hi).all()
    assert (expected[0, names.index("saturate_lo")] == lo).all()
    for tile, hw in tile_variants(spec):
        assert_exact(simulate(spec, tile, hw, env), expected, tile)


#: Rescaled adds over every pair of int8 values: (scale_a, scale_b, offset), clamp, and pinned
#: ``(a, b) -> result``. "f32_order": float32 scales at which only the order
#: ``(offset + a*sa) + b*sb`` gives 28 at (58, 82) (``offset + (a*sa + b*sb)`` and float64 give 29).
QADD_CASES: dict[str, tuple[tuple[float, float, float], int, int, dict[tuple[int, int], int]]] = {
    "half": ((0.5, 0.5, 0.0), -128, 127, {(1, 2): 2, (-1, -2): -2, (1, 0): 0, (2, 3): 2, (-128, -128): -128}),
    "half_offset": ((0.5, 0.5, 0.5), -128, 127, {(0, 0): 0, (1, 0): 1, (1, 1): 2, (-1, -1): 0, (-2, -1): -1}),
    "saturate": ((1.0, 1.0, 3.0), -20, 100, {(127, 127): 100, (-128, -128): -20, (50, 40): 93, (-12, -11): -20,
                                              (-11, -11): -19}),
    "f32_order": ((float(np.float32("0.07757618")), float(np.float32("0.14482418")), 12.125), -128, 127,
                  {(58, 82): 28}),
}


@pytest.mark.parametrize("name", list(QADD_CASES))
def test_qadd_ties_order_and_saturation(name: str) -> None:
    """Every pair of int8 values: halves tie (to even), saturation at a narrowed clamp, and scales
    for which only the float32 order of the rule gives the right integer."""
    floats, lo, hi, pins = QADD_CASES[name]
    spec = qadd_eltwise(I8, (256, 256), "NC", QAdd(I8, floats, lo, hi))
    a, b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
    env = {"a": a.astype(np.int8), "b": b.astype(np.int8)}
    expected = int_reference(accepted(spec), env)
    for (va, vb), q in pins.items():
        assert expected[va + 128, vb + 128] == q, (va, vb)
    for tile, hw in tile_variants(spec)[:2]:
        assert_exact(simulate(spec, tile, hw, env), expected, tile)


# ---------------------------------------------------------------------------- fp16
def cast_to(dtype: DType) -> Epilogue:
    return Epilogue(EpiKind.CAST, dtype=dtype)


def assert_fp16_close(out: np.ndarray, ref: np.ndarray, acc: np.ndarray, what: object) -> None:
    """An fp16 conv / matmul result ``relu(fp16(acc) + bias)`` against the float64 ``ref`` rounded to fp16.

    The hardware rounds the fp32 accumulator to fp16 (error <= 2**-11 |acc|) and the fp16 sum
    with the bias (<= 2**-11 |result|); rounding the reference to fp16 adds <= 2**-11 |result|,
    relu only shrinks errors and the fp32 accumulation (2**-24 per partial sum) is negligible.
    So |out - ref| <= 2**-11 max|acc| + 2**-10 |ref|: rtol 2e-3 (twice 2**-10) and atol
    2**-10 max|acc| (twice the accumulator's rounding, which bias may cancel the result below).
    """
    assert out.dtype == np.float16 and out.shape == ref.shape, (out.dtype, out.shape, ref.shape)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float16).astype(np.float64), rtol=2e-3,
                               atol=2.0**-10 * float(np.abs(acc).max()), err_msg=str(what))


FP16_MAIN_CASES: dict[str, OpSpec] = {
    "conv_k3_c16_o24_h10": conv(16, 24, 10, epi=("bias", "relu")),
    "conv_k3s2_c24_o16_h11_nhwc": conv(24, 16, 11, stride=2, pad=1, layout="NHWC", epi=("bias", "relu")),
    "conv_k1_c24_o8_h7_nchw_to_nhwc": conv(24, 8, 7, k=1, layout="NHWC", data_layout="NCHW", epi=("bias", "relu")),
    "dw3_c24_h9": conv(24, 24, 9, groups=24, epi=("bias", "relu")),
    "g3_c12_o18_h8_nhwc": conv(12, 18, 8, groups=3, layout="NHWC", epi=("bias", "relu")),
    "mm_17x33x45": matmul(17, 33, 45, epi=("bias", "relu")),
    "mm_1x100x64_tb": matmul(1, 100, 64, transpose_b=True, epi=("bias", "relu")),
    "bmm_2x9x18x33_shared_b": matmul(9, 18, 33, batch=2, batch_b=False, epi=("bias", "relu")),
}


@pytest.mark.parametrize("name", list(FP16_MAIN_CASES))
def test_fp16_conv_matmul_cast_bias_relu(name: str) -> None:
    """fp16 operands, fp32 accumulator, epilogue [CAST to fp16, BIAS (fp16), RELU] as -precision=fp16 builds it."""
    spec = accepted(retyped(FP16_MAIN_CASES[name], F16, head=[cast_to(F16)]))
    env = float_env(spec, np.random.default_rng(len(name)))
    (bias,) = [e.operand.name for e in spec.epilogue if e.operand is not None]
    if isinstance(spec, Conv2dSpec):
        acc = conv_direct(spec, env[spec.data.name].astype(np.float64), env[spec.weight.name].astype(np.float64))
        axis = spec.layout.index("C")
    else:
        assert isinstance(spec, MatmulSpec)
        acc = matmul_direct(spec, env[spec.a.name].astype(np.float64), env[spec.b.name].astype(np.float64))
        axis = acc.ndim - 1
    ref = np.maximum(acc + per_channel(env[bias].astype(np.float64), acc.ndim, axis), 0.0)
    assert (ref == 0).mean() > 0.2 and (ref > 0).mean() > 0.2  # relu and bias both matter
    for tile, hw in tile_variants(spec):
        assert_fp16_close(simulate(spec, tile, hw, env), ref, acc, f"{name} {tile}")


FP16_POOLS: dict[str, OpSpec] = {
    "max3s2p1_c24_h11_nhwc": pool(24, 11, k=3, stride=2, pad=1, layout="NHWC"),
    "max2_c16_h8_nchw_to_nhwc": pool(16, 8, k=2, layout="NHWC", data_layout="NCHW"),
    "avg3s1p1_cip_c12_h9": pool(12, 9, kind="avg", k=3, stride=1, pad=1, count_include_pad=True),
    "avg3s1p1_nocip_c12_h9_nhwc": pool(12, 9, kind="avg", k=3, stride=1, pad=1, layout="NHWC"),
    "gap_c40_h5": pool(40, 5, kind="avg", global_=True),
}


@pytest.mark.parametrize("name", list(FP16_POOLS))
def test_fp16_pool(name: str) -> None:
    """Exact: a max rounds nothing; an average of fp16 values is an exact float64 sum (every fp16
    value is a multiple of 2**-24 below 2**16), a correctly rounded float64 quotient, then one
    rounding to fp16, and the float64 quotient cannot land on an fp16 tie the exact one misses."""
    spec = accepted(retyped(FP16_POOLS[name], F16))
    x = float_env(spec, np.random.default_rng(len(name)))[spec.data.name]
    assert isinstance(spec, PoolSpec)
    if spec.kind == PoolKind.MAX:
        expected = maxpool_ref(spec, x)
    else:
        (pt, pl, pb, pr), (sh, sw) = spec.padding, spec.strides
        oh, ow = spec.out.dim("H"), spec.out.dim("W")
        pads = ((0, 0), (0, 0), (pt, pb), (pl, pr))
        xp = np.pad(to_nchw(x.astype(np.float64), spec.data.layout), pads)
        ones = np.pad(np.ones(to_nchw(x, spec.data.layout).shape), pads)
        view = np.lib.stride_tricks.sliding_window_view
        total = view(xp, spec.kernel, axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow].sum((-1, -2))
        count = view(ones, spec.kernel, axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow].sum((-1, -2))
        if spec.count_include_pad:
            count = np.full_like(count, spec.kernel[0] * spec.kernel[1])
        expected = from_nchw(total / count, spec.layout).astype(np.float16)
    for tile, hw in tile_variants(spec):
        assert_exact(simulate(spec, tile, hw, {spec.data.name: x}), expected, f"{name} {tile}")


@pytest.mark.parametrize(("shape", "layout"), [((2, 12, 5, 7), "NCHW"), ((1, 6, 6, 20), "NHWC"), ((3, 40), "NC")])
def test_fp16_elementwise_chain(shape: tuple[int, ...], layout: str) -> None:
    """fp16 ``tanh(relu((x + y) * m[c]))``: each step rounds once to fp16 (<= 2**-11 relative; the
    add is first, on exact inputs, so no earlier error is amplified by cancellation; relu and
    tanh, on non-negative inputs, do not grow relative errors), four roundings in all:
    (1 + 2**-11)**4 - 1 < 2e-3; atol for fp16 subnormals (spacing 2**-24)."""
    x = TensorRef("x", shape, F16, layout)
    steps = (Epilogue(EpiKind.ADD, replace(x, name="y")),
             Epilogue(EpiKind.MUL, TensorRef("m", (x.dim("C"),), F16), Broadcast.CHANNEL),
             Epilogue(EpiKind.RELU), Epilogue(EpiKind.TANH))
    spec = accepted(ElementwiseSpec("chain", replace(x, name="out"), data=x, epilogue=steps))
    env = float_env(spec, np.random.default_rng(len(shape)))
    m = per_channel(env["m"].astype(np.float64), len(shape), layout.index("C"))
    ref = np.tanh(np.maximum((env["x"].astype(np.float64) + env["y"]) * m, 0.0))
    for tile, hw in tile_variants(spec):
        out = simulate(spec, tile, hw, env)
        assert out.dtype == np.float16
        np.testing.assert_allclose(out.astype(np.float64), ref, rtol=2e-3, atol=2.0**-22, err_msg=str(tile))


def _fp16_values() -> np.ndarray:
    """Every finite fp16 value."""
    every = np.arange(2**16, dtype=np.uint16).view(np.float16)
    return every[np.isfinite(every)]


def test_cast_fp16_to_fp32_is_exact() -> None:
    """A standalone cast (relax.astype between float types) of every finite fp16 value and +-inf."""
    x = np.concatenate([_fp16_values(), np.array([np.inf, -np.inf], np.float16)])
    spec = accepted(ElementwiseSpec("cast", TensorRef("y", x.shape, F32, "C"), data=TensorRef("x", x.shape, F16, "C"),
                                    epilogue=(cast_to(F32),)))
    for tile, hw in tile_variants(spec)[:2]:
        out = simulate(spec, tile, hw, {"x": x})
        assert_exact(out.view(np.uint32), x.astype(np.float32).view(np.uint32), tile)  # signed zeros too


def test_cast_fp32_to_fp16_rounds_to_nearest_even() -> None:
    """Every finite fp16 value, the midpoints between neighbours (ties: to the even one), one float32
    step either side of each midpoint, and values that overflow to infinity (65520 and up: the
    midpoint above 65504)."""
    v = np.unique(_fp16_values().astype(np.float32))
    mid = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)  # exact: 12-bit significands
    x = np.concatenate([v, mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf)),
                        np.float32([-0.0, 65519.996, 65520.0, 1e6, -65520.0, np.inf, -np.inf])])
    spec = accepted(ElementwiseSpec("cast", TensorRef("y", x.shape, F16, "C"), data=TensorRef("x", x.shape, F32, "C"),
                                    epilogue=(cast_to(F16),)))
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16)  # IEEE conversion: nearest, ties to even, overflow to inf
    assert expected[np.where(x == np.float32(1 + 2**-11))[0][0]] == 1.0  # a tie rounds to the even neighbour
    assert expected[np.where(x == np.float32(1 + 3 * 2**-11))[0][0]] == 1 + 2**-9
    for tile, hw in tile_variants(spec)[:2]:
        assert_exact(simulate(spec, tile, hw, {"x": x}).view(np.uint16), expected.view(np.uint16), tile)
