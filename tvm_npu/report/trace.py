"""The whole model's timeline as a Chrome / Perfetto trace: one process per partition run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tvm_npu.config import parse_target
from tvm_npu.report.layers import partition_labels
from tvm_npu.runtime.execute import Profile
from tvm_npu.simulator import RunResult


def chrome_trace(prof: Profile) -> dict[str, Any]:
    """The whole model's timeline as Chrome-trace JSON for ui.perfetto.dev.

    One process per partition run, each the simulator's own per-run trace
    (:meth:`RunResult.chrome_trace`), shifted so the runs follow each other in call order.
    """
    events: list[dict[str, Any]] = []
    offset_us = 0.0
    for pid, (run, label) in enumerate(zip(prof.runs, partition_labels(prof.runs), strict=True)):
        clock_mhz = parse_target(run.artifact.target).hw.clock_mhz
        one = RunResult({}, run.stats, run.trace, clock_mhz).chrome_trace()
        for ev in one["traceEvents"]:
            ev = {**ev, "pid": pid}
            if ev["name"] == "process_name":
                ev["args"] = {"name": f"{label}: {run.symbol}"}
            if "ts" in ev:
                ev["ts"] += offset_us
            events.append(ev)
        offset_us += run.stats.total_cycles / clock_mhz
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_trace(prof: Profile, path: str | Path) -> Path:
    """Write :func:`chrome_trace` of ``prof`` (profiled with ``trace=True``) to ``path``."""
    if any(not r.trace for r in prof.runs):
        raise ValueError("a trace needs a timeline: profile the run with tvm_npu.profile(trace=True)")
    Path(path).write_text(json.dumps(chrome_trace(prof)))
    return Path(path)
