"""``VQMUL`` (0x3F), the product of two 8-bit tensors requantised (onnxruntime's QLinearMul,
:func:`tvm_npu.simulator.quant.rescale_mul`): numerics over hypothesis-drawn shapes, types, zero points and
ratios, the second operand full or broadcast by zero strides (a squeeze-and-excitation gate), timing (one
lane group per cycle), encoding round trip and validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import program, run_instruction, strided
from tvm_npu.simulator import Simulator, isa, quant
from tvm_npu.simulator.encoding import encode_instruction
from tvm_npu.simulator.errors import InstructionError
from tvm_npu.simulator.timing import compute_cycles

from tvm_npu.config import DType, HardwareConfig

HW = HardwareConfig()
A0, A1, A2 = 0x00000, 0x10000, 0x20000
Q8 = [DType.INT8, DType.UINT8]
shapes3 = st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 70))


def _values(rng: np.random.Generator, dtype: DType, n: int) -> np.ndarray:
    info = np.iinfo(dtype.np)
    return rng.integers(info.min, info.max, n, endpoint=True).astype(dtype.np)


@settings(max_examples=40, deadline=None)
@given(shape=shapes3, src=st.sampled_from(Q8), dst=st.sampled_from(Q8), gate=st.booleans(),
       seed=st.integers(0, 2**16), ratio=st.floats(1e-5, 0.05).map(lambda r: float(np.float32(r))))
def test_product_matches_the_rule(shape, src, dst, gate, seed, ratio) -> None:
    """``dst = rescale_mul(src - z_a, other - z_b)``; ``other`` one value per middle index (stride 0 along the
    others) when ``gate``."""
    rng = np.random.default_rng(seed)
    n = math.prod(shape)
    _, b, c = shape
    x, y = _values(rng, src, n), _values(rng, src, n)
    other_strides = (0, 1, 0) if gate else (b * c, c, 1)
    (za, zb), (lo, zy, hi) = _values(rng, src, 2).tolist(), sorted(_values(rng, dst, 3).tolist())
    ins = isa.VecQMul(shape, A2, (b * c, c, 1), A0, (b * c, c, 1), A1, other_strides, za, zb, ratio, zy, lo, hi,
                      src, dst)
    got = run_instruction(HW, ins, [(A0, x), (A1, y)], A2, dst, n).reshape(shape)
    a = x.reshape(shape).astype(np.int32) - za
    other = strided(y, shape, other_strides).astype(np.int32) - zb
    want = quant.rescale_mul(a, other, ratio, zy, lo, hi, dst, quant.NUMPY)
    np.testing.assert_array_equal(got, want)


def test_timing_one_lane_group_per_cycle_and_encoding_round_trip() -> None:
    ins = isa.VecQMul((2, 3, 33), A1, (99, 33, 1), A0, (99, 33, 1), A2, (0, 1, 0), 3, -5, 0.0123, 7, -100, 120,
                      DType.INT8, DType.INT8)
    assert compute_cycles(HW, ins) == HW.vector_issue_cycles + -(-(2 * 3 * 33) // HW.vector_lanes)
    blob = encode_instruction(ins)
    assert blob[0] == isa.Opcode.VQMUL == 0x3F


@pytest.mark.parametrize(("field", "value"), [("zero_a", 200), ("zero_y", -129), ("lo", 121), ("ratio", 0.1)])
def test_validation_names_the_bad_field(field: str, value: float) -> None:
    """Zero points and clamps must lie in their types' ranges, ``lo <= hi``, the ratio a float32 value."""
    fields = dict(zero_a=3, zero_b=-5, ratio=float(np.float32(0.0123)), zero_y=7, lo=-100, hi=120)
    fields[field] = value
    ins = isa.VecQMul((1, 1, 32), A1, (32, 32, 1), A0, (32, 32, 1), A2, (32, 32, 1), *fields.values(), DType.INT8,
                      DType.INT8)
    with pytest.raises(InstructionError) as err:
        Simulator(HW).run(program(HW, ins), {"x": np.zeros(4, np.float32)})
    assert err.value.field == field
