"""Elementwise template: stream a tensor through SRAM in tiles, applying a chain of steps.

Used for elementwise regions that have no tensor-engine producer to fuse into
(and for every elementwise op at ``-fusion=0``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from tvm import s_tir, te

from tvm_npu.config import CompilerOptions, HardwareConfig
from tvm_npu.core.ops import Broadcast, ElementwiseSpec, EpiKind
from tvm_npu.core.tiles import EltwiseTile

from .common import (
    Scheduled,
    attach,
    buffer_name,
    epilogue_stages,
    mark,
    pipeline,
    placeholder,
    split,
    stage_operand,
    value_read,
)
from .contract import SRAM_SCOPE, Role, SiteKind
from .cost import (
    NO_COPY,
    Pipelining,
    Step,
    axis_tiles,
    boxes,
    chain,
    step_itemsizes,
    tile_extents,
    vector_cycles,
)
from .cost import ceil_div as _ceil
from .kind import OpKind, RowWindow, register


def _channel(spec: ElementwiseSpec) -> int:
    """The axis per-channel operands run along."""
    return spec.out.layout.index("C") if "C" in spec.out.layout else len(spec.out.shape) - 1


#: ``x op x`` kinds whose TE expression still reads ``x`` once it is simplified (``x - x``,
#: ``max(x, x)`` and ``min(x, x)`` fold away, leaving a block that reads nothing to stage).
_SHARED_OPERAND = frozenset({EpiKind.ADD, EpiKind.MUL})


def _first_reads_data(spec: ElementwiseSpec) -> bool:
    """``x + x``, ``x * x``: the first step's operand is the data itself, tile for tile (loaded once)."""
    first = spec.epilogue[0] if spec.epilogue else None
    return (first is not None and first.kind in _SHARED_OPERAND and first.operand is not None
            and first.operand.name == spec.data.name and first.broadcast == Broadcast.FULL)


def _tile_count(spec: ElementwiseSpec, tile: EltwiseTile) -> int:
    return math.prod(_ceil(a, t) for a, t in zip(spec.out.shape, tile.tiles, strict=True))


def compute(spec: ElementwiseSpec) -> tuple[list[te.Tensor], te.Tensor]:
    data = placeholder(spec.data)
    chan = _channel(spec)
    given = {0: data} if _first_reads_data(spec) else {}
    stages, operands = epilogue_stages(spec, data, lambda idx: idx[chan], given=given)
    return [data, *operands.values()], stages[-1]


class Elementwise(OpKind):
    """A chain of elementwise steps streamed through SRAM on the vector engine."""

    spec_type = ElementwiseSpec
    tile_type = EltwiseTile
    name = "elementwise"

    # ---------------------------------------------------------------- template
    def pipelining(self, spec: ElementwiseSpec, tile: EltwiseTile) -> Pipelining:
        """The fused tile loop."""
        return Pipelining(_tile_count(spec, tile) > 1)

    def definition(self, spec: ElementwiseSpec, tile: EltwiseTile) -> tuple:
        return compute(spec)

    def schedule(self, spec: ElementwiseSpec, tile: EltwiseTile) -> Scheduled:
        if not spec.epilogue:
            raise ValueError(f"{spec.name}: an elementwise operator needs at least one step")
        inputs, final = compute(spec)
        sch = s_tir.Schedule(te.create_prim_func([*inputs, final]))
        res = Scheduled(spec, tile, sch)
        n_epi = len(spec.epilogue)
        last = sch.get_sblock(spec.out.name)
        store = sch.cache_write(last, 0, SRAM_SCOPE)
        outer, inner = [], []
        for lp, t in zip(sch.get_loops(last), tile.tiles, strict=True):
            o, i = split(sch, lp, t)
            outer.append(o)
            inner.append(i)
        sch.reorder(*outer, *inner)
        t = sch.fuse(*outer)
        mark(sch, inner[0], SiteKind.EPI, n_epi - 1)
        prev = None
        for idx in range(n_epi - 1, -1, -1):
            e = sch.get_sblock(spec.out.name if idx == n_epi - 1 else f"epi{idx}")
            if idx < n_epi - 1:
                sch.set_scope(e, 0, SRAM_SCOPE)
                attach(sch, e, t, SiteKind.EPI, idx)
            if spec.epilogue[idx].operand is not None and not (idx == 0 and _first_reads_data(spec)):
                stage_operand(sch, res, e, idx, t)
            if prev is not None:
                res.aliases[prev] = buffer_name(sch, e)
            prev = buffer_name(sch, e)
        data_s = sch.cache_read(sch.get_sblock("epi0" if n_epi > 1 else spec.out.name), value_read(spec.epilogue[0]),
                                SRAM_SCOPE)
        res.roles[buffer_name(sch, data_s)] = Role.DATA
        res.loads.append(attach(sch, data_s, t, SiteKind.DMA))
        if not self.pipelining(spec, tile).pipelined or tile.stages == 1:
            # in place on the loaded data only without pipelining: a pipelined load refills
            # its buffer before the previous tile's result is stored
            res.aliases[prev] = buffer_name(sch, data_s)
        res.stores.append(attach(sch, store, t, SiteKind.DMA, reverse=True))
        pipeline(sch, t, tile.stages, res.loads, res.stores)
        return res

    # -------------------------------------------------------------- tile space
    def axes(self, spec: ElementwiseSpec, hw: HardwareConfig, opts: CompilerOptions) -> dict[str, list]:
        shape = spec.out.shape
        # tile the outermost non-unit axis (keeping inner rows whole: long DRAM runs), or also the next one
        axis = next((i for i, d in enumerate(shape) if d > 1), 0)
        tiles = []
        if axis + 1 < len(shape):
            for t2 in tile_extents(shape[axis + 1], 1, opts, limit=16):
                tiles.append(tuple(1 if i <= axis else t2 if i == axis + 1 else d for i, d in enumerate(shape)))
        for t in tile_extents(shape[axis], 1, opts, limit=64):
            tiles.append(tuple(1 if i < axis else t if i == axis else d for i, d in enumerate(shape)))
        return {"tiles": tiles, "stages": [opts.pipeline_stages]}

    def footprint(self, spec: ElementwiseSpec, tile: EltwiseTile, hw: HardwareConfig) -> int:
        s = tile.stages if self.pipelining(spec, tile).pipelined else 1
        chan = _channel(spec)
        elems = math.prod(tile.tiles)
        isz = spec.data.dtype.itemsize
        # the loaded data is worked on in place only when not pipelined (see the template)
        buffers = [s * elems * isz] if s > 1 else []
        stage_sizes = [isz, *step_itemsizes(spec, spec.data.dtype)[:-1]]  # each step's input
        buffers += chain([(1, elems * z) for z in (stage_sizes[1:] if s > 1 else stage_sizes)]
                         + [(2 if s > 1 else 1, elems * spec.out.dtype.itemsize)])
        for i, e in enumerate(spec.epilogue):
            if e.broadcast == Broadcast.TABLE:  # loaded once (the template): one version
                buffers.append(e.operand.nbytes)
            elif e.operand is not None and not (i == 0 and _first_reads_data(spec)):
                n = tile.tiles[chan] if e.broadcast == Broadcast.CHANNEL else elems
                buffers.append(s * n * e.operand.dtype.itemsize)
        return sum(hw.align(x) for x in buffers)

    # -------------------------------------------------------------- cost model
    def steps(self, spec: ElementwiseSpec, tile: EltwiseTile, hw: HardwareConfig) -> Iterator[Step]:
        shape = spec.out.shape
        chan = _channel(spec)
        tiles = itertools.product(*(axis_tiles(n, t) for n, t in zip(shape, tile.tiles, strict=True)))
        # each tensor's box coster looked up once per call, not per step
        data = boxes(hw, spec.data.dtype, tuple(shape), spec.data.on_chip)
        result = boxes(hw, spec.out.dtype, tuple(shape), spec.out.on_chip)
        operands = [(e.broadcast == Broadcast.CHANNEL,
                     boxes(hw, e.operand.dtype, (e.operand.size,)) if e.broadcast == Broadcast.CHANNEL
                     else boxes(hw, e.operand.dtype, tuple(shape), e.operand.on_chip))
                    for i, e in enumerate(spec.epilogue)
                    if e.operand is not None and e.broadcast != Broadcast.TABLE  # once: cost.with_table_loads
                    and not (i == 0 and _first_reads_data(spec))]
        vec: dict[int, int] = {}
        for slot, box in enumerate(tiles):
            lo = tuple(a for a, _ in box)
            ext = tuple(e for _, e in box)
            loads = data.cost(lo, ext)
            for per_channel, operand in operands:
                loads += operand.cost((lo[chan],), (ext[chan],)) if per_channel else operand.cost(lo, ext)
            n = math.prod(ext)
            if n not in vec:
                vec[n] = vector_cycles(hw, spec, n)
            # everything is consumed by the vector engine: model the loads as epilogue operands
            yield Step(loads=NO_COPY, vector=vec[n], store=result.cost(lo, ext), operands=loads, slot=slot)

    def traffic_floor(self, spec: ElementwiseSpec, tile: EltwiseTile, hw: HardwareConfig) -> float:
        extra = sum(e.operand.nbytes for e in spec.epilogue
                    if e.operand is not None and e.broadcast == Broadcast.FULL)
        return (spec.data.nbytes + spec.out.nbytes + extra) / hw.dram_bytes_per_cycle

    def step_count(self, spec: ElementwiseSpec, tile: EltwiseTile) -> int:
        return _tile_count(spec, tile)

    # ----------------------------------------------------------------- reports
    def row_window(self, spec: ElementwiseSpec) -> RowWindow | None:
        if (len(spec.out.shape) != 4 or "H" not in spec.out.layout or spec.data.shape != spec.out.shape
                or spec.data.layout != spec.out.layout):
            return None
        return RowWindow(1, 1, 1, 0, 0)

    def describe(self, spec: ElementwiseSpec) -> str:
        return f"{'+'.join(e.kind.value for e in spec.epilogue)} {spec.out.shape}"

    def compute_dtype(self, spec: ElementwiseSpec) -> str:
        return spec.out.dtype.np.name


KIND = register(Elementwise())
