"""One operator compiled (scheduled, lowered, walked) for the emitter: the task both this process
(:mod:`.operator`) and the codegen worker processes (:mod:`.worker`) run, in a module of its own so
that neither of those two has to import the other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tvm_npu.tir_schedules import schedule

from tvm_npu.core.ops import OpSpec
from tvm_npu.core.tiles import TileParams

from .emit import Template
from .lower import lower
from .tir_walk import CompiledWalk, compile_walk

#: Receives (stage name, text) for every intermediate form when dumping is on.
Dump = Callable[[str, str], None]


@dataclass(frozen=True)
class Compiled:
    """An operator scheduled, lowered and translated for the emitter (no addresses yet; plain data)."""

    template: Template
    walk: CompiledWalk


def compile_spec(spec: OpSpec, tile: TileParams, dump: Dump | None = None) -> Compiled:
    """``spec`` scheduled with ``tile``, lowered and walked; every intermediate form to ``dump``."""
    scheduled = schedule(spec, tile)
    lowered = lower(scheduled.sch.mod)
    walk = compile_walk(lowered["main"])
    if dump is not None:
        dump("0_spec", f"{spec}\n{tile}\n")
        dump("1_scheduled_tir", scheduled.sch.mod.script())
        dump("2_schedule_trace", str(scheduled.sch.trace))
        dump("3_lowered_tir", lowered.script())
        dump("4_walk", walk.source)
    return Compiled(Template.of(scheduled), walk)


def compile_plain(spec: OpSpec, tile: TileParams) -> Compiled | None:
    """A worker's task (:mod:`.worker`). A failure gives None: the operator is then compiled again where
    it is emitted, which raises the error there as without workers."""
    try:
        return compile_spec(spec, tile)
    except Exception:
        return None
