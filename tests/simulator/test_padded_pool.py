"""``VMAXPOOL_PAD`` (``isa.PaddedMaxPool``): a max pool whose padding reads a value, against numpy; its
validation; its cost is the pool's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sim_helpers import run_instruction
from tvm_npu.simulator import InstructionError, ProgramBuilder, Simulator, isa

from tvm_npu.config import DType, HardwareConfig

HW = HardwareConfig()
A0, A1 = 0x00000, 0x10000


def _instr(dtype: DType, value: float, c: int = 3, h: int = 7, w: int = 6) -> tuple[isa.PaddedMaxPool, int, int]:
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = (3, 3), (2, 2), (1, 1, 1, 0)
    oh, ow = (pt + h + pb - kh) // sh + 1, (pl + w + pr - kw) // sw + 1
    return isa.PaddedMaxPool(A0, (h * w, w, 1), h, w, A1, (oh * ow, ow, 1), c, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr,
                             dtype, isa.Opcode.VMAXPOOL_PAD, False, value), oh, ow  # fmt: skip


@pytest.mark.parametrize(("dtype", "value"), [(DType.FP32, 0.0), (DType.FP16, -0.5), (DType.INT8, -3),
                                              (DType.UINT8, 7)])
def test_padding_reads_the_value(dtype: DType, value: float) -> None:
    """Against numpy's max over windows of the explicitly padded tile: padding wins where every value of a
    window is below it (all values negative here for the float types)."""
    instr, oh, ow = _instr(dtype, value)
    rng = np.random.default_rng(0)
    if dtype.is_float:
        x = -rng.uniform(0.1, 2.0, (3, 7, 6)).astype(dtype.np)
    else:
        info = np.iinfo(dtype.np)
        x = rng.integers(info.min, info.max + 1, (3, 7, 6)).astype(dtype.np)
    got = run_instruction(HW, instr, [(A0, x)], A1, dtype, 3 * oh * ow).reshape(3, oh, ow)
    padded = np.pad(x, ((0, 0), (1, 1), (1, 0)), constant_values=value)
    want = np.stack([[[padded[c, y * 2:y * 2 + 3, xx * 2:xx * 2 + 3].max() for xx in range(ow)] for y in range(oh)]
                     for c in range(3)])
    np.testing.assert_array_equal(got, want.astype(dtype.np))
    if dtype.is_float:  # the border windows take the pad value, the inner ones do not
        assert (got == np.asarray(value, dtype.np)).any() and (got != np.asarray(value, dtype.np)).any()


@pytest.mark.parametrize(("dtype", "value", "words"), [(DType.INT8, 200.0, "an integer in -128..127"),
                                                       (DType.INT8, 0.5, "an integer"),
                                                       (DType.FP32, float("inf"), "not finite"),
                                                       (DType.FP16, 0.1, "not exact in float16")])
def test_a_pad_value_the_dtype_cannot_hold_is_refused(dtype: DType, value: float, words: str) -> None:
    b = ProgramBuilder(HW)
    b.emit(_instr(dtype, value)[0])
    with pytest.raises(InstructionError, match=words) as err:
        Simulator(HW).load(b.build())
    assert err.value.field == "pad_value"


def test_costs_what_the_pool_costs() -> None:
    instr, _, _ = _instr(DType.FP32, 0.0)
    plain = isa.Pool(*[getattr(instr, f.name) for f in dataclasses.fields(isa.Pool)][:-2], isa.Opcode.VMAXPOOL,
                     False)
    cycles = []
    for ins in (instr, plain):
        b = ProgramBuilder(HW)
        b.emit(ins)
        cycles.append(Simulator(HW).run(b.build(), timing_only=True).stats.total_cycles)
    assert cycles[0] == cycles[1] > 0
