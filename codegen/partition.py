"""Compile one partitioned Relax function (``Codegen="npu"``) into an NPU artifact.

The function's bindings are calls to composite functions, one per matched pattern.
Each becomes an operator spec (``relay_patterns.extract``); at ``-fusion>=1``
elementwise operators are folded into their producer's epilogue when the producer's
result has no other use and the fused tile still fits the SRAM; each operator then
gets a tile from the planner (or the tuning records), is scheduled, lowered and
emitted; finally the semaphore pass makes the engines safe.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from tvm import relax
from tvm_npu.relay_patterns.extract import extract_op, tensor_type
from tvm_npu.simulator import disassemble, encode_program, isa
from tvm_npu.tir_schedules import planner
from tvm_npu.tir_schedules.ops import (
    Broadcast,
    Conv2dSpec,
    ElementwiseSpec,
    EpiKind,
    MatmulSpec,
    OpSpec,
    PoolSpec,
    spec_key,
)
from tvm_npu.tir_schedules.params import TileParams, tile_to_json

from tvm_npu.artifact import Artifact, LayerInfo
from tvm_npu.config import HardwareConfig, NpuTarget

from .emit import ProgramAssembler, Resident
from .operator import compile_operator
from .sync import insert_semaphores

#: Tuned tiles by :func:`spec_key` (how tuning records reach the codegen).
TileTable = Mapping[str, TileParams]

_COMMUTATIVE = {EpiKind.ADD, EpiKind.MUL, EpiKind.MAX, EpiKind.MIN}


class CodegenError(RuntimeError):
    """A partition the pattern table accepted cannot be compiled (reported with its symbol)."""


@dataclass
class _Op:
    spec: OpSpec
    fused: list[str]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _partition_ops(func: relax.Function) -> tuple[list[_Op], dict[str, np.ndarray], list[str], list[str]]:
    """Specs of the composite calls, constants, and the DRAM names of inputs and outputs."""
    names: dict[relax.Var, str] = {}
    inputs = []
    for i, p in enumerate(func.params):
        names[p] = f"in{i}_{_safe(p.name)}"
        inputs.append(names[p])
    local: dict[relax.Var, relax.Function] = {}
    ops: list[_Op] = []
    constants: dict[str, np.ndarray] = {}
    body = func.body
    for block in body.blocks:
        for b in block.bindings:
            value = b.value
            if isinstance(value, relax.Function):
                local[b.var] = value
                continue
            if not isinstance(value, relax.Call):
                raise CodegenError(f"unexpected binding in an NPU partition: {value}")
            callee = local.get(value.op) if isinstance(value.op, relax.Var) else value.op
            if not isinstance(callee, relax.Function) or "Composite" not in (callee.attrs or {}):
                raise CodegenError(f"binding {b.var.name} is not a call to an npu.* composite function")
            out = f"t{len(ops)}_{_safe(b.var.name)}"
            names[b.var] = out
            arg_names = []
            for a in value.args:
                if not isinstance(a, relax.Var) or a not in names:
                    raise CodegenError(f"argument {a} of {b.var.name} is not a tensor of the partition")
                arg_names.append(names[a])
            extracted = extract_op(callee, arg_names, out, f"k{len(ops)}")
            constants.update(extracted.constants)
            ops.append(_Op(replace(extracted.spec, name=f"{extracted.spec.name}_{len(ops)}"),
                           [str(callee.attrs["Composite"])]))
    ret = body.body
    fields = ret.fields if isinstance(ret, relax.Tuple) else [ret]
    outputs = []
    for f in fields:
        if not isinstance(f, relax.Var) or f not in names:
            raise CodegenError(f"partition result {f} is not a tensor computed in the partition")
        outputs.append(names[f])
    return ops, constants, inputs, outputs


def _consumers(ops: list[_Op]) -> dict[str, int]:
    count: dict[str, int] = {}
    for op in ops:
        for t in op.spec.inputs:
            count[t.name] = count.get(t.name, 0) + 1
    return count


def _fuse(ops: list[_Op], outputs: list[str], target: NpuTarget) -> list[_Op]:
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
            src = spec.data
            if src.name not in producer and steps and steps[0].kind in _COMMUTATIVE and steps[0].operand is not None \
                    and steps[0].broadcast == Broadcast.FULL and steps[0].operand.name in producer:
                src, steps[0] = steps[0].operand, replace(steps[0], operand=src)
            i = producer.get(src.name)
            if i is None or uses.get(src.name, 0) != 1 or src.name in outputs:
                continue
            prod = ops[i].spec
            if prod.out.shape != spec.out.shape or prod.out.dtype != spec.out.dtype:
                continue
            if any(s.broadcast == Broadcast.CHANNEL for s in steps) and channel_axis(spec) != channel_axis(prod):
                continue  # a per-channel operand would line up with another axis
            if any(s.operand is not None and s.operand.name in (t.name for t in _after(ops, i, j)) for s in steps):
                continue  # an operand computed between producer and consumer: would be read too early
            fused = replace(prod, out=replace(spec.out, layout=prod.out.layout),
                            epilogue=prod.epilogue + tuple(_relayout(s, prod) for s in steps))
            if not planner.fits(fused, target.hw, target.options):
                continue
            ops[i] = _Op(fused, ops[i].fused + op.fused)
            del ops[j]
            changed = True
            break
    return ops


def channel_axis(spec: OpSpec) -> int:
    """The output axis per-channel epilogue operands run along."""
    layout = spec.out.layout
    if isinstance(spec, MatmulSpec) or "C" not in layout:
        return len(spec.out.shape) - 1
    return layout.index("C")


def _after(ops: list[_Op], i: int, j: int) -> list:
    return [op.spec.out for op in ops[i + 1 : j]]


def _relayout(step, prod: OpSpec):
    """An elementwise step moved onto a producer keeps its operand, in the producer's layout."""
    if step.operand is not None and step.broadcast == Broadcast.FULL:
        return replace(step, operand=replace(step.operand, layout=prod.out.layout))
    return step


def _describe(spec: OpSpec) -> tuple[str, str, str]:
    """(op kind, one-line description, operand dtype) for reports."""
    epi = "+".join(e.kind.value for e in spec.epilogue)
    if isinstance(spec, Conv2dSpec):
        kh, kw = spec.kernel
        d = (f"conv{kh}x{kw}/s{spec.strides[0]} {spec.data.shape}->{spec.out.shape}"
             f"{' g' + str(spec.groups) if spec.groups > 1 else ''}")
        return "conv2d", d + (f" +{epi}" if epi else ""), spec.data.dtype.np.name
    if isinstance(spec, MatmulSpec):
        m, n, k = spec.mnk
        return "matmul", f"matmul {m}x{n}x{k}" + (f" +{epi}" if epi else ""), spec.a.dtype.np.name
    if isinstance(spec, PoolSpec):
        d = f"{spec.kind.value}pool{spec.kernel[0]}x{spec.kernel[1]}/s{spec.strides[0]} {spec.data.shape}"
        return "pool", d + (f" +{epi}" if epi else ""), spec.data.dtype.np.name
    return "elementwise", f"{epi} {spec.out.shape}", spec.out.dtype.np.name


def _on_chip(ops: list[_Op], outputs: list[str], hw: HardwareConfig) -> tuple[dict[str, OpSpec], int]:
    """Intermediates to keep in SRAM (``-fusion=2``): produced by one operator, read only by the
    next, and at most an eighth of the SRAM; and the size of the two slots they alternate in."""
    uses = _consumers(ops)
    chosen = {}
    for k in range(len(ops) - 1):
        out = ops[k].spec.out
        nxt = {t.name for t in ops[k + 1].spec.inputs}
        if out.name in outputs or uses.get(out.name, 0) != 1 or out.name not in nxt:
            continue
        if hw.align(out.nbytes) <= hw.max_sram_bytes // 8:
            chosen[out.name] = ops[k].spec
    slot = max((hw.align(s.out.nbytes) for s in chosen.values()), default=0)
    return chosen, slot


def partition_specs(func: relax.Function, target: NpuTarget) -> list[OpSpec]:
    """The operators a partition compiles to, after fusion (what the tuner measures)."""
    ops, _, _, outputs = _partition_ops(func)
    if target.options.fusion >= 1:
        ops = _fuse(ops, outputs, target)
    return [op.spec for op in ops]


def compile_partition(
    func: relax.Function,
    symbol: str,
    target: NpuTarget,
    dump_dir: Path | None = None,
    tiles: TileTable | None = None,
) -> Artifact:
    """Compile one ``Codegen="npu"`` function into an :class:`Artifact`."""
    hw, opts = target.hw, target.options
    ops, constants, inputs, outputs = _partition_ops(func)
    if opts.fusion >= 1:
        ops = _fuse(ops, outputs, target)
    on_chip, slot = _on_chip(ops, outputs, hw) if opts.fusion >= 2 else ({}, 0)
    # the two slots holding on-chip intermediates sit at the top of the SRAM; an operator that
    # reads or writes one plans its tiles without them, the others use the whole SRAM
    slots_base = hw.max_sram_bytes - 2 * slot
    reduced_hw = replace(hw, max_sram_bytes=slots_base) if slot else hw
    asm = ProgramAssembler(hw)
    for p, name in zip(func.params, inputs, strict=True):
        shape, dtype = tensor_type(p)
        asm.declare(name, shape, dtype, isa.TensorKind.INPUT)
    for k, op in enumerate(ops):
        if op.spec.out.name in on_chip:  # produced by operator k into slot k % 2
            asm.resident[op.spec.out.name] = Resident(slots_base + (k % 2) * slot, op.spec.out.dtype)
        for t in (*op.spec.inputs, op.spec.out):
            if t.name in constants:
                asm.declare(t.name, constants[t.name].shape, t.dtype, isa.TensorKind.CONSTANT, constants[t.name])
            elif t.name not in inputs and t.name not in on_chip:
                kind = isa.TensorKind.OUTPUT if t.name in outputs else isa.TensorKind.SCRATCH
                asm.declare(t.name, t.shape, t.dtype, kind)
    layers: list[LayerInfo] = []
    for layer, op in enumerate(ops):
        spec = op.spec
        touches = any(t.name in on_chip for t in (*spec.inputs, spec.out))
        plan_hw = reduced_hw if touches else hw
        asm.sram_limit = plan_hw.max_sram_bytes
        tile = (tiles or {}).get(spec_key(spec))
        if tile is None or planner.footprint(spec, tile, plan_hw) > plan_hw.max_sram_bytes:
            tile = planner.choose(spec, plan_hw, opts)
        first = len(asm.instructions)
        dump = None
        if dump_dir is not None:
            base = dump_dir / f"{symbol}.{layer:03d}.{spec.name}"

            def dump(stage: str, text: str, base: Path = base) -> None:
                Path(f"{base}.{stage}.txt").write_text(text)

        compile_operator(asm, spec, tile, layer, dump)
        est = planner.estimate(spec, tile, plan_hw)
        kind, desc, dtype = _describe(spec)
        in_bytes = sum(t.nbytes for t in spec.inputs if t.name not in constants)
        layers.append(LayerInfo(
            name=spec.name, op=kind, description=desc, tile=tile_to_json(tile), first=first,
            last=len(asm.instructions), macs=int(spec.macs), dtype=dtype,
            layout_in=getattr(spec, "layout", "") or spec.inputs[0].layout, layout_out=spec.out.layout,
            input_bytes=in_bytes, weight_bytes=sum(t.nbytes for t in spec.inputs if t.name in constants),
            output_bytes=spec.out.nbytes, sram_bytes=est.sram_bytes, predicted_cycles=est.cycles, fused=op.fused,
        ))
    instructions, tags = insert_semaphores(hw, asm.instructions, asm.layer_of)
    # instruction ranges per layer after synchronisation was inserted
    bounds = {}
    for idx, tag in enumerate(tags):
        lo, hi = bounds.get(tag, (idx, idx + 1))
        bounds[tag] = (min(lo, idx), max(hi, idx + 1))
    layers = [replace(li, first=bounds.get(i, (0, 0))[0], last=bounds.get(i, (0, 0))[1])
              for i, li in enumerate(layers)]
    program = isa.Program(hw.config_hash, tuple(asm.tensors), (*instructions, isa.End()), asm.constants)
    if dump_dir is not None:
        (dump_dir / f"{symbol}.program.txt").write_text(disassemble(program))
    return Artifact(symbol, str(target), inputs, outputs, layers, encode_program(program))

