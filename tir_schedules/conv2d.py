"""Conv2d template: tiles over output channels, output rows/cols and input channels.

The zero-padded input is its own TE stage placed in SRAM and computed at the
tile loop, so the input DMA reads exactly the (halo-extended) window one output
tile needs; its shape is rounded up to the tile grid so no predicate appears.
The DMA clamps the window to the real tensor and the conv instruction treats the
clamped border as padding. Grouped convolutions (depthwise included) are written
over a group axis (``N G C H W`` views of the same DRAM bytes), which keeps every
index affine.

Loop orders (``ConvTile.order``): ``B_STATIONARY`` keeps a weight tile in SRAM and
streams input tiles through the fused spatial loop; ``A_STATIONARY`` keeps an input
tile and streams weight tiles through the output-channel loop.
"""

from __future__ import annotations

from tvm import s_tir, te, tirx

from .common import (
    SRAM,
    Scheduled,
    acc_dtype,
    attach,
    buffer_name,
    epilogue_stages,
    extent,
    mark,
    padded_reader,
    pipeline,
    placeholder,
    result_store,
    schedule_epilogue,
    split,
)
from .ops import Conv2dSpec
from .params import ConvTile, Order


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def padded_extent(out: int, tile: int, stride: int, kernel: int, dilation: int, size: int, pad: int) -> int:
    """Rows of the padded input stage: enough for every tile of the (overhanging) tile grid."""
    grid = (_ceil(out, tile) * tile - 1) * stride + (kernel - 1) * dilation + 1
    return max(size + pad, grid)


def compute(spec: Conv2dSpec, tile: ConvTile) -> tuple[list[te.Tensor], te.Tensor, dict[str, str]]:
    """TE definition: inputs, final output and the axis names of the stages' buffers."""
    nchw = spec.layout == "NCHW"
    n, c, h, w = (spec.data.dim(a) for a in "NCHW")
    o, oh, ow = spec.out.dim("C"), spec.out.dim("H"), spec.out.dim("W")
    kh, kw = spec.kernel
    (sh, sw), (dh, dw) = spec.strides, spec.dilation
    pt, pl = spec.padding[0], spec.padding[1]
    g = spec.groups
    cg, og = c // g, o // g
    hp = padded_extent(oh, tile.toh, sh, kh, dh, h, pt)
    wp = padded_extent(ow, tile.tow, sw, kw, dw, w, pl)
    cp = _ceil(cg, tile.tic) * tile.tic
    dt = spec.data.dtype.np.name
    adt = acc_dtype(spec.data.dtype)
    grouped = g > 1
    zero = tirx.const(0, dt)
    acc_name = "acc" if spec.epilogue else spec.out.name

    def valid(hh, ww, cc):
        return tirx.all(hh >= pt, hh < h + pt, ww >= pl, ww < w + pl, cc < cg)

    if not grouped:
        data = placeholder(spec.data)
        weight = placeholder(spec.weight)
        read = padded_reader(spec.data, data, pt, pl)

        if nchw:
            pad = te.compute((n, cp, hp, wp), lambda b, cc, hh, ww: tirx.if_then_else(
                valid(hh, ww, cc), read(b, cc, hh, ww), zero), name="pad")
        else:
            pad = te.compute((n, hp, wp, cp), lambda b, hh, ww, cc: tirx.if_then_else(
                valid(hh, ww, cc), read(b, cc, hh, ww), zero), name="pad")
        rc = te.reduce_axis((0, cg), name="rc")
        ry = te.reduce_axis((0, kh), name="ry")
        rx = te.reduce_axis((0, kw), name="rx")

        def term(b, oc, y, x):
            if nchw:
                v = pad[b, rc, y * sh + ry * dh, x * sw + rx * dw]
            else:
                v = pad[b, y * sh + ry * dh, x * sw + rx * dw, rc]
            return te.sum(v.astype(adt) * weight[oc, rc, ry, rx].astype(adt), axis=[rc, ry, rx])

        if nchw:
            shape = (n, o, oh, ow)
            acc = te.compute(shape, lambda b, oc, y, x: term(b, oc, y, x), name=acc_name)
            axes = {"data": "NCHW", "out": "NCHW"}
        else:
            shape = (n, oh, ow, o)
            acc = te.compute(shape, lambda b, y, x, oc: term(b, oc, y, x), name=acc_name)
            axes = {"data": "NHWC", "out": "NHWC"}
        axes["weight"] = "OIHW"

        def channel_of(idx):
            return idx[1] if nchw else idx[3]
    else:
        if nchw:
            data = placeholder(spec.data, (n, g, cg, h, w))
            pad = te.compute((n, g, cp, hp, wp), lambda b, gg, cc, hh, ww: tirx.if_then_else(
                valid(hh, ww, cc), data[b, gg, cc, hh - pt, ww - pl], zero), name="pad")
            shape = (n, g, og, oh, ow)
            axes = {"data": "NGCHW", "out": "NGCHW"}
        else:
            data = placeholder(spec.data, (n, h, w, g, cg))
            pad = te.compute((n, hp, wp, g, cp), lambda b, hh, ww, gg, cc: tirx.if_then_else(
                valid(hh, ww, cc), data[b, hh - pt, ww - pl, gg, cc], zero), name="pad")
            shape = (n, oh, ow, g, og)
            axes = {"data": "NHWGC", "out": "NHWGC"}
        weight = placeholder(spec.weight, (g, og, cg, kh, kw))
        axes["weight"] = "GOIHW"
        rc = te.reduce_axis((0, cg), name="rc")
        ry = te.reduce_axis((0, kh), name="ry")
        rx = te.reduce_axis((0, kw), name="rx")

        def gterm(b, gg, oc, y, x):
            if nchw:
                v = pad[b, gg, rc, y * sh + ry * dh, x * sw + rx * dw]
            else:
                v = pad[b, y * sh + ry * dh, x * sw + rx * dw, gg, rc]
            return te.sum(v.astype(adt) * weight[gg, oc, rc, ry, rx].astype(adt), axis=[rc, ry, rx])

        if nchw:
            acc = te.compute(shape, lambda b, gg, oc, y, x: gterm(b, gg, oc, y, x), name=acc_name)
        else:
            acc = te.compute(shape, lambda b, y, x, gg, oc: gterm(b, gg, oc, y, x), name=acc_name)

        def channel_of(idx):
            gg, oc = (idx[1], idx[2]) if nchw else (idx[3], idx[4])
            return gg * og + oc

    stages, operands = epilogue_stages(spec, acc, channel_of, acc.shape)
    final = stages[-1] if stages else acc
    return [data, weight, *operands.values()], final, axes


def schedule(spec: Conv2dSpec, tile: ConvTile) -> Scheduled:
    """Tile, stage into SRAM, pipeline and blockize a convolution (see the module docstring)."""
    inputs, final, axes = compute(spec, tile)
    sch = s_tir.Schedule(te.create_prim_func([*inputs, final]))
    res = Scheduled(spec, tile, sch, axes=axes)
    nchw = spec.layout == "NCHW"
    grouped = spec.groups > 1
    if not grouped:
        res.dram_axes["data"] = spec.data.layout
    c = spec.in_channels // spec.groups
    blk = sch.get_sblock("acc" if spec.epilogue else spec.out.name)
    loops = sch.get_loops(blk)
    if grouped:
        if nchw:
            b, gg, o, y, x, rc, ry, rx = loops
        else:
            b, y, x, gg, o, rc, ry, rx = loops
    else:
        gg = None
        if nchw:
            b, o, y, x, rc, ry, rx = loops
        else:
            b, y, x, o, rc, ry, rx = loops
    go = gi = None
    if grouped:
        go, gi = split(sch, gg, tile.tg)
    oo, oi = split(sch, o, tile.toc)
    yo, yi = split(sch, y, tile.toh)
    xo, xi = split(sch, x, tile.tow)
    rco = None
    if tile.tic < c:
        rco, rc = split(sch, rc, tile.tic)
    # a group tile is outermost: its input channels serve only its own outputs
    groups = [go] if grouped else []
    inner = [gi, oi, yi, xi, rc, ry, rx] if grouped else [oi, yi, xi, rc, ry, rx]
    outer = [oo, yo, xo] if tile.order == Order.B_STATIONARY else [yo, xo, oo]
    sch.reorder(b, *groups, *outer, *([rco] if rco else []), *inner)
    s = sch.fuse(yo, xo)
    outer_loops = [*groups, oo, s] if tile.order == Order.B_STATIONARY else [*groups, s, oo]
    inner_out = outer_loops[-1]
    chan_inner = oo

    # input window: the pad stage lives in SRAM, computed per spatial (and rc) tile
    pad = sch.get_sblock("pad")
    sch.set_scope(pad, 0, SRAM)
    res.roles[buffer_name(sch, pad)] = "data"
    res.loads.append(attach(sch, pad, rco if rco else s, "dma"))
    w_s = sch.cache_read(blk, 1, SRAM)
    res.roles[buffer_name(sch, w_s)] = "weight"
    res.loads.append(attach(sch, w_s, rco if rco else chan_inner, "dma"))

    store = result_store(sch, spec, blk)
    init = sch.decompose_reduction(blk, rco if rco else inner[0])
    mark(sch, sch.blockize(sch.get_loops(init)[len(outer_loops) + 1]), "zero")
    mark(sch, sch.blockize(inner[0]), "conv")
    schedule_epilogue(sch, res, blk, inner_out, store, own_result=rco is not None)

    pipe = rco if rco is not None and extent(sch, rco) > 1 else inner_out
    pipeline(sch, pipe, tile.stages, res.loads, res.stores)
    return res
