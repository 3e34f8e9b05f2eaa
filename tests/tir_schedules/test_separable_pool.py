"""Separable max pools (``tir_schedules/pool.py`` ``separable``): a ``kh x kw`` max as a ``1 x kw`` pass over the
loaded rows into an SRAM scratch and a ``kh x 1`` pass over that (issue 26 item 6: SPP / SPPF pools).

Chosen where it takes fewer lane cycles (stride-1 windows of 3 x 3 and more), never for average pools (two
roundings) or the 3 x 3 / 2 stem pool; the results equal numpy's, the cost model follows the simulator, and
the SPP pools of a YOLOX-style neck run at their DMA bound where one pass ran at 0.12-0.64 of it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from helpers import assert_matches, pool, reference, run_op, simulate
from tvm_npu.tir_schedules import tile_search
from tvm_npu.tir_schedules.pool import separable

from tvm_npu.config import CompilerOptions, DType, HardwareConfig
from tvm_npu.core.ops import PoolSpec
from tvm_npu.core.tiles import PoolTile

HW = HardwareConfig()


def _choose(spec: PoolSpec) -> PoolTile:
    return tile_search.choose(spec, HW, CompilerOptions())


@pytest.mark.parametrize(("k", "stride", "kind", "expected"), [(5, 1, "max", True), (3, 1, "max", True),
                                                               (13, 1, "max", True), (3, 2, "max", False),
                                                               (2, 2, "max", False), (5, 1, "avg", False)])
def test_which_pools_are_separable(k: int, stride: int, kind: str, expected: bool) -> None:
    spec = pool(64, 20, kind=kind, k=k, stride=stride, pad=k // 2)
    assert separable(spec, _choose(spec), HW) is expected


@pytest.mark.parametrize("case", ["5x5", "13x13", "relu_epilogue", "nhwc", "rect_3x5", "tiled_rows"])
def test_separable_pool_matches_numpy(case: str) -> None:
    """Against the float64 definition, whole maps and row-tiled ones (a halo per tile)."""
    spec = {"5x5": pool(16, 12, k=5, stride=1, pad=2), "13x13": pool(8, 16, k=13, stride=1, pad=6),
            "relu_epilogue": pool(16, 10, k=5, stride=1, pad=2, epi=("relu",)),
            "nhwc": pool(16, 10, k=3, stride=1, pad=1, layout="NHWC"),
            "rect_3x5": pool(16, 9, 11, k=5, stride=1, pad=(1, 2, 1, 2)),
            "tiled_rows": pool(32, 24, k=5, stride=1, pad=2)}[case]
    if case == "rect_3x5":
        spec = dataclasses.replace(spec, kernel=(3, 5))
    tile = _choose(spec)
    if case == "tiled_rows":
        tile = dataclasses.replace(tile, toh=5)
    assert separable(spec, tile, HW), tile
    run = run_op(spec, tile, HW)
    assert_matches(run.out, run.ref, case)
    assert run.sram_peak <= tile_search.footprint(spec, tile, HW)


def test_separable_int8_and_padded_max_pool() -> None:
    """An 8-bit pool whose padding reads a value (``VMAXPOOL_PAD`` in both passes), and an fp32 one: exact."""
    base = pool(16, 12, k=5, stride=1, pad=2)
    i8 = DType.from_str("int8")
    spec = dataclasses.replace(base, data=dataclasses.replace(base.data, dtype=i8),
                               out=dataclasses.replace(base.out, dtype=i8), pad_value=-3.0)
    tile = _choose(spec)
    assert separable(spec, tile, HW)
    x = np.random.default_rng(0).integers(-128, 128, spec.data.shape).astype(np.int8)
    got = simulate(spec, tile, HW, {spec.data.name: x})
    np.testing.assert_array_equal(got, reference(spec, {spec.data.name: x}).astype(np.int8))
    padded = dataclasses.replace(base, pad_value=0.0)
    run = run_op(padded, _choose(padded), HW)
    assert_matches(run.out, run.ref, "fp32 pad value 0")


def test_cost_model_follows_the_simulator() -> None:
    """Two passes cost what the simulator says within 10 % (the cost model's tolerance for layers), and
    fewer cycles than the lane work of one pass alone (``kh * kw`` per output)."""
    for spec in (pool(256, 20, k=5, stride=1, pad=2), pool(256, 20, k=13, stride=1, pad=6)):
        tile = _choose(spec)
        est = tile_search.estimate(spec, tile, HW).cycles
        sim = run_op(spec, tile, HW, timing_only=True).stats.total_cycles
        assert abs(est - sim) / sim < 0.10, (spec.kernel, est, sim)
        assert sim < math.ceil(spec.out.size / HW.vector_lanes) * spec.kernel[0] * spec.kernel[1]
