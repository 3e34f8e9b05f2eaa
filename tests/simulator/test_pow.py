"""``VPOW`` (0x66), the power step of local response normalisation, against numpy: numerics over
hypothesis-drawn shapes, strides and exponents, IEEE edge cases, encoding round trip,
validation and timing from the datasheet's lane count."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import program, run_instruction, strided
from tvm_npu.simulator import Simulator, isa
from tvm_npu.simulator.encoding import decode_program, encode_program
from tvm_npu.simulator.errors import InstructionError
from tvm_npu.simulator.timing import compute_cycles

from tvm_npu.config import DType, HardwareConfig

HW = HardwareConfig()
A0, A1 = 0x00000, 0x20000
FLOATS = [DType.FP16, DType.FP32]

shapes3 = st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 70))
exponents = st.sampled_from([-0.75, -0.5, 0.75, 2.0, -1.0, 1.0 / 3.0]) | st.floats(-3.0, 3.0, width=32)


@settings(max_examples=30, deadline=None)
@given(shape=shapes3, exponent=exponents, dtype=st.sampled_from(FLOATS), transpose=st.booleans(),
       seed=st.integers(0, 2**16))
def test_pow_matches_numpy(shape, exponent, dtype, transpose, seed) -> None:
    n = math.prod(shape)
    x = np.random.default_rng(seed).uniform(0.05, 20.0, n).astype(dtype.np)
    _, b, c = shape
    src_strides = (b * c, 1, b) if transpose else (b * c, c, 1)
    ins = isa.VecPow(shape, A1, (b * c, c, 1), A0, src_strides, dtype, exponent)
    got = run_instruction(HW, ins, [(A0, x)], A1, dtype, n).reshape(shape)
    want = np.power(strided(x, shape, src_strides).astype(np.float64), exponent).astype(dtype.np)  # rounded once
    np.testing.assert_array_equal(got, want)


def test_pow_ieee_edges_and_in_place() -> None:
    """0 ** -p = inf, a negative base to a fractional power is nan, in place (dst = src) allowed."""
    x = np.array([0.0, -2.0, 4.0, 1.0], np.float32)
    ins = isa.VecPow((1, 1, 4), A0, (4, 4, 1), A0, (4, 4, 1), DType.FP32, -0.5)
    got = run_instruction(HW, ins, [(A0, x)], A0, DType.FP32, 4)
    assert math.isinf(got[0]) and math.isnan(got[1])
    assert got[2] == np.float32(0.5) and got[3] == np.float32(1.0)


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 4, 32), (2, 3, 33)])
def test_timing_two_transcendental_evaluations_per_lane_group(shape) -> None:
    a, b, c = shape
    ins = isa.VecPow(shape, A1, (b * c, c, 1), A0, (b * c, c, 1), DType.FP32, -0.75)
    groups = -(-(a * b * c) // HW.vector_lanes)
    assert compute_cycles(HW, ins) == HW.vector_issue_cycles + groups * 2 * HW.transcendental_cycles
    wide = HardwareConfig(vector_lanes=64, transcendental_cycles=3)
    assert compute_cycles(wide, ins) == wide.vector_issue_cycles + -(-(a * b * c) // 64) * 6


def test_encoding_round_trip_and_disassembly() -> None:
    from tvm_npu.simulator.disasm import disassemble

    prog = program(HW, isa.VecPow((1, 2, 3), A1, (6, 3, 1), A0, (6, 3, 1), DType.FP32, -0.75),
                    isa.VecPow((2, 1, 5), A1, (5, 5, 1), A0, (0, 0, 1), DType.FP16, 1.0 / 3.0))
    back = decode_program(encode_program(prog))
    assert back.instructions == prog.instructions
    assert "VPOW" in disassemble(back)


@pytest.mark.parametrize("ins, field", [
    (isa.VecPow((1, 2, 4), A1, (8, 4, 1), A0, (8, 4, 1), DType.INT8, 2.0), "dtype"),
    (isa.VecPow((1, 2, 4), A1, (8, 4, 1), A0, (8, 4, 1), DType.FP32, math.inf), "exponent"),
    (isa.VecPow((1, 2, 4), A1, (8, 4, 1), A0, (8, 4, 1), DType.FP32, math.nan), "exponent"),
    (isa.VecPow((1, 2, 4), HW.max_sram_bytes - 4, (8, 4, 1), A0, (8, 4, 1), DType.FP32, 0.5), "dst_addr"),
])
def test_validation_names_the_field(ins, field) -> None:
    with pytest.raises(InstructionError) as err:
        Simulator(HW).run(program(HW, ins), {"x": np.zeros(4, np.float32)})
    assert err.value.field == field
