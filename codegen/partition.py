"""Lower one partition plan into an NPU artifact: every operator scheduled, lowered and
emitted in the plan's order, then the semaphore pass makes the engines safe.

Nothing is decided here: fusion, on-chip intermediates, SRAM budgets and tiles all
come from the :class:`~tvm_npu.plan.PartitionPlan`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
from tvm_npu.simulator import ProgramBuilder, disassemble, isa
from tvm_npu.tir_schedules import kind_of

from tvm_npu.artifact import Artifact, LayerInfo
from tvm_npu.config import HardwareConfig
from tvm_npu.plan import PartitionPlan
from tvm_npu.tiles import tile_to_json

from .emit import Resident
from .operator import compile_operator
from .sync import insert_semaphores


def lower_plan(plan: PartitionPlan, constants: Mapping[str, np.ndarray], hw: HardwareConfig,
               dump_dir: Path | None = None) -> bytearray:
    """Compile ``plan`` (whose constants are ``constants``) into an encoded :class:`Artifact`."""
    _check_names(plan, constants)
    asm = ProgramBuilder(hw)
    inputs = [t.name for t in plan.inputs]
    for t in plan.inputs:
        asm.declare(t.name, t.shape, t.dtype, isa.TensorKind.INPUT)
    resident = {r.tensor: Resident(r.addr, plan.ops[r.producer].spec.out.dtype) for r in plan.resident}
    for t in plan.buffers:  # concat outputs: written slice by slice through views
        kind = isa.TensorKind.OUTPUT if t.name in plan.outputs else isa.TensorKind.SCRATCH
        asm.declare(t.name, t.shape, t.dtype, kind)
    for op in plan.ops:
        for t in (*op.spec.inputs, op.spec.out):
            if t.view is not None:  # no storage of its own: the emitter addresses its base
                if t.view.base in constants:  # a constant read through a view (copied into a concat)
                    data = constants[t.view.base]
                    asm.declare(t.view.base, data.shape, t.dtype, isa.TensorKind.CONSTANT, data)
                continue
            if t.name in constants:
                asm.declare(t.name, constants[t.name].shape, t.dtype, isa.TensorKind.CONSTANT, constants[t.name])
            elif t.name not in inputs and t.name not in resident:
                kind = isa.TensorKind.OUTPUT if t.name in plan.outputs else isa.TensorKind.SCRATCH
                asm.declare(t.name, t.shape, t.dtype, kind)
    layers: list[LayerInfo] = []
    for layer, op in enumerate(plan.ops):
        spec = op.spec
        asm.sram_limit = op.sram_limit
        first = len(asm)
        dump = None
        if dump_dir is not None:
            base = dump_dir / f"{plan.dump_stem}.{layer:03d}"

            def dump(stage: str, text: str, base: Path = base) -> None:
                Path(f"{base}.{stage}.txt").write_text(text)

        compile_operator(asm, spec, op.tile, layer, dump, resident)
        kind = kind_of(spec)
        need = kind.needed_bytes(spec)  # compulsory DRAM reads: each tensor once, only what is needed
        layers.append(LayerInfo(
            name=spec.name, op=kind.name, description=kind.describe(spec), tile=tile_to_json(op.tile), first=first,
            last=len(asm), macs=int(spec.macs), dtype=kind.compute_dtype(spec),
            layout_in=getattr(spec, "layout", "") or spec.inputs[0].layout, layout_out=spec.out.layout,
            input_bytes=sum(b for t, b in need.items() if t not in constants and t not in resident),
            weight_bytes=sum(b for t, b in need.items() if t in constants),
            output_bytes=0 if spec.out.name in resident else spec.out.nbytes, sram_bytes=op.sram_bytes,
            predicted_cycles=op.predicted_cycles,
            fused=list(op.fused),
        ))
    instructions, tags = insert_semaphores(hw, asm.instructions, asm.tags)
    # instruction ranges per layer after synchronisation was inserted
    bounds: dict[int, tuple[int, int]] = {}
    for idx, tag in enumerate(tags):
        lo, hi = bounds.get(tag, (idx, idx + 1))
        bounds[tag] = (min(lo, idx), max(hi, idx + 1))
    layers = [replace(li, first=bounds.get(i, (0, 0))[0], last=bounds.get(i, (0, 0))[1])
              for i, li in enumerate(layers)]
    program = asm.build(instructions)
    if dump_dir is not None:
        (dump_dir / f"{plan.dump_stem}.program.txt").write_text(disassemble(program))
    return Artifact.pack(plan.symbol, plan.target, inputs, list(plan.outputs), layers, program)


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
