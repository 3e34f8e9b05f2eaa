"""Strided one-row windows read only what they use (``tir_schedules/strided.py``, issue 27 item 3): a 1x1 / 2
pool or convolution reads the input rows it uses through a row-skipping view (``skip_rows``), and a whole-row
pool tile of a window narrower than its stride reads whole input rows as one DMA run (``pool.read_width``).

The results equal the float64 / integer definitions, the emitter allocates no more than the footprint, the
tile search chooses the form with the fewest simulated cycles among those it compares, and the simulated
cycles of the ResNetV2 shortcut pool (fp32 and int8) and of a downsampling 1x1 convolution are pinned.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_matches, conv, pool, reference, run_op, simulate
from tvm_npu.tir_schedules import kind_of, tile_search
from tvm_npu.tir_schedules.pool import read_width
from tvm_npu.tir_schedules.strided import rows_view, skips_rows

from tvm_npu.config import CompilerOptions, DType, HardwareConfig
from tvm_npu.core.ops import OpSpec, TensorRef
from tvm_npu.core.tiles import ConvTile, PoolTile
from tvm_npu.core.views import indices, reshape

HW = HardwareConfig()
I8 = DType.from_str("int8")


def _choose(spec: OpSpec) -> PoolTile | ConvTile:
    return tile_search.choose(spec, HW, CompilerOptions())


def _int8(spec: OpSpec) -> OpSpec:
    return dataclasses.replace(spec, data=dataclasses.replace(spec.data, dtype=I8),
                               out=dataclasses.replace(spec.out, dtype=I8))


@pytest.mark.parametrize(("spec", "expected"), [
    (pool(64, 16, k=1, stride=2), True),
    (pool(64, 15, k=1, stride=2), True),  # rows 0, 2, ..., 14: all inside
    (pool(64, 16, k=1, stride=2, layout="NHWC"), True),
    (conv(64, 128, 28, k=1, stride=2, pad=0), True),
    (pool(64, 16, k=2, stride=2), False),  # a two-row window uses every row
    (pool(64, 16, k=1, stride=1), False),
    (conv(64, 64, 16, k=3, stride=2, pad=1), False),
    (conv(64, 64, 16, k=1, stride=2, pad=0, groups=4), False),
])
def test_which_operators_skip_rows(spec: OpSpec, expected: bool) -> None:
    assert skips_rows(spec) is expected
    if expected:
        assert any(t.skip_rows for t in tile_search.candidates(spec, HW, CompilerOptions()))
    else:
        assert not any(getattr(t, "skip_rows", False) for t in tile_search.candidates(spec, HW, CompilerOptions()))


def test_an_operand_that_is_also_the_input_or_a_view_keeps_every_row() -> None:
    spec = pool(8, 16, k=1, stride=2)
    viewed = dataclasses.replace(spec, data=dataclasses.replace(spec.data, view=reshape("z", spec.data.shape)))
    assert not skips_rows(viewed)
    on_chip = dataclasses.replace(spec, data=dataclasses.replace(spec.data, on_chip=True))
    assert not skips_rows(on_chip)


def test_rows_view_is_the_same_operator() -> None:
    """The view holds input rows 0, s, 2s, ... of the tensor itself, and the operator strides by 1 over them."""
    spec = conv(16, 32, 15, 13, k=1, stride=2, pad=0)
    view = rows_view(spec)
    assert view.strides == (1, 2) and view.padding == (0, 0, 0, 0)
    assert view.data.shape == (1, 16, 8, 13) and view.data.view is not None and view.data.view.base == "x"
    whole = np.arange(spec.data.size).reshape(spec.data.shape)
    np.testing.assert_array_equal(indices(view.data.view), whole[:, :, ::2, :])


CASES = {
    "pool_nchw": pool(64, 16, k=1, stride=2),
    "pool_odd": pool(32, 15, 13, k=1, stride=2),
    "pool_nhwc": pool(32, 16, k=1, stride=2, layout="NHWC"),
    "avgpool_epilogue": pool(32, 16, kind="avg", k=1, stride=2, epi=("relu",)),
    "conv_nchw": conv(32, 48, 16, k=1, stride=2, pad=0, epi=("bias", "relu")),
    "conv_nhwc": conv(32, 48, 15, k=1, stride=2, pad=0, layout="NHWC"),
    "conv_stride3": conv(16, 16, 17, k=1, stride=3, pad=0),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("skip", [False, True])
def test_both_forms_match_numpy(case: str, skip: bool) -> None:
    """Whole maps and row-tiled ones, both forms: the float64 definition, within the footprint."""
    spec = CASES[case]
    tile = dataclasses.replace(_choose(spec), skip_rows=skip, toh=2)
    run = run_op(spec, tile, HW)
    assert_matches(run.out, run.ref, (case, tile))
    assert run.sram_peak <= tile_search.footprint(spec, tile, HW)


@pytest.mark.parametrize("skip", [False, True])
def test_int8_pool_is_exact(skip: bool) -> None:
    spec = _int8(pool(64, 16, k=1, stride=2))
    x = np.random.default_rng(0).integers(-128, 128, spec.data.shape).astype(np.int8)
    for toh in (2, 8):
        tile = PoolTile(tc=32, toh=toh, tow=8, skip_rows=skip)
        got = simulate(spec, tile, HW, {spec.data.name: x})
        np.testing.assert_array_equal(got, reference(spec, {spec.data.name: x}).astype(np.int8))


def test_whole_row_pool_tiles_read_whole_rows() -> None:
    """A 1x1 / 2 pool's whole-row tile reads columns ``0 .. 2 * ow - 1``: with rows as long as the tensor's,
    the rows of a channel are one run, a tile one descriptor (the 8-bit shortcut pool's 16-byte rows: four
    bursts per channel instead of a partial burst per row)."""
    spec = _int8(pool(64, 16, k=1, stride=2))
    tile = PoolTile(tc=32, toh=8, tow=8)
    assert read_width(spec, tile) == 2 and read_width(spec, dataclasses.replace(tile, tow=4)) == 1
    stats = run_op(spec, tile, HW, timing_only=True).stats
    assert stats.dma_load_descriptors == 2  # two channel tiles
    assert stats.dma_load_bytes == 2 * 32 * 15 * 16  # rows 0..14 of 32 channels, per tile


@pytest.mark.parametrize(("spec", "skip", "cycles"), [
    (pool(64, 16, k=1, stride=2), True, 3372),  # ResNetV2's shortcut pool, fp32: 4396 reading every row
    (_int8(pool(64, 16, k=1, stride=2)), False, 1580),  # int8: 4396 (its tile before read_width)
    # a downsampling 1x1 conv: 109,164 reading every row of the same tile (one-row tiles: 105,644 but twice the
    # wasted bursts, tile_search.TRAFFIC_SLACK)
    (conv(64, 128, 56, k=1, stride=2, pad=0), True, 107116),
])
def test_chosen_tiles_and_their_cycles(spec: OpSpec, skip: bool, cycles: int) -> None:
    """Pinned simulated cycles of the chosen tile (deterministic), which skips rows where that is faster;
    the other form of the same tile is slower, and the estimate follows the simulator within 25 %."""
    tile = _choose(spec)
    assert tile.skip_rows is skip
    got = run_op(spec, tile, HW, timing_only=True).stats
    assert got.total_cycles == cycles
    other = run_op(spec, dataclasses.replace(tile, skip_rows=not skip), HW, timing_only=True).stats
    assert other.total_cycles >= got.total_cycles
    assert abs(tile_search.estimate(spec, tile, HW).cycles - cycles) / cycles < 0.25


def test_fp32_shortcut_pool_moves_fewer_bytes() -> None:
    """Skipping rows: half the input bytes of reading every row of a tile's window, and no wasted burst."""
    spec = pool(64, 16, k=1, stride=2)
    tile = PoolTile(tc=32, toh=8, tow=8, skip_rows=True)
    skip = run_op(spec, tile, HW, timing_only=True).stats
    every = run_op(spec, dataclasses.replace(tile, skip_rows=False), HW, timing_only=True).stats
    assert skip.dma_load_bytes == 64 * 8 * 16 * 4 and skip.wasted_burst_bytes == 0
    assert every.dma_load_bytes == 64 * 15 * 16 * 4
    assert skip.total_cycles < every.total_cycles


def test_data_tensor_ref_is_unchanged_for_reports() -> None:
    """The plan's spec (bounds, descriptions) is the original operator; only the template reads the view."""
    spec = pool(64, 16, k=1, stride=2)
    assert isinstance(spec.data, TensorRef) and spec.data.view is None
    assert kind_of(spec).as_scheduled(spec, PoolTile(32, 8, 8)) is spec
