"""Pooling template: channel x output-row x output-column tiles on the vector engine.

As for convolutions, the padded input is an SRAM stage sized to the tile grid; the
DMA clamps the window and the pool instruction treats the border as padding
(ignored by max, excluded from or counted in the average per ``count_include_pad``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from tvm import s_tir, te, tirx
from tvm_npu.simulator import timing

from tvm_npu.config import CompilerOptions, HardwareConfig
from tvm_npu.core.ops import Broadcast, PoolKind, PoolSpec
from tvm_npu.core.tiles import PoolTile

from .common import (
    Scheduled,
    attach,
    buffer_name,
    epilogue_stages,
    mark,
    padded_reader,
    pipeline,
    placeholder,
    result_store,
    schedule_epilogue,
    split,
)
from .contract import SRAM_SCOPE, Role, SiteKind
from .conv2d import padded_extent
from .cost import (
    NO_COPY,
    Pipelining,
    Step,
    axis_tiles,
    boxes,
    epilogue_sizes,
    tile_extents,
    touched,
    vector_cycles,
    window_sum,
    windows,
)
from .cost import ceil_div as _ceil
from .kind import OpKind, RowWindow, epilogue_text, register
from .strided import as_read, skips_rows


def read_width(spec: PoolSpec, tile: PoolTile) -> int:
    """Columns the template reads per window: the kernel's, or for a whole-row tile of a window narrower
    than its stride (a 1x1 / 2 pool) the whole stride, so a tile's window spans whole input rows and the
    DMA reads rows (of equal SRAM and DRAM pitch) as one run; the instruction's kernel ignores the extra
    columns, which cost no extra burst when the rows are whole."""
    kw, sw = spec.kernel[1], spec.strides[1]
    return sw if kw < sw and tile.tow == spec.out.dim("W") else kw


def _window(spec: PoolSpec, tile: PoolTile) -> tuple[int, int]:
    (kh, _), (sh, sw) = spec.kernel, spec.strides
    return (tile.toh - 1) * sh + kh, (tile.tow - 1) * sw + read_width(spec, tile)


def separable(spec: PoolSpec, tile: PoolTile, hw: HardwareConfig) -> bool:
    """Whether the max pool of ``tile`` runs as two passes, a ``1 x kw`` window over every loaded row into an
    SRAM scratch (:func:`scratch_shape`) and a ``kh x 1`` window over that: a max over a rectangle is the max
    of its rows' maxima, so ``kh + kw`` lane cycles per output instead of ``kh * kw``, where the first pass's
    extra rows (the window's halo, all rows for a stride) do not cost that back: stride-1 pools of 3 x 3 and
    more (SPP / SPPF necks), not the 3 x 3 / 2 stem pool. Average pools stay one pass (two roundings)."""
    (kh, kw), lanes = spec.kernel, hw.vector_lanes
    if spec.kind != PoolKind.MAX or kh == 1 or kw == 1:
        return False
    rows, _ = _window(spec, tile)
    outs = tile.tc * tile.toh * tile.tow
    two = _ceil(tile.tc * rows * tile.tow, lanes) * kw + _ceil(outs, lanes) * kh + hw.vector_issue_cycles
    return two < _ceil(outs, lanes) * kh * kw


def scratch_shape(spec: PoolSpec, tile: PoolTile) -> tuple[int, int, int]:
    """(channels, rows, columns) of a separable pool's row maxima: every loaded row of the tile's window, the
    tile's output columns."""
    return tile.tc, _window(spec, tile)[0], tile.tow


def _spatial_tiles(spec: PoolSpec, tile: PoolTile) -> int:
    return _ceil(spec.out.dim("H"), tile.toh) * _ceil(spec.out.dim("W"), tile.tow)


def compute(spec: PoolSpec, tile: PoolTile) -> tuple[list[te.Tensor], te.Tensor, dict[str, str]]:
    nchw = spec.layout == "NCHW"
    n, c, h, w = (spec.data.dim(a) for a in "NCHW")
    oh, ow = spec.out.dim("H"), spec.out.dim("W")
    kh, kw = spec.kernel
    sh, sw = spec.strides
    pt, pl = spec.padding[0], spec.padding[1]
    hp = padded_extent(oh, tile.toh, sh, kh, 1, h, pt)
    rw = read_width(spec, tile)
    wp = padded_extent(ow, tile.tow, sw, rw, 1, w, pl)
    dt = spec.data.dtype.np.name
    fill = tirx.min_value(dt) if spec.kind == PoolKind.MAX else tirx.const(0, dt)
    if spec.pad_value is not None:  # a folded constant pad (the instruction's PaddedMaxPool)
        fill = tirx.const(spec.pad_value, dt)
    data = placeholder(spec.data)

    def valid(hh, ww):
        return tirx.all(hh >= pt, hh < h + pt, ww >= pl, ww < w + pl)

    read = padded_reader(spec.data, data, pt, pl)

    if nchw:
        pad = te.compute((n, c, hp, wp), lambda b, cc, hh, ww: tirx.if_then_else(
            valid(hh, ww), read(b, cc, hh, ww), fill), name="pad")
    else:
        pad = te.compute((n, hp, wp, c), lambda b, hh, ww, cc: tirx.if_then_else(
            valid(hh, ww), read(b, cc, hh, ww), fill), name="pad")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, rw), name="rx")
    name = "acc" if spec.epilogue else spec.out.name
    inv = tirx.const(1.0 / (kh * kw), dt)
    identity = tirx.min_value(dt) if spec.kind == PoolKind.MAX else tirx.const(0, dt)

    def window(b, cc, y, x):
        v = pad[b, cc, y * sh + ry, x * sw + rx] if nchw else pad[b, y * sh + ry, x * sw + rx, cc]
        if rw > kw:  # columns read for whole rows only (read_width)
            v = tirx.if_then_else(rx < kw, v, identity)
        if spec.kind == PoolKind.MAX:
            return te.max(v, axis=[ry, rx])
        return te.sum(v * inv, axis=[ry, rx])  # structure only: the instruction defines the divisor

    if nchw:
        acc = te.compute((n, c, oh, ow), lambda b, cc, y, x: window(b, cc, y, x), name=name)
    else:
        acc = te.compute((n, oh, ow, c), lambda b, y, x, cc: window(b, cc, y, x), name=name)
    chan = 1 if nchw else 3
    stages, operands = epilogue_stages(spec, acc, lambda idx: idx[chan])
    final = stages[-1] if stages else acc
    return [data, *operands.values()], final, {Role.DATA: spec.layout, Role.OUT: spec.layout}  # SRAM tiles


class Pool(OpKind):
    """Max / average / global pooling on the vector engine."""

    spec_type = PoolSpec
    tile_type = PoolTile
    name = "pool"

    # ---------------------------------------------------------------- template
    def pipelining(self, spec: PoolSpec, tile: PoolTile) -> Pipelining:
        """The fused spatial loop, or the channel loop when there is one spatial tile."""
        return Pipelining(_ceil(spec.data.dim("C"), tile.tc) * _spatial_tiles(spec, tile) > 1)

    def as_scheduled(self, spec: PoolSpec, tile: PoolTile) -> PoolSpec:
        return as_read(spec, tile.skip_rows)

    def definition(self, spec: PoolSpec, tile: PoolTile) -> tuple:
        return compute(self.as_scheduled(spec, tile), tile)

    def schedule(self, spec: PoolSpec, tile: PoolTile) -> Scheduled:
        spec = self.as_scheduled(spec, tile)
        inputs, final, axes = compute(spec, tile)
        sch = s_tir.Schedule(te.create_prim_func([*inputs, final]))
        res = Scheduled(spec, tile, sch, axes=axes, dram_axes={Role.DATA: spec.data.layout})
        nchw = spec.layout == "NCHW"
        blk = sch.get_sblock("acc" if spec.epilogue else spec.out.name)
        if nchw:
            b, c, y, x, ry, rx = sch.get_loops(blk)
        else:
            b, y, x, c, ry, rx = sch.get_loops(blk)
        co, ci = split(sch, c, tile.tc)
        yo, yi = split(sch, y, tile.toh)
        xo, xi = split(sch, x, tile.tow)
        if _spatial_tiles(spec, tile) > 1:  # the pipelined loop is the innermost tile loop: the one with iterations
            sch.reorder(b, co, yo, xo, ci, yi, xi, ry, rx)
            s = sch.fuse(yo, xo)
        else:
            sch.reorder(b, yo, xo, co, ci, yi, xi, ry, rx)
            s = co
        pad = sch.get_sblock("pad")
        sch.set_scope(pad, 0, SRAM_SCOPE)
        res.roles[buffer_name(sch, pad)] = Role.DATA
        res.loads.append(attach(sch, pad, s, SiteKind.DMA))
        store = result_store(sch, spec, blk)
        mark(sch, sch.blockize(sch.get_loops(sch.decompose_reduction(blk, ci))[-2]), SiteKind.INIT)
        mark(sch, sch.blockize(ci), SiteKind.POOL)
        schedule_epilogue(sch, res, blk, s, store)
        pipeline(sch, s, tile.stages, res.loads, res.stores)
        return res

    # -------------------------------------------------------------- tile space
    def axes(self, spec: PoolSpec, hw: HardwareConfig, opts: CompilerOptions) -> dict[str, list]:
        c, oh, ow = spec.data.dim("C"), spec.out.dim("H"), spec.out.dim("W")
        return {"tc": tile_extents(c, hw.vector_lanes, opts), "toh": tile_extents(oh, 1, opts, limit=16),
                "tow": tile_extents(ow, 1, opts, limit=4), "stages": [opts.pipeline_stages],
                "skip_rows": [False, True] if skips_rows(spec) else [False]}

    def whole_rows(self, spec: PoolSpec, tile: PoolTile) -> bool:
        return tile.tow == spec.out.dim("W")

    def footprint(self, spec: PoolSpec, tile: PoolTile, hw: HardwareConfig) -> int:
        spec = self.as_scheduled(spec, tile)
        rows, cols = _window(spec, tile)
        s = tile.stages if self.pipelining(spec, tile).pipelined else 1
        isz = spec.data.dtype.itemsize
        out_tile = tile.tc * tile.toh * tile.tow
        buffers = [s * tile.tc * rows * cols * isz]
        buffers += epilogue_sizes(spec, out_tile, tile.tc, spec.data.dtype, s, 2 if s > 1 else 1)
        if separable(spec, tile, hw):  # the row maxima (one: the vector engine's passes are in order)
            buffers.append(math.prod(scratch_shape(spec, tile)) * isz)
        return sum(hw.align(x) for x in buffers)

    # -------------------------------------------------------------- cost model
    def steps(self, spec: PoolSpec, tile: PoolTile, hw: HardwareConfig) -> Iterator[Step]:
        spec = self.as_scheduled(spec, tile)
        nchw = spec.layout == "NCHW"
        n, c = spec.data.dim("N"), spec.data.dim("C")
        oh, ow = spec.out.dim("H"), spec.out.dim("W")
        kh, (sh, sw), (pt, pl) = spec.kernel[0], spec.strides, spec.padding[:2]
        rows, cols = _window(spec, tile)
        dt = spec.data.dtype
        n_sp = _spatial_tiles(spec, tile)
        spatial = [(y, x) for y in axis_tiles(oh, tile.toh) for x in axis_tiles(ow, tile.tow)]
        window = windows(hw, dt, spec.data, spec.layout)  # looked up once per call, not per step
        result = boxes(hw, dt, tuple(spec.out.shape), spec.out.on_chip)
        vec: dict[tuple[int, int], int] = {}
        two_pass = separable(spec, tile, hw)
        h = spec.data.dim("H")
        for b in range(n):
            for ci, ct in enumerate(axis_tiles(c, tile.tc)):
                for si, (y, x) in enumerate(spatial):
                    r0, c0 = y[0] * sh - pt, x[0] * sw - pl
                    load = window.cost((b, ct[0], r0, c0), (1, ct[1], rows, cols))
                    if nchw:
                        store = result.cost((b, ct[0], y[0], x[0]), (1, ct[1], y[1], x[1]))
                    else:
                        store = result.cost((b, y[0], x[0], ct[0]), (1, y[1], x[1], ct[1]))
                    nout = ct[1] * y[1] * x[1]
                    # the first pass covers the window's rows inside the image (the DMA loads those)
                    loaded = min(r0 + (y[1] - 1) * sh + kh, h) - max(r0, 0) if two_pass else 0
                    if (nout, loaded) not in vec:
                        vec[nout, loaded] = self._pool_cycles(spec, hw, ct[1] * x[1], nout, loaded) \
                            + vector_cycles(hw, spec, nout)
                    # the loaded window is read by the vector engine: modelled as an epilogue operand
                    yield Step(NO_COPY, 0, True, vec[nout, loaded], store, None, load, si if n_sp > 1 else ci)

    @staticmethod
    def _pool_cycles(spec: PoolSpec, hw: HardwareConfig, row_outs: int, nout: int, loaded: int) -> int:
        """The pool instructions of one tile: one pass, or (``loaded`` rows) the two of :func:`separable`."""
        kh, kw = spec.kernel
        if not loaded:
            return timing.vector_cycles(hw, nout, kh * kw)
        return timing.vector_cycles(hw, row_outs * loaded, kw) + timing.vector_cycles(hw, nout, kh)

    def traffic_floor(self, spec: PoolSpec, tile: PoolTile, hw: HardwareConfig) -> float:
        spec = self.as_scheduled(spec, tile)
        extra = sum(e.operand.nbytes for e in spec.epilogue
                    if e.operand is not None and e.broadcast == Broadcast.FULL)
        kh, kw = spec.kernel
        rows = window_sum(spec.out.dim("H"), tile.toh, spec.strides[0], kh, 1, spec.data.dim("H"), spec.padding[0])
        cols = window_sum(spec.out.dim("W"), tile.tow, spec.strides[1], kw, 1, spec.data.dim("W"), spec.padding[1])
        data = spec.data.dim("N") * spec.data.dim("C") * rows * cols * spec.data.dtype.itemsize
        return (data + spec.out.nbytes + extra) / hw.dram_bytes_per_cycle

    def step_count(self, spec: PoolSpec, tile: PoolTile) -> int:
        return spec.data.dim("N") * _ceil(spec.data.dim("C"), tile.tc) * _spatial_tiles(spec, tile)

    # ----------------------------------------------------------------- bounds
    def needed_bytes(self, spec: PoolSpec) -> dict[str, int]:
        """The input window rows and columns some output reads (a strided 1x1 conv skips rows)."""
        need = super().needed_bytes(spec)
        (kh, kw), (sh, sw) = spec.kernel, spec.strides
        rows = touched(spec.out.dim("H"), sh, kh, 1, spec.data.dim("H"), spec.padding[0])
        cols = touched(spec.out.dim("W"), sw, kw, 1, spec.data.dim("W"), spec.padding[1])
        data = spec.data.dim("N") * spec.data.dim("C") * rows * cols * spec.data.dtype.itemsize
        uses = [t for t in spec.inputs if t.name == spec.data.name]
        need[spec.data.name] = max([data] + [t.nbytes for t in uses[1:]])  # another use may need all of it
        return need

    # ----------------------------------------------------------------- reports
    def row_window(self, spec: PoolSpec) -> RowWindow | None:
        if "H" not in spec.out.layout:
            return None
        return RowWindow(spec.kernel[0], spec.strides[0], 1, spec.padding[0], spec.padding[2])

    def describe(self, spec: PoolSpec) -> str:
        return (f"{spec.kind.value}pool{spec.kernel[0]}x{spec.kernel[1]}/s{spec.strides[0]} {spec.data.shape}"
                + epilogue_text(spec))


KIND = register(Pool())
