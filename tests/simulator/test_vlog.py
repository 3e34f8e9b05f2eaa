"""``VLOG`` (0x67), the vector engine's natural logarithm (log-softmax's ``log(sum(exp))``), against numpy:
numerics over hypothesis-drawn shapes, strides and float types (float64, rounded once), IEEE results at
the edges, timing (a transcendental per lane group, like ``VEXP``), a golden encoding and its disassembly,
and validation (float only)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import program, run_instruction, strided
from tvm_npu.simulator import Simulator, isa
from tvm_npu.simulator.disasm import format_instruction
from tvm_npu.simulator.encoding import decode_program, encode_instruction, encode_program
from tvm_npu.simulator.errors import InstructionError
from tvm_npu.simulator.timing import compute_cycles

from tvm_npu.config import DType, HardwareConfig

HW = HardwareConfig()
A0, A1 = 0x00000, 0x20000
shapes3 = st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 70))


@settings(max_examples=30, deadline=None)
@given(shape=shapes3, dtype=st.sampled_from([DType.FP16, DType.FP32]), transpose=st.booleans(),
       seed=st.integers(0, 2**16))
def test_log_matches_numpy(shape, dtype, transpose, seed) -> None:
    n = math.prod(shape)
    rng = np.random.default_rng(seed)
    x = np.exp(rng.uniform(-10.0, 10.0, n)).astype(dtype.np)  # magnitudes over many octaves
    _, b, c = shape
    src_strides = (b * c, 1, b) if transpose else (b * c, c, 1)
    ins = isa.VecUnary(shape, A1, (b * c, c, 1), A0, src_strides, dtype, isa.Opcode.VLOG)
    got = run_instruction(HW, ins, [(A0, x)], A1, dtype, n).reshape(shape)
    want = np.log(strided(x, shape, src_strides).astype(np.float64)).astype(dtype.np)  # float64, rounded once
    np.testing.assert_array_equal(got, want)


def test_ieee_edges() -> None:
    """ln(1) = 0 exactly, ln(0) = -inf, a negative input is nan, ln(inf) = inf."""
    x = np.array([1.0, 0.0, -2.0, np.inf, math.e, 1e-30], np.float32)
    ins = isa.VecUnary((1, 1, 6), A1, (6, 6, 1), A0, (6, 6, 1), DType.FP32, isa.Opcode.VLOG)
    got = run_instruction(HW, ins, [(A0, x)], A1, DType.FP32, 6)
    assert got[0] == 0.0 and got[1] == -np.inf and np.isnan(got[2]) and got[3] == np.inf
    np.testing.assert_array_equal(got[4:], np.log(x[4:].astype(np.float64)).astype(np.float32))


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 4, 32), (2, 3, 33)])
def test_timing_is_a_transcendental_per_lane_group(shape) -> None:
    a, b, c = shape
    ins = isa.VecUnary(shape, A1, (b * c, c, 1), A0, (b * c, c, 1), DType.FP32, isa.Opcode.VLOG)
    groups = -(-(a * b * c) // HW.vector_lanes)
    assert compute_cycles(HW, ins) == HW.vector_issue_cycles + groups * HW.transcendental_cycles
    exp = isa.VecUnary(shape, A1, (b * c, c, 1), A0, (b * c, c, 1), DType.FP32, isa.Opcode.VEXP)
    assert compute_cycles(HW, ins) == compute_cycles(HW, exp)
    slow = HardwareConfig(transcendental_cycles=9, vector_lanes=16)
    assert compute_cycles(slow, ins) == slow.vector_issue_cycles + -(-(a * b * c) // 16) * 9


def test_golden_encoding_and_disassembly() -> None:
    ins = isa.VecUnary((1, 2, 3), 0x40, (6, 3, 1), 0x80, (6, 1, 2), DType.FP32, isa.Opcode.VLOG)
    blob = encode_instruction(ins)  # (the opcode byte names the function: no field of its own)
    assert blob.hex() == ("67" + "010000000200000003000000" + "40000000" + "060000000300000001000000"
                          + "80000000" + "060000000100000002000000" + f"{int(DType.FP32):02x}")
    prog = program(HW, ins)
    assert decode_program(encode_program(prog)).instructions == (ins, isa.End())
    assert format_instruction(ins) == ("VLOG       shape=(1,2,3) dst_addr=0x000040 dst_strides=(6,3,1) "
                                       "src_addr=0x000080 src_strides=(6,1,2) dtype=FP32")


@pytest.mark.parametrize("dtype", [DType.INT8, DType.INT32, DType.UINT8])
def test_validation_rejects_integer_types(dtype: DType) -> None:
    ins = isa.VecUnary((1, 2, 4), A1, (8, 4, 1), A0, (8, 4, 1), dtype, isa.Opcode.VLOG)
    with pytest.raises(InstructionError) as err:
        Simulator(HW).run(program(HW, ins), {"x": np.zeros(4, np.float32)})
    assert err.value.field == "dtype"
