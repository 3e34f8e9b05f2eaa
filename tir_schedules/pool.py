"""Pooling template: channel x output-row x output-column tiles on the vector engine.

As for convolutions, the padded input is an SRAM stage sized to the tile grid; the
DMA clamps the window and the pool instruction treats the border as padding
(ignored by max, excluded from or counted in the average per ``count_include_pad``).
"""

from __future__ import annotations

from tvm import s_tir, te, tirx

from .common import (
    SRAM,
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
from .conv2d import padded_extent
from .ops import PoolKind, PoolSpec
from .params import PoolTile


def compute(spec: PoolSpec, tile: PoolTile) -> tuple[list[te.Tensor], te.Tensor, dict[str, str]]:
    nchw = spec.layout == "NCHW"
    n, c, h, w = (spec.data.dim(a) for a in "NCHW")
    oh, ow = spec.out.dim("H"), spec.out.dim("W")
    kh, kw = spec.kernel
    sh, sw = spec.strides
    pt, pl = spec.padding[0], spec.padding[1]
    hp = padded_extent(oh, tile.toh, sh, kh, 1, h, pt)
    wp = padded_extent(ow, tile.tow, sw, kw, 1, w, pl)
    dt = spec.data.dtype.np.name
    fill = tirx.min_value(dt) if spec.kind == PoolKind.MAX else tirx.const(0, dt)
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
    rx = te.reduce_axis((0, kw), name="rx")
    name = "acc" if spec.epilogue else spec.out.name
    inv = tirx.const(1.0 / (kh * kw), dt)

    def window(b, cc, y, x):
        v = pad[b, cc, y * sh + ry, x * sw + rx] if nchw else pad[b, y * sh + ry, x * sw + rx, cc]
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
    return [data, *operands.values()], final, {"data": spec.layout, "out": spec.layout}  # SRAM tiles


def schedule(spec: PoolSpec, tile: PoolTile) -> Scheduled:
    inputs, final, axes = compute(spec, tile)
    sch = s_tir.Schedule(te.create_prim_func([*inputs, final]))
    res = Scheduled(spec, tile, sch, axes=axes, dram_axes={"data": spec.data.layout})
    nchw = spec.layout == "NCHW"
    blk = sch.get_sblock("acc" if spec.epilogue else spec.out.name)
    if nchw:
        b, c, y, x, ry, rx = sch.get_loops(blk)
    else:
        b, y, x, c, ry, rx = sch.get_loops(blk)
    co, ci = split(sch, c, tile.tc)
    yo, yi = split(sch, y, tile.toh)
    xo, xi = split(sch, x, tile.tow)
    n_sp = -(-spec.out.dim("H") // tile.toh) * -(-spec.out.dim("W") // tile.tow)
    if n_sp > 1:  # the pipelined loop is the innermost tile loop: make it the one with iterations
        sch.reorder(b, co, yo, xo, ci, yi, xi, ry, rx)
        s = sch.fuse(yo, xo)
    else:
        sch.reorder(b, yo, xo, co, ci, yi, xi, ry, rx)
        s = co
    pad = sch.get_sblock("pad")
    sch.set_scope(pad, 0, SRAM)
    res.roles[buffer_name(sch, pad)] = "data"
    res.loads.append(attach(sch, pad, s, "dma"))
    store = result_store(sch, spec, blk)
    mark(sch, sch.blockize(sch.get_loops(sch.decompose_reduction(blk, ci))[-2]), "init")
    mark(sch, sch.blockize(ci), "pool")
    schedule_epilogue(sch, res, blk, s, store)
    pipeline(sch, s, tile.stages, res.loads, res.stores)
    return res
