"""The row-wise vector instructions (exp, reciprocal, rsqrt, gelu-tanh, row max / row sum)
against numpy: numerics over hypothesis-drawn shapes and strides, encoding round trip,
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
Op = isa.Opcode
FLOATS = [DType.FP16, DType.FP32]


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))))


#: opcode -> (float64 reference, input range); reciprocal and rsqrt get positive inputs
UNARY = {
    Op.VEXP: (np.exp, (-8.0, 8.0)),
    Op.VRECIP: (lambda x: 1.0 / x, (0.05, 20.0)),
    Op.VRSQRT: (lambda x: 1.0 / np.sqrt(x), (1e-3, 50.0)),
    Op.VGELU_TANH: (_gelu_tanh, (-6.0, 6.0)),
}

shapes3 = st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 70))


@settings(max_examples=25, deadline=None)
@given(shape=shapes3, op=st.sampled_from(sorted(UNARY)), dtype=st.sampled_from(FLOATS),
       transpose=st.booleans(), seed=st.integers(0, 2**16))
def test_unary_matches_numpy(shape, op, dtype, transpose, seed) -> None:
    ref, (lo, hi) = UNARY[op]
    n = math.prod(shape)
    x = np.random.default_rng(seed).uniform(lo, hi, n).astype(dtype.np)
    _, b, c = shape
    # the source read transposed in its two inner dims (strides), the result row-major
    src_strides = (b * c, 1, b) if transpose else (b * c, c, 1)
    ins = isa.VecUnary(shape, A1, (b * c, c, 1), A0, src_strides, dtype, op)
    got = run_instruction(HW, ins, [(A0, x)], A1, dtype, n).reshape(shape)
    src = strided(x, shape, src_strides)
    want = ref(src.astype(np.float64)).astype(dtype.np)  # float64, rounded once
    np.testing.assert_array_equal(got, want)


@settings(max_examples=25, deadline=None)
@given(shape=shapes3, op=st.sampled_from([Op.VRMAX, Op.VRSUM]), dtype=st.sampled_from(FLOATS),
       broadcast=st.booleans(), seed=st.integers(0, 2**16))
def test_row_reduce_matches_numpy(shape, op, dtype, broadcast, seed) -> None:
    a, b, r = shape
    x = np.random.default_rng(seed).normal(0.0, 3.0, a * b * r).astype(dtype.np)
    # broadcast: every (a, b) reads the same row (stride 0), else row-major rows
    src_strides = (0, 0, 1) if broadcast else (b * r, r, 1)
    ins = isa.VecReduce(shape, A1, (b, 1), A0, src_strides, dtype, op)
    got = run_instruction(HW, ins, [(A0, x)], A1, dtype, a * b).reshape(a, b)
    src = strided(x, shape, src_strides).astype(np.float64)
    want = (src.max(axis=2) if op == Op.VRMAX else src.sum(axis=2)).astype(dtype.np)
    np.testing.assert_array_equal(got, want)


def test_row_sum_rounds_once() -> None:
    """1 + 2^-24 added 2^20 times: a float32 running sum would stay at 1."""
    r = 4096
    x = np.full(r, np.float32(2.0**-24))
    x[0] = 1.0
    ins = isa.VecReduce((1, 1, r), A1, (1, 1), A0, (r, r, 1), DType.FP32, Op.VRSUM)
    got = run_instruction(HW, ins, [(A0, x)], A1, DType.FP32, 1)
    assert got[0] == np.float32(1.0 + (r - 1) * 2.0**-24)


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 4, 32), (2, 3, 33), (1, 64, 64)])
def test_timing_from_lane_count(shape) -> None:
    a, b, r = shape
    lanes = HW.vector_lanes
    red = isa.VecReduce(shape, A1, (b, 1), A0, (b * r, r, 1), DType.FP32, Op.VRSUM)
    assert compute_cycles(HW, red) == HW.vector_issue_cycles + a * b * -(-r // lanes)
    for op in UNARY:
        ins = isa.VecUnary(shape, A1, (b * r, r, 1), A0, (b * r, r, 1), DType.FP32, op)
        n = a * b * r
        assert compute_cycles(HW, ins) == HW.vector_issue_cycles + -(-n // lanes) * HW.transcendental_cycles
    wide = HardwareConfig(vector_lanes=64)
    assert compute_cycles(wide, red) == wide.vector_issue_cycles + a * b * -(-r // 64)


def test_encoding_round_trip_and_disassembly() -> None:
    from tvm_npu.simulator.disasm import disassemble

    instrs = [isa.VecReduce((2, 3, 5), A1, (3, 1), A0, (15, 5, 1), DType.FP16, Op.VRMAX),
              isa.VecReduce((1, 4, 8), A1, (4, 1), A0, (0, 8, 1), DType.FP32, Op.VRSUM),
              *(isa.VecUnary((1, 2, 3), A1, (6, 3, 1), A0, (6, 3, 1), DType.FP32, op) for op in UNARY)]
    prog = program(HW, *instrs)
    back = decode_program(encode_program(prog))
    assert back.instructions == prog.instructions
    text = disassemble(back)
    for name in ("VRMAX", "VRSUM", "VEXP", "VRECIP", "VRSQRT", "VGELU_TANH"):
        assert name in text


@pytest.mark.parametrize("ins, field", [
    (isa.VecReduce((1, 2, 4), A1, (2, 0), A0, (8, 4, 1), DType.FP32, Op.VRSUM), "dst_strides"),  # zero dst stride
    (isa.VecReduce((1, 2, 4), A1, (2, 1), A0, (8, 4, 1), DType.INT32, Op.VRMAX), "dtype"),
    (isa.VecReduce((1, 2, 4), A1, (2, 1), A0, (8, 4, 1), DType.FP32, Op.VADD), "op"),
    (isa.VecReduce((1, 0, 4), A1, (2, 1), A0, (8, 4, 1), DType.FP32, Op.VRSUM), "shape"),
    (isa.VecUnary((1, 2, 4), A1, (8, 4, 1), A0, (8, 4, 1), DType.INT8, Op.VEXP), "dtype"),
    (isa.VecUnary((1, 2, 4), HW.max_sram_bytes - 4, (8, 4, 1), A0, (8, 4, 1), DType.FP32, Op.VRSQRT), "dst_addr"),
])
def test_validation_names_the_field(ins, field) -> None:
    with pytest.raises(InstructionError) as err:
        Simulator(HW).run(program(HW, ins), {"x": np.zeros(4, np.float32)})
    assert err.value.field == field
