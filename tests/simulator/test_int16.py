"""16-bit activations on the simulator (issue 28): int16 / uint16 x int8 on the tensor engine with an int64
accumulator at ``int16_mac_slowdown`` slots per MAC, requantised by ``VREQUANT64``; 8-bit programs encode as
before (the new opcode carries the accumulator type, not a new field)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sim_helpers import run_instruction
from tvm_npu.simulator import encoding, isa, quant, timing
from tvm_npu.simulator.errors import InstructionError
from tvm_npu.simulator.validate import validate

from tvm_npu.config import DType, HardwareConfig, parse_target

HW = HardwareConfig()


def _matmul(m: int, n: int, k: int, dtype: DType) -> isa.MatMul:
    return isa.MatMul(0, (k, 1), 4096, (n, 1), 8192, (n, 1), m, n, k, dtype, accumulate=False)


@pytest.mark.parametrize("dtype", [DType.INT16, DType.UINT16])
def test_16x8_matmul_accumulates_exactly_in_int64(dtype: DType) -> None:
    """Worst-case operands: K products of 2**15 * 128 overflow int32 (2**31 at 512 terms), not int64."""
    m, n, k = 2, 16, 640
    info = np.iinfo(dtype.np)
    a = np.full((m, k), info.min if dtype == DType.INT16 else info.max, dtype.np)
    a[1] = np.random.default_rng(0).integers(info.min, info.max + 1, k)
    b = np.full((k, n), -128, np.int8)
    got = run_instruction(HW, _matmul(m, n, k, dtype), [(0, a), (4096, b)], 8192, DType.INT64, m * n)
    want = a.astype(np.int64) @ b.astype(np.int64)
    assert np.abs(want).max() > 2**31
    np.testing.assert_array_equal(got.reshape(m, n), want)


def test_vrequant64_requantises_an_int64_accumulator_to_16_bits() -> None:
    acc = np.array([-(2**40), -5_000_000, -1, 0, 3, 77_777_777, 2**40, 123], np.int64)
    scale = np.float32(1.5e-3)
    ins = isa.VecRequant((1, 1, 8), 4096, (0, 0, 1), 0, (0, 0, 1), 8192, (0, 0, 0), 7, -32768, 32767,
                         DType.INT16, isa.Opcode.VREQUANT64)
    got = run_instruction(HW, ins, [(0, acc), (8192, np.array([scale]))], 4096, DType.INT16, 8)
    want = quant.requantize(acc, scale, 7, -32768, 32767, DType.INT16, quant.NUMPY)
    np.testing.assert_array_equal(got, want)
    assert got[0] == -32768 and got[6] == 32767  # saturates


def test_16x8_runs_at_half_the_int8_rate_in_timing_bound_and_cost() -> None:
    """One number (``-int16-mac-slowdown``, default 2) behind the simulator's cycles and the bound."""
    m, n, k = 64, 64, 64
    int8, int16 = (timing.matmul_cycles(HW, m, n, k, dt) - HW.tensor_issue_cycles for dt in (DType.INT8, DType.INT16))
    assert int16 == 2 * int8
    assert HW.peak_macs_per_cycle(DType.UINT16) == HW.peak_macs_per_cycle(DType.INT8) / 2
    hw4 = parse_target("npu -int16-mac-slowdown=4").hw
    assert timing.matmul_cycles(hw4, m, n, k, DType.INT16) - hw4.tensor_issue_cycles == 4 * int8
    assert hw4.config_hash != HW.config_hash  # a changed rate is another machine


def test_8bit_programs_encode_as_before() -> None:
    """VREQUANT keeps its bytes (the accumulator type rides on the opcode); VREQUANT64 round-trips."""
    old = isa.VecRequant((1, 2, 3), 64, (0, 3, 1), 128, (0, 3, 1), 256, (0, 1, 0), -3, -128, 127, DType.INT8)
    assert encoding.encode_instruction(old).hex() == (
        "3b0100000002000000030000004000000000000000030000000100000080000000000000000300000001000000000100000000"
        "00000100000000000000fdffffff80ffffff7f00000000")
    wide = dataclasses.replace(old, op=isa.Opcode.VREQUANT64)
    blob = encoding.encode_instruction(wide)
    assert blob[0] == isa.Opcode.VREQUANT64 and blob[1:] == encoding.encode_instruction(old)[1:]
    assert wide.types() == (DType.INT64, DType.INT8) and old.types() == (DType.INT32, DType.INT8)


def test_a_table_lookup_stays_8_bit() -> None:
    """VLUT has 256 entries: a 16-bit operand is refused with the reason."""
    b_prog = isa.Program(HW.config_hash, (), (isa.VecLut((1, 1, 32), 0, (0, 0, 1), 64, (0, 0, 1), 128, DType.INT16,
                                                          DType.INT16), isa.End()))
    with pytest.raises(InstructionError, match="INT8 or UINT8"):
        validate(HW, b_prog)
