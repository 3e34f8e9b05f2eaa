"""Row programs whose result is one value per row (plain reductions, ``rowwise_algebra.program`` and the
row-wise template's ``rows x 1`` output): their steps, the template on the simulator against numpy, the
planner's footprint and cost model against the codegen and simulator, and the spec's shape check; and the
8-bit sum's exactness bound (``relay_patterns/qreduce.py``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from tvm_npu.codegen.operator import standalone_program
from tvm_npu.relay_patterns import qreduce
from tvm_npu.relay_patterns import rowwise_algebra as A
from tvm_npu.simulator import Simulator, isa
from tvm_npu.tir_schedules import kind_of, tile_search

from tvm_npu.config import DType, HardwareConfig
from tvm_npu.core.ops import RowKind, RowwiseSpec, TensorRef
from tvm_npu.core.tiles import RowTile

HW = HardwareConfig()
OP = isa.Opcode


def _spec(expr: A.Node, shape: tuple[int, ...], row_length: int, out: tuple[int, ...]) -> RowwiseSpec:
    return RowwiseSpec("red", TensorRef("y", out, DType.FP32), data=TensorRef("x", shape, DType.FP32),
                       kind=RowKind.PROGRAM, row_length=0 if row_length == shape[-1] else row_length,
                       program=A.program(expr, {}))


def test_reductions_are_programs_ending_in_a_per_row_step() -> None:
    """mean: a sum and a per-row scale; min: the max of the negation, negated; ``mean(x * x)``: the prologue
    first. Every last step is per row, so the spec is a per-row result."""
    assert [(s.op, s.row) for s in A.program(A.mean(A.X, 24), {})] == [(OP.VRSUM, True), (OP.VSCALE, True)]
    assert [s.op for s in A.program(A.rmin(A.X), {})] == [OP.VSCALE, OP.VRMAX, OP.VSCALE]
    assert [s.op for s in A.program(A.mean(A.mul(A.X, A.X), 24), {})] == [OP.VMUL, OP.VRSUM, OP.VSCALE]
    assert _spec(A.rmax(A.X), (4, 24), 24, (4,)).per_row
    with pytest.raises(A.NotRowwise):
        A.program(A.const(2.0), {})


def test_a_per_row_output_must_have_one_value_per_row() -> None:
    with pytest.raises(ValueError, match="one value per row"):
        _spec(A.rsum(A.X), (4, 24), 24, (4, 24))


@pytest.mark.parametrize(("expr", "reference", "shape", "row_length", "tile"), [
    (A.mean(A.X, 40), lambda v: v.mean(axis=1), (6, 40), 40, RowTile(4, 2)),
    (A.rmin(A.X), lambda v: v.min(axis=1), (2, 3, 4, 5), 20, RowTile(5, 3)),
    (A.sqrt(A.rsum(A.mul(A.X, A.X))), lambda v: np.sqrt((v * v).sum(axis=1)), (2, 8, 16), 16, RowTile(16, 1)),
])
def test_per_row_program_on_the_simulator(expr: A.Node, reference: Callable[[np.ndarray], np.ndarray],
                                          shape: tuple[int, ...], row_length: int, tile: RowTile) -> None:
    """The template's ``rows x 1`` result, row tiles that do not divide the rows, against float64 numpy."""
    rows = int(np.prod(shape)) // row_length
    spec = _spec(expr, shape, row_length, (rows, 1))
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    program, peak = standalone_program(spec, tile, HW)
    got = Simulator(HW).run(program, {"x": x}).outputs["y"]
    expected = reference(x.reshape(rows, row_length).astype(np.float64))
    np.testing.assert_allclose(got.reshape(rows), expected, rtol=1e-5, atol=1e-6)
    assert peak == kind_of(spec).footprint(spec, tile, HW)  # the planner's footprint is what the codegen allocates


def test_per_row_cost_model_tracks_the_simulator() -> None:
    """The flow model's cycles within 10% of the simulated ones for a ``rows x 1`` result."""
    spec = _spec(A.mean(A.X, 96), (256, 96), 96, (256,))
    tile = RowTile(32, 2)
    program, _ = standalone_program(spec, tile, HW)
    x = np.random.default_rng(1).standard_normal((256, 96)).astype(np.float32)
    cycles = Simulator(HW).run(program, {"x": x}).stats.total_cycles
    predicted = tile_search.estimate(spec, tile, HW).cycles
    assert abs(predicted - cycles) <= 0.10 * cycles, (predicted, cycles)


def test_an_integer_sum_is_exact_in_float32_only_up_to_its_bound() -> None:
    """``n`` 8-bit (16-bit) terms of up to 255 (65535) in magnitude sum exactly in float32 while
    ``n * span <= 2^24``."""
    for bits in (8, 16):
        n, span = qreduce.exact_terms(bits), (1 << bits) - 1
        assert n * span <= 1 << 24 < (n + 1) * span
        worst = np.full(n, span, np.float32)
        assert float(np.cumsum(worst, dtype=np.float32)[-1]) == float(span) * n
