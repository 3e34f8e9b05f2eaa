"""VDWCONV, the vector engine's depthwise window multiply-accumulate: numerics against a direct
numpy definition (hypothesis over shapes, strides, dilations, padding, layouts and dtypes),
agreement with the tensor engine's grouped Conv, cycles, encoding and validation."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import run_instruction
from tvm_npu.simulator import Engine, InstructionError, ProgramBuilder, Simulator, isa
from tvm_npu.simulator.encoding import decode_program, encode_instruction, encode_program

from tvm_npu.config import ACCUMULATOR, DType, HardwareConfig

HW = HardwareConfig()
A0, A1, A2 = 0x00000, 0x20000, 0x40000
TYPES = [DType.INT8, DType.UINT8, DType.FP16, DType.FP32]


def dw_ref(x: np.ndarray, w: np.ndarray, stride: tuple[int, int], dilation: tuple[int, int],
           pads: tuple[int, int], out_hw: tuple[int, int], pad_value: int) -> np.ndarray:
    """The record's formula, loop by loop, in exact arithmetic (object ints or float64)."""
    c, h, wd = x.shape
    _, kh, kw = w.shape
    out = np.zeros((c, *out_hw), dtype=x.dtype)
    for ch in range(c):
        for y in range(out_hw[0]):
            for xx in range(out_hw[1]):
                s = 0
                for ky in range(kh):
                    for kx in range(kw):
                        iy = y * stride[0] + ky * dilation[0] - pads[0]
                        ix = xx * stride[1] + kx * dilation[1] - pads[1]
                        v = x[ch, iy, ix] if 0 <= iy < h and 0 <= ix < wd else pad_value
                        s += v * w[ch, ky, kx]
                out[ch, y, xx] = s
    return out


def wrap32(x: np.ndarray) -> np.ndarray:
    return (((x.astype(object) + 2**31) % 2**32) - 2**31).astype(np.int32)


@st.composite
def cases(draw: st.DrawFn) -> dict:
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = [draw(st.integers(0, (k - 1) * d)) for k, d in ((kh, dh), (kw, dw), (kh, dh), (kw, dw))]
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    h = draw(st.integers(max(1, span_h - pads[0] - pads[2]), 9))
    w = draw(st.integers(max(1, span_w - pads[1] - pads[3]), 9))
    oh = (pads[0] + h + pads[2] - span_h) // sh + 1
    ow = (pads[1] + w + pads[3] - span_w) // sw + 1
    return dict(c=draw(st.integers(1, 40)), h=h, w=w, k=(kh, kw), s=(sh, sw), d=(dh, dw), p=tuple(pads),
                out=(oh, ow), dtype=draw(st.sampled_from(TYPES)), accumulate=draw(st.booleans()),
                hwc=draw(st.booleans()), seed=draw(st.integers(0, 2**16)))


def _rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    if dtype.is_float:
        return rng.uniform(-4, 4, shape).astype(dtype.np)
    info = np.iinfo(dtype.np)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype.np)


@settings(max_examples=60, deadline=None)
@given(p=cases())
def test_dwconv_matches_numpy(p: dict) -> None:
    rng = np.random.default_rng(p["seed"])
    c, h, w, dtype = p["c"], p["h"], p["w"], p["dtype"]
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr), (oh, ow) = p["k"], p["s"], p["d"], p["p"], p["out"]
    acc = ACCUMULATOR[dtype]
    x = _rand(rng, (c, h, w), dtype)
    wt = _rand(rng, (c, kh, kw), dtype.weight)
    c0 = _rand(rng, (c, oh, ow), acc) if acc.is_float else rng.integers(-2**31, 2**31 - 1, (c, oh, ow), np.int32)
    pad_value = 0 if dtype.is_float else int(_rand(rng, (), dtype))  # an 8-bit input's zero point
    if p["hwc"]:  # the input tile laid out (h, w, c), as an NHWC operator stages it
        x_sram, in_strides = np.ascontiguousarray(x.transpose(1, 2, 0)), (1, w * c, c)
    else:
        x_sram, in_strides = x, (h * w, w, 1)
    instr = isa.DwConv(A0, in_strides, h, w, A1, (kh * kw, kw, 1), A2, (oh * ow, ow, 1), c, oh, ow, kh, kw,
                       sh, sw, dh, dw, pt, pl, pb, pr, dtype, p["accumulate"], pad_value)
    got = run_instruction(HW, instr, [(A0, x_sram), (A1, wt), (A2, c0)], A2, acc, c * oh * ow).reshape(c, oh, ow)
    if dtype.is_float:
        ref = dw_ref(x.astype(np.float64), wt.astype(np.float64), (sh, sw), (dh, dw), (pt, pl), (oh, ow), 0)
        ref = ref.astype(np.float32)  # rounded once into the fp32 accumulator
        if p["accumulate"]:
            ref = ref + c0
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    else:
        ref = dw_ref(x.astype(object), wt.astype(object), (sh, sw), (dh, dw), (pt, pl), (oh, ow), pad_value)
        np.testing.assert_array_equal(got, wrap32(ref + (c0.astype(object) if p["accumulate"] else 0)))


@pytest.mark.parametrize("dtype", TYPES)
def test_dwconv_equals_the_tensor_engines_depthwise_conv(dtype: DType) -> None:
    """Same operands, same bits: VDWCONV is Conv with groups = channels on the other engine."""
    rng = np.random.default_rng(7)
    c, h, w, k = 5, 7, 6, 3
    x, wt = _rand(rng, (c, h, w), dtype), _rand(rng, (c, k, k), dtype.weight)
    pad_value = 3 if dtype.is_quantized else 0
    geom = dict(in_h=h, in_w=w, out_h=4, out_w=6, kernel_h=k, kernel_w=k, stride_h=2, stride_w=1, dilation_h=1,
                dilation_w=1, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1, in_dtype=dtype, accumulate=False,
                pad_value=pad_value)
    n = c * 4 * 6
    dw = isa.DwConv(in_addr=A0, in_strides=(h * w, w, 1), w_addr=A1, w_strides=(k * k, k, 1), out_addr=A2,
                    out_strides=(24, 6, 1), channels=c, **geom)
    conv = isa.Conv(in_addr=A0, in_strides=(h * w, w, 1), in_c=c, w_addr=A1, w_strides=(k * k, k * k, k, 1),
                    out_addr=A2, out_strides=(24, 6, 1), out_c=c, groups=c, **geom)
    acc = ACCUMULATOR[dtype]
    a = run_instruction(HW, dw, [(A0, x), (A1, wt)], A2, acc, n)
    b = run_instruction(HW, conv, [(A0, x), (A1, wt)], A2, acc, n)
    np.testing.assert_array_equal(a, b)
    assert dw.macs == conv.macs == n * k * k


def _timed(hw: HardwareConfig, instr: isa.DwConv) -> tuple[int, dict]:
    b = ProgramBuilder(hw)
    b.emit(instr)
    stats = Simulator(hw).run(b.build(), timing_only=True).stats
    return stats.total_cycles, stats.macs


@pytest.mark.parametrize(("c", "oh", "ow", "k"), [(1, 1, 1, 1), (32, 1, 1, 3), (33, 1, 1, 3), (16, 8, 7, 5)])
def test_dwconv_cycles(hw: HardwareConfig, c: int, oh: int, ow: int, k: int) -> None:
    """issue + ceil(outputs / lanes) * taps, the same for every dtype (one tap per lane per cycle)."""
    for dtype in TYPES:
        ih, iw = oh + k - 1, ow + k - 1
        instr = isa.DwConv(0, (ih * iw, iw, 1), ih, iw, 0x10000, (k * k, k, 1), 0x20000,
                           (oh * ow, ow, 1), c, oh, ow, k, k, 1, 1, 1, 1, 0, 0, 0, 0, dtype, False)
        cycles, macs = _timed(hw, instr)
        assert cycles == hw.vector_issue_cycles + -(-c * oh * ow // hw.vector_lanes) * k * k
        assert macs == {dtype.name: c * oh * ow * k * k}  # the bound counts these MACs like a Conv's


def test_dwconv_runs_on_the_vector_engine_concurrently_with_the_tensor_engine() -> None:
    dw = isa.DwConv(0, (64, 8, 1), 8, 8, 0x1000, (9, 3, 1), 0x2000, (64, 8, 1), 4, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1,
                    1, DType.FP32, False)
    mm = isa.MatMul(0x8000, (16, 1), 0x9000, (16, 1), 0xA000, (16, 1), 16, 16, 16, DType.FP32, False)
    b = ProgramBuilder(HW)
    b.emit(dw)
    b.emit(mm)
    cycles, _ = _timed(HW, dw)
    both = Simulator(HW).run(b.build(), timing_only=True).stats.total_cycles
    assert dw.engine == Engine.VECTOR
    assert both == max(cycles, HW.tensor_issue_cycles + 16 * HW.mac_pass_cycles(DType.FP32))


GOLDEN = isa.DwConv(0x40, (64, 8, 1), 8, 8, 0x1000, (9, 3, 1), 0x2000, (16, 4, 1), 3, 4, 4, 3, 3, 2, 2, 1, 1, 1, 1, 0,
                    0, DType.UINT8, True, 128)


def test_dwconv_encoding_golden_and_round_trip() -> None:
    fields = (0x40, 64, 8, 1, 8, 8, 0x1000, 9, 3, 1, 0x2000, 16, 4, 1, 3, 4, 4, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0,
              int(DType.UINT8), 1, 128)
    expected = bytes([0x42]) + struct.pack("<" + "i" * 27 + "BBi", *fields)
    assert encode_instruction(GOLDEN) == expected
    program = isa.Program(HW.config_hash, (), (GOLDEN, isa.End()))
    assert decode_program(encode_program(program)).instructions == program.instructions


def _load(instr: isa.Instruction) -> None:
    Simulator(HW).load(isa.Program(HW.config_hash, (), (instr, isa.End())))


def _dw(**kw: object) -> isa.DwConv:
    args = dict(in_addr=0, in_strides=(64, 8, 1), in_h=8, in_w=8, w_addr=1024, w_strides=(9, 3, 1), out_addr=2048,
                out_strides=(64, 8, 1), channels=2, out_h=8, out_w=8, kernel_h=3, kernel_w=3, stride_h=1, stride_w=1,
                dilation_h=1, dilation_w=1, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1, in_dtype=DType.INT8,
                accumulate=False)
    return isa.DwConv(**{**args, **kw})


ERRORS = {
    "int32_input": (dict(in_dtype=DType.INT32), "in_dtype", "tensor-engine type"),
    "zero_channels": (dict(channels=0), "channels", "positive"),
    "zero_dilation": (dict(dilation_w=0), "dilation_w", "positive"),
    "pad_beyond_window": (dict(pad_top=3), "pad_top", "dilated kernel"),
    "window_past_input": (dict(out_w=9), "out_w", "window"),
    "float_pad_value": (dict(in_dtype=DType.FP32, pad_value=2), "pad_value", "must be 0"),
    "pad_value_range": (dict(in_dtype=DType.UINT8, pad_value=300), "pad_value", "UINT8"),
    "weights_out_of_bounds": (dict(w_addr=HW.max_sram_bytes - 8), "w_addr", "out of bounds"),
    "output_overlap": (dict(out_strides=(0, 8, 1)), "out_strides", "distinct"),
    "output_misaligned": (dict(out_addr=2050), "out_addr", "misaligned"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_dwconv_validation(case: str) -> None:
    kw, field, words = ERRORS[case]
    _load(_dw())  # the base instruction is valid
    with pytest.raises(InstructionError) as err:
        _load(_dw(**kw))
    assert err.value.field == field and words in err.value.rule, str(err.value)


def test_dwconv_output_written_in_place_with_accumulate_reads_it() -> None:
    """An accumulating VDWCONV reads its output: the hazard referee must see that read."""
    acc = _dw(accumulate=True).accesses()[2]
    assert acc.read and acc.write and acc.dtype == DType.INT32
    assert _dw().accesses()[2].read is False
