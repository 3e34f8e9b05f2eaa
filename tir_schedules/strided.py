"""Strided operators that read only the input rows some output uses.

A 1 x kw window with a row stride ``sh > 1`` (a ResNetV2 shortcut's 1x1 / 2 max pool, a
downsampling 1x1 / 2 convolution) reads input rows ``y * sh`` only. The template's padded
input stage holds every row of a tile's window, so a tile of ``toh`` output rows loads
``(toh - 1) * sh + 1`` rows, the unused ones included; a tile of one output row avoids
that but stores output runs shorter than a DRAM burst. Read instead through a view of the
input that keeps every ``sh``-th row (:func:`rows_view`), the operator is the same window
with row stride 1: the DMA skips the unused rows by its descriptor's row stride (no DRAM
burst carries them), the columns are read whole and subsampled in SRAM by the instruction's
column stride, and tiles of many output rows store long runs. Where rows are shorter than a
burst, skipping them saves nothing (a burst holds several rows); the tile search prices both
forms with the same DMA cost model and keeps the faster (``skip_rows`` of the tile).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from tvm_npu.core.ops import Conv2dSpec, PoolSpec
from tvm_npu.core.views import strided

S = TypeVar("S", Conv2dSpec, PoolSpec)


def skips_rows(spec: Conv2dSpec | PoolSpec) -> bool:
    """Whether ``spec`` reads every ``stride``-th input row and nothing between (one-row windows, no
    top padding, every used row inside the input) from a DRAM tensor of its own, read by no other
    operand: the cases :func:`rows_view` rewrites exactly."""
    if spec.kernel[0] != 1 or spec.strides[0] == 1 or spec.padding[0] != 0:
        return False
    if isinstance(spec, Conv2dSpec) and spec.groups != 1:
        return False
    data = spec.data
    if data.view is not None or data.on_chip or "H" not in data.layout:
        return False
    if sum(t.name == data.name for t in (*spec.inputs, spec.out)) != 1:
        return False  # another operand is the same tensor: it would need the rows the view skips
    return (spec.out.dim("H") - 1) * spec.strides[0] < data.dim("H")


def rows_view(spec: S) -> S:
    """``spec`` as the same operator over a view of its input holding only the rows it uses, with row
    stride 1 (requires :func:`skips_rows`). The view's base is the input itself, so the codegen reads
    the input's own DRAM tensor through the view's strides."""
    data = spec.data
    h_axis = data.layout.index("H")
    oh = spec.out.dim("H")
    shape = tuple(oh if i == h_axis else n for i, n in enumerate(data.shape))
    step = tuple(spec.strides[0] if i == h_axis else 1 for i in range(len(data.shape)))
    view = strided(data.name, data.shape, (0,) * len(data.shape), step, shape)
    sw = spec.strides[1]
    pl, pr = spec.padding[1], spec.padding[3]
    changes: dict = {"data": replace(data, shape=shape, view=view), "strides": (1, sw), "padding": (0, pl, 0, pr)}
    if isinstance(spec, Conv2dSpec):
        changes["dilation"] = (1, spec.dilation[1])
    return replace(spec, **changes)


def as_read(spec: S, skip_rows: bool) -> S:
    """The spec a tile's template is built for: :func:`rows_view` of ``spec`` when the tile skips rows."""
    return rows_view(spec) if skip_rows else spec
