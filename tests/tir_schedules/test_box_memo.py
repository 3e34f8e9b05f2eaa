"""The tile search's memoised copy costs (``cost.Boxes``) against pricing every box afresh.

A box's cost is memoised by its extents before and after clamping, its SRAM strides and its
start address modulo the burst size; a key that missed something the cost depends on would
hand one box another's cost. Fresh ``Boxes`` (empty memos) give the unmemoised cost.
"""

from __future__ import annotations

import itertools

import pytest
from tvm_npu.tir_schedules.cost import Boxes, boxes, copy_cost

from tvm_npu.config import DType, HardwareConfig

HW = HardwareConfig()
SHAPE = (1, 13, 11, 9)  # odd extents: starts at every burst residue, boxes clamped at every edge


@pytest.mark.parametrize("dtype", [DType.INT8, DType.FP16, DType.FP32])
@pytest.mark.parametrize("on_chip", [False, True])
def test_memoised_box_costs_equal_fresh_ones(dtype: DType, on_chip: bool) -> None:
    shared = Boxes(HW, dtype, SHAPE, on_chip)
    seen = set()
    for c0, y0, x0, (ce, ye, xe) in itertools.product(range(-2, 13, 5), range(-2, 11, 3), range(-3, 9, 2),
                                                      [(4, 3, 9), (13, 2, 4), (5, 5, 5)]):
        lo, ext = (0, c0, y0, x0), (1, ce, ye, xe)
        for strides in (None, (ce * ye * xe, 1, xe * ce, ce)):  # row-major, and a transposing tile
            got = shared.cost(lo, ext, strides)
            assert got == Boxes(HW, dtype, SHAPE, on_chip).cost(lo, ext, strides), (lo, ext, strides)
            assert got == copy_cost(HW, dtype, SHAPE, lo, ext, strides, on_chip)
            seen.add(got)
    assert len(seen) > (3 if on_chip else 10)  # the boxes differ in cost: not a comparison of zeros


def test_shared_boxes_are_per_hardware_record() -> None:
    other = HardwareConfig(dram_burst_bytes=32)
    assert boxes(HW, DType.INT8, SHAPE) is boxes(HW, DType.INT8, SHAPE)
    assert boxes(other, DType.INT8, SHAPE) is not boxes(HW, DType.INT8, SHAPE)
    box = (0, 0, 0, 1), (1, 1, 1, 20)  # one 32-byte burst, or one 64-byte one
    assert boxes(other, DType.INT8, (1, 1, 1, 64)).cost(*box) != boxes(HW, DType.INT8, (1, 1, 1, 64)).cost(*box)
