"""Compile one operator into a partition's instruction stream: schedule, lower, walk, emit."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import replace

from tvm_npu.simulator import ProgramBuilder, isa
from tvm_npu.tir_schedules import kind_of

from tvm_npu.config import HardwareConfig
from tvm_npu.core.ops import OpSpec, TensorRef
from tvm_npu.core.tiles import TileParams
from tvm_npu.core.views import map_refs, without_views

from .compile_op import Compiled, Dump
from .compile_op import compile_spec as _compile
from .emit import OperatorEmitter, Resident
from .resize import emit_resize
from .sync import insert_semaphores
from .worker import compile_all

#: Compiled operators by name-free signature (:func:`canonical`), so identical operators (ResNet's
#: repeated blocks, a layer group's slices) are scheduled, lowered and walked once per process.
#: Least recently used entries go first beyond :data:`CACHE_SIZE` (entries are plain data, no TVM modules).
_COMPILED: OrderedDict[tuple[OpSpec, TileParams], Compiled] = OrderedDict()
CACHE_SIZE = 512

#: Environment variable capping the codegen's worker processes (``0``: compile in this process only).
WORKERS_ENV = "TVM_NPU_CODEGEN_WORKERS"
#: Distinct operators each worker must get for starting it to pay. A worker first imports TVM and this
#: package (S = 3-4 s unloaded, measured 12 s on the shared 2-core machine) while one operator compiles
#: in c = 0.07-0.3 s (S/c = 20-45, measured); this process keeps compiling meanwhile, so one worker
#: saves about (n * c - S) / 2 for n operators: nothing below ~45, and little below 64.
MIN_PER_WORKER = 64


def canonical(spec: OpSpec) -> tuple[OpSpec, dict[str, str]]:
    """``spec`` with its tensors renamed in order of appearance (one name per distinct tensor) and
    without views, and the map from the new names back to the old ones.

    The templates read nothing else of a tensor's name than whether two operands are the same
    tensor, and never its view (the emitter addresses views), so operators whose canonical specs
    are equal compile to the same walk up to these names.
    """
    names: dict[str, str] = {}

    def rename(t: TensorRef) -> TensorRef:
        return replace(t, name=names.setdefault(t.name, f"npu_t{len(names)}"), view=None)

    return replace(map_refs(spec, rename), name="npu_op"), {new: old for old, new in names.items()}


def _remember(key: tuple[OpSpec, TileParams], value: Compiled) -> None:
    _COMPILED[key] = value
    _COMPILED.move_to_end(key)
    if len(_COMPILED) > CACHE_SIZE:
        _COMPILED.popitem(last=False)


def compiled(spec: OpSpec, tile: TileParams) -> tuple[Compiled, dict[str, str]]:
    """The cached compilation of ``spec``'s canonical form, and its tensor names -> ``spec``'s."""
    canon, names = canonical(spec)
    key = (canon, tile)
    hit = _COMPILED.get(key)
    _remember(key, hit if hit is not None else _compile(canon, tile))
    return _COMPILED[key], names


def worker_count(distinct: int) -> int:
    """Worker processes for ``distinct`` operators to compile: :data:`MIN_PER_WORKER` each at least,
    besides this process at most ``os.cpu_count() - 1``, and at most ``$TVM_NPU_CODEGEN_WORKERS``."""
    cap = (os.cpu_count() or 1) - 1
    env = os.environ.get(WORKERS_ENV, "").strip()
    if env:
        if not env.isdigit():
            raise ValueError(f"${WORKERS_ENV}={env!r}: expected a number of worker processes (0: none)")
        cap = min(cap, int(env))
    return max(0, min(cap, distinct // MIN_PER_WORKER))


def precompile(operators: Iterable[tuple[OpSpec, TileParams]]) -> None:
    """Compile the distinct (canonical) operators not cached yet, in worker processes when there are
    enough of them (:func:`worker_count`, :mod:`.worker`); otherwise nothing happens here and each is
    compiled when first emitted. The workers are gone when this returns."""
    todo = list(dict.fromkeys(key for spec, tile in operators if not kind_of(spec).direct
                              and (key := (canonical(spec)[0], tile)) not in _COMPILED))
    workers = worker_count(len(todo))
    if workers:
        for key, value in compile_all(todo, workers, _compile).items():
            _remember(key, value)


def compile_operator(asm: ProgramBuilder, spec: OpSpec, tile: TileParams, layer: int,
                     dump: Dump | None = None, resident: Mapping[str, Resident] | None = None) -> None:
    """Emit ``spec`` scheduled with ``tile`` (instructions tagged ``layer``); its SRAM is
    released again afterwards. ``resident`` names the on-chip intermediates it reads or writes.

    With ``dump`` the operator is compiled under its own names (the dumps show them); otherwise
    its canonical form comes from the cache (the same instructions either way). A kind without a TIR
    template (``kind.direct``: a resize) is emitted from its spec."""
    if kind_of(spec).direct:
        if dump is not None:
            dump("0_spec", f"{spec}\n{tile}\n")
        mark = asm.sram_mark()
        emit_resize(asm, spec, tile, layer, resident or {})
        asm.sram_release(mark)
        return
    if dump is not None:
        comp, names = _compile(spec, tile, dump), {}
    else:
        comp, names = compiled(spec, tile)
    mark = asm.sram_mark()
    OperatorEmitter(asm, spec, comp.walk, comp.template, layer, resident or {}, names).run()
    asm.sram_release(mark)


def standalone_program(spec: OpSpec, tile: TileParams, hw: HardwareConfig) -> tuple[isa.Program, int]:
    """One operator as a complete program (its tensors as inputs/outputs), for tuning and tests,
    and the SRAM bytes the emitter allocated for it."""
    asm = ProgramBuilder(hw)
    spec = without_views(spec)  # its tensors are the program's own
    for t in spec.inputs:
        asm.declare(t.name, t.shape, t.dtype, isa.TensorKind.INPUT)
    asm.declare(spec.out.name, spec.out.shape, spec.out.dtype, isa.TensorKind.OUTPUT)
    compile_operator(asm, spec, tile, 0)
    instructions, _ = insert_semaphores(hw, asm.instructions, asm.tags, [t.shape for t in asm.tensors])
    return asm.build(instructions), asm.sram_high_water
