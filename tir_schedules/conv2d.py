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

Engines (``ConvTile.engine``): the tensor engine computes every convolution as an
implicit GEMM; a depthwise one (one input and one output channel per group) may run on
the vector engine instead (``VDWCONV``: all lanes busy, where the array would use one
column per group). The template is the same for both except for the loops: a vector
tile fuses the group-tile and spatial loops into one pipelined loop (so tiles of whole
maps still overlap) and keeps the whole layer's weights and per-channel epilogue
operands (bias, requantisation multipliers) in SRAM, loaded once (a few bytes per
channel; a load per tile would cost a descriptor's latency each). The codegen picks the
instruction, and the cost model estimates both so the planner chooses per layer. A grouped
tensor-engine tile may fuse its loops the same way (``ConvTile.stream_groups``), loading each
group's weights with the step's input instead of once.

A one-row window with a row stride (a 1x1 / 2 convolution) may read only the input rows it uses
(``ConvTile.skip_rows``, ``strided.py``): the template, the cost model and the emitter then see the
operator over a row-skipping view of its input (:meth:`Conv2d.as_scheduled`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from tvm import s_tir, te, tirx
from tvm_npu.simulator import timing

from tvm_npu.config import ACCUMULATOR, CompilerOptions, DepthwiseEngine, HardwareConfig
from tvm_npu.core.ops import Broadcast, Conv2dSpec
from tvm_npu.core.tiles import ConvEngine, ConvTile, Order

from .common import (
    Scheduled,
    acc_dtype,
    attach,
    buffer_name,
    epilogue_stages,
    mark,
    padded_reader,
    pipeline,
    pipeline_outputs,
    placeholder,
    result_store,
    schedule_epilogue,
    split,
)
from .contract import SRAM_SCOPE, Role, SiteKind
from .cost import (
    NO_COPY,
    Copy,
    Pipelining,
    Step,
    axis_tiles,
    boxes,
    epilogue_sizes,
    sum_ceil,
    tile_extents,
    touched,
    vector_cycles,
    window_sum,
    windows,
)
from .cost import ceil_div as _ceil
from .kind import OpKind, RowWindow, epilogue_text, register
from .strided import as_read, skips_rows


def padded_extent(out: int, tile: int, stride: int, kernel: int, dilation: int, size: int, pad: int) -> int:
    """Rows of the padded input stage: enough for every tile of the (overhanging) tile grid."""
    grid = (_ceil(out, tile) * tile - 1) * stride + (kernel - 1) * dilation + 1
    return max(size + pad, grid)


@dataclass(frozen=True)
class _Geometry:
    """The sizes and constants :func:`compute`'s stages are defined over (names as in the spec)."""

    nchw: bool
    n: int
    h: int
    w: int
    o: int
    oh: int
    ow: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    g: int
    cg: int
    og: int
    hp: int
    wp: int
    cp: int
    adt: str
    zero: tirx.expr.PrimExpr  # what padding reads (an 8-bit input's zero point)
    acc_name: str

    @staticmethod
    def of(spec: Conv2dSpec, tile: ConvTile) -> _Geometry:
        """The geometry of ``spec`` padded for ``tile``."""
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
        return _Geometry(spec.layout == "NCHW", n, h, w, o, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, g, cg, og,
                         hp, wp, cp, acc_dtype(spec.data.dtype), tirx.const(spec.pad_value, dt),
                         "acc" if spec.epilogue else spec.out.name)

    def valid(self, hh, ww, cc):
        """Whether a padded position reads the input (else the padding value)."""
        h, w, pt, pl, cg = self.h, self.w, self.pt, self.pl, self.cg
        return tirx.all(hh >= pt, hh < h + pt, ww >= pl, ww < w + pl, cc < cg)

    def reduce_axes(self) -> tuple[tirx.IterVar, tirx.IterVar, tirx.IterVar]:
        """The reduction axes over input channels, kernel rows and kernel columns."""
        rc = te.reduce_axis((0, self.cg), name="rc")
        ry = te.reduce_axis((0, self.kh), name="ry")
        rx = te.reduce_axis((0, self.kw), name="rx")
        return rc, ry, rx


def compute(spec: Conv2dSpec, tile: ConvTile) -> tuple[list[te.Tensor], te.Tensor, dict[str, str]]:
    """TE definition: inputs, final output and the axis names of the stages' buffers."""
    geo = _Geometry.of(spec, tile)
    data, weight, acc, axes, channel_of = (_grouped if geo.g > 1 else _ungrouped)(spec, geo)
    stages, operands = epilogue_stages(spec, acc, channel_of, acc.shape)
    final = stages[-1] if stages else acc
    return [data, weight, *operands.values()], final, axes


def _ungrouped(spec: Conv2dSpec, geo: _Geometry) -> tuple:
    """A convolution of one group: data, weight, accumulator, axis names, channel of an output index."""
    nchw, n, o, oh, ow, zero, valid = geo.nchw, geo.n, geo.o, geo.oh, geo.ow, geo.zero, geo.valid
    sh, sw, dh, dw, hp, wp, cp, adt = geo.sh, geo.sw, geo.dh, geo.dw, geo.hp, geo.wp, geo.cp, geo.adt
    data = placeholder(spec.data)
    weight = placeholder(spec.weight)
    read = padded_reader(spec.data, data, geo.pt, geo.pl)

    if nchw:
        pad = te.compute((n, cp, hp, wp), lambda b, cc, hh, ww: tirx.if_then_else(
            valid(hh, ww, cc), read(b, cc, hh, ww), zero), name="pad")
    else:
        pad = te.compute((n, hp, wp, cp), lambda b, hh, ww, cc: tirx.if_then_else(
            valid(hh, ww, cc), read(b, cc, hh, ww), zero), name="pad")
    rc, ry, rx = geo.reduce_axes()

    def term(b, oc, y, x):
        v = pad[b, rc, y * sh + ry * dh, x * sw + rx * dw] if nchw else pad[b, y * sh + ry * dh, x * sw + rx * dw, rc]
        return te.sum(v.astype(adt) * weight[oc, rc, ry, rx].astype(adt), axis=[rc, ry, rx])

    if nchw:
        acc = te.compute((n, o, oh, ow), lambda b, oc, y, x: term(b, oc, y, x), name=geo.acc_name)
        axes = {"data": "NCHW", "out": "NCHW"}
    else:
        acc = te.compute((n, oh, ow, o), lambda b, y, x, oc: term(b, oc, y, x), name=geo.acc_name)
        axes = {"data": "NHWC", "out": "NHWC"}
    axes["weight"] = "OIHW"

    def channel_of(idx):
        return idx[1] if nchw else idx[3]

    return data, weight, acc, axes, channel_of


def _grouped(spec: Conv2dSpec, geo: _Geometry) -> tuple:
    """A grouped convolution (groups as an axis of their own): as :func:`_ungrouped`."""
    nchw, n, g, cg, og, zero, valid = geo.nchw, geo.n, geo.g, geo.cg, geo.og, geo.zero, geo.valid
    h, w, oh, ow, pt, pl, kh, kw = geo.h, geo.w, geo.oh, geo.ow, geo.pt, geo.pl, geo.kh, geo.kw
    sh, sw, dh, dw, hp, wp, cp, adt = geo.sh, geo.sw, geo.dh, geo.dw, geo.hp, geo.wp, geo.cp, geo.adt
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
    rc, ry, rx = geo.reduce_axes()

    def gterm(b, gg, oc, y, x):
        if nchw:
            v = pad[b, gg, rc, y * sh + ry * dh, x * sw + rx * dw]
        else:
            v = pad[b, y * sh + ry * dh, x * sw + rx * dw, gg, rc]
        return te.sum(v.astype(adt) * weight[gg, oc, rc, ry, rx].astype(adt), axis=[rc, ry, rx])

    if nchw:
        acc = te.compute(shape, lambda b, gg, oc, y, x: gterm(b, gg, oc, y, x), name=geo.acc_name)
    else:
        acc = te.compute(shape, lambda b, y, x, gg, oc: gterm(b, gg, oc, y, x), name=geo.acc_name)

    def channel_of(idx):
        gg, oc = (idx[1], idx[2]) if nchw else (idx[3], idx[4])
        return gg * og + oc

    return data, weight, acc, axes, channel_of


def depthwise(spec: Conv2dSpec) -> bool:
    """One input and one output channel per group: what the vector engine's ``VDWCONV`` computes."""
    g = spec.groups
    return g > 1 and spec.in_channels == g and spec.out.dim("C") == g


def group_quantum(spec: Conv2dSpec, hw: HardwareConfig) -> int:
    """Groups per depthwise tile that make every buffer version a whole number of SRAM granules.

    Two versions of a pipelined buffer that shared a granule would share bytes that the
    synchronisation pass tracks together, ordering each load after the previous tile's compute
    and serialising the pipeline.
    """
    sizes = [spec.data.dtype.itemsize, spec.weight.dtype.itemsize, spec.out.dtype.itemsize,
             *(e.operand.dtype.itemsize for e in spec.epilogue if e.operand is not None)]
    return hw.sram_align_bytes // math.gcd(hw.sram_align_bytes, min(sizes))


def streams_groups(tile: ConvTile) -> bool:
    """Whether the group-tile loop is fused into the pipelined loop (vector-engine tiles, and grouped
    tensor-engine tiles that choose it: ``ConvTile.stream_groups``)."""
    return tile.engine == ConvEngine.VECTOR or tile.stream_groups


def whole_weights(tile: ConvTile) -> bool:
    """Whether the whole layer's weights (and per-channel epilogue operands) are loaded once (vector tiles:
    a few bytes per channel); a streaming tensor tile loads its group's with each step's data instead, so
    the next group's weights arrive while the array computes this one's."""
    return tile.engine == ConvEngine.VECTOR


def _window(spec: Conv2dSpec, tile: ConvTile) -> tuple[int, int]:
    """Input rows and columns one output tile reads (halo included)."""
    (kh, kw), (sh, sw), (dh, dw) = spec.kernel, spec.strides, spec.dilation
    return (tile.toh - 1) * sh + (kh - 1) * dh + 1, (tile.tow - 1) * sw + (kw - 1) * dw + 1


class _StepCosts:
    """The copies of :meth:`Conv2d.steps`: the boxes of data, weights, output and epilogue operands a
    step moves, priced with box costers looked up once per call. Boxes repeat across the loop (the
    input window across output-channel tiles, the weights across spatial tiles) and are priced once
    (``memo``)."""

    def __init__(self, spec: Conv2dSpec, tile: ConvTile, hw: HardwareConfig) -> None:
        self.nchw = spec.layout == "NCHW"
        self.g = spec.groups
        self.cg, self.og = spec.data.dim("C") // self.g, spec.out.dim("C") // self.g
        self.kh, self.kw = spec.kernel
        (self.sh, self.sw), (self.pt, self.pl) = spec.strides, spec.padding[:2]
        self.rows, self.cols = _window(spec, tile)
        self.whole = whole_weights(tile)
        self.streamed = streams_groups(tile)
        self.outer_b = tile.order == Order.B_STATIONARY
        dt = spec.data.dtype
        self.window = windows(hw, dt, spec.data, spec.layout)
        self.weights = boxes(hw, dt, tuple(spec.weight.shape))
        self.outs = boxes(hw, spec.out.dtype, tuple(spec.out.shape), spec.out.on_chip)
        self.epi = [(e, boxes(hw, e.operand.dtype, (e.operand.size,), False) if e.broadcast == Broadcast.CHANNEL
                     else boxes(hw, e.operand.dtype, tuple(spec.out.shape), e.operand.on_chip))
                    for e in spec.epilogue if e.operand is not None and e.broadcast != Broadcast.TABLE]  # once
        self.memo: dict[tuple, Copy] = {}

    def data_box(self, b, gt, ct, y, x) -> Copy:
        """The input window of one step (input-channel tile ``ct`` of group tile ``gt``)."""
        key = ("d", b, gt, ct, y[0], x[0])
        hit = self.memo.get(key)
        if hit is None:
            cg = self.cg
            cl = gt[0] * cg + ct[0]
            ce = (gt[1] - 1) * cg + ct[1] if gt[1] > 1 else ct[1]
            r0, c0 = y[0] * self.sh - self.pt, x[0] * self.sw - self.pl
            hit = self.memo[key] = self.window.cost((b, cl, r0, c0), (1, ce, self.rows, self.cols))
        return hit

    def weight_box(self, gt, ot, ct) -> Copy:
        """The weights of output-channel tile ``ot`` and input-channel tile ``ct``."""
        key = ("w", gt, ot, ct)
        hit = self.memo.get(key)
        if hit is None:
            og = self.og
            o0 = gt[0] * og + ot[0]
            oe = (gt[1] - 1) * og + ot[1] if gt[1] > 1 else ot[1]
            hit = self.memo[key] = self.weights.cost((o0, ct[0], 0, 0), (oe, ct[1], self.kh, self.kw))
        return hit

    def out_box(self, b, gt, ot, y, x, box=None) -> Copy:
        """The output tile's box in ``box`` (default: the output's)."""
        box = self.outs if box is None else box
        og = self.og
        o0 = gt[0] * og + ot[0]
        oe = (gt[1] - 1) * og + ot[1] if gt[1] > 1 else ot[1]
        if self.nchw:
            return box.cost((b, o0, y[0], x[0]), (1, oe, y[1], x[1]))
        return box.cost((b, y[0], x[0], o0), (1, y[1], x[1], oe))

    def epi_loads(self, b, gt, ot, y, x, channel=True, full=True) -> Copy:
        """The epilogue operands of an output tile: per-channel ones if ``channel``, whole ones if ``full``."""
        cost = NO_COPY
        for e, box in self.epi:
            if not (channel if e.broadcast == Broadcast.CHANNEL else full):
                continue
            if e.broadcast == Broadcast.CHANNEL:
                key = ("c", box, gt, ot)
                hit = self.memo.get(key)
                if hit is None:
                    hit = self.memo[key] = box.cost((gt[0] * self.og + ot[0],), (gt[1] * ot[1],))
                cost += hit
            else:
                cost += self.out_box(b, gt, ot, y, x, box)
        return cost

    def loads(self, b, gt, ot, ct, y, x, new_outer: bool, pipelined_rc: bool) -> tuple[Copy, Copy | None]:
        """A step's loads, and those of its outer loop's stationary operand (None: none at this step)."""
        stationary = None
        if self.whole:  # weights and per-channel operands of every group stay in SRAM
            loads = self.data_box(b, gt, ct, y, x)
            if new_outer:
                g, every = self.g, (0, self.og)
                stationary = self.weight_box((0, g), every, ct) + self.epi_loads(b, (0, g), every, y, x, full=False)
        elif pipelined_rc or self.streamed:
            loads = self.data_box(b, gt, ct, y, x) + self.weight_box(gt, ot, ct)
        elif self.outer_b:
            loads = self.data_box(b, gt, ct, y, x)
            stationary = self.weight_box(gt, ot, ct) if new_outer else None
        else:
            loads = self.weight_box(gt, ot, ct)
            stationary = self.data_box(b, gt, ct, y, x) if new_outer else None
        return loads, stationary


class _ConvLoops(NamedTuple):
    """The loops of a tiled convolution that :meth:`Conv2d.schedule` attaches its stages to."""

    batch: s_tir.LoopRV  # the image loop
    rco: s_tir.LoopRV | None  # the input-channel tile loop (None: the reduction is not split)
    spatial: s_tir.LoopRV  # the (fused) spatial tile loop: where the input window changes
    channel: s_tir.LoopRV  # where the weights change: the output-channel tile loop (a vector tile: the image)
    inner_out: s_tir.LoopRV  # the innermost output-tile loop
    depth: int  # output-tile loops inside the image loop
    tile: s_tir.LoopRV  # the outermost loop of one tile's computation (blockized into the instruction)


def _named_loops(loops: list[s_tir.LoopRV], nchw: bool, grouped: bool) -> tuple:
    """The conv block's loops as ``b, gg, o, y, x, rc, ry, rx`` whatever the layout (``gg`` None: no groups)."""
    if grouped:
        if nchw:
            b, gg, o, y, x, rc, ry, rx = loops
        else:
            b, y, x, gg, o, rc, ry, rx = loops
        return b, gg, o, y, x, rc, ry, rx
    if nchw:
        b, o, y, x, rc, ry, rx = loops
    else:
        b, y, x, o, rc, ry, rx = loops
    return b, None, o, y, x, rc, ry, rx


def _tile_loops(sch: s_tir.Schedule, blk: s_tir.SBlockRV, spec: Conv2dSpec, tile: ConvTile) -> _ConvLoops:
    """Split the conv block's loops by ``tile`` and order them: group tile outermost (its input channels
    serve only its own outputs), output-tile loops in ``tile.order`` (spatial ones fused), the
    input-channel tile loop, then one tile's loops. A vector tile fuses all output-tile loops into one."""
    grouped = spec.groups > 1
    b, gg, o, y, x, rc, ry, rx = _named_loops(sch.get_loops(blk), spec.layout == "NCHW", grouped)
    go = gi = None
    if grouped:
        go, gi = split(sch, gg, tile.tg)
    oo, oi = split(sch, o, tile.toc)
    yo, yi = split(sch, y, tile.toh)
    xo, xi = split(sch, x, tile.tow)
    rco = None
    if tile.tic < spec.in_channels // spec.groups:
        rco, rc = split(sch, rc, tile.tic)
    groups = [go] if grouped else []
    inner = [gi, oi, yi, xi, rc, ry, rx] if grouped else [oi, yi, xi, rc, ry, rx]
    outer = [oo, yo, xo] if tile.order == Order.B_STATIONARY else [yo, xo, oo]
    sch.reorder(b, *groups, *outer, *([rco] if rco else []), *inner)
    s = sch.fuse(yo, xo)
    outer_loops = [*groups, oo, s] if tile.order == Order.B_STATIONARY else [*groups, s, oo]
    chan_inner = oo
    if streams_groups(tile):  # one pipelined loop over group and spatial tiles
        s = sch.fuse(*outer_loops)
        outer_loops = [s]
        chan_inner = b if whole_weights(tile) else s  # all weights loaded once, or a tile's with its data
    return _ConvLoops(b, rco, s, chan_inner, outer_loops[-1], len(outer_loops), inner[0])


def _stage_inputs(sch: s_tir.Schedule, res: Scheduled, blk: s_tir.SBlockRV, loops: _ConvLoops) -> None:
    """Load the input window and the weights into SRAM where each changes, so every load moves only
    what the next tiles read: the pad stage lives in SRAM, computed per spatial (and rc) tile."""
    pad = sch.get_sblock("pad")
    sch.set_scope(pad, 0, SRAM_SCOPE)
    res.roles[buffer_name(sch, pad)] = Role.DATA
    res.loads.append(attach(sch, pad, loops.rco if loops.rco else loops.spatial, SiteKind.DMA))
    w_s = sch.cache_read(blk, 1, SRAM_SCOPE)
    res.roles[buffer_name(sch, w_s)] = Role.WEIGHT
    res.loads.append(attach(sch, w_s, loops.rco if loops.rco else loops.channel, SiteKind.DMA))


def _load_channel_operands_once(sch: s_tir.Schedule, res: Scheduled, spec: Conv2dSpec, batch: s_tir.LoopRV) -> None:
    """Replace a vector tile's per-tile loads of per-channel epilogue operands by one load of each whole
    vector per image: a few bytes per channel, where a load per tile would cost a descriptor's latency."""
    for idx, step in enumerate(spec.epilogue):
        if step.operand is None or step.broadcast != Broadcast.CHANNEL:
            continue
        i = next(i for i, x in enumerate(res.loads) if res.roles.get(buffer_name(sch, x)) == Role.operand(idx))
        per_tile = res.loads[i]
        whole = sch.cache_read(per_tile, 0, SRAM_SCOPE)  # a copy of the whole vector, at the root
        del res.roles[buffer_name(sch, per_tile)]
        res.operand_loads.remove(per_tile)
        sch.compute_inline(per_tile)  # the epilogue step reads the whole vector
        res.roles[buffer_name(sch, whole)] = Role.operand(idx)
        res.loads[i] = attach(sch, whole, batch, SiteKind.DMA)


class Conv2d(OpKind):
    """2-D convolution (grouped and depthwise included) on the tensor engine, depthwise also on the vector engine."""

    spec_type = Conv2dSpec
    tile_type = ConvTile
    name = "conv2d"

    # ---------------------------------------------------------------- template
    def pipelining(self, spec: Conv2dSpec, tile: ConvTile) -> Pipelining:
        """The input-channel loop when the reduction is streamed, else the innermost output-tile
        loop (spatial tiles with weights stationary, output-channel tiles with the input stationary).
        A tensor-engine tile's epilogue gets a stage of its own there, or with a streamed reduction
        the output-tile loop is pipelined around it (the vector engine then works beside the array;
        on a vector tile it would only wait for itself)."""
        g = spec.groups
        streamed = min(tile.tic, spec.in_channels // g) < spec.in_channels // g
        n_sp = _ceil(spec.out.dim("H"), tile.toh) * _ceil(spec.out.dim("W"), tile.tow)
        n_oc = _ceil(spec.out.dim("C") // g, tile.toc)
        inner = n_sp if tile.order == Order.B_STATIONARY else n_oc
        if streams_groups(tile):
            inner = _ceil(g, tile.tg) * n_oc * n_sp
        own = inner > 1 and tile.stages > 1 and (streamed or bool(spec.epilogue)) and tile.engine == ConvEngine.TENSOR
        return Pipelining(streamed or inner > 1, streamed, own)

    def as_scheduled(self, spec: Conv2dSpec, tile: ConvTile) -> Conv2dSpec:
        return as_read(spec, tile.skip_rows)

    def definition(self, spec: Conv2dSpec, tile: ConvTile) -> tuple:
        return compute(self.as_scheduled(spec, tile), tile)

    def schedule(self, spec: Conv2dSpec, tile: ConvTile) -> Scheduled:
        """Tile, stage into SRAM, pipeline and blockize a convolution (see the module docstring)."""
        spec = self.as_scheduled(spec, tile)
        inputs, final, axes = compute(spec, tile)
        sch = s_tir.Schedule(te.create_prim_func([*inputs, final]))
        res = Scheduled(spec, tile, sch, axes=axes)
        if spec.groups == 1:
            res.dram_axes[Role.DATA] = spec.data.layout
        blk = sch.get_sblock("acc" if spec.epilogue else spec.out.name)
        loops = _tile_loops(sch, blk, spec, tile)
        _stage_inputs(sch, res, blk, loops)

        rco = loops.rco
        store = result_store(sch, spec, blk)
        init = sch.decompose_reduction(blk, rco if rco else loops.tile)
        mark(sch, sch.blockize(sch.get_loops(init)[loops.depth + 1]), SiteKind.ZERO)
        mark(sch, sch.blockize(loops.tile), SiteKind.CONV)
        p = self.pipelining(spec, tile)
        schedule_epilogue(sch, res, blk, loops.inner_out, store, own_result=rco is not None or p.epilogue_stage)
        if whole_weights(tile):  # per-channel epilogue operands, like the weights, are loaded once
            _load_channel_operands_once(sch, res, spec, loops.batch)

        pipe = rco if p.streamed_reduction else loops.inner_out
        late = (res.epilogue, res.operand_loads) if p.epilogue_stage and not p.streamed_reduction else ((), ())
        pipeline(sch, pipe, tile.stages, res.loads, res.stores, *late)
        if p.epilogue_stage and p.streamed_reduction:
            pipeline_outputs(sch, loops.inner_out, rco, res)
        return res

    # -------------------------------------------------------------- tile space
    def axes(self, spec: Conv2dSpec, hw: HardwareConfig, opts: CompilerOptions) -> dict[str, list]:
        g = spec.groups
        og, cg = spec.out.dim("C") // g, spec.in_channels // g
        oh, ow = spec.out.dim("H"), spec.out.dim("W")
        if g > 1:
            # several groups per tile only when each group has one output channel
            tg = [1] if og > 1 else tile_extents(g, group_quantum(spec, hw) if depthwise(spec) else 1, opts)
            toc = [og] if og == 1 else [t for t in tile_extents(og, hw.mac_cols, opts) if og % t == 0]
            tic = [cg]
        else:
            tg, toc, tic = [1], tile_extents(og, hw.mac_cols, opts), tile_extents(cg, hw.mac_rows, opts, limit=4)
        vector = depthwise(spec) and opts.depthwise_engine == DepthwiseEngine.AUTO  # -depthwise-engine=tensor: never
        engines = [ConvEngine.TENSOR, ConvEngine.VECTOR] if vector else [ConvEngine.TENSOR]
        return {"toc": toc, "toh": tile_extents(oh, 1, opts, limit=16), "tow": tile_extents(ow, 1, opts, limit=4),
                "tic": tic, "order": list(Order), "stages": [opts.pipeline_stages], "tg": tg, "engine": engines,
                "skip_rows": [False, True] if skips_rows(spec) else [False],
                "stream_groups": [False, True] if g > 1 and og > 1 else [False]}

    def fallback_axes(self, spec: Conv2dSpec, hw: HardwareConfig, opts: CompilerOptions) -> dict[str, list] | None:
        """Depthwise tiles of fewer groups than :func:`group_quantum`: buffer versions then share an SRAM
        granule, which serialises the pipeline, but a depthwise window too large for a quantum of groups
        (the 8-bit global average pool of a large image is one, a window of the whole image) still runs."""
        if spec.groups == 1 or spec.out.dim("C") // spec.groups > 1:
            return None
        axes = self.axes(spec, hw, opts)
        fewer = [t for t in tile_extents(spec.groups, 1, opts) if t < axes["tg"][0]]
        return {**axes, "tg": fewer} if fewer else None

    def admits(self, spec: Conv2dSpec, tile: ConvTile) -> bool:
        if streams_groups(tile) and tile.order != Order.B_STATIONARY:
            return False  # the loop order means nothing when every loop is fused into one
        if tile.engine == ConvEngine.VECTOR and not depthwise(spec):
            return False
        return tile.tg == 1 or tile.toc == spec.out.dim("C") // spec.groups  # a multi-group tile holds whole groups

    def whole_rows(self, spec: Conv2dSpec, tile: ConvTile) -> bool:
        return tile.tow == spec.out.dim("W")

    def footprint(self, spec: Conv2dSpec, tile: ConvTile, hw: HardwareConfig) -> int:
        spec = self.as_scheduled(spec, tile)
        cg = spec.in_channels // spec.groups
        kh, kw = spec.kernel
        rows, cols = _window(spec, tile)
        tic = min(tile.tic, cg)
        p = self.pipelining(spec, tile)
        streamed_rc = p.streamed_reduction
        outer_b = tile.order == Order.B_STATIONARY
        s = tile.stages if p.pipelined else 1
        isz = spec.data.dtype.itemsize
        out_tile = tile.tg * tile.toc * tile.toh * tile.tow
        data_v = s if (streamed_rc or outer_b) else 1
        w_v = s if (streamed_rc or not outer_b or streams_groups(tile)) and not whole_weights(tile) else 1
        own = p.epilogue_stage  # accumulator, result and epilogue operands double-buffered
        out_v = 2 if own else 1 if streamed_rc else (2 if s > 1 else 1)
        w_out = spec.out.dim("C") if whole_weights(tile) else tile.tg * tile.toc  # every group's, or the tile's
        buffers = [data_v * tile.tg * tic * rows * cols * isz, w_v * w_out * tic * kh * kw * isz]
        buffers += epilogue_sizes(spec, out_tile, tile.tg * tile.toc, ACCUMULATOR[spec.data.dtype],
                                  2 if own else 1 if streamed_rc else s, out_v, streamed_rc or own,
                                  spec.out.dim("C") if whole_weights(tile) else None, 2 if own else 1)
        return sum(hw.align(x) for x in buffers)

    # -------------------------------------------------------------- cost model
    def steps(self, spec: Conv2dSpec, tile: ConvTile, hw: HardwareConfig) -> Iterator[Step]:
        """The steps of ``tile``'s loop nest in order, with their copies (:class:`_StepCosts`) and cycles."""
        spec = self.as_scheduled(spec, tile)
        n, c = spec.data.dim("N"), spec.data.dim("C")
        o, oh, ow = spec.out.dim("C"), spec.out.dim("H"), spec.out.dim("W")
        g = spec.groups
        kh, kw = spec.kernel
        dt = spec.data.dtype
        rc_tiles = axis_tiles(c // g, min(tile.tic, c // g))
        g_tiles = axis_tiles(g, tile.tg)
        oc_tiles = axis_tiles(o // g, tile.toc)
        y_tiles, x_tiles = axis_tiles(oh, tile.toh), axis_tiles(ow, tile.tow)
        costs = _StepCosts(spec, tile, hw)
        outer_b = tile.order == Order.B_STATIONARY
        pipelined_rc = len(rc_tiles) > 1
        on_vector = tile.engine == ConvEngine.VECTOR
        vec_memo: dict[tuple[int, int, int], int] = {}
        mm_memo: dict[tuple[int, int, int, int], int] = {}
        for b in range(n):
            if outer_b:
                pairs = (((gt, ot), (y, x)) for gt in g_tiles for ot in oc_tiles for y in y_tiles for x in x_tiles)
            else:
                pairs = (((gt, ot), (y, x)) for gt in g_tiles for y in y_tiles for x in x_tiles for ot in oc_tiles)
            prev_outer = None
            slot = 0
            for (gt, ot), (y, x) in pairs:
                outer_key = () if streams_groups(tile) else (gt, ot) if outer_b else (gt, y, x)
                new_outer = outer_key != prev_outer
                slot = 0 if new_outer else slot + 1
                prev_outer = outer_key
                m = y[1] * x[1]
                oe = ot[1]
                vec = vec_memo.get((gt[1], oe, m))
                if vec is None:
                    vec = vector_cycles(hw, spec, gt[1] * oe * m)
                    if on_vector:  # the windows run on the vector engine, before the epilogue
                        vec += timing.vector_cycles(hw, gt[1] * m, kh * kw)
                    vec_memo[gt[1], oe, m] = vec
                store = costs.out_box(b, gt, ot, y, x)
                for ri, ct in enumerate(rc_tiles):
                    tensor = 0
                    if not on_vector:
                        tensor = mm_memo.get((m, oe, ct[1], gt[1]))
                        if tensor is None:
                            tensor = mm_memo[m, oe, ct[1], gt[1]] = timing.matmul_cycles(
                                hw, m, oe, ct[1] * kh * kw, dt, gt[1])
                    loads, stationary = costs.loads(b, gt, ot, ct, y, x, new_outer, pipelined_rc)
                    last = ri == len(rc_tiles) - 1
                    operands = costs.epi_loads(b, gt, ot, y, x, channel=not whole_weights(tile)) if last else NO_COPY
                    yield Step(loads, tensor, last, vec if last else 0, store if last else NO_COPY, stationary,
                               operands, ri if pipelined_rc else slot, slot)

    def compute_floor(self, spec: Conv2dSpec, tile: ConvTile, hw: HardwareConfig) -> int:
        """Tensor-engine work of all steps (none when the vector engine computes the windows)."""
        if tile.engine == ConvEngine.VECTOR:
            return 0
        g = spec.groups
        kh, kw = spec.kernel
        og, cg = spec.out.dim("C") // g, spec.in_channels // g
        tic = min(tile.tic, cg)
        oh, ow = spec.out.dim("H"), spec.out.dim("W")
        n_steps = _ceil(g, tile.tg) * _ceil(og, tile.toc) * _ceil(cg, tic) * _ceil(oh, tile.toh) * _ceil(ow, tile.tow)
        passes = g * sum_ceil(og, tile.toc, hw.mac_cols) * sum_ceil(cg, tic, hw.mac_rows, kh * kw)
        work = passes * oh * ow * hw.mac_pass_cycles(spec.data.dtype)
        return spec.data.dim("N") * (n_steps * hw.tensor_issue_cycles + work)

    def traffic_floor(self, spec: Conv2dSpec, tile: ConvTile, hw: HardwareConfig) -> float:
        spec = self.as_scheduled(spec, tile)
        extra = sum(e.operand.nbytes for e in spec.epilogue
                    if e.operand is not None and e.broadcast == Broadcast.FULL)
        g = spec.groups
        kh, kw = spec.kernel
        oh, ow = spec.out.dim("H"), spec.out.dim("W")
        h, w = spec.data.dim("H"), spec.data.dim("W")
        og, cg = spec.out.dim("C") // g, spec.in_channels // g
        rows = window_sum(oh, tile.toh, spec.strides[0], kh, spec.dilation[0], h, spec.padding[0])
        cols = window_sum(ow, tile.tow, spec.strides[1], kw, spec.dilation[1], w, spec.padding[1])
        data = spec.data.dim("N") * spec.in_channels * rows * cols * spec.data.dtype.itemsize
        n_oc, n_sp = _ceil(og, tile.toc), _ceil(oh, tile.toh) * _ceil(ow, tile.tow)
        streamed = min(tile.tic, cg) < cg
        b_stat = tile.order == Order.B_STATIONARY
        data_loads = n_oc if (b_stat or streamed) else 1
        per_step = (streamed or not b_stat or streams_groups(tile)) and not whole_weights(tile)
        weight_loads = spec.data.dim("N") * (n_sp if per_step else 1)
        total = data * data_loads + spec.weight.nbytes * weight_loads + spec.out.nbytes + extra
        return total / hw.dram_bytes_per_cycle

    def outer_count(self, spec: Conv2dSpec, tile: ConvTile) -> int:
        if streams_groups(tile):
            return 1
        if tile.order == Order.B_STATIONARY:
            return _ceil(spec.groups, tile.tg) * _ceil(spec.out.dim("C") // spec.groups, tile.toc)
        return _ceil(spec.groups, tile.tg) * _ceil(spec.out.dim("H"), tile.toh) * _ceil(spec.out.dim("W"), tile.tow)

    def step_count(self, spec: Conv2dSpec, tile: ConvTile) -> int:
        g = spec.groups
        return (spec.data.dim("N") * _ceil(g, tile.tg) * _ceil(spec.out.dim("C") // g, tile.toc)
                * _ceil(spec.in_channels // g, min(tile.tic, spec.in_channels // g))
                * _ceil(spec.out.dim("H"), tile.toh) * _ceil(spec.out.dim("W"), tile.tow))

    # ----------------------------------------------------------------- bounds
    def needed_bytes(self, spec: Conv2dSpec) -> dict[str, int]:
        """The input window rows and columns some output reads (a strided 1x1 conv skips rows)."""
        need = super().needed_bytes(spec)
        (kh, kw), (sh, sw) = spec.kernel, spec.strides
        rows = touched(spec.out.dim("H"), sh, kh, spec.dilation[0], spec.data.dim("H"), spec.padding[0])
        cols = touched(spec.out.dim("W"), sw, kw, spec.dilation[1], spec.data.dim("W"), spec.padding[1])
        data = spec.data.dim("N") * spec.data.dim("C") * rows * cols * spec.data.dtype.itemsize
        uses = [t for t in spec.inputs if t.name == spec.data.name]
        need[spec.data.name] = max([data] + [t.nbytes for t in uses[1:]])  # another use may need all of it
        return need

    # ----------------------------------------------------------------- reports
    def row_window(self, spec: Conv2dSpec) -> RowWindow:
        return RowWindow(spec.kernel[0], spec.strides[0], spec.dilation[0], spec.padding[0], spec.padding[2])

    def describe(self, spec: Conv2dSpec) -> str:
        kh, kw = spec.kernel
        groups = f" g{spec.groups}" if spec.groups > 1 else ""
        return f"conv{kh}x{kw}/s{spec.strides[0]} {spec.data.shape}->{spec.out.shape}{groups}" + epilogue_text(spec)


KIND = register(Conv2d())
