"""Latency and DRAM traffic of one model against the SRAM size, the pipeline depth and layer groups.

Usage: ``python benchmarks/sweep.py [--model NAME_OR_PATH] [--quick] [--out DIR]``.

For ``-max-sram-bytes`` from 64 KiB to 8 MiB (powers of two) and ``-pipeline-stages``
1..3 (at ``-fusion=1``), and at the default 2 stages without and with layer groups
(``-fusion=1`` and ``-fusion=3``), builds the model (default ``light_squeezenet``), runs it
once in timing-only mode with a timeline, and records simulated cycles and DRAM bytes next
to the in-process baseline, the roofline bound (cycles: the sum of the per-layer bounds),
the model-level bound (only the model's inputs, weights and outputs cross the DRAM channel)
and the compulsory traffic (every layer's inputs, weights and outputs once; intermediates a
group keeps on chip are not). ``--quick``: 64 KiB, 512 KiB and 8 MiB with 1 and 3 stages,
and 2 stages at both fusion levels. Writes ``sweep.json`` and ``sweep.png`` (top: pipeline
depths; bottom: without and with layer groups; ``--quick``: ``sweep_quick.*``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from tqdm import tqdm

from tvm_npu.tools.bench import build_model, default_inputs, environment, model_report, profile_model, resolve_model

RESULTS = Path(__file__).parent / "results"
KIB = 1024
FULL = ([64 * KIB << i for i in range(8)], [1, 2, 3])
QUICK = ([64 * KIB, 512 * KIB, 8192 * KIB], [1, 3])
#: The pipeline depth (the target's default) at which -fusion=1 and -fusion=3 are compared.
GROUP_STAGES = 2


def configs(srams: list[int], depths: list[int]) -> list[tuple[int, int, int]]:
    """(SRAM bytes, pipeline stages, fusion) to measure: every depth at -fusion=1, then layer groups."""
    pipeline = [(s, d, 1) for s in srams for d in depths]
    groups = [(s, GROUP_STAGES, f) for s in srams for f in (1, 3)]
    return list(dict.fromkeys(pipeline + groups))


def measure(model: Any, inputs: list, sram: int, stages: int, fusion: int) -> dict[str, Any]:
    """One configuration: build, one timing-only traced run, the report's whole-model figures."""
    target = f"npu -max-sram-bytes={sram} -pipeline-stages={stages} -fusion={fusion}"
    point: dict[str, Any] = {"max_sram_bytes": sram, "pipeline_stages": stages, "fusion": fusion, "target": target}
    try:
        executable, info, build_s = build_model(model, target, progress=False)
    except Exception as e:  # too little SRAM for some layer is a result, not a crash
        return {**point, "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"}
    _, prof, sim_s = profile_model(executable, inputs, trace=True, timing_only=True)
    rep = model_report(prof, info)
    return {**point, "build_s": build_s, "simulator_s": sim_s, "cycles": rep.cycles,
            "bound_cycles": rep.bound_cycles, "efficiency": rep.efficiency,
            "model_bound_cycles": rep.model_bound_cycles, "dram_bytes": rep.dram_bytes,
            "compulsory_bytes": rep.compulsory_bytes, "dram_over_compulsory": rep.dram_bytes / rep.compulsory_bytes,
            "wasted_bytes": sum(x.wasted_bytes for x in rep.layers),
            "sram_high_water": max(r.stats.sram_high_water for r in prof.runs),
            "npu_macs": rep.npu_macs, "partitions": len(prof.runs),
            "groups": sum(len(r.artifact.groups) for r in prof.runs)}


def plot(points: list[dict[str, Any]], path: Path, title: str) -> None:
    """Cycles (left) and DRAM MiB (right) against SRAM size: one line per pipeline depth at -fusion=1
    (top), and at the default depth one line without and one with layer groups (bottom)."""
    fig = Figure(figsize=(11, 9), layout="constrained")
    (cyc, dram), (gcyc, gdram) = fig.subplots(2, 2)
    ok = [p for p in points if "error" not in p]

    def line(ax_cyc: Any, ax_dram: Any, pts: list[dict[str, Any]], label: str) -> None:
        pts = sorted(pts, key=lambda p: p["max_sram_bytes"])
        kib = [p["max_sram_bytes"] / KIB for p in pts]
        ax_cyc.plot(kib, [p["cycles"] / 1e6 for p in pts], "o-", label=label)
        ax_dram.plot(kib, [p["dram_bytes"] / 2**20 for p in pts], "o-", label=label)

    fusion1 = [p for p in ok if p["fusion"] == 1]
    for stages in sorted({p["pipeline_stages"] for p in fusion1}):
        line(cyc, dram, [p for p in fusion1 if p["pipeline_stages"] == stages], f"{stages} pipeline stage(s)")
    for fusion, label in ((1, "-fusion=1 (no layer groups)"), (3, "-fusion=3 (layer groups)")):
        line(gcyc, gdram, [p for p in ok if p["pipeline_stages"] == GROUP_STAGES and p["fusion"] == fusion], label)
    if fusion1:
        cyc.axhline(min(p["bound_cycles"] for p in fusion1) / 1e6, color="k", ls="--", lw=1, label="roofline bound")
        dram.axhline(min(p["compulsory_bytes"] for p in fusion1) / 2**20, color="k", ls="--", lw=1,
                     label="compulsory traffic")
    if ok:
        gcyc.axhline(min(p["model_bound_cycles"] for p in ok) / 1e6, color="k", ls=":", lw=1,
                     label="model-level bound")
    gcyc.set_title(f"{GROUP_STAGES} pipeline stages, without and with layer groups", fontsize=10)
    gdram.set_title(f"{GROUP_STAGES} pipeline stages, without and with layer groups", fontsize=10)
    sizes = sorted({p["max_sram_bytes"] // KIB for p in points})
    for ax, ylabel in ((cyc, "simulated cycles (millions)"), (dram, "DRAM traffic (MiB)"),
                       (gcyc, "simulated cycles (millions)"), (gdram, "DRAM traffic (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [f"{s // KIB} MiB" if s >= KIB else f"{s} KiB" for s in sizes])
        ax.set_xlabel("-max-sram-bytes")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.savefig(path, format="png", dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="light_squeezenet", help="bundled model name or .onnx path "
                        "(default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="3 SRAM sizes x 2 pipeline depths, and layer groups")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results)")
    args = parser.parse_args(argv)
    name, model = resolve_model(args.model)
    inputs = default_inputs(model)
    srams, depths = QUICK if args.quick else FULL
    start = time.perf_counter()
    points = []
    todo = configs(srams, depths)
    for sram, stages, fusion in tqdm(todo, desc=f"sweep {name}", unit="build", file=sys.stderr, disable=None):
        point = measure(model, inputs, sram, stages, fusion)
        points.append(point)
        head = f"{sram // KIB:>5} KiB, {stages} stage(s), -fusion={fusion}: "
        if "error" in point:
            tqdm.write(f"{head}build failed ({point['error']})")
        else:
            tqdm.write(f"{head}{point['cycles']:>10,} cycles = {point['cycles'] / point['bound_cycles']:.2f}x the "
                       f"roofline bound; DRAM {point['dram_bytes'] / 2**20:6.2f} MiB = "
                       f"{point['dram_over_compulsory']:.2f}x compulsory; "
                       f"{point['cycles'] / point['model_bound_cycles']:.2f}x the model-level bound; "
                       f"{point['groups']} layer groups; build {point['build_s']:.1f} s")
    total_s = time.perf_counter() - start
    ok = [p for p in points if "error" not in p]
    if ok:
        best = min(ok, key=lambda p: p["cycles"])
        print(f"fastest: {best['target']} at {best['cycles']:,} cycles ({best['efficiency']:.3f} of the bound)")
    print(f"{len(ok)}/{len(points)} configurations built; total {total_s:.0f} s")

    suffix = "_quick" if args.quick else ""
    args.out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = args.out / f"sweep{suffix}.json", args.out / f"sweep{suffix}.png"
    json_path.write_text(json.dumps({"environment": environment(), "model": name, "total_seconds": total_s,
                                     "points": points}, indent=1) + "\n")
    plot(points, png_path, f"{name}: simulated cycles and DRAM traffic vs SRAM size")
    print(f"wrote {json_path}, {png_path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
