"""The NPU simulator: load (decode, validate, cost) a program once, run it many times.

The machine (``docs/architecture.md``): four engines, DMA_LOAD, DMA_STORE, TENSOR and
VECTOR, each executing its own in-order queue; the program is one instruction list
whose entries are dispatched, in program order, to the queue of their engine
(Signal/Wait to the engine in their ``engine_id``; End is the last instruction and
goes nowhere). An engine runs one instruction at a time, for the cycles of
:mod:`.timing`. Counting semaphores, all starting at 0, are the only synchronisation:
Signal adds one when its engine reaches it; Wait blocks its engine until the count is
positive, then consumes the earliest outstanding signal and starts at
max(engine free, that signal's time). Signal, Wait and End take 0 cycles.

The event loop processes instructions in non-decreasing start time across engines
(ties go to the lower engine id), so a run is deterministic, and applies an
instruction's numerics at the moment it is processed. Timing-only mode is the same
loop without the numerics, hence returns identical cycle counts by construction.
Both modes referee the synchronisation (:mod:`.hazards`): two instructions of
different engines that touch the same memory, one of them writing, must run in
program order (the later may start only once the earlier has completed), else the
run stops with :class:`HazardError`; so a run that completes computes exactly what
executing the instruction list sequentially computes. When every unfinished engine
is blocked on a Wait, the run stops with :class:`DeadlockError`.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from tvm_npu.config import DType, HardwareConfig

from . import hazards, isa, numerics, timing
from .encoding import decode_program
from .errors import BindingError, ConfigMismatchError, DeadlockError, InstructionError, ProgramFormatError
from .validate import validate_accesses

#: Timeline tracks: the four engines, then the DRAM channel they share.
TRACKS: tuple[str, ...] = (*(e.name for e in isa.Engine), "DRAM")
_N_ENGINES = len(isa.Engine)
# kinds of queue entries
_COMPUTE, _DMA, _SIGNAL, _WAIT = range(4)


@dataclass(frozen=True)
class RunStats:
    """Everything a run measures; deterministic for a given program and configuration.

    ``busy_cycles``/``utilisation`` are keyed by :data:`TRACKS`. An engine is busy
    while it executes an instruction (a DMA engine from issue, through the latency and
    any wait for the channel, to the end of its transfer), not while blocked on a Wait;
    ``DRAM`` is busy while a transfer holds the channel.
    """

    total_cycles: int
    busy_cycles: dict[str, int]
    utilisation: dict[str, float]
    dma_load_bytes: int
    dma_store_bytes: int
    dma_load_descriptors: int
    dma_store_descriptors: int
    wasted_burst_bytes: int
    sram_high_water: int
    macs: dict[str, int]
    instructions: int
    lower_bound_cycles: float
    efficiency: float


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One interval on a timeline track; ``start == end`` for Signal and Wait-without-waiting."""

    track: str
    name: str
    index: int
    start: int
    end: int


@dataclass(frozen=True)
class RunResult:
    """Outputs (empty in timing-only mode), statistics and, if asked for, the timeline."""

    outputs: dict[str, np.ndarray]
    stats: RunStats
    trace: tuple[TraceEvent, ...] | None
    clock_mhz: int

    def chrome_trace(self) -> dict[str, Any]:
        """The timeline as Chrome-trace JSON (one track per engine plus DRAM; ts in µs)."""
        if self.trace is None:
            raise ValueError("this run recorded no timeline; run with trace=True")
        us = 1.0 / self.clock_mhz
        tids = {name: i for i, name in enumerate(TRACKS)}
        events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "NPU simulator"}}
        ]
        for tid, name in enumerate(TRACKS):
            events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": tid, "args": {"sort_index": tid}})
        for ev in self.trace:
            entry: dict[str, Any] = {
                "name": ev.name, "pid": 0, "tid": tids[ev.track], "ts": ev.start * us, "args": {"index": ev.index},
            }  # fmt: skip
            if ev.end > ev.start:
                entry.update(ph="X", dur=(ev.end - ev.start) * us)
            else:
                entry.update(ph="i", s="t")
            events.append(entry)
        return {"traceEvents": events, "displayTimeUnit": "ns"}

    def write_chrome_trace(self, path: str | Path) -> None:
        """Write :meth:`chrome_trace` to ``path`` (open it in ui.perfetto.dev)."""
        Path(path).write_text(json.dumps(self.chrome_trace()))


@dataclass(frozen=True, eq=False)
class LoadedProgram:
    """A decoded, validated program with every cost precomputed; reusable across runs."""

    hw: HardwareConfig
    program: isa.Program
    #: per engine, its queue: (kind, instruction index, cycles or semaphore, hazard candidates)
    queues: tuple[tuple[tuple[int, int, int, tuple[int, ...]], ...], ...]
    static_stats: dict[str, Any]
    #: the exact hazard test, None if the program was loaded without hazard checking
    referee: hazards.Referee | None
    #: every instruction's operand descriptions (equal records share one tuple)
    accesses: tuple[tuple[isa.Access, ...], ...]

    @cached_property
    def executors(self) -> tuple[numerics.Executor | None, ...]:
        """Numerics of every instruction, built on the first functional run only (once per distinct record)."""
        return numerics.executors(self.program.instructions, self.accesses)


class Simulator:
    """Runs NPU programs for one hardware configuration.

    ``check_hazards`` (on by default) makes every run, functional or timing-only, raise
    :class:`HazardError` when two instructions of different engines that share memory
    run out of program order (see :mod:`.hazards`); it applies to the programs this
    simulator loads.
    """

    def __init__(self, hw: HardwareConfig, *, check_hazards: bool = True) -> None:
        self.hw = hw
        self.check_hazards = check_hazards

    # ------------------------------------------------------------------ load
    def load(self, program: isa.Program | bytes | bytearray | memoryview) -> LoadedProgram:
        """Decode (if bytes), validate against this configuration and precompute costs."""
        hw = self.hw
        decoded = not isinstance(program, isa.Program)
        if decoded:
            if not isinstance(program, bytes | bytearray | memoryview):
                raise ProgramFormatError(f"expected a Program or its encoded bytes, got {type(program).__name__}")
            program = decode_program(program)
        high_water, accesses = validate_accesses(hw, program, check_types=not decoded)
        deps = hazards.candidates(program, accesses) if self.check_hazards else [()] * len(accesses)
        queues: list[list[tuple[int, int, int, tuple[int, ...]]]] = [[] for _ in range(_N_ENGINES)]
        macs: dict[DType, int] = {}
        bytes_ = [0, 0]
        descriptors = [0, 0]
        wasted = 0
        for index, ins in enumerate(program.instructions):
            if isinstance(ins, isa.DmaLoad | isa.DmaStore):
                cost = timing.dram_cost(hw, accesses[index][0])
                way = int(ins.engine)  # DMA_LOAD = 0, DMA_STORE = 1
                bytes_[way] += cost.useful_bytes
                descriptors[way] += 1
                wasted += cost.wasted_bytes
                queues[ins.engine].append((_DMA, index, cost.transfer_cycles, deps[index]))
            elif isinstance(ins, isa.Signal | isa.Wait):
                queues[ins.engine_id].append((_SIGNAL if isinstance(ins, isa.Signal) else _WAIT, index, ins.sem, ()))
            elif not isinstance(ins, isa.End):
                if isinstance(ins, isa.MatMul | isa.Conv | isa.DwConv):  # the bound counts MACs on any engine
                    macs[ins.in_dtype] = macs.get(ins.in_dtype, 0) + ins.macs
                queues[ins.engine].append((_COMPUTE, index, timing.compute_cycles(hw, ins), deps[index]))
        static = {
            "dma_load_bytes": bytes_[0],
            "dma_store_bytes": bytes_[1],
            "dma_load_descriptors": descriptors[0],
            "dma_store_descriptors": descriptors[1],
            "wasted_burst_bytes": wasted,
            "sram_high_water": high_water,
            "macs": {dt.name: n for dt, n in sorted(macs.items())},
            "instructions": len(program.instructions),
            "lower_bound_cycles": timing.lower_bound_cycles(hw, macs, timing.compulsory_bytes(
                program.tensors, (accesses[i][0] for i, ins in enumerate(program.instructions)
                                  if isinstance(ins, isa.DmaLoad)))),
        }
        referee = hazards.Referee(program) if self.check_hazards else None
        return LoadedProgram(hw, program, tuple(tuple(q) for q in queues), static, referee, tuple(accesses))

    # ------------------------------------------------------------------- run
    def run(
        self,
        program: LoadedProgram | isa.Program | bytes | bytearray | memoryview,
        tensors: Mapping[str, np.ndarray] | None = None,
        *,
        timing_only: bool = False,
        trace: bool = False,
    ) -> RunResult:
        """Simulate a program; ``tensors`` binds INPUT (required) and OUTPUT (optional) arrays by name.

        An OUTPUT array passed in is written in place (DPS); the others are allocated.
        Timing-only mode ignores ``tensors`` and returns no outputs but the same stats.
        """
        loaded = program if isinstance(program, LoadedProgram) else self.load(program)
        if loaded.hw != self.hw:
            raise ConfigMismatchError(
                f"program was loaded for 'npu {loaded.hw.target_string()}', this simulator is "
                f"'npu {self.hw.target_string()}'"
            )
        events: list[TraceEvent] | None = [] if trace else None
        if timing_only:
            busy, total = self._loop(loaded, None, None, None, events)
            outputs: dict[str, np.ndarray] = {}
        else:
            dram, outputs = _bind(loaded.program, tensors or {})
            sram = np.zeros(self.hw.max_sram_bytes, np.uint8)
            with np.errstate(all="ignore"):
                busy, total = self._loop(loaded, loaded.executors, sram, dram, events)
        busy_cycles = dict(zip(TRACKS, busy, strict=True))
        lower = loaded.static_stats["lower_bound_cycles"]
        stats = RunStats(
            total_cycles=total,
            busy_cycles=busy_cycles,
            utilisation={k: (v / total if total else 0.0) for k, v in busy_cycles.items()},
            efficiency=lower / total if total else 0.0,
            **loaded.static_stats,
        )
        return RunResult(outputs, stats, None if events is None else tuple(events), self.hw.clock_mhz)

    def _loop(
        self,
        loaded: LoadedProgram,
        executors: tuple[numerics.Executor | None, ...] | None,
        sram: np.ndarray | None,
        dram: list[np.ndarray] | None,
        events: list[TraceEvent] | None,
    ) -> tuple[list[int], int]:
        """The event loop; returns (busy cycles per track, total cycles)."""
        queues = loaded.queues
        lengths = [len(q) for q in queues]
        pos = [0] * _N_ENGINES
        free = [0] * _N_ENGINES
        busy = [0] * (_N_ENGINES + 1)
        pending: list[deque[int]] = [deque() for _ in range(self.hw.num_semaphores)]
        latency = self.hw.dma_latency
        channel_free = 0
        active = [e for e in range(_N_ENGINES) if lengths[e]]
        index = 0
        # completion time of every instruction started so far (hazard checking)
        done = [hazards.NOT_DONE] * len(loaded.program.instructions)
        try:
            while active:
                best, best_t = _earliest(active, queues, pos, free, pending)
                kind, index, value, deps = queues[best][pos[best]]
                if kind == _COMPUTE:
                    if deps:  # hazard candidates: each must have completed by now
                        _check_done(loaded, index, best_t, deps, done)
                    end = done[index] = best_t + value
                    busy[best] += value
                    if executors is not None:
                        executors[index](sram, dram)
                elif kind == _DMA:
                    if deps:
                        _check_done(loaded, index, best_t, deps, done)
                    grant = best_t + latency
                    if channel_free > grant:
                        grant = channel_free
                    end = done[index] = channel_free = grant + value
                    busy[best] += end - best_t
                    busy[_N_ENGINES] += value
                    if executors is not None:
                        executors[index](sram, dram)
                    if events is not None:
                        events.append(TraceEvent("DRAM", _name(loaded, index), index, grant, end))
                elif kind == _SIGNAL:
                    pending[value].append(best_t)
                    end = best_t
                else:
                    pending[value].popleft()
                    end = best_t
                if events is not None:
                    start = free[best] if kind == _WAIT else best_t
                    events.append(TraceEvent(TRACKS[best], _name(loaded, index), index, start, end))
                free[best] = end
                pos[best] += 1
                if pos[best] == lengths[best]:
                    active.remove(best)
        except MemoryError:
            raise _too_large(loaded, index) from None
        return busy, max(free)


def _earliest(active: list[int], queues: Sequence[Sequence[tuple]], pos: list[int], free: list[int],
              pending: list[deque[int]]) -> tuple[int, int]:
    """The active engine whose next instruction can start first (the lowest engine on a tie) and that
    time; a Wait can start once its semaphore was signalled. DeadlockError when none can."""
    best, best_t = -1, 0
    for e in active:
        kind, _, value, _ = queues[e][pos[e]]
        t = free[e]
        if kind == _WAIT:
            signals = pending[value]
            if not signals:
                continue
            if signals[0] > t:
                t = signals[0]
        if best < 0 or t < best_t:
            best, best_t = e, t
    if best < 0:
        raise DeadlockError([(queues[e][pos[e]][1], TRACKS[e], queues[e][pos[e]][2]) for e in active])
    return best, best_t


def _check_done(loaded: LoadedProgram, index: int, start: int, deps: Sequence[int], done: list[int]) -> None:
    """Instruction ``index`` starts at ``start``: each of its hazard candidates ``deps`` must have
    completed by then (the referee raises otherwise)."""
    for i in deps:
        if done[i] > start:
            loaded.referee.refute(index, start, i, done)  # type: ignore[union-attr]


def _too_large(loaded: LoadedProgram, index: int) -> InstructionError:
    """The error for instruction ``index`` when its numerics ran out of this host's memory."""
    ins = loaded.program.instructions[index]
    return InstructionError(index, ins.opcode.name, "operands", "the instruction is too large to simulate on this host")


def _name(loaded: LoadedProgram, index: int) -> str:
    ins = loaded.program.instructions[index]
    return f"{ins.opcode.name} sem{ins.sem}" if isinstance(ins, isa.Signal | isa.Wait) else ins.opcode.name


def _bind(program: isa.Program, tensors: Mapping[str, np.ndarray]) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """DRAM for a functional run: flat arrays per tensor, and the OUTPUT arrays by name."""
    bindable = {t.name for t in program.tensors if t.kind in (isa.TensorKind.INPUT, isa.TensorKind.OUTPUT)}
    unknown = sorted(set(tensors) - bindable)
    if unknown:
        raise BindingError(f"{unknown} are not INPUT or OUTPUT tensors of the program; accepted: {sorted(bindable)}")
    dram: list[np.ndarray] = []
    outputs: dict[str, np.ndarray] = {}
    for t in program.tensors:
        arr = tensors.get(t.name)
        if arr is not None:
            _check_binding(t, arr)
        elif t.kind == isa.TensorKind.INPUT:
            raise BindingError(f"INPUT tensor {t.name!r} ({t.dtype.name} {t.shape}) was not supplied")
        elif t.kind == isa.TensorKind.CONSTANT:
            arr = program.constants[t.name]
        else:
            try:
                arr = np.zeros(t.shape, t.dtype.np)
            except (MemoryError, ValueError):
                raise BindingError(f"cannot allocate DRAM tensor {t.name!r} of {t.nbytes} bytes on this host") from None
        if t.kind == isa.TensorKind.OUTPUT:
            outputs[t.name] = arr
        dram.append(np.ascontiguousarray(arr).reshape(-1))
    return dram, outputs


def _check_binding(t: isa.TensorDecl, arr: object) -> None:
    if not isinstance(arr, np.ndarray) or arr.dtype != t.dtype.np or arr.shape != t.shape:
        got = f"{arr.dtype} {arr.shape}" if isinstance(arr, np.ndarray) else type(arr).__name__
        raise BindingError(f"tensor {t.name!r} must be a numpy array of {t.dtype.np} {t.shape}, got {got}")
    if t.kind == isa.TensorKind.OUTPUT and not (arr.flags.c_contiguous and arr.flags.writeable):
        raise BindingError(f"OUTPUT tensor {t.name!r} is written in place and must be C-contiguous and writeable")
