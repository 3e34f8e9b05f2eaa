"""The exporters' activations as vector instructions (swish VSILU, hard sigmoid VHSIGMOID, hard swish
VHSWISH) against numpy: numerics over hypothesis-drawn shapes, strides and parameters, encoding round
trip and disassembly, validation and timing from the datasheet's lane count."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import expit
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
shapes3 = st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 70))


def _src_strides(shape: tuple[int, int, int], transpose: bool) -> tuple[int, int, int]:
    _, b, c = shape
    return (b * c, 1, b) if transpose else (b * c, c, 1)


@settings(max_examples=25, deadline=None)
@given(shape=shapes3, dtype=st.sampled_from(FLOATS), transpose=st.booleans(), seed=st.integers(0, 2**16))
def test_swish_matches_numpy(shape, dtype, transpose, seed) -> None:
    n = math.prod(shape)
    x = np.random.default_rng(seed).uniform(-10.0, 10.0, n).astype(dtype.np)
    _, b, c = shape
    strides = _src_strides(shape, transpose)
    ins = isa.VecUnary(shape, A1, (b * c, c, 1), A0, strides, dtype, Op.VSILU)
    got = run_instruction(HW, ins, [(A0, x)], A1, dtype, n).reshape(shape)
    src = strided(x, shape, strides).astype(np.float64)
    np.testing.assert_array_equal(got, (src * expit(src)).astype(dtype.np))  # float64, rounded once


@settings(max_examples=25, deadline=None)
@given(shape=shapes3, dtype=st.sampled_from(FLOATS), op=st.sampled_from([Op.VHSIGMOID, Op.VHSWISH]),
       alpha=st.floats(0.05, 1.0), beta=st.floats(-1.0, 1.0), transpose=st.booleans(),
       seed=st.integers(0, 2**16))
def test_hard_sigmoid_and_swish_match_numpy(shape, dtype, op, alpha, beta, transpose, seed) -> None:
    n = math.prod(shape)
    x = np.random.default_rng(seed).uniform(-8.0, 8.0, n).astype(dtype.np)
    _, b, c = shape
    strides = _src_strides(shape, transpose)
    ins = isa.VecHardSigmoid(shape, A1, (b * c, c, 1), A0, strides, dtype, alpha, beta, op)
    got = run_instruction(HW, ins, [(A0, x)], A1, dtype, n).reshape(shape)
    src = strided(x, shape, strides).astype(np.float64)
    h = np.clip(src * alpha + beta, 0.0, 1.0)
    want = (src * h if op == Op.VHSWISH else h).astype(dtype.np)
    np.testing.assert_array_equal(got, want)
    if op == Op.VHSIGMOID:
        assert got.min() >= 0 and got.max() <= 1


def test_hard_swish_is_exact_at_the_kinks() -> None:
    """ONNX HardSwish (alpha 1/6, beta 1/2): 0 at and below -3, the identity at and above 3."""
    x = np.array([-4.0, -3.0, 0.0, 1.5, 3.0, 5.0], np.float32)
    ins = isa.VecHardSigmoid((1, 1, 6), A1, (6, 6, 1), A0, (6, 6, 1), DType.FP32, 1 / 6, 0.5, Op.VHSWISH)
    got = run_instruction(HW, ins, [(A0, x)], A1, DType.FP32, 6)
    np.testing.assert_array_equal(got, np.array([0.0, 0.0, 0.0, 1.5 * 0.75, 3.0, 5.0], np.float32))


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 4, 32), (2, 3, 33)])
def test_timing_from_lane_count(shape) -> None:
    n, lanes = math.prod(shape), HW.vector_lanes
    _, b, c = shape
    dense = (b * c, c, 1)
    silu = isa.VecUnary(shape, A1, dense, A0, dense, DType.FP32, Op.VSILU)
    assert compute_cycles(HW, silu) == HW.vector_issue_cycles + -(-n // lanes) * HW.transcendental_cycles
    for op in (Op.VHSIGMOID, Op.VHSWISH):  # piecewise linear: one cycle per lane group
        hard = isa.VecHardSigmoid(shape, A1, dense, A0, dense, DType.FP16, 0.2, 0.5, op)
        assert compute_cycles(HW, hard) == HW.vector_issue_cycles + -(-n // lanes)
        wide = HardwareConfig(vector_lanes=64)
        assert compute_cycles(wide, hard) == wide.vector_issue_cycles + -(-n // 64)


def test_encoding_round_trip_and_disassembly() -> None:
    from tvm_npu.simulator.disasm import disassemble

    instrs = [isa.VecUnary((1, 2, 3), A1, (6, 3, 1), A0, (6, 3, 1), DType.FP16, Op.VSILU),
              isa.VecHardSigmoid((1, 2, 3), A1, (6, 3, 1), A0, (6, 3, 1), DType.FP32, 0.2, 0.5, Op.VHSIGMOID),
              isa.VecHardSigmoid((2, 1, 3), A1, (3, 3, 1), A0, (0, 3, 1), DType.FP16, 1 / 6, 0.5, Op.VHSWISH)]
    prog = program(HW, *instrs)
    back = decode_program(encode_program(prog))
    assert back.instructions == prog.instructions
    text = disassemble(back)
    for name in ("VSILU", "VHSIGMOID", "VHSWISH", "alpha=0.2"):
        assert name in text


@pytest.mark.parametrize("ins, field", [
    (isa.VecUnary((1, 2, 4), A1, (8, 4, 1), A0, (8, 4, 1), DType.INT8, Op.VSILU), "dtype"),
    (isa.VecHardSigmoid((1, 2, 4), A1, (8, 4, 1), A0, (8, 4, 1), DType.INT32, 0.2, 0.5, Op.VHSIGMOID), "dtype"),
    (isa.VecHardSigmoid((1, 2, 4), A1, (8, 4, 1), A0, (8, 4, 1), DType.FP32, math.inf, 0.5, Op.VHSWISH), "alpha"),
    (isa.VecHardSigmoid((1, 2, 4), A1, (8, 4, 1), A0, (8, 4, 1), DType.FP32, 0.2, math.nan, Op.VHSWISH), "beta"),
    (isa.VecHardSigmoid((1, 2, 4), A1, (8, 4, 1), A0, (8, 4, 1), DType.FP32, 0.2, 0.5, Op.VRELU), "op"),
    (isa.VecHardSigmoid((2, 2, 4), A1, (0, 4, 1), A0, (8, 4, 1), DType.FP32, 0.2, 0.5, Op.VHSIGMOID), "dst_strides"),
])
def test_validation_names_the_field(ins, field) -> None:
    with pytest.raises(InstructionError) as err:
        Simulator(HW).run(program(HW, ins), {"x": np.zeros(4, np.float32)})
    assert err.value.field == field
