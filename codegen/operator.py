"""Compile one operator into a partition's instruction stream: schedule, lower, walk, emit."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tvm_npu.simulator import ProgramBuilder, isa
from tvm_npu.tir_schedules import Scheduled, schedule

from tvm_npu.config import HardwareConfig
from tvm_npu.ops import OpSpec
from tvm_npu.tiles import TileParams
from tvm_npu.views import without_views

from .emit import OperatorEmitter, Resident
from .lower import lower
from .sync import insert_semaphores
from .tir_walk import compile_walk

#: Receives (stage name, text) for every intermediate form when dumping is on.
Dump = Callable[[str, str], None]


def compile_operator(asm: ProgramBuilder, spec: OpSpec, tile: TileParams, layer: int,
                     dump: Dump | None = None, resident: Mapping[str, Resident] | None = None) -> Scheduled:
    """Emit ``spec`` scheduled with ``tile`` (instructions tagged ``layer``); its SRAM is
    released again afterwards. ``resident`` names the on-chip intermediates it reads or writes."""
    scheduled = schedule(spec, tile)
    lowered = lower(scheduled.sch.mod)
    walk = compile_walk(lowered["main"])
    if dump is not None:
        dump("0_spec", f"{spec}\n{tile}\n")
        dump("1_scheduled_tir", scheduled.sch.mod.script())
        dump("2_schedule_trace", str(scheduled.sch.trace))
        dump("3_lowered_tir", lowered.script())
        dump("4_walk", walk.source)
    mark = asm.sram_mark()
    OperatorEmitter(asm, spec, walk, scheduled, layer, resident or {}).run()
    asm.sram_release(mark)
    return scheduled


def standalone_program(spec: OpSpec, tile: TileParams, hw: HardwareConfig) -> tuple[isa.Program, int]:
    """One operator as a complete program (its tensors as inputs/outputs), for tuning and tests,
    and the SRAM bytes the emitter allocated for it."""
    asm = ProgramBuilder(hw)
    spec = without_views(spec)  # its tensors are the program's own
    for t in spec.inputs:
        asm.declare(t.name, t.shape, t.dtype, isa.TensorKind.INPUT)
    asm.declare(spec.out.name, spec.out.shape, spec.out.dtype, isa.TensorKind.OUTPUT)
    compile_operator(asm, spec, tile, 0)
    instructions, _ = insert_semaphores(hw, asm.instructions, asm.tags)
    return asm.build(instructions), asm.sram_high_water
