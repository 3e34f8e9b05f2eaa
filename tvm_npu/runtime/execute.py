"""Runtime glue: the ``npu`` module's functions run the simulator; statistics reach the user.

``tvm_npu.runtime.npu_module`` owns the TVM side (a C++ module of kind ``npu`` whose
functions call back into Python); this module installs the callback. Each call
decodes its artifact once (cached per blob), binds the DPS tensors zero-copy with
``np.from_dlpack``, runs the simulator for the artifact's hardware configuration and
records the run's statistics, which :func:`collect` and :func:`last_runs` expose. A :class:`Profile` is
plain data: the per-layer report, the trace and the roofline plot read it (:mod:`tvm_npu.report`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from tvm_npu.config import parse_target
from tvm_npu.core.artifact import Artifact
from tvm_npu.runtime import npu_module as runtime_module
from tvm_npu.simulator import LoadedProgram, RunStats, Simulator, TraceEvent


@dataclass(frozen=True)
class PartitionRun:
    """One execution of one NPU partition."""

    symbol: str
    artifact: Artifact
    stats: RunStats
    trace: tuple[TraceEvent, ...] = ()
    wall_s: float = 0.0  # host wall time of the call: the simulator, binding the tensors, decoding on first use


@dataclass
class Profile:
    """Runs collected by :func:`profile`, in call order."""

    trace: bool = False
    timing_only: bool = False
    runs: list[PartitionRun] = field(default_factory=list)

    @property
    def total_cycles(self) -> int:
        return sum(r.stats.total_cycles for r in self.runs)

    @property
    def npu_call_seconds(self) -> float:
        """Wall time spent inside NPU partition calls (simulating them): subtracted from a VM run's wall
        time, what is left is the host's share of the inference (see :func:`tvm_npu.tools.bench.host_seconds`)."""
        return sum(r.wall_s for r in self.runs)


@dataclass
class _Loaded:
    artifact: Artifact
    sim: Simulator
    program: LoadedProgram


_cache: dict[bytes, _Loaded] = {}
_lock = threading.Lock()
_local = threading.local()
_last: dict[str, PartitionRun] = {}


def _loaded(blob: bytes) -> _Loaded:
    # bytes cache their hash, and the module layer keeps one bytes object per blob
    entry = _cache.get(blob)
    if entry is None:
        artifact = Artifact.decode(blob)
        sim = Simulator(parse_target(artifact.target).hw)
        entry = _Loaded(artifact, sim, sim.load(artifact.program))
        with _lock:
            _cache[blob] = entry
    return entry


def _active() -> list[Profile]:
    if not hasattr(_local, "profiles"):
        _local.profiles = []
    return _local.profiles


def _invoke(blob: bytes, symbol: str, args: list) -> None:
    """Run ``symbol`` on DPS ``args`` (inputs, then outputs) in the simulator.

    The call times itself (``PartitionRun.wall_s``): everything from here to the return is NPU
    work that a device would replace by its simulated cycles; the VM's own dispatch into this
    callback stays on the host's side of the ledger, as a device driver's would.
    """
    start = time.perf_counter()
    entry = _loaded(blob)
    art = entry.artifact
    names = art.inputs + art.outputs
    if len(args) != len(names):
        raise ValueError(f"NPU function {symbol} takes {len(names)} tensors ({len(art.inputs)} in, "
                         f"{len(art.outputs)} out), got {len(args)}")
    tensors = {name: np.from_dlpack(a) for name, a in zip(names, args, strict=True)}
    profiles = _active()
    trace = any(p.trace for p in profiles)
    timing_only = any(p.timing_only for p in profiles)
    result = entry.sim.run(entry.program, tensors, timing_only=timing_only, trace=trace)
    run = PartitionRun(symbol, art, result.stats, tuple(result.trace or ()), time.perf_counter() - start)
    _last[symbol] = run
    for p in profiles:
        p.runs.append(run)


@contextmanager
def collect(prof: Profile) -> Iterator[Profile]:
    """Record into ``prof`` (its ``trace`` and ``timing_only`` apply) every NPU partition run inside the block."""
    _active().append(prof)
    try:
        yield prof
    finally:
        _active().remove(prof)


def last_runs() -> dict[str, PartitionRun]:
    """The most recent run of every NPU partition symbol executed in this process."""
    return dict(_last)


runtime_module.set_invoke_handler(_invoke)
