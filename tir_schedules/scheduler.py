"""The plan stage: every decision that spans the operators of one NPU partition.

``schedule_partition(graph, target) -> PartitionPlan`` decides, in this order:

0. a global average pool with no tile in SRAM becomes two pools (row bands, then the
   bands: :func:`split_global_pool`);
1. **fusion** (``-fusion>=1``): an elementwise operator folds into its producer's
   epilogue when the producer's result has no other use, the shapes match, a
   per-channel operand lines up with the producer's channel axis and the fused tile
   still fits the SRAM;
2. **residency** (``-fusion>=2``): an intermediate that only the next operator reads,
   and that takes at most an eighth of the SRAM, stays on chip. Regions are allocated
   from the top of the SRAM with lifetimes (producer .. last reader): a region is
   placed at the highest address free of every region live at the same time;
3. **tiles**: each operator's own buffers get the SRAM below the regions live while it
   runs; its tile is the tuned one (by :func:`~tvm_npu.core.ops.spec_key`) when it fits
   that budget, else the planner's choice.

At ``-fusion=3``, steps 2 and 3 give way to **layer groups** (:mod:`.groups`): after fusion,
interval dynamic programming over the operators picks which run together slice by slice
(intermediates in SRAM regions at the top, the steps' tiles below them) and which alone
(with the whole SRAM).

The codegen lowers the plan and decides nothing itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from tvm_npu.config import HardwareConfig, NpuTarget
from tvm_npu.core.epilogue import RULES
from tvm_npu.core.ops import (
    Broadcast,
    ElementwiseSpec,
    EpiKind,
    Epilogue,
    MatmulSpec,
    OpSpec,
    PoolKind,
    PoolSpec,
    TensorRef,
    spec_key,
)
from tvm_npu.core.plan import (
    GroupBuffer,
    GroupChoice,
    GroupPlan,
    GroupStep,
    OpPlan,
    PartitionGraph,
    PartitionPlan,
    PlanChoice,
    PlanChoiceWarning,
    SramRegion,
)
from tvm_npu.core.tiles import TileParams
from tvm_npu.core.views import storage

from . import groups, tile_search
from .kind import kind_of

#: Tuned tiles by :func:`~tvm_npu.core.ops.spec_key` (how tuning records reach the plan).
TileTable = Mapping[str, TileParams]

#: An on-chip intermediate may take at most this share of the SRAM.
RESIDENT_SHARE = 8


@dataclass
class _Op:
    spec: OpSpec
    fused: tuple[str, ...]


def schedule_partition(graph: PartitionGraph, target: NpuTarget, tiles: TileTable | None = None,
                   choice: PlanChoice | None = None) -> PartitionPlan:
    """Fuse, place on-chip intermediates and choose tiles for one partition (module docstring).

    ``choice`` (recorded by the model-level plan search) sets the fusion level and, at 3, the layer
    groups instead of the search. One that does not apply to this partition (a group past its
    operators, or that no longer forms or fits) warns (:class:`PlanChoiceWarning`) and the partition
    is planned as without it: a build never fails over a stale record."""
    if choice is not None:
        try:
            return _plan(graph, target, tiles or {}, choice.fusion, choice.groups)
        except _Inapplicable as e:
            warnings.warn(f"{graph.symbol}: recorded plan choice {choice} does not apply ({e}); planned without it",
                          PlanChoiceWarning, stacklevel=2)
    return _plan(graph, target, tiles or {}, target.options.fusion, None)


def group_planner(graph: PartitionGraph, target: NpuTarget, tiles: TileTable | None = None) -> groups.Planner:
    """The layer-group planner over ``graph``'s operators after fusion (what a plan choice's indices
    count): the plan search ranks other groupings than the search's best with it."""
    return groups.Planner([o.spec for o in _fused(graph, target, 3)], graph.outputs, target, tiles or {},
                          graph.buffers)


def _fused(graph: PartitionGraph, target: NpuTarget, fusion: int) -> list[_Op]:
    ops = []
    for g in graph.ops:
        bands = split_global_pool(g.spec, target) if isinstance(g.spec, PoolSpec) else None
        ops.extend([_Op(g.spec, g.fused)] if bands is None else [_Op(b, g.fused) for b in bands])
    return fuse(ops, graph.outputs, target) if fusion >= 1 else ops


def _plan(graph: PartitionGraph, target: NpuTarget, tiles: TileTable, fusion: int,
          chosen: Sequence[GroupChoice] | None) -> PartitionPlan:
    """The plan at ``fusion``; at 3 with the ``chosen`` groups, or the search's when None."""
    hw = target.hw
    ops = _fused(graph, target, fusion)
    if fusion >= 3:
        planned, grouped = _plan_groups(ops, graph, target, tiles, chosen)
        return PartitionPlan(graph.symbol, str(target), graph.inputs, graph.outputs, tuple(planned), (),
                             graph.buffers, tuple(grouped))
    resident = _allocate(ops, graph.outputs, hw) if fusion >= 2 else []
    while True:
        try:
            planned = [_plan_op(k, op, resident, target, tiles) for k, op in enumerate(ops)]
            break
        except _Tight as e:  # the regions live at this operator leave no tile: give them up
            resident = [r for r in resident if not r.live_at(e.op)]
    return PartitionPlan(graph.symbol, str(target), graph.inputs, graph.outputs, tuple(planned), tuple(resident),
                         graph.buffers)


class _Inapplicable(Exception):
    """A plan choice names groups this partition cannot form."""


class _Tight(Exception):
    def __init__(self, op: int) -> None:
        self.op = op


def _plan_op(k: int, op: _Op, resident: Sequence[SramRegion], target: NpuTarget, tiles: TileTable) -> OpPlan:
    hw, opts = target.hw, target.options
    live = [r.addr for r in resident if r.live_at(k)]
    limit = min(live, default=hw.max_sram_bytes)
    tile = tiles.get(spec_key(op.spec))
    if tile is None or tile_search.footprint(op.spec, tile, hw) > limit:
        try:
            tile = tile_search.choose(op.spec, hw, opts, limit)
        except tile_search.NoTileFits:
            if live:
                raise _Tight(k) from None
            raise
    est = tile_search.estimate(op.spec, tile, hw)
    return OpPlan(op.spec, tile, op.fused, limit, est.cycles, est.sram_bytes)


# ---------------------------------------------------------------- layer groups
def _plan_groups(ops: Sequence[_Op], graph: PartitionGraph, target: NpuTarget, tiles: TileTable,
                 chosen: Sequence[GroupChoice] | None = None) -> tuple[list[OpPlan], list[GroupPlan]]:
    """``-fusion=3``: the grouping :func:`groups.search` finds (or the ``chosen`` one), as operator plans
    and group plans. A group's intermediates take the top of the SRAM (two versions each when it has
    several slices); its steps' buffers go below them."""
    hw = target.hw
    planned: list[OpPlan] = []
    grouped: list[GroupPlan] = []
    p = groups.Planner([o.spec for o in ops], graph.outputs, target, tiles, graph.buffers)
    for i, j, choice in groups.search(p) if chosen is None else _chosen_groups(p, chosen):
        if choice is None:
            planned.append(_plan_op(i, ops[i], [], target, tiles))
            continue
        top = hw.max_sram_bytes
        buffers = []
        for name, nbytes in choice.buffers:
            addrs = tuple(top - nbytes * (v + 1) for v in range(choice.versions))
            top -= nbytes * choice.versions
            buffers.append(GroupBuffer(name, addrs, nbytes))
        steps = tuple(GroupStep(i + st.member, st.slice, OpPlan(st.spec, st.tile, ops[i + st.member].fused, top,
                                                                st.estimate.cycles, st.estimate.sram_bytes))
                      for st in choice.steps)
        for k in range(i, j + 1):
            mine = [st.op for st in steps if st.member == k]
            planned.append(OpPlan(ops[k].spec, mine[0].tile, ops[k].fused, top,
                                  sum(o.predicted_cycles for o in mine), max(o.sram_bytes for o in mine)))
        grouped.append(GroupPlan(i, j, choice.rows, choice.slices, tuple(buffers), steps, choice.cost))
    return planned, grouped


def _chosen_groups(p: groups.Planner, chosen: Sequence[GroupChoice]) -> list[tuple[int, int, groups.Choice | None]]:
    """The intervals of a plan choice, as :func:`groups.search` returns them: its groups at their slice
    counts, every other operator alone."""
    n = len(p.ops)
    parts: list[tuple[int, int, groups.Choice | None]] = []
    k = 0
    for g in chosen:
        if g.last >= n:
            raise _Inapplicable(f"group {g.first}..{g.last} is past its {n} operators")
        choice = p.group(g.first, g.last, g.slices)
        if choice is None:
            raise _Inapplicable(f"operators {g.first}..{g.last} do not form a group of {g.slices} slices that fits")
        parts += [(x, x, None) for x in range(k, g.first)] + [(g.first, g.last, choice)]
        k = g.last + 1
    return parts + [(x, x, None) for x in range(k, n)]


# ------------------------------------------------------------- big global pools
def split_global_pool(spec: PoolSpec, target: NpuTarget) -> tuple[PoolSpec, PoolSpec] | None:
    """A global average pool with no tile in SRAM (a whole map per channel tile) as two pools that
    do fit, or None: averages of ``k`` bands of rows, then the average of the bands (equal bands,
    so the mean is the same up to rounding). Squeeze-and-excitation pools of early, large maps."""
    hw, opts = target.hw, target.options
    data, out = spec.data, spec.out
    if spec.kind != PoolKind.AVG or "H" not in out.layout or tile_search.fits(spec, hw, opts):
        return None
    h, w = data.dim("H"), data.dim("W")
    if spec.kernel != (h, w) or any(spec.padding) or out.dim("H") != 1 or out.dim("W") != 1:
        return None
    for k in (k for k in range(2, h + 1) if h % k == 0):
        mid = tuple(k if a == "H" else out.dim(a) for a in out.layout)
        bands = replace(spec, name=f"{spec.name}_bands", out=TensorRef(f"{out.name}_bands", mid, out.dtype, out.layout),
                        kernel=(h // k, w), strides=(h // k, w), epilogue=())
        total = replace(spec, data=bands.out, kernel=(k, 1), strides=(1, 1))
        if tile_search.fits(bands, hw, opts) and tile_search.fits(total, hw, opts):
            return bands, total
    return None


# ---------------------------------------------------------------------- fusion
def _consumers(ops: Sequence[_Op]) -> dict[str, int]:
    """Readers per tensor; a read through a view counts for the viewed tensor too (it must stay in DRAM)."""
    count: dict[str, int] = {}
    for op in ops:
        for t in op.spec.inputs:
            count[t.name] = count.get(t.name, 0) + 1
            if t.view is not None:
                count[t.view.base] = count.get(t.view.base, 0) + 1
    return count


#: Binary steps that are not commutative but have a twin with the two tensors' roles exchanged: a
#: residual add of 8-bit tensors (its block input read again by the next block) goes onto the producer
#: of its other tensor.
_EXCHANGED = {EpiKind.QADD: EpiKind.QADD_R, EpiKind.QADD_R: EpiKind.QADD}


def fuse(ops: list[_Op], outputs: Sequence[str], target: NpuTarget) -> list[_Op]:
    """Fold elementwise operators into their producer's epilogue (``-fusion>=1``)."""
    changed = True
    while changed:
        changed = False
        uses = _consumers(ops)
        producer = {op.spec.out.name: i for i, op in enumerate(ops)}
        for j, op in enumerate(ops):
            spec = op.spec
            if not isinstance(spec, ElementwiseSpec):
                continue
            steps = list(spec.epilogue)
            tries = [(spec.data, steps)]
            first = steps[0] if steps else None
            # a binary step that commutes (or has an exchanged twin) may go to the other operand's producer
            # instead, when the data's cannot take it (computed outside, read again -- a residual add's block
            # input is read by the next block too --, or the other operand is computed after it)
            if (first is not None and (RULES[first.kind].commutative or first.kind in _EXCHANGED)
                    and first.operand is not None and first.broadcast == Broadcast.FULL):
                swapped = replace(first, operand=spec.data, kind=_EXCHANGED.get(first.kind, first.kind))
                tries.append((first.operand, [swapped, *steps[1:]]))
            for src, chain in tries:
                fused = _fused_into(ops, j, src, chain, uses, producer, outputs, target)
                if fused is not None:
                    i, spec_i = fused
                    ops[i] = _Op(spec_i, ops[i].fused + op.fused)
                    del ops[j]
                    changed = True
                    break
            if changed:
                break
    return ops


def _fused_into(ops: list[_Op], j: int, src: TensorRef, steps: list[Epilogue], uses: Mapping[str, int],
                producer: Mapping[str, int], outputs: Sequence[str], target: NpuTarget) -> tuple[int, OpSpec] | None:
    """(index, fused spec) of ``src``'s producer with ``ops[j]``'s ``steps`` appended, where that is exact
    and fits; None otherwise."""
    spec = ops[j].spec
    i = producer.get(src.name)
    if i is None or uses.get(src.name, 0) != 1 or src.name in outputs or ops[i].spec.out.view is not None:
        return None  # (a producer writing through a view fills a concat that others read)
    prod = ops[i].spec
    if kind_of(prod).direct:
        return None  # emitted without a template, and without epilogue steps (a resize)
    if prod.out.shape != spec.out.shape or prod.out.dtype != src.dtype:
        return None  # the steps were checked from the consumer's input type: a cast or requantisation may follow
    if any(s.broadcast == Broadcast.CHANNEL for s in steps) and channel_axis(spec) != channel_axis(prod):
        return None  # a per-channel operand would line up with another axis
    between = {storage(o.spec.out) for o in ops[i + 1 : j]} | {o.spec.out.name for o in ops[i + 1 : j]}
    if any(s.operand is not None and {s.operand.name, storage(s.operand)} & between for s in steps):
        return None  # an operand computed between producer and consumer: would be read too early
    fused = replace(prod, out=replace(spec.out, layout=prod.out.layout),
                    epilogue=prod.epilogue + tuple(_relayout(s, prod.out) for s in steps))
    return (i, fused) if tile_search.fits(fused, target.hw, target.options) else None


def channel_axis(spec: OpSpec) -> int:
    """The output axis per-channel epilogue operands run along."""
    layout = spec.out.layout
    if isinstance(spec, MatmulSpec) or "C" not in layout:
        return len(spec.out.shape) - 1
    return layout.index("C")


def _relayout(step: Epilogue, out: TensorRef) -> Epilogue:
    """An elementwise step moved onto a producer keeps its operand, in the producer's layout."""
    if step.operand is not None and step.broadcast == Broadcast.FULL:
        return replace(step, operand=replace(step.operand, layout=out.layout))
    return step


# ------------------------------------------------------------------- residency
def _allocate(ops: Sequence[_Op], outputs: Sequence[str], hw: HardwareConfig) -> list[SramRegion]:
    """On-chip regions for the intermediates ``-fusion=2`` keeps (module docstring, step 2)."""
    uses = _consumers(ops)
    regions: list[SramRegion] = []
    for k in range(len(ops) - 1):
        out = ops[k].spec.out
        nbytes = hw.align(out.nbytes)
        readers = {t.name for t in ops[k + 1].spec.inputs}
        if out.name in outputs or uses.get(out.name, 0) != 1 or out.name not in readers or out.view is not None:
            continue
        if nbytes > hw.max_sram_bytes // RESIDENT_SHARE:
            continue
        busy = sorted(((r.addr, r.addr + r.nbytes) for r in regions if r.last_use >= k), reverse=True)
        top = hw.max_sram_bytes
        for lo, hi in busy:  # highest first: slide below every live region that overlaps
            if top - nbytes < hi and lo < top:
                top = lo
        regions.append(SramRegion(out.name, top - nbytes, nbytes, k, k + 1))
    return regions
