"""Compile one scheduled operator into a partition's instruction stream."""

from __future__ import annotations

from tvm_npu.tir_schedules import Scheduled, schedule
from tvm_npu.tir_schedules.ops import OpSpec
from tvm_npu.tir_schedules.params import TileParams

from .emit import OperatorEmitter, ProgramAssembler
from .lower import lower
from .tir_walk import compile_walk


def compile_operator(asm: ProgramAssembler, spec: OpSpec, tile: TileParams, layer: int) -> Scheduled:
    """Schedule, lower, walk and emit ``spec``; SRAM is released again afterwards."""
    scheduled = schedule(spec, tile)
    lowered = lower(scheduled.sch.mod)
    walk = compile_walk(lowered["main"])
    mark = asm.sram_top
    OperatorEmitter(asm, spec, walk, scheduled.roles, scheduled.axes, scheduled.aliases, layer).run()
    asm.sram_top = mark
    return scheduled
