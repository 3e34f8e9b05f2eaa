"""What every NPU template shares: TE pieces for epilogues, copy staging, pipelining.

A template is a function ``schedule(spec, tile) -> Scheduled``: it writes the
operator in TE, creates the PrimFunc, and schedules it with ``tvm.s_tir``. The
conventions the codegen relies on:

* every instruction is one blockized block (or, for overlapping halo copies, one
  loop nest) annotated ``npu.instr`` with its :class:`~.contract.SiteKind`
  (epilogue step index in ``npu.epi``); SRAM buffers carry a :class:`~.contract.Role`;
* splits never predicate (``disable_predication``): edge tiles overhang and the
  codegen clamps them, so blockize always succeeds;
* the innermost tile loop with more than one iteration carries the
  ``software_pipeline_stage`` annotation: loads in stage 0, compute in
  ``stages - 1``, stores in ``stages`` -- ``InjectSoftwarePipeline`` then gives
  every streamed SRAM buffer ``stages`` versions. A tensor-engine operator's epilogue
  may have a stage of its own (``stages``, its operands loaded in ``stages - 1``, the
  store in ``stages + 1``): the accumulator and the result then have two versions, and
  the vector engine finishes output tile i while the tensor engine computes tile i+1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tvm import s_tir, te, tirx

from tvm_npu.config import ACCUMULATOR, DType
from tvm_npu.core.epilogue import RULES, table_index
from tvm_npu.core.ops import Broadcast, Epilogue, OpSpec, TensorRef
from tvm_npu.core.tiles import TileParams

from .contract import EPI_KEY, INSTR_KEY, OPERAND_TAG, SRAM_SCOPE, Role, SiteKind


@dataclass
class Scheduled:
    """A scheduled operator and what the codegen needs to read it."""

    spec: OpSpec
    tile: TileParams
    sch: s_tir.Schedule
    roles: dict[str, str] = field(default_factory=dict)  # SRAM buffer name -> Role (or Role.operand(i))
    axes: dict[str, str] = field(default_factory=dict)  # role -> axis names of its buffer dims
    # role -> axis names of the DRAM tensor its load reads, where that layout differs (folded transforms)
    dram_axes: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)  # SRAM buffer -> buffer it may share storage with
    loads: list[s_tir.SBlockRV] = field(default_factory=list)
    stores: list[s_tir.SBlockRV] = field(default_factory=list)
    epilogue: list[s_tir.SBlockRV] = field(default_factory=list)  # the epilogue steps under the tile loop
    operand_loads: list[s_tir.SBlockRV] = field(default_factory=list)  # their per-tile operand loads (in loads)


def placeholder(ref: TensorRef, shape: Sequence[int] | None = None, name: str | None = None) -> te.Tensor:
    """The TE input for a DRAM tensor (a reshaped view when ``shape`` is given).

    ``name`` distinguishes a second use of the same tensor (its TIR buffer must have a
    name of its own); :func:`dram_name` maps it back.
    """
    return te.placeholder(tuple(shape or ref.shape), ref.dtype.np.name, name=name or ref.name)


def padded_reader(ref: TensorRef, tensor: te.Tensor, pad_top: int, pad_left: int) -> Callable[..., tirx.PrimExpr]:
    """``read(b, c, y, x)``: ``tensor`` (a DRAM input in ``ref.layout``) at NCHW coordinates of the
    padded image, so the input DMA reads the data in its own layout whatever layout the NPU
    computes in (a folded layout transform)."""
    if ref.layout == "NCHW":
        return lambda b, c, y, x: tensor[b, c, y - pad_top, x - pad_left]
    return lambda b, c, y, x: tensor[b, y - pad_top, x - pad_left, c]


def operand_name(ref: TensorRef, index: int | str) -> str:
    """TE name of epilogue step ``index``'s operand: unique even if the tensor is also the data."""
    return f"{ref.name}{OPERAND_TAG}{index}"


def dram_name(buffer: str) -> str:
    """The DRAM tensor a TIR input buffer stands for."""
    return buffer.split(OPERAND_TAG, 1)[0]


def acc_dtype(dtype: DType) -> str:
    return ACCUMULATOR[dtype].np.name


def epilogue_stages(
    spec: OpSpec,
    acc: te.Tensor,
    channel_of: Callable[[tuple], tirx.PrimExpr],
    operand_shape: Sequence[int] | None = None,
    given: dict[int, te.Tensor] | None = None,
) -> tuple[list[te.Tensor], dict[int, te.Tensor]]:
    """TE stages applying ``spec.epilogue`` to ``acc`` elementwise; returns (stages, operand inputs).

    ``channel_of(idx)`` gives the channel index of an output element (for per-channel
    operands); full-shape operands are viewed with ``operand_shape`` (default: acc's).
    ``given[i]`` is an existing tensor to read as step ``i``'s operand (the same DRAM tile
    as the data: loaded once). Stage ``i`` is named ``epi{i}``, except the last, which is
    named after the operator's DRAM output (the codegen maps TIR buffer names to DRAM tensors).
    """
    stages: list[te.Tensor] = []
    operands: dict[int, te.Tensor] = {}
    prev = acc
    for i, step in enumerate(spec.epilogue):
        operand = (given or {}).get(i)
        if step.operand is not None and operand is None:
            if step.broadcast in (Broadcast.CHANNEL, Broadcast.TABLE):
                operand = placeholder(step.operand, (step.operand.size,), operand_name(step.operand, i))
            else:
                operand = placeholder(step.operand, operand_shape or acc.shape, operand_name(step.operand, i))
            operands[i] = operand
        name = spec.out.name if i == len(spec.epilogue) - 1 else f"epi{i}"
        prev = te.compute(acc.shape, _stage_body(prev, operand, step, channel_of), name=name)
        stages.append(prev)
    return stages, operands


def _stage_body(prev: te.Tensor, operand: te.Tensor | None, step: Epilogue,
                channel_of: Callable[[tuple], tirx.PrimExpr]) -> Callable:
    def body(*idx):
        y = None
        if step.broadcast == Broadcast.TABLE:  # a lookup: the entry the value selects
            y = operand[table_index(prev[idx])]
        elif operand is not None:
            y = operand[channel_of(idx)] if step.broadcast == Broadcast.CHANNEL else operand[idx]
        return RULES[step.kind].te(prev[idx], y, step)

    return body


def value_read(step: Epilogue | None) -> int:
    """The read index of the value in a step's block: a table lookup reads its table first (the entry at
    the index the value gives), every other step the value first."""
    return 1 if step is not None and step.broadcast == Broadcast.TABLE else 0


def stage_operand(sch: s_tir.Schedule, res: Scheduled, block: s_tir.SBlockRV, idx: int,
                  loop: s_tir.LoopRV) -> None:
    """Stage epilogue step ``idx``'s operand in SRAM: per tile under ``loop``, except a lookup table, which
    any element may read: loaded whole, once, before the first tile (its region is not a tile's)."""
    step = res.spec.epilogue[idx]
    op_s = sch.cache_read(block, 1 - value_read(step), SRAM_SCOPE)
    res.roles[buffer_name(sch, op_s)] = Role.operand(idx)
    if step.broadcast == Broadcast.TABLE:
        mark(sch, sch.get_loops(op_s)[0], SiteKind.DMA)
        res.loads.append(op_s)
    else:
        res.loads.append(attach(sch, op_s, loop, SiteKind.DMA))
        res.operand_loads.append(op_s)


def split(sch: s_tir.Schedule, loop: s_tir.LoopRV, tile: int) -> tuple[s_tir.LoopRV, s_tir.LoopRV]:
    """Split without predicates: the last tile overhangs (the codegen clamps it)."""
    return sch.split(loop, [None, tile], disable_predication=True)


def attach(sch: s_tir.Schedule, block: s_tir.SBlockRV, loop: s_tir.LoopRV, kind: SiteKind,
           epi: int | None = None, reverse: bool = False) -> s_tir.SBlockRV:
    """Move a stage under ``loop`` and mark the loop nest it gets there as one instruction site.

    The nest, not a blockized block, is the site: at edge tiles the nest carries a
    predicate (which blockize rejects) and the codegen clamps instead.
    """
    (sch.reverse_compute_at if reverse else sch.compute_at)(block, loop)
    loops = sch.get_loops(block)
    target = sch.get(loop)
    pos = next(i for i, lp in enumerate(loops) if sch.get(lp).same_as(target))
    site = loops[pos + 1] if pos + 1 < len(loops) else block
    mark(sch, site, kind, epi)
    return block


def mark(sch: s_tir.Schedule, site: s_tir.SBlockRV | s_tir.LoopRV, kind: SiteKind, epi: int | None = None) -> None:
    """Annotate a block or loop as one instruction site of ``kind``."""
    sch.annotate(site, INSTR_KEY, kind.value)
    if epi is not None:
        sch.annotate(site, EPI_KEY, epi)


def buffer_name(sch: s_tir.Schedule, block: s_tir.SBlockRV) -> str:
    """Name of the buffer a block writes."""
    return sch.get(block).writes[0].source.name


def pipeline(sch: s_tir.Schedule, loop: s_tir.LoopRV, stages: int, loads: Sequence[s_tir.SBlockRV],
             stores: Sequence[s_tir.SBlockRV], epilogue: Sequence[s_tir.SBlockRV] = (),
             operand_loads: Sequence[s_tir.SBlockRV] = ()) -> None:
    """Annotate ``loop`` for ``InjectSoftwarePipeline`` (no-op for one stage or one iteration).

    ``epilogue`` (blocks under ``loop``) get a stage of their own after the compute, their
    ``operand_loads`` the compute's stage (two versions, not ``stages + 1``) and the stores the
    stage after the epilogue: every buffer between two engines then has two versions.
    """
    extent = sch.get(loop).extent
    if stages < 2 or not isinstance(extent, tirx.IntImm) or int(extent.value) < 2:
        return
    names = {kind: {sch.get(b).name_hint for b in blocks}
             for kind, blocks in (("load", loads), ("store", stores), ("epi", epilogue), ("opnd", operand_loads))}
    late = 1 if epilogue else 0
    children = sch.get_child_blocks(loop)
    stage_of = []
    for b in children:
        name = sch.get(b).name_hint
        if name in names["opnd"] and late:
            stage_of.append(stages - 1)
        elif name in names["load"]:
            stage_of.append(0)
        elif name in names["store"]:
            stage_of.append(stages + late)
        else:
            stage_of.append(stages if name in names["epi"] else stages - 1)
    sch.annotate(loop, "software_pipeline_stage", stage_of)
    sch.annotate(loop, "software_pipeline_order", list(range(len(children))))


def pipeline_outputs(sch: s_tir.Schedule, loop: s_tir.LoopRV, reduction: s_tir.LoopRV, res: Scheduled) -> None:
    """Pipeline the output-tile ``loop`` around a streamed (itself pipelined) reduction: the zeroing,
    the reduction loop and the epilogue operands' loads in stage 0, the epilogue in stage 1, the store
    after it, so the accumulator and the result have two versions and the next tile's reduction runs
    beside this tile's epilogue and store (no-op for one iteration)."""
    extent = sch.get(loop).extent
    if not isinstance(extent, tirx.IntImm) or int(extent.value) < 2:
        return
    epi = {sch.get(b).name_hint for b in res.epilogue}
    store = {sch.get(b).name_hint for b in res.stores}
    target, inner = sch.get(loop), sch.get(reduction)
    children: list[tuple[tirx.Stmt, int]] = []  # direct child statements of ``loop`` and their stages
    for b in sch.get_child_blocks(loop):
        loops = sch.get_loops(b)
        pos = next(i for i, lp in enumerate(loops) if sch.get(lp).same_as(target))
        child = sch.get(loops[pos + 1]) if pos + 1 < len(loops) else sch.get(b)
        name = sch.get(b).name_hint
        if not any(c.same_as(child) for c, _ in children):
            children.append((child, (2 if epi else 1) if name in store else 1 if name in epi else 0))
    stage_of = []
    for child, stage in children:
        # ``InjectSoftwarePipeline`` rewrites the pipelined reduction loop first, into three statements
        # (prologue, body, epilogue) that the outer pipeline takes as three children
        nested = child.same_as(inner) and "software_pipeline_stage" in inner.annotations
        stage_of += [stage] * (3 if nested else 1)
    sch.annotate(loop, "software_pipeline_stage", stage_of)
    sch.annotate(loop, "software_pipeline_order", list(range(len(stage_of))))


def result_store(sch: s_tir.Schedule, spec: OpSpec, acc: s_tir.SBlockRV) -> s_tir.SBlockRV:
    """Put the accumulator (and, with an epilogue, its stages) in SRAM; return the store copy."""
    if spec.epilogue:
        sch.set_scope(acc, 0, SRAM_SCOPE)
        return sch.cache_write(sch.get_sblock(spec.out.name), 0, SRAM_SCOPE)
    return sch.cache_write(acc, 0, SRAM_SCOPE)


def schedule_epilogue(sch: s_tir.Schedule, res: Scheduled, acc: s_tir.SBlockRV, loop: s_tir.LoopRV,
                      store: s_tir.SBlockRV, own_result: bool = False) -> None:
    """Attach the epilogue steps (in place on the accumulator), their operand loads and the
    store under ``loop``, the innermost output-tile loop.

    ``own_result``: the last step writes a buffer of its own even when it has the
    accumulator's shape (with a streamed reduction the next tile's accumulation then
    need not wait for this tile's store; with the epilogue in a stage of its own the store
    reads the result a stage after the accumulator's last use, so sharing its two versions
    would let the next tile but one overwrite what the store has yet to read).
    """
    spec = res.spec
    n_epi = len(spec.epilogue)
    prev = buffer_name(sch, acc)
    for idx, step in enumerate(spec.epilogue):
        e = sch.get_sblock(spec.out.name if idx == n_epi - 1 else f"epi{idx}")
        if idx < n_epi - 1:
            sch.set_scope(e, 0, SRAM_SCOPE)
        res.epilogue.append(attach(sch, e, loop, SiteKind.EPI, idx, reverse=True))
        if step.operand is not None:
            stage_operand(sch, res, e, idx, loop)
        if idx < n_epi - 1 or not own_result:
            res.aliases[buffer_name(sch, e)] = prev
        prev = buffer_name(sch, e)
    res.stores.append(attach(sch, store, loop, SiteKind.DMA, reverse=True))
