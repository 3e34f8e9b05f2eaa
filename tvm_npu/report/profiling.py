"""What ``tvm_npu.profile`` yields: the runtime's plain :class:`~tvm_npu.runtime.Profile` with the
report, the trace and the roofline plot as methods (they live on this floor, above the runtime)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tvm_npu.report.layers import ModelReport, report
from tvm_npu.report.roofline import plot_roofline
from tvm_npu.report.trace import write_trace
from tvm_npu.runtime.execute import Profile, collect


class ReportedProfile(Profile):
    """A :class:`~tvm_npu.runtime.Profile` that writes its own report, trace and roofline plot."""

    def report(self, host_macs: int = 0) -> ModelReport:
        """The per-layer report (:func:`tvm_npu.report.layers.report`) of a run profiled with ``trace=True``."""
        return report(self, host_macs)

    def write_trace(self, path: str | Path) -> Path:
        """Write the timeline as a Chrome/Perfetto trace (open it in ui.perfetto.dev); needs ``trace=True``."""
        return write_trace(self, path)

    def plot_roofline(self, path: str | Path, title: str = "NPU layers") -> int:
        """Write the per-layer roofline plot as a PNG; returns the number of layers plotted. Needs ``trace=True``."""
        return plot_roofline(self, self.report(), path, title)


@contextmanager
def profile(trace: bool = False, timing_only: bool = False) -> Iterator[ReportedProfile]:
    """Collect the statistics of every NPU partition run inside the ``with`` block.

    ``trace=True`` also keeps per-instruction timelines (for per-layer reports and Perfetto traces);
    ``timing_only=True`` skips the numerics (outputs are not written). Profiles are per thread: a VM
    running in another thread records into that thread's profiles, never into this one.
    """
    with collect(ReportedProfile(trace=trace, timing_only=timing_only)) as prof:
        yield prof
