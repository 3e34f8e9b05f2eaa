"""Lower one partition plan into an NPU artifact: every operator scheduled, lowered and
emitted in the plan's order, then the semaphore pass makes the engines safe.

Nothing is decided here: fusion, on-chip intermediates, SRAM budgets and tiles all
come from the :class:`~tvm_npu.core.plan.PartitionPlan`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
from tvm_npu.simulator import ProgramBuilder, disassemble, isa
from tvm_npu.tir_schedules import kind_of

from tvm_npu.config import HardwareConfig
from tvm_npu.core.artifact import Artifact, GroupInfo, LayerInfo
from tvm_npu.core.ops import OpSpec
from tvm_npu.core.plan import GroupPlan, OpPlan, PartitionPlan, slice_name
from tvm_npu.core.tiles import TileParams, tile_to_json
from tvm_npu.core.views import storage

from .emit import Resident
from .operator import Dump, compile_operator
from .sync import insert_semaphores


def lower_plan(plan: PartitionPlan, constants: Mapping[str, np.ndarray], hw: HardwareConfig,
               dump_dir: Path | None = None) -> bytearray:
    """Compile ``plan`` (whose constants are ``constants``) into an encoded :class:`Artifact`."""
    return Artifact.pack(*_lowered(plan, constants, hw, dump_dir))


def lower_plan_parts(plan: PartitionPlan, constants: Mapping[str, np.ndarray], hw: HardwareConfig,
                     dump_dir: Path | None = None) -> list[bytearray | np.ndarray | bytes]:
    """:func:`lower_plan`'s bytes as consecutive parts (:meth:`Artifact.pack_parts`), the constants' arrays
    among them as they are: what the build's runtime modules hold, so the weights are not copied."""
    return Artifact.pack_parts(*_lowered(plan, constants, hw, dump_dir))


def _lowered(plan: PartitionPlan, constants: Mapping[str, np.ndarray], hw: HardwareConfig,
             dump_dir: Path | None) -> tuple:
    """:meth:`Artifact.pack`'s arguments for ``plan``: every operator scheduled, lowered and emitted."""
    _check_names(plan, constants)
    asm = ProgramBuilder(hw)
    resident = {r.tensor: Resident(r.addr, plan.ops[r.producer].spec.out.dtype) for r in plan.resident}
    resident.update(_group_slices(plan))  # layer groups' intermediates: never in DRAM
    intermediates = {b.tensor for g in plan.groups for b in g.buffers}
    _declare_tensors(asm, plan, constants, resident, intermediates)
    layers: list[LayerInfo] = []
    place = _Placement(hw)
    for layer, op in enumerate(plan.ops):
        group = plan.group_of(layer)
        _emit_layer(asm, place, plan, layer, group, dump_dir, resident)
        layers.append(_layer_info(op, group, constants, resident, intermediates))
    instructions, tags = insert_semaphores(hw, asm.instructions, asm.tags, [t.shape for t in asm.tensors])
    layers = _with_spans(plan, layers, tags)
    program = asm.build(instructions)
    if dump_dir is not None:
        (dump_dir / f"{plan.dump_stem}.program.txt").write_text(disassemble(program))
    return (plan.symbol, plan.target, [t.name for t in plan.inputs], list(plan.outputs), layers, program,
            [_group_info(plan, g) for g in plan.groups])


def _dram_kind(plan: PartitionPlan, name: str) -> isa.TensorKind:
    """A computed DRAM tensor is the partition's output if the plan says so, else scratch it alone uses."""
    return isa.TensorKind.OUTPUT if name in plan.outputs else isa.TensorKind.SCRATCH


def _declare_tensors(asm: ProgramBuilder, plan: PartitionPlan, constants: Mapping[str, np.ndarray],
                     resident: Mapping[str, Resident], intermediates: set[str]) -> None:
    """Declare the partition's DRAM tensors in a fixed order (inputs, the plan's buffers, then each
    operator's tensors), so tensor indices are stable; constants carry their data, and tensors kept
    on chip get no DRAM storage."""
    inputs = {t.name for t in plan.inputs}
    for t in plan.inputs:
        asm.declare(t.name, t.shape, t.dtype, isa.TensorKind.INPUT)
    for t in plan.buffers:  # concat outputs: written slice by slice through views
        if t.name not in intermediates:
            asm.declare(t.name, t.shape, t.dtype, _dram_kind(plan, t.name))
    for op in plan.ops:
        for t in (*op.spec.inputs, op.spec.out):
            if t.view is not None:  # no storage of its own: the emitter addresses its base
                if t.view.base in constants:  # a constant read through a view (copied into a concat)
                    data = constants[t.view.base]
                    asm.declare(t.view.base, data.shape, t.dtype, isa.TensorKind.CONSTANT, data)
                continue
            if t.name in constants:
                asm.declare(t.name, constants[t.name].shape, t.dtype, isa.TensorKind.CONSTANT, constants[t.name])
            elif t.name not in inputs and t.name not in resident and t.name not in intermediates:
                asm.declare(t.name, t.shape, t.dtype, _dram_kind(plan, t.name))


def _emit_layer(asm: ProgramBuilder, place: _Placement, plan: PartitionPlan, layer: int, group: GroupPlan | None,
                dump_dir: Path | None, resident: Mapping[str, Resident]) -> None:
    """Emit operator ``layer``; a layer group is emitted whole at its first member, slice by slice
    (its members take turns, so later members have nothing left to emit)."""
    if group is None:
        _emit(asm, place, plan.ops[layer], layer, _dumper(dump_dir, plan, f"{layer:03d}"), resident)
    elif layer == group.first:
        for st in group.steps:
            _emit(asm, place, st.op, st.member, _dumper(dump_dir, plan, f"{st.member:03d}.s{st.slice}"), resident)


def _layer_info(op: OpPlan, group: GroupPlan | None, constants: Mapping[str, np.ndarray],
                resident: Mapping[str, Resident], intermediates: set[str]) -> LayerInfo:
    """The report record of one operator (its instruction ranges are known only after synchronisation).
    Its DRAM bytes are the compulsory reads and writes: each tensor once, only what is needed, nothing
    for a tensor kept on chip."""
    spec = op.spec
    kind = kind_of(spec)
    need = kind.needed_bytes(spec)
    return LayerInfo(
        name=spec.name, op=kind.name, description=kind.describe(spec), tile=tile_to_json(op.tile), first=0,
        last=0, macs=int(spec.macs), dtype=kind.compute_dtype(spec),
        layout_in=spec.inputs[0].layout or getattr(spec, "layout", ""), layout_out=spec.out.layout,
        input_bytes=sum(b for t, b in need.items() if t not in constants and t not in resident
                        and t not in intermediates),
        weight_bytes=sum(b for t, b in need.items() if t in constants),
        output_bytes=0 if spec.out.name in resident or storage(spec.out) in intermediates else spec.out.nbytes,
        sram_bytes=op.sram_bytes if group is None else group.sram_bytes,
        predicted_cycles=op.predicted_cycles,
        fused=list(op.fused),
    )


def _layer_spans(tags: Sequence[int]) -> dict[int, list[list[int]]]:
    """Each layer's instruction ranges ``[first, last)`` after synchronisation was inserted (several
    for a group's members, which take turns)."""
    spans: dict[int, list[list[int]]] = {}
    for idx, tag in enumerate(tags):
        runs = spans.setdefault(tag, [])
        if runs and runs[-1][1] == idx:
            runs[-1][1] = idx + 1
        else:
            runs.append([idx, idx + 1])
    return spans


def _with_spans(plan: PartitionPlan, layers: list[LayerInfo], tags: Sequence[int]) -> list[LayerInfo]:
    """``layers`` with their instruction ranges (from the instructions' layer ``tags``) and layer groups."""
    spans = _layer_spans(tags)
    group_index = {k: n for n, g in enumerate(plan.groups) for k in g.members}
    return [replace(li, first=spans[i][0][0] if i in spans else 0, last=spans[i][-1][1] if i in spans else 0,
                    spans=spans[i] if len(spans.get(i, ())) > 1 else [], group=group_index.get(i, -1))
            for i, li in enumerate(layers)]


def compile_tasks(plan: PartitionPlan) -> list[tuple[OpSpec, TileParams]]:
    """Every (spec, tile) :func:`lower_plan` compiles: the operators outside layer groups, and the
    steps of each group."""
    ops = [(op.spec, op.tile) for k, op in enumerate(plan.ops) if plan.group_of(k) is None]
    return ops + [(st.op.spec, st.op.tile) for g in plan.groups for st in g.steps]


def _dumper(dump_dir: Path | None, plan: PartitionPlan, suffix: str) -> Dump | None:
    if dump_dir is None:
        return None
    base = dump_dir / f"{plan.dump_stem}.{suffix}"

    def dump(stage: str, text: str) -> None:
        Path(f"{base}.{stage}.txt").write_text(text)

    return dump


class _Placement:
    """Places each operator's buffers where they overlap least with those of the operators just before
    it (the more recent, the more it counts), so its first loads need not wait for their last compute
    on the same bytes: with the constants loaded first (:func:`_constants_first`) and DRAM dependences
    tracked by element (``sync.py``), an operator's prologue overlaps its predecessors' drain. The
    candidates are the two ends of its budget and the edges of the recent operators' buffers."""

    #: How many operators back count, and their weights (most recent first).
    WEIGHTS = (4, 2, 1)

    def __init__(self, hw: HardwareConfig) -> None:
        self.hw = hw
        self.recent: list[tuple[int, int]] = []  # most recent first

    def __call__(self, op: OpPlan) -> int:
        g, size = self.hw.sram_align_bytes, op.sram_bytes
        top = max(0, (op.sram_limit - size) // g * g)
        options = {0, top} | {b for lo, hi in self.recent for b in (hi, lo - size) if 0 <= b <= top}

        def clash(base: int) -> tuple[int, int]:
            return sum(max(0, min(base + size, hi) - max(base, lo)) * w
                       for w, (lo, hi) in zip(self.WEIGHTS, self.recent, strict=False)), base

        base = min(options, key=clash)
        self.recent = [(base, base + size), *self.recent][:len(self.WEIGHTS)]
        return base


def _emit(asm: ProgramBuilder, place: _Placement, op: OpPlan, layer: int, dump: Dump | None,
          resident: Mapping[str, Resident]) -> None:
    """One operator (or one step of a layer group) into ``asm``, its instructions tagged ``layer``."""
    asm.sram_limit = op.sram_limit
    asm.sram_place(place(op))
    first = len(asm)
    compile_operator(asm, op.spec, op.tile, layer, dump, resident)
    _constants_first(asm, first)


def _group_info(plan: PartitionPlan, g: GroupPlan) -> GroupInfo:
    members = [plan.ops[k].spec for k in g.members]
    tensors = {t.name: t for t in plan.buffers} | {m.out.name: m.out for m in members}
    saved = 0
    for b in g.buffers:
        saved += tensors[b.tensor].nbytes * (1 + sum(any(x.name == b.tensor for x in m.inputs) for m in members))
    return GroupInfo(g.first, g.last, g.rows, g.slices, g.sram_bytes, saved, g.predicted_cycles)


def _group_slices(plan: PartitionPlan) -> dict[str, Resident]:
    """Every slice of every layer group's intermediates, at its version's address."""
    dtype = {t.name: t.dtype for t in plan.buffers} | {op.spec.out.name: op.spec.out.dtype for op in plan.ops}
    return {slice_name(b.tensor, s): Resident(b.addrs[s % len(b.addrs)], dtype[b.tensor])
            for g in plan.groups for b in g.buffers for s in range(g.slices)}


def _constants_first(asm: ProgramBuilder, first: int) -> None:
    """Issue an operator's first load of each constant (weights, biases) before its loads of activations.

    The loads before its first compute instruction write distinct SRAM buffers, so their order is free;
    an activation load may have to wait for the previous operator's last stores (a DMA-load engine
    queue is in order), a constant load never does, so this way the weights are prefetched under the
    previous operator's drain instead of behind it."""
    ins = asm.instructions
    stop = first
    while stop < len(ins) and isinstance(ins[stop], isa.DmaLoad):
        stop += 1
    const = {k for k, t in enumerate(asm.tensors) if t.kind == isa.TensorKind.CONSTANT}
    hoisted: dict[int, int] = {}  # the first load of each constant: later ones belong to later tiles
    for k in range(stop - first):
        if ins[first + k].tensor in const:
            hoisted.setdefault(ins[first + k].tensor, k)
    lead = sorted(hoisted.values())
    asm.reorder(first, lead + [k for k in range(stop - first) if k not in lead])


class PlanError(ValueError):
    """A plan handed to the codegen does not fit the partition it names (a stale or edited plan)."""


def _check_names(plan: PartitionPlan, constants: Mapping[str, np.ndarray]) -> None:
    """Every tensor an operator reads is a partition input, a constant or computed before it."""
    known = {t.name for t in plan.inputs} | set(constants) | {t.name for t in plan.buffers}
    for k, op in enumerate(plan.ops):
        for t in op.spec.inputs:
            if (t.view.base if t.view is not None else t.name) not in known:
                raise PlanError(f"{plan.symbol}: operator {k} ({op.spec.name}) reads {t.name!r}, which is neither an "
                                f"input, a constant nor computed by an earlier operator of the partition")
        known.add(op.spec.out.view.base if op.spec.out.view is not None else op.spec.out.name)
    missing = [o for o in plan.outputs if o not in known]
    if missing:
        raise PlanError(f"{plan.symbol}: outputs {missing} are not computed by the plan's operators")
