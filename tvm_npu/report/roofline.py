"""The per-layer roofline plot of a profiled run (matplotlib, written as a PNG)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from tvm_npu.config import DType, parse_target
from tvm_npu.report.layers import ModelReport
from tvm_npu.runtime.execute import Profile


def plot_roofline(prof: Profile, rep: ModelReport, path: str | Path, title: str) -> int:
    """Write the per-layer roofline of a profiled run as a PNG; returns the layers plotted.

    Left, the layers with MACs: x MACs per byte that crossed the DRAM channel (useful plus
    wasted burst bytes), y achieved MACs per cycle, under the tensor engine's peak for each
    operand type present and the DRAM slope ``dram_bytes_per_cycle * x``. Right, the layers
    without MACs (pooling, elementwise, softmax: no point on those axes), which the channel
    bounds: achieved DRAM bytes per cycle against the bandwidth. A black tick marks where a layer
    would be at its engine bound (:func:`tvm_npu.report.occupancy.engine_bound`), for the layers the
    engine that runs them holds below the roof (a depthwise convolution on the vector engine) or
    below the channel's rate (a pool whose windows cost the vector engine more than its bytes).
    Every point is labelled with its layer (``p0/conv2d_0``); the y axes span the points and the
    roof, not decades below.
    """
    if not prof.runs:
        raise ValueError("nothing ran on the NPU, so there is no roofline to plot")
    hw = parse_target(prof.runs[0].artifact.target).hw
    dtypes = sorted({layer.dtype for run in prof.runs for layer in run.artifact.layers})
    mac_layers = [x for x in rep.layers if x.macs and x.dram_bytes + x.wasted_bytes and x.cycles]
    other = [x for x in rep.layers if not x.macs and x.dram_bytes + x.wasted_bytes and x.cycles]
    fig = Figure(figsize=(13 if other else 9, 6), layout="constrained")
    ax, side = (fig.subplots(1, 2, width_ratios=(2, 1)) if other else (fig.add_subplot(), None))
    ax.set_xscale("log")
    ax.set_yscale("log")
    points: dict[str, list[tuple[float, float, str]]] = {}
    for x in mac_layers:
        moved = x.dram_bytes + x.wasted_bytes
        points.setdefault(x.op, []).append((x.macs / moved, x.macs / x.cycles, x.label or x.name))
    for op, xy in sorted(points.items()):
        ax.scatter([p[0] for p in xy], [p[1] for p in xy], label=f"{op} ({len(xy)})", alpha=0.75, s=24)
    limited = [x for x in mac_layers if x.engine_bound_cycles > 1.01 * x.bound_cycles]
    if limited:  # where the engine that runs a layer caps it below the roof: the most it can reach there
        ax.scatter([x.macs / (x.dram_bytes + x.wasted_bytes) for x in limited],
                   [x.macs / x.engine_bound_cycles for x in limited], marker="_", s=120, color="k",
                   label=f"engine bound ({len(limited)})")
    _label_points(ax, [p for xy in points.values() for p in xy])
    xs = [p[0] for xy in points.values() for p in xy] or [1.0]
    peaks = {d: hw.peak_macs_per_cycle(DType.from_str(d)) for d in dtypes
             if d in ("int8", "uint8", "float16", "float32")}
    top = max(peaks.values(), default=float(hw.mac_rows * hw.mac_cols))
    lo, hi = min(min(xs), top / hw.dram_bytes_per_cycle) / 4, max(max(xs), top / hw.dram_bytes_per_cycle) * 4
    grid = np.geomspace(lo, hi, 200)
    ax.plot(grid, hw.dram_bytes_per_cycle * grid, "k--", lw=1, label=f"DRAM {hw.dram_bytes_per_cycle} B/cycle")
    for dtype, peak in peaks.items():
        ax.plot(grid, np.minimum(peak, hw.dram_bytes_per_cycle * grid), lw=1.5,
                label=f"{dtype} roof {peak:g} MACs/cycle")
    ax.set_xlim(lo, hi)
    ys = [p[1] for xy in points.values() for p in xy] or [top]
    ax.set_ylim(min(ys) / 1.5, max(top, max(ys)) * 1.5)
    ax.set_xlabel("arithmetic intensity (MACs per DRAM byte moved)")
    ax.set_ylabel("achieved MACs per cycle")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    if side is not None:
        rates = [((x.dram_bytes + x.wasted_bytes) / x.cycles, x.label or x.name) for x in other]
        side.barh(range(len(rates)), [r for r, _ in rates], color="tab:gray", alpha=0.8)
        capped = [(i, x) for i, x in enumerate(other) if x.engine_bound_by != "dma"]
        if capped:  # layers their engine holds below the channel's rate: the rate at their engine bound
            side.scatter([(x.dram_bytes + x.wasted_bytes) / x.engine_bound_cycles for _, x in capped],
                         [i for i, _ in capped], marker="|", s=80, color="k", label="at the engine bound")
        side.set_yticks(range(len(rates)), [n for _, n in rates], fontsize=7)
        side.invert_yaxis()
        side.axvline(hw.dram_bytes_per_cycle, color="k", ls="--", lw=1, label=f"DRAM {hw.dram_bytes_per_cycle} B/cycle")
        side.set_xlabel("achieved DRAM bytes per cycle")
        side.set_title("layers without MACs")
        side.legend(fontsize=8, loc="lower right")
    fig.savefig(path, format="png", dpi=120)
    return len(mac_layers) + len(other)


def _label_points(ax: Any, points: Sequence[tuple[float, float, str]]) -> None:
    """Name every point beside it (small, offset alternately up and down so neighbours overlap less)."""
    for i, (x, y, name) in enumerate(points):
        ax.annotate(name, (x, y), xytext=(4, 4 if i % 2 else -8), textcoords="offset points", fontsize=6, alpha=0.8)
