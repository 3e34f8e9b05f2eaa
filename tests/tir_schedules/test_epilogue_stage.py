"""The epilogue off the array's critical path (issue 27 item 1).

A tensor-engine conv's or matmul's epilogue (bias, activation, residual, requantisation) and the store of
its result run in pipeline stages of their own (``tir_schedules.common.pipeline``, or around a streamed
reduction ``common.pipeline_outputs``), so the accumulator and the result have two SRAM versions and the
vector engine finishes output tile i while the array computes tile i+1: per tile
``max(MAC, epilogue, store)`` instead of ``MAC + epilogue``. Checked here: the buffers really have two
versions, results stay right under the simulator's hazard referee, the array does not wait for the vector
engine, and the cost model and footprint follow the simulator.
"""

from __future__ import annotations

import pytest
from helpers import assert_matches, conv, matmul, run_op
from tvm_npu.codegen import sync
from tvm_npu.codegen.lower import lower
from tvm_npu.codegen.tir_walk import compile_walk
from tvm_npu.tir_schedules import kind_of, schedule, tile_search

from tvm_npu.config import HardwareConfig
from tvm_npu.core.ops import OpSpec
from tvm_npu.core.tiles import ConvEngine, ConvTile, MatmulTile, Order, TileParams

HW = HardwareConfig()
BAR = ("bias", "add", "relu")

CASES: dict[str, tuple[OpSpec, TileParams]] = {
    # weights stationary, four row tiles; a residual operand loaded per tile
    "conv1x1_rows": (conv(64, 64, 16, k=1, pad=0, epi=BAR),
                     ConvTile(toc=64, toh=4, tow=16, tic=64, order=Order.B_STATIONARY, stages=2)),
    # input stationary: the output-channel tiles are the pipelined loop; one epilogue step only (the
    # result could have shared the accumulator's storage, but not its versions)
    "conv3x3_channels": (conv(32, 64, 8, epi=("bias",)),
                         ConvTile(toc=16, toh=8, tow=8, tic=32, order=Order.A_STATIONARY, stages=2)),
    # streamed reduction: the output-tile loop is pipelined around the input-channel loop's pipeline
    "conv3x3_streamed": (conv(48, 32, 8, epi=("bias", "relu")),
                         ConvTile(toc=16, toh=4, tow=8, tic=16, order=Order.B_STATIONARY, stages=2)),
    "conv1x1_streamed_no_epilogue": (conv(48, 32, 8, k=1, pad=0),
                                     ConvTile(toc=32, toh=2, tow=8, tic=16, order=Order.B_STATIONARY, stages=3)),
    "matmul_tiles": (matmul(64, 48, 32, epi=("bias", "gelu")), MatmulTile(tm=16, tn=16, tk=32, stages=2)),
    "matmul_streamed": (matmul(40, 48, 64, epi=("bias", "relu")), MatmulTile(tm=16, tn=16, tk=16, stages=3)),
}


def _sram_shapes(spec: OpSpec, tile: TileParams) -> dict[str, tuple[int, ...]]:
    walk = compile_walk(lower(schedule(spec, tile).sch.mod)["main"])
    return {name: buf.shape for name, buf in walk.sram_buffers.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_accumulator_and_result_have_two_versions(name: str) -> None:
    spec, tile = CASES[name]
    assert kind_of(spec).pipelining(spec, tile).epilogue_stage
    shapes = _sram_shapes(spec, tile)
    acc = "acc_global.npu_sram" if spec.epilogue else f"{spec.out.name}_global.npu_sram"
    result = f"{spec.out.name}_global.npu_sram"
    assert shapes[acc][0] == 2, shapes
    assert shapes[result][0] == 2, shapes


@pytest.mark.parametrize("name", list(CASES))
def test_results_right_and_model_follows_the_simulator(name: str) -> None:
    """Numerics under the hazard referee (on by default), cycles as predicted, SRAM within the footprint."""
    spec, tile = CASES[name]
    r = run_op(spec, tile, HW)
    assert_matches(r.out, r.ref, name)
    est = tile_search.estimate(spec, tile, HW)
    assert abs(est.cycles - r.stats.total_cycles) <= 0.10 * r.stats.total_cycles, (est.cycles, r.stats.total_cycles)
    assert r.sram_peak <= tile_search.footprint(spec, tile, HW)


def test_array_does_not_wait_for_the_epilogue() -> None:
    """A compute-bound 1x1 conv whose epilogue (two transcendental steps) is over a quarter of its MAC time,
    in eight row tiles: with one accumulator the array idles while the vector engine works on every tile
    (idle >= the whole epilogue's work); with two it idles only for the first load and the last tile."""
    spec = conv(64, 64, 16, k=1, pad=0, epi=("bias", "sigmoid", "tanh"))
    tile = ConvTile(toc=64, toh=2, tow=16, tic=64, order=Order.B_STATIONARY, stages=2)
    stats = run_op(spec, tile, HW, timing_only=True).stats
    tensor, vector = stats.busy_cycles["TENSOR"], stats.busy_cycles["VECTOR"]
    assert vector > 0.25 * tensor  # the case means something
    assert stats.total_cycles - tensor < 0.75 * vector, stats


def test_vector_engine_depthwise_keeps_one_accumulator() -> None:
    """On the vector engine the windows and the epilogue share one engine: nothing to overlap, no SRAM spent."""
    spec = conv(64, 64, 16, groups=64, epi=("bias", "relu"))
    tile = ConvTile(toc=1, toh=4, tow=16, tic=1, order=Order.B_STATIONARY, stages=2, tg=64, engine=ConvEngine.VECTOR)
    assert not kind_of(spec).pipelining(spec, tile).epilogue_stage
    r = run_op(spec, tile, HW)
    assert_matches(r.out, r.ref, "depthwise on the vector engine")


def test_versions_sharing_an_allocation_granule_do_not_serialise(monkeypatch: pytest.MonkeyPatch) -> None:
    """A result tile of 24 x 3 x 9 float32 values (2592 bytes) ends mid 64-byte granule, so its two versions
    share one: tracked in 64-byte granules, the store of tile i waited for the epilogue of tile i+1 writing
    the other version. The semaphore pass tracks the largest granule dividing every range's ends instead."""
    spec = conv(48, 24, 9, k=1, pad=0, epi=("bias", "relu"))
    tile = ConvTile(toc=24, toh=3, tow=9, tic=16, order=Order.B_STATIONARY, stages=2)
    r = run_op(spec, tile, HW)
    assert_matches(r.out, r.ref, "unaligned versions")
    program = r.program
    assert sync.granule(HW, [ins.accesses() if ins.engine is not None else () for ins in program.instructions]) < 64
    fine = r.stats.total_cycles
    assert abs(tile_search.estimate(spec, tile, HW).cycles - fine) <= 0.10 * fine
    monkeypatch.setattr(sync, "granule", lambda hw, accesses: hw.sram_align_bytes)
    coarse = run_op(spec, tile, HW, timing_only=True).stats.total_cycles
    assert fine < coarse, (fine, coarse)
