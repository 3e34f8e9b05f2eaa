"""Every instruction's result against an independent numpy / pure-Python reference, all dtypes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import run_instruction, strided
from tvm_npu.simulator import Engine, ProgramBuilder, Simulator, TensorKind, isa

from tvm_npu.config import ACCUMULATOR, DType, HardwareConfig

HW = HardwareConfig()
ALL = list(DType)
FLOATS = [DType.FP16, DType.FP32]
TENSOR_TYPES = [DType.INT8, DType.UINT8, DType.FP16, DType.FP32]
# SRAM addresses of up to four operands, far enough apart for every test tile
A0, A1, A2, A3 = 0x00000, 0x10000, 0x20000, 0x30000
Op = isa.Opcode


def rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: DType, lo: int = -100, hi: int = 100) -> np.ndarray:
    if dtype.is_float:
        return rng.uniform(lo / 10, hi / 10, shape).astype(dtype.np)
    info = np.iinfo(dtype.np)
    return rng.integers(max(lo, info.min), min(hi, info.max), shape, endpoint=True).astype(dtype.np)


def wrap(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Two's-complement wrap of exact integers into ``dtype`` (modulo for unsigned types)."""
    bits = 8 * dtype.itemsize
    if np.iinfo(dtype.np).min == 0:
        return (x.astype(object) % 2**bits).astype(dtype.np)
    return (((x.astype(object) + 2 ** (bits - 1)) % 2**bits) - 2 ** (bits - 1)).astype(dtype.np)


# --------------------------------------------------------------------------- DMA
@pytest.mark.parametrize("dtype", ALL)
def test_dma_strided_load_store_round_trip(dtype: DType) -> None:
    rng = np.random.default_rng(1)
    x = rand(rng, (4, 6, 8), dtype)
    b = ProgramBuilder(HW)
    tx = b.tensor("x", x.shape, dtype, TensorKind.INPUT)
    ty = b.tensor("y", (6, 2, 3), dtype, TensorKind.OUTPUT)
    sem = b.semaphore()
    # x[1:3, ::2, 1:7] -> SRAM as (2, 3, 6) row-major; stored back transposed to y (6, 2, 3)
    b.dma_load(tx, A1, (2, 3, 6), dram_offset=1 * 48 + 1, dram_strides=(48, 16, 1))
    b.signal(Engine.DMA_LOAD, sem)
    b.wait(Engine.DMA_STORE, sem)
    b.dma_store(ty, A1, (2, 3, 6), dram_strides=(3, 1, 6))
    y = Simulator(HW).run(b.build(), {"x": x}).outputs["y"]
    np.testing.assert_array_equal(y, x[1:3, ::2, 1:7].transpose(2, 0, 1))


def test_output_array_is_written_in_place() -> None:
    x = np.arange(8, dtype=np.float32)
    b = ProgramBuilder(HW)
    tx, ty = b.tensor("x", (8,), DType.FP32, TensorKind.INPUT), b.tensor("y", (8,), DType.FP32, TensorKind.OUTPUT)
    sem = b.semaphore()
    b.dma_load(tx, 0, (4,))
    b.signal(Engine.DMA_LOAD, sem)
    b.wait(Engine.DMA_STORE, sem)
    b.dma_store(ty, 0, (4,), dram_offset=2)
    y = np.full(8, -1.0, np.float32)
    result = Simulator(HW).run(b.build(), {"x": x, "y": y})
    assert result.outputs["y"] is y
    np.testing.assert_array_equal(y, [-1, -1, 0, 1, 2, 3, -1, -1])


# ------------------------------------------------------------------------ matmul
@pytest.mark.parametrize("dtype", TENSOR_TYPES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_matmul(dtype: DType, accumulate: bool) -> None:
    rng = np.random.default_rng(2)
    m, n, k = 5, 7, 19
    acc = ACCUMULATOR[dtype]
    a = rand(rng, (m, k), dtype, -128, 255)
    bt = rand(rng, (n, k), dtype.weight, -128, 127)  # B stored transposed: B[k, n] at n * K + k
    c0 = rand(rng, (m, n), acc)
    instr = isa.MatMul(A0, (k, 1), A1, (1, k), A2, (n, 1), m, n, k, dtype, accumulate)
    got = run_instruction(HW, instr, [(A0, a), (A1, bt), (A2, c0)], A2, acc, m * n).reshape(m, n)
    if not dtype.is_float:
        exact = a.astype(object) @ bt.T.astype(object) + (c0.astype(object) if accumulate else 0)
        np.testing.assert_array_equal(got, wrap(np.array(exact), DType.INT32))
    else:
        ref = a.astype(np.float64) @ bt.T.astype(np.float64) + (c0 if accumulate else 0)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert got.dtype == acc.np


def test_matmul_int32_accumulator_wraps() -> None:
    a = np.full((1, 4), 127, np.int8)
    b = np.full((4, 1), 127, np.int8)
    c0 = np.array([[2**31 - 10]], np.int32)
    instr = isa.MatMul(A0, (4, 1), A1, (1, 1), A2, (1, 1), 1, 1, 4, DType.INT8, True)
    got = run_instruction(HW, instr, [(A0, a), (A1, b), (A2, c0)], A2, DType.INT32, 1)
    assert int(got[0]) == (2**31 - 10 + 4 * 127 * 127) - 2**32


# -------------------------------------------------------------------------- conv
def conv_ref(
    x: np.ndarray,
    w: np.ndarray,
    stride: tuple[int, int],
    dilation: tuple[int, int],
    pads: tuple[int, int],
    groups: int,
    out_hw: tuple[int, int],
    pad_value: int = 0,
) -> np.ndarray:
    """Direct definition of isa.Conv in exact arithmetic (object ints or float64)."""
    _, h, wd = x.shape
    o_c, cin_g, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl) = stride, dilation, pads
    oh, ow = out_hw
    out = np.zeros((o_c, oh, ow), dtype=x.dtype)
    for o in range(o_c):
        g = o // (o_c // groups)
        for y in range(oh):
            for xx in range(ow):
                s = 0
                for i in range(cin_g):
                    for ky in range(kh):
                        for kx in range(kw):
                            iy, ix = y * sh + ky * dh - pt, xx * sw + kx * dw - pl
                            inside = 0 <= iy < h and 0 <= ix < wd
                            s += (x[g * cin_g + i, iy, ix] if inside else pad_value) * w[o, i, ky, kx]
                out[o, y, xx] = s
    return out


CONV_CASES = {
    "3x3_pad1": dict(c=3, h=5, w=6, o=4, k=(3, 3), s=(1, 1), d=(1, 1), p=(1, 1, 1, 1), g=1),
    "stride2_asym_pad": dict(c=2, h=7, w=6, o=3, k=(3, 2), s=(2, 2), d=(1, 1), p=(1, 0, 0, 1), g=1),
    "dilated": dict(c=2, h=7, w=7, o=2, k=(3, 3), s=(1, 1), d=(2, 2), p=(2, 2, 2, 2), g=1),
    "grouped": dict(c=4, h=4, w=4, o=6, k=(3, 3), s=(1, 1), d=(1, 1), p=(1, 1, 1, 1), g=2),
    "depthwise": dict(c=3, h=5, w=5, o=3, k=(3, 3), s=(2, 1), d=(1, 1), p=(0, 1, 0, 1), g=3),
}


@pytest.mark.parametrize("dtype", TENSOR_TYPES)
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv(dtype: DType, case: str) -> None:
    p = CONV_CASES[case]
    rng = np.random.default_rng(3)
    c, h, w, o, g = p["c"], p["h"], p["w"], p["o"], p["g"]
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = p["k"], p["s"], p["d"], p["p"]
    oh = (pt + h + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (pl + w + pr - (kw - 1) * dw - 1) // sw + 1
    acc = ACCUMULATOR[dtype]
    x = rand(rng, (c, h, w), dtype, -128, 255)
    wt = rand(rng, (o, c // g, kh, kw), dtype.weight, -128, 127)
    c0 = rand(rng, (o, oh, ow), acc)
    pad_value = {DType.INT8: -7, DType.UINT8: 131}.get(dtype, 0)  # a zero point
    for accumulate in (False, True):
        instr = isa.Conv(
            A0, (h * w, w, 1), c, h, w, A1, (c // g * kh * kw, kh * kw, kw, 1), A2, (oh * ow, ow, 1),
            o, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, g, dtype, accumulate, pad_value,
        )  # fmt: skip
        got = run_instruction(HW, instr, [(A0, x), (A1, wt), (A2, c0)], A2, acc, o * oh * ow).reshape(o, oh, ow)
        if not dtype.is_float:
            ref = conv_ref(x.astype(object), wt.astype(object), (sh, sw), (dh, dw), (pt, pl), g, (oh, ow), pad_value)
            ref = wrap(ref + (c0.astype(object) if accumulate else 0), DType.INT32)
            np.testing.assert_array_equal(got, ref)
        else:
            ref = conv_ref(x.astype(np.float64), wt.astype(np.float64), (sh, sw), (dh, dw), (pt, pl), g, (oh, ow))
            np.testing.assert_allclose(got, ref + (c0 if accumulate else 0), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------ vector
SHAPE = (2, 3, 8)
DENSE = (24, 8, 1)
N = 48


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", sorted(isa.VecBinary.OPS))
def test_vec_binary(dtype: DType, op: isa.Opcode) -> None:
    rng = np.random.default_rng(4)
    lo, hi = (-128, 127) if dtype == DType.INT8 else (-(2**31), 2**31 - 1) if dtype == DType.INT32 else (-100, 100)
    x = rand(rng, SHAPE, dtype, lo, hi)
    row = rand(rng, (8,), dtype, lo, hi)  # broadcast along the two outer axes (strides 0)
    instr = isa.VecBinary(SHAPE, A2, DENSE, A0, DENSE, A1, (0, 0, 1), dtype, op)
    got = run_instruction(HW, instr, [(A0, x), (A1, row)], A2, dtype, N).reshape(SHAPE)
    y = np.broadcast_to(row, SHAPE)
    if dtype.is_float:
        ref = {Op.VADD: np.add, Op.VSUB: np.subtract, Op.VMUL: np.multiply, Op.VMAX: np.maximum,
               Op.VMIN: np.minimum}[op](x, y)  # fmt: skip
    else:
        xo, yo = x.astype(object), y.astype(object)
        exact = {Op.VADD: xo + yo, Op.VSUB: xo - yo, Op.VMUL: xo * yo,
                 Op.VMAX: np.maximum(xo, yo), Op.VMIN: np.minimum(xo, yo)}[op]  # fmt: skip
        ref = wrap(np.array(exact), dtype)
    np.testing.assert_array_equal(got, ref)


def _f64_ref(op: isa.Opcode, v: float) -> float:
    if op == Op.VSIGMOID:
        return 1.0 / (1.0 + math.exp(-v)) if v > -700 else 0.0
    if op == Op.VTANH:
        return math.tanh(v)
    if op == Op.VEXP:
        return math.exp(v)
    if op == Op.VLOG:
        return math.log(v) if v > 0 else (-math.inf if v == 0 else math.nan)
    if op == Op.VSILU:
        return v * (1.0 / (1.0 + math.exp(-v))) if v > -700 else -0.0
    if op == Op.VRECIP:
        return 1.0 / v
    if op == Op.VRSQRT:
        return 1.0 / math.sqrt(v) if v >= 0 else math.nan
    if op == Op.VGELU_TANH:  # numpy's vectorised tanh, as the simulator (math.tanh differs in the last bit)
        inner = math.sqrt(2.0 / math.pi) * (v + 0.044715 * (v * v * v))
        return 0.5 * v * (1.0 + float(np.tanh(np.array([inner]))[0]))
    return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


@pytest.mark.parametrize(
    ("dtype", "op"),
    [(dt, op) for dt in ALL for op in sorted(isa.VecUnary.OPS) if dt.is_float or op not in isa.VecUnary.TRANSCENDENTAL],
)
def test_vec_unary(dtype: DType, op: isa.Opcode) -> None:
    rng = np.random.default_rng(5)
    x = rand(rng, SHAPE, dtype)
    # read the source transposed (w, h swapped) to cover strided sources
    shape = (2, 8, 3)
    instr = isa.VecUnary(shape, A2, (24, 3, 1), A0, (24, 1, 8), dtype, op)
    got = run_instruction(HW, instr, [(A0, x)], A2, dtype, N).reshape(shape)
    xt = x.transpose(0, 2, 1)
    if op == Op.VCOPY:
        ref = xt
    elif op == Op.VRELU:
        ref = np.where(xt > 0, xt, 0).astype(dtype.np)
    else:
        ref = np.array([_f64_ref(op, float(v)) for v in xt.ravel()]).astype(dtype.np).reshape(shape)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dtype", ALL)
def test_vec_clip(dtype: DType) -> None:
    x = rand(np.random.default_rng(6), SHAPE, dtype)
    lo, hi = (-2.5, 3.0) if dtype.is_float else (2.0, 60.0) if np.iinfo(dtype.np).min == 0 else (-20.0, 6.0)
    instr = isa.VecClip(SHAPE, A1, DENSE, A0, DENSE, dtype, lo, hi)
    got = run_instruction(HW, instr, [(A0, x)], A1, dtype, N).reshape(SHAPE)
    ref = [min(max(float(v), lo), hi) for v in x.ravel()]
    np.testing.assert_array_equal(got, np.array(ref).astype(dtype.np).reshape(SHAPE))


@pytest.mark.parametrize("dtype", FLOATS)
def test_vec_scale(dtype: DType) -> None:
    x = rand(np.random.default_rng(7), SHAPE, dtype)
    instr = isa.VecScale(SHAPE, A1, DENSE, A0, DENSE, dtype, 0.3, -1.25)
    got = run_instruction(HW, instr, [(A0, x)], A1, dtype, N).reshape(SHAPE)
    ref = np.array([float(v) * 0.3 - 1.25 for v in x.ravel()]).astype(dtype.np).reshape(SHAPE)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_vec_bias_add(dtype: DType, axis: int) -> None:
    rng = np.random.default_rng(8)
    x = rand(rng, SHAPE, dtype, -128, 127)
    bias = rand(rng, (SHAPE[axis],), dtype, -128, 127)
    instr = isa.VecBiasAdd(SHAPE, A2, DENSE, A0, DENSE, A1, axis, dtype)
    got = run_instruction(HW, instr, [(A0, x), (A1, bias)], A2, dtype, N).reshape(SHAPE)
    shape = [1, 1, 1]
    shape[axis] = SHAPE[axis]
    if dtype.is_float:
        ref = x + bias.reshape(shape)
    else:
        ref = wrap(x.astype(object) + bias.reshape(shape).astype(object), dtype)
    np.testing.assert_array_equal(got, ref)


def requant_ref(acc: int, m: float, zero_point: int, lo: int, hi: int) -> int:
    """One element, written independently of the simulator: float32 product, ties to even, clamp."""
    product = float(np.float32(np.float32(acc) * np.float32(m)))
    return max(lo, min(hi, round(product) + zero_point))  # Python's round: half to even


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from([DType.INT8, DType.UINT8]),
       per_channel=st.booleans(), zero_point=st.integers(-128, 255), log_scale=st.floats(-12, 2),
       narrow=st.integers(0, 100))
def test_vec_requant(seed: int, dtype: DType, per_channel: bool, zero_point: int, log_scale: float,
                     narrow: int) -> None:
    rng = np.random.default_rng(seed)
    qmin, qmax = int(np.iinfo(dtype.np).min), int(np.iinfo(dtype.np).max)
    zero_point = min(max(zero_point, qmin), qmax)
    lo, hi = qmin + narrow // 2, qmax - narrow // 3  # a folded relu / clip narrows the clamp
    x = rng.integers(-(2**31), 2**31 - 1, SHAPE, endpoint=True).astype(np.int32)
    x.flat[:7] = [0, -1, 1, 2**31 - 1, -(2**31), 255, 2**24 + 1]
    x.flat[7:15] = np.arange(-4, 4) * 2 ** max(0, int(-log_scale))  # values near the rounding ties
    m = (2.0 ** rng.uniform(log_scale - 1, log_scale + 1, SHAPE[1] if per_channel else 1)).astype(np.float32)
    m_strides = (0, 1, 0) if per_channel else (0, 0, 0)
    instr = isa.VecRequant(SHAPE, A2, DENSE, A0, DENSE, A1, m_strides, zero_point, lo, hi, dtype)
    got = run_instruction(HW, instr, [(A0, x), (A1, m)], A2, dtype, N).reshape(SHAPE)
    mm = np.broadcast_to(m.reshape(1, -1, 1) if per_channel else m.reshape(1, 1, 1), SHAPE)
    ref = [requant_ref(int(v), float(s), zero_point, lo, hi) for v, s in zip(x.ravel(), mm.ravel(), strict=True)]
    np.testing.assert_array_equal(got, np.array(ref, dtype.np).reshape(SHAPE))


def test_requant_ties_round_to_even() -> None:
    """0.5, 1.5, 2.5, -0.5, -1.5 -> 0, 2, 2, 0, -2: the rule onnxruntime's integer kernels use."""
    x = np.array([1, 3, 5, -1, -3, 0], np.int32)
    m = np.array([0.5], np.float32)
    instr = isa.VecRequant((1, 1, 6), A2, (6, 6, 1), A0, (6, 6, 1), A1, (0, 0, 0), 0, -128, 127, DType.INT8)
    got = run_instruction(HW, instr, [(A0, x), (A1, m)], A2, DType.INT8, 6)
    np.testing.assert_array_equal(got, [0, 2, 2, 0, -2, 0])


def _cast_ref(v: float | int, src: DType, dst: DType) -> object:
    if dst.is_float:
        with np.errstate(over="ignore"):  # int32 -> fp16 overflows to inf, as specified
            return np.array([v], dtype=src.np).astype(np.float64).astype(dst.np)[0]  # one IEEE rounding
    info = np.iinfo(dst.np)
    if isinstance(v, float):
        if math.isnan(v):
            return 0
        if math.isinf(v):
            return info.max if v > 0 else info.min
        v = round(v)  # Python rounds half to even
    return max(int(info.min), min(int(info.max), int(v)))


@pytest.mark.parametrize("src", ALL)
@pytest.mark.parametrize("dst", ALL)
def test_vec_cast(src: DType, dst: DType) -> None:
    rng = np.random.default_rng(10)
    if src.is_float:
        x = (rng.uniform(-300, 300, SHAPE)).astype(src.np)
        x.flat[:10] = [0.5, 1.5, 2.5, -0.5, -2.5, np.nan, np.inf, -np.inf, 60000, -60000]
    else:
        x = rand(rng, SHAPE, src, -(2**31), 2**31 - 1)
    instr = isa.VecCast(SHAPE, A1, DENSE, A0, DENSE, src, dst)
    got = run_instruction(HW, instr, [(A0, x)], A1, dst, N)
    ref = np.array([_cast_ref(v.item(), src, dst) for v in x.ravel()], dtype=dst.np)
    np.testing.assert_array_equal(got, ref)


# -------------------------------------------------------------------------- pool
def pool_ref(
    x: np.ndarray,
    op: isa.Opcode,
    k: tuple[int, int],
    s: tuple[int, int],
    pads: tuple[int, int],
    include_pad: bool,
    out_hw: tuple[int, int],
    dtype: DType,
) -> np.ndarray:
    """Direct definition of isa.Pool: reduce the in-tile elements of each window."""
    c, h, w = x.shape
    out = np.zeros((c, *out_hw), dtype=dtype.np)
    for ch in range(c):
        for y in range(out_hw[0]):
            for xx in range(out_hw[1]):
                vals = [
                    x[ch, iy, ix].item()
                    for iy in range(y * s[0] - pads[0], y * s[0] - pads[0] + k[0])
                    for ix in range(xx * s[1] - pads[1], xx * s[1] - pads[1] + k[1])
                    if 0 <= iy < h and 0 <= ix < w
                ]
                if op == Op.VMAXPOOL:
                    out[ch, y, xx] = max(vals)
                else:
                    mean = math.fsum(vals) / (k[0] * k[1] if include_pad else len(vals))
                    out[ch, y, xx] = mean if dtype.is_float else round(mean)
    return out


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize(("op", "include_pad"), [(Op.VMAXPOOL, False), (Op.VAVGPOOL, False), (Op.VAVGPOOL, True)])
def test_pool(dtype: DType, op: isa.Opcode, include_pad: bool) -> None:
    c, h, w, (kh, kw), (sh, sw), (pt, pl, pb, pr) = 3, 7, 6, (3, 2), (2, 2), (1, 0, 1, 1)
    oh = (pt + h + pb - kh) // sh + 1
    ow = (pl + w + pr - kw) // sw + 1
    x = rand(np.random.default_rng(11), (c, h, w), dtype, -128, 127)
    x.flat[:4] = x.flat[0]  # ties
    instr = isa.Pool(A0, (h * w, w, 1), h, w, A1, (oh * ow, ow, 1), c, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr,
                     dtype, op, include_pad)  # fmt: skip
    got = run_instruction(HW, instr, [(A0, x)], A1, dtype, c * oh * ow).reshape(c, oh, ow)
    np.testing.assert_array_equal(got, pool_ref(x, op, (kh, kw), (sh, sw), (pt, pl), include_pad, (oh, ow), dtype))


def test_strided_destination_leaves_gaps_untouched() -> None:
    x = np.arange(6, dtype=np.int32)
    preset = np.full(12, -7, np.int32)
    instr = isa.VecUnary((1, 2, 3), A1, (0, 6, 2), A0, (6, 3, 1), DType.INT32, Op.VCOPY)
    got = run_instruction(HW, instr, [(A1, preset), (A0, x)], A1, DType.INT32, 12)
    np.testing.assert_array_equal(strided(got, (2, 3), (6, 2)), x.reshape(2, 3))
    np.testing.assert_array_equal(got[1::2], -7)
