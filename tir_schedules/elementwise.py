"""Elementwise template: stream a tensor through SRAM in tiles, applying a chain of steps.

Used for elementwise regions that have no tensor-engine producer to fuse into
(and for every elementwise op at ``-fusion=0``).
"""

from __future__ import annotations

from tvm import s_tir, te

from .common import SRAM, Scheduled, attach, buffer_name, epilogue_stages, extent, mark, pipeline, placeholder, split
from .ops import ElementwiseSpec
from .params import EltwiseTile


def compute(spec: ElementwiseSpec) -> tuple[list[te.Tensor], te.Tensor]:
    data = placeholder(spec.data)
    chan = spec.out.layout.index("C") if "C" in spec.out.layout else len(spec.out.shape) - 1
    stages, operands = epilogue_stages(spec, data, lambda idx: idx[chan])
    return [data, *operands.values()], stages[-1]


def schedule(spec: ElementwiseSpec, tile: EltwiseTile) -> Scheduled:
    if not spec.epilogue:
        raise ValueError(f"{spec.name}: an elementwise operator needs at least one step")
    inputs, final = compute(spec)
    sch = s_tir.Schedule(te.create_prim_func([*inputs, final]))
    res = Scheduled(spec, tile, sch)
    n_epi = len(spec.epilogue)
    last = sch.get_sblock(spec.out.name)
    store = sch.cache_write(last, 0, SRAM)
    outer, inner = [], []
    for lp, t in zip(sch.get_loops(last), tile.tiles, strict=True):
        o, i = split(sch, lp, t)
        outer.append(o)
        inner.append(i)
    sch.reorder(*outer, *inner)
    t = sch.fuse(*outer)
    mark(sch, inner[0], "epi", n_epi - 1)
    prev = None
    for idx in range(n_epi - 1, -1, -1):
        e = sch.get_sblock(spec.out.name if idx == n_epi - 1 else f"epi{idx}")
        if idx < n_epi - 1:
            sch.set_scope(e, 0, SRAM)
            attach(sch, e, t, "epi", idx)
        if spec.epilogue[idx].operand is not None:
            op_s = sch.cache_read(e, 1, SRAM)
            res.roles[buffer_name(sch, op_s)] = f"operand{idx}"
            res.loads.append(attach(sch, op_s, t, "dma"))
        if prev is not None:
            res.aliases[prev] = buffer_name(sch, e)
        prev = buffer_name(sch, e)
    data_s = sch.cache_read(sch.get_sblock("epi0" if n_epi > 1 else spec.out.name), 0, SRAM)
    res.roles[buffer_name(sch, data_s)] = "data"
    res.loads.append(attach(sch, data_s, t, "dma"))
    if extent(sch, t) == 1 or tile.stages == 1:
        # in place on the loaded data only without pipelining: a pipelined load refills
        # its buffer before the previous tile's result is stored
        res.aliases[prev] = buffer_name(sch, data_s)
    res.stores.append(attach(sch, store, t, "dma", reverse=True))
    pipeline(sch, t, tile.stages, res.loads, res.stores)
    return res
