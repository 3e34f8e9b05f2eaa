"""The analytic cost model (``tile_search.estimate``) against the simulator's deterministic cycles.

The table is every distinct conv layer of ResNet-50 at 224x224 (the 7x7 stem, the 1x1 and
3x3 convs of each stage, the stride-2 3x3 and downsample convs, each with the epilogue it
has after batch-norm folding) and the 2048->1000 classifier, each with the tile the planner
chooses. The simulator runs timing-only (cycles do not depend on the data).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from helpers import conv, matmul, run_op
from tvm_npu.tir_schedules import tile_search

from tvm_npu.config import CompilerOptions, HardwareConfig
from tvm_npu.core.ops import OpSpec
from tvm_npu.core.tiles import TileParams

HW = HardwareConfig()
#: Relative error allowed per layer, and the share of layers that must meet it.
TOLERANCE, QUORUM = 0.10, 0.90

BR, BAR = ("bias", "relu"), ("bias", "add", "relu")
RESNET50_LAYERS: dict[str, OpSpec] = {
    "stem_7x7s2_3_64": conv(3, 64, 224, k=7, stride=2, pad=3, epi=BR),
    # stage 1, 56x56
    "s1_1x1_64_64": conv(64, 64, 56, k=1, epi=BR),
    "s1_3x3_64_64": conv(64, 64, 56, epi=BR),
    "s1_1x1_64_256_residual": conv(64, 256, 56, k=1, epi=BAR),
    "s1_down_1x1_64_256": conv(64, 256, 56, k=1, epi=("bias",)),
    "s1_1x1_256_64": conv(256, 64, 56, k=1, epi=BR),
    # stage 2, 56 -> 28
    "s2_1x1_256_128": conv(256, 128, 56, k=1, epi=BR),
    "s2_3x3s2_128_128": conv(128, 128, 56, stride=2, pad=1, epi=BR),
    "s2_1x1_128_512_residual": conv(128, 512, 28, k=1, epi=BAR),
    "s2_down_1x1s2_256_512": conv(256, 512, 56, k=1, stride=2, pad=0, epi=("bias",)),
    "s2_1x1_512_128": conv(512, 128, 28, k=1, epi=BR),
    "s2_3x3_128_128": conv(128, 128, 28, epi=BR),
    # stage 3, 28 -> 14
    "s3_1x1_512_256": conv(512, 256, 28, k=1, epi=BR),
    "s3_3x3s2_256_256": conv(256, 256, 28, stride=2, pad=1, epi=BR),
    "s3_1x1_256_1024_residual": conv(256, 1024, 14, k=1, epi=BAR),
    "s3_down_1x1s2_512_1024": conv(512, 1024, 28, k=1, stride=2, pad=0, epi=("bias",)),
    "s3_1x1_1024_256": conv(1024, 256, 14, k=1, epi=BR),
    "s3_3x3_256_256": conv(256, 256, 14, epi=BR),
    # stage 4, 14 -> 7
    "s4_1x1_1024_512": conv(1024, 512, 14, k=1, epi=BR),
    "s4_3x3s2_512_512": conv(512, 512, 14, stride=2, pad=1, epi=BR),
    "s4_1x1_512_2048_residual": conv(512, 2048, 7, k=1, epi=BAR),
    "s4_down_1x1s2_1024_2048": conv(1024, 2048, 14, k=1, stride=2, pad=0, epi=("bias",)),
    "s4_1x1_2048_512": conv(2048, 512, 7, k=1, epi=BR),
    "s4_3x3_512_512": conv(512, 512, 7, epi=BR),
    # classifier
    "fc_2048_1000": matmul(1, 1000, 2048, transpose_b=True, epi=("bias",)),
}


@dataclass(frozen=True)
class Row:
    name: str
    tile: TileParams
    predicted: float
    simulated: int
    predicted_dram_bytes: int
    simulated_dram_bytes: int

    @property
    def error(self) -> float:
        return abs(self.predicted - self.simulated) / self.simulated


@pytest.fixture(scope="module")
def table() -> list[Row]:
    opts = CompilerOptions()
    rows = []
    for name, spec in RESNET50_LAYERS.items():
        tile = tile_search.choose(spec, HW, opts)
        est = tile_search.estimate(spec, tile, HW)
        stats = run_op(spec, tile, HW, timing_only=True).stats
        moved = stats.dma_load_bytes + stats.dma_store_bytes + stats.wasted_burst_bytes
        rows.append(Row(name, tile, est.cycles, stats.total_cycles, est.dram_bytes, moved))
    print(f"\n{'layer':28s} {'predicted':>11s} {'simulated':>11s} {'error':>7s}  tile")
    for r in rows:
        print(f"{r.name:28s} {r.predicted:11.0f} {r.simulated:11d} {r.error:7.2%}  {r.tile}")
    return rows


@pytest.mark.slow
def test_cycles_within_ten_percent_for_most_layers(table: list[Row]) -> None:
    good = [r for r in table if r.error <= TOLERANCE]
    bad = {r.name: f"{r.error:.1%}" for r in table if r.error > TOLERANCE}
    assert len(good) >= QUORUM * len(table), f"{len(good)}/{len(table)} within {TOLERANCE:.0%}; off: {bad}"


def test_dram_traffic_prediction(table: list[Row]) -> None:
    """The model plans the same descriptors the codegen emits, so the bytes it moves should agree."""
    off = {r.name: (r.predicted_dram_bytes, r.simulated_dram_bytes) for r in table
           if abs(r.predicted_dram_bytes - r.simulated_dram_bytes) > 0.02 * r.simulated_dram_bytes}
    assert not off, f"predicted vs simulated DRAM bytes moved: {off}"


def test_layers_are_compute_bound_or_efficient(table: list[Row]) -> None:
    """Sanity of the table itself: the simulator is never faster than the datasheet's lower bound."""
    for name, spec in RESNET50_LAYERS.items():
        row = next(r for r in table if r.name == name)
        peak = HW.peak_macs_per_cycle(spec.out.dtype)
        compulsory = sum(t.nbytes for t in spec.inputs) + spec.out.nbytes
        bound = max(spec.macs / peak, compulsory / HW.dram_bytes_per_cycle)
        assert row.simulated >= bound * 0.999, (name, row.simulated, bound)
