"""End-to-end latency of the NPU build against llvm and onnxruntime on the bundled models: ``tvm-npu bench`` for each.

Usage: ``python benchmarks/compare_llvm.py [--quick] [--repeat N] [--target T] [--host-target H] [--out DIR]``.

Per model: the end-to-end latency of one inference (the simulated NPU part plus the host part
measured on this CPU, :func:`tvm_npu.tools.bench.host_latency`), the NPU part alone, and the references
on this CPU: TVM's untuned default llvm build and onnxruntime with one thread and with every core
(n/a for the Relax-built transformer block). Wall times depend on the machine and on what else runs
on it: the environment is stored with the figures.

Models: ``tiny_convnet``, every ``light_*`` model shipped with onnx (weights randomised with
seed 0, so the output comparison means something; a model whose build fails is skipped
and reported), and a transformer-style block (attention with softmax, a gelu MLP) built
with ``relax.BlockBuilder`` (the table: :func:`tvm_npu.models.registry.benchmark_models`).
``--quick`` runs tiny_convnet, light_squeezenet and the block.
Writes ``compare_llvm.json``, the latency plot ``compare_llvm.png`` and ``compare_llvm_efficiency.png``
(``--quick``: with a ``_quick`` suffix, so a short run never overwrites the full results).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from tvm_npu.config import parse_target
from tvm_npu.models.registry import QUICK, benchmark_models
from tvm_npu.tools.bench import (
    BenchResult,
    bench,
    default_inputs,
    environment,
    onnxruntime_threads,
)

RESULTS = Path(__file__).parent / "results"


def bar_plot(path: Path, names: list[str], series: dict[str, list[float]], ylabel: str, title: str,
             log: bool = False, reference: float | None = None) -> None:
    """Grouped bars, one group per model."""
    fig = Figure(figsize=(max(6.0, 1.1 * len(names) + 2) + 3.5 * (len(series) > 1), 4.8), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / len(series)
    x = np.arange(len(names))
    for i, (label, values) in enumerate(series.items()):
        bars = ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=label)
        ax.bar_label(bars, fmt="%.3g", fontsize=7, padding=1, rotation=90 if len(series) > 2 else 0)
    if reference is not None:
        ax.axhline(reference, color="k", lw=0.8, ls="--")
    if log:
        ax.set_yscale("log")
    ax.set_xticks(x, names, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_ylim(top=ax.get_ylim()[1] * (4 if log else 1.15))  # room for the bar labels
    if len(series) > 1:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    fig.savefig(path, format="png", dpi=120)


def plots(results: list[BenchResult], out: Path, suffix: str) -> list[Path]:
    names = [r.model for r in results]
    paths = [out / f"compare_llvm{suffix}.png", out / f"compare_llvm_efficiency{suffix}.png"]
    series = {"NPU build end to end (NPU simulated + host measured)": [r.e2e_latency_s * 1e3 for r in results],
              "NPU part alone (simulated)": [r.npu_latency_s * 1e3 for r in results],
              "llvm, TVM's untuned default build": [r.llvm_latency_s * 1e3 for r in results]}
    for threads in onnxruntime_threads():
        series[f"onnxruntime CPU, {threads} thread{'s' * (threads > 1)}"] = [
            r.onnxruntime_latency_s.get(str(threads), float("nan")) * 1e3 for r in results]  # nan: n/a, no bar
    bar_plot(paths[0], names, series, "latency per inference (ms, median)",
             "One inference: NPU build end to end vs CPU references", log=True)
    bar_plot(paths[1], names, {"roofline efficiency (model)": [r.efficiency for r in results],
                               "geomean conv/matmul efficiency": [r.geomean_efficiency for r in results],
                               "share of MACs on the NPU": [r.npu_mac_share for r in results]},
             "fraction", "How close the NPU comes to its bound, and how much of the model it runs",
             reference=1.0)
    return paths


def table(results: list[BenchResult]) -> str:
    """The summary table (milliseconds; the ratios are reference latency over end-to-end latency)."""
    threads = onnxruntime_threads()
    head = ["model", "end-to-end", "NPU part", "host part", "llvm", *(f"ORT {t}t" for t in threads),
            "vs llvm", f"vs ORT {threads[-1]}t", "MACs on NPU", "host operators"]
    rows = [head]
    for r in results:
        ort = [r.onnxruntime_latency_s.get(str(t)) for t in threads]
        rows.append([r.model, f"{r.e2e_latency_s * 1e3:.3f}", f"{r.npu_latency_s * 1e3:.3f}",
                     f"{r.host_latency_s * 1e3:.3f}", f"{r.llvm_latency_s * 1e3:.3f}",
                     *(f"{s * 1e3:.3f}" if s else "n/a" for s in ort),
                     f"{r.speedup:.2f}x" if r.speedup else "-",
                     f"{ort[-1] / r.e2e_latency_s:.2f}x" if ort[-1] and r.npu_cycles else "n/a",
                     f"{r.npu_mac_share:.1%}", ", ".join(f"{k.removeprefix('relax.')} x{v}"
                                                        for k, v in r.host_op_counts.items()) or "none"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) if i in (0, len(head) - 1) else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip() for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}, 3 llvm runs each")
    parser.add_argument("--repeat", type=int, help="timed llvm runs per model (default 10, 3 with --quick)")
    parser.add_argument("--target", default="npu", help="NPU target string (default: %(default)s)")
    parser.add_argument("--host-target", help="llvm target of the host part and the llvm reference "
                        "(e.g. '{\"kind\": \"llvm\", \"mcpu\": \"znver3\"}'; default: generic llvm)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results)")
    args = parser.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 10)
    target = str(parse_target(args.target))
    suffix = "_quick" if args.quick else ""
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"compare_llvm{suffix}.json"
    results: list[BenchResult] = []
    skipped: dict[str, str] = {}
    start = time.perf_counter()

    def save(complete: bool) -> None:
        """Written after every model, so an interrupted run keeps what it measured (``complete`` says if it ended)."""
        path.write_text(json.dumps({"environment": environment(), "target": target, "host_target": args.host_target,
                                    "onnxruntime_threads": list(onnxruntime_threads()), "repeat": repeat,
                                    "complete": complete, "total_seconds": time.perf_counter() - start,
                                    "models": [r.to_json() for r in results], "skipped": skipped}, indent=1) + "\n")

    for name, load in benchmark_models(args.quick).items():
        try:
            model = load()
            result = bench(name, model, target, default_inputs(model), repeat=repeat, host=args.host_target)
        except Exception as e:  # a model the compiler cannot handle yet is reported, not fatal
            reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            skipped[name] = reason
            print(f"SKIPPED {name}: build or run failed ({reason})", flush=True)
            continue
        results.append(result)
        print("\n".join(result.lines()) + "\n", flush=True)
        save(complete=False)
    save(complete=True)

    print(table(results))
    for name, reason in skipped.items():
        print(f"{name:<20} skipped: {reason}")
    print(f"total {time.perf_counter() - start:.0f} s")
    written = [path, *(plots(results, args.out, suffix) if results else [])]
    print("wrote " + ", ".join(str(p) for p in written))
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
