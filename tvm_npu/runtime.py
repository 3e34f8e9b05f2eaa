"""Runtime glue: the ``npu`` module's functions run the simulator; statistics reach the user.

``tvm_npu.runtime_module`` owns the TVM side (a C++ module of kind ``npu`` whose
functions call back into Python); this module installs the callback. Each call
decodes its artifact once (cached per blob), binds the DPS tensors zero-copy with
``np.from_dlpack``, runs the simulator for the artifact's hardware configuration and
records the run's statistics, which :func:`profile` and :func:`last_runs` expose.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tvm_npu import runtime_module
from tvm_npu.artifact import Artifact
from tvm_npu.config import parse_target
from tvm_npu.simulator import LoadedProgram, RunStats, Simulator, TraceEvent

if TYPE_CHECKING:
    from tvm_npu.analysis import ModelReport


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
        time, what is left is the host's share of the inference (see :func:`tvm_npu.bench.host_seconds`)."""
        return sum(r.wall_s for r in self.runs)

    # The report, trace and plot live in analysis.py and bench.py, which import this module: imported on use.
    def report(self, host_macs: int = 0) -> ModelReport:
        """The per-layer report (:func:`tvm_npu.analysis.report`) of a run profiled with ``trace=True``."""
        from tvm_npu.analysis import report

        return report(self, host_macs)

    def write_trace(self, path: str | Path) -> Path:
        """Write the timeline as a Chrome/Perfetto trace (open it in ui.perfetto.dev); needs ``trace=True``."""
        from tvm_npu.bench import chrome_trace

        if any(not r.trace for r in self.runs):
            raise ValueError("a trace needs a timeline: profile the run with tvm_npu.profile(trace=True)")
        Path(path).write_text(json.dumps(chrome_trace(self)))
        return Path(path)

    def plot_roofline(self, path: str | Path, title: str = "NPU layers") -> int:
        """Write the per-layer roofline plot as a PNG; returns the number of layers plotted. Needs ``trace=True``."""
        from tvm_npu.bench import plot_roofline

        return plot_roofline(self, self.report(), path, title)


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
def profile(trace: bool = False, timing_only: bool = False) -> Iterator[Profile]:
    """Collect the statistics of every NPU partition run inside the ``with`` block.

    ``trace=True`` also keeps per-instruction timelines (for per-layer reports and
    Perfetto traces); ``timing_only=True`` skips the numerics (outputs are not written).
    Profiles are per thread: a VM running in another thread records into that thread's
    profiles, never into this one.
    """
    prof = Profile(trace=trace, timing_only=timing_only)
    _active().append(prof)
    try:
        yield prof
    finally:
        _active().remove(prof)


def last_runs() -> dict[str, PartitionRun]:
    """The most recent run of every NPU partition symbol executed in this process."""
    return dict(_last)


runtime_module.set_invoke_handler(_invoke)
