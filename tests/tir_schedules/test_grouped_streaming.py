"""Grouped tensor-engine convolutions that pipeline across groups (``ConvTile.stream_groups``, issue 27 item 4):
the group, output-channel and spatial tile loops are one pipelined loop and a tile's group weights load with
its data, so the next group's weights and inputs arrive while the array computes this group (before, each
group's pipeline drained before the next group's weights were loaded).

Both forms match the float64 definition and fit their footprint; the tile search picks the streaming form
for ShuffleNet's grouped 1x1 convolutions (4 groups of 34, 68 and 136 channels), whose simulated cycles are
pinned here beside those of the best tile without it.
"""

from __future__ import annotations

import dataclasses

import pytest
from helpers import assert_matches, conv, run_op
from tvm_npu.tir_schedules import tile_search

from tvm_npu.config import CompilerOptions, HardwareConfig
from tvm_npu.core.ops import Conv2dSpec
from tvm_npu.core.tiles import ConvEngine, Order

HW = HardwareConfig()
OPTS = CompilerOptions()


def test_only_grouped_tensor_tiles_stream_groups() -> None:
    specs = {"dense": conv(32, 32, 8, k=1, pad=0), "grouped": conv(32, 32, 8, k=1, pad=0, groups=4),
             "depthwise": conv(32, 32, 8, groups=32)}
    offered = {name: {t.stream_groups for t in tile_search.candidates(spec, HW, OPTS)} for name, spec in specs.items()}
    assert offered == {"dense": {False}, "grouped": {False, True}, "depthwise": {False}}
    tiles = [t for t in tile_search.candidates(conv(32, 32, 8, k=1, pad=0, groups=4), HW, OPTS) if t.stream_groups]
    assert all(t.order == Order.B_STATIONARY and t.engine == ConvEngine.TENSOR for t in tiles)


CASES = {
    "1x1_g4_bias_relu": conv(64, 64, 7, k=1, pad=0, groups=4, epi=("bias", "relu")),
    "1x1_g4_widening": conv(24, 112, 9, k=1, pad=0, groups=4, epi=("bias",)),
    "3x3_g2": conv(32, 32, 8, k=3, pad=1, groups=2),
    "1x1_g4_nhwc_add": conv(32, 48, 10, k=1, pad=0, groups=4, layout="NHWC", epi=("bias", "add", "relu")),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("toh", [1, 3])
def test_streaming_tiles_match_numpy(case: str, toh: int) -> None:
    spec = CASES[case]
    tiles = [t for t in tile_search.candidates(spec, HW, OPTS) if t.stream_groups and t.toh == toh]
    assert tiles
    for tile in tiles[:1]:
        run = run_op(spec, tile, HW)
        assert_matches(run.out, run.ref, (case, tile))
        assert run.sram_peak <= tile_search.footprint(spec, tile, HW)


def _shuffle(channels: int, size: int) -> Conv2dSpec:
    return conv(channels, channels, size, k=1, pad=0, groups=4, epi=("bias", "relu"))


@pytest.mark.parametrize(("spec", "streaming", "without"), [
    (_shuffle(544, 7), 72326, 89556),  # 136 channels per group: MAC-bound at 56,644 (0.63 -> 0.78)
    (_shuffle(272, 14), 83078, 89300),  # 68 per group: 0.63 -> 0.68 (the array's limit 0.72)
    (_shuffle(136, 28), 118716, 120944),  # 34 per group: 0.47 -> 0.48 (the array's limit 0.50)
])
def test_shufflenet_grouped_convs_stream(spec: Conv2dSpec, streaming: int, without: int) -> None:
    """Pinned simulated cycles of the chosen (streaming) tile and of the best tile without streaming; the
    estimate of the chosen tile is within 5 % of the simulator."""
    tile = tile_search.choose(spec, HW, OPTS)
    assert tile.stream_groups
    assert run_op(spec, tile, HW, timing_only=True).stats.total_cycles == streaming
    opts = [(t, fp) for t, fp in tile_search.legal(spec, HW, OPTS) if not t.stream_groups]
    best = min(opts, key=lambda tf: tile_search.estimate(spec, tf[0], HW).cycles)[0]
    assert run_op(spec, best, HW, timing_only=True).stats.total_cycles == without
    assert abs(tile_search.estimate(spec, tile, HW).cycles - streaming) / streaming < 0.05


def test_streaming_reloads_weights_per_spatial_tile() -> None:
    """A streaming tile loads its group's weights with every step: whole-map tiles load each weight once."""
    spec = conv(64, 64, 8, k=1, pad=0, groups=4)
    tile = next(t for t in tile_search.candidates(spec, HW, OPTS) if t.stream_groups and t.toh == t.tow == 8)
    one = run_op(spec, tile, HW, timing_only=True).stats
    two = run_op(spec, dataclasses.replace(tile, toh=4), HW, timing_only=True).stats
    assert two.dma_load_bytes - one.dma_load_bytes == spec.weight.nbytes
