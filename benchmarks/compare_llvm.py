"""NPU (simulated) against llvm on the bundled models: the figures of ``tvm-npu bench`` for each.

Usage: ``python benchmarks/compare_llvm.py [--quick] [--repeat N] [--target T] [--out DIR]``.

Models: ``tiny_convnet``, every ``light_*`` model shipped with onnx (weights randomised with
seed 0, so the output comparison means something; a model whose build fails is skipped
and reported), and a transformer-style block (attention with softmax, a gelu MLP) built
with ``relax.BlockBuilder``. ``--quick`` runs tiny_convnet, light_squeezenet and the block.
Writes ``compare_llvm.json`` and bar plots ``compare_llvm_*.png`` (``--quick``: with a
``_quick`` suffix, so a short run never overwrites the full results).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tvm
from matplotlib.figure import Figure
from tvm import relax
from tvm.script import relax as R

from tvm_npu.bench import BUNDLED, BenchResult, LoadedModel, bench, default_inputs, environment
from tvm_npu.config import parse_target
from tvm_npu.models import randomize_weights

RESULTS = Path(__file__).parent / "results"
QUICK = ("tiny_convnet", "light_squeezenet", "transformer_block")


def transformer_block(seq: int = 64, dim: int = 128, hidden: int = 512, seed: int = 0) -> tvm.IRModule:
    """One pre-norm-free transformer layer on ``seq x dim`` tokens: single-head attention
    (q, k, v projections, ``softmax(q k^T / sqrt(dim)) v``, output projection, residual)
    and an MLP (``gelu(x W1 + b1) W2 + b2``, residual)."""
    rng = np.random.default_rng(seed)

    def const(*shape: int, scale: float) -> relax.Constant:
        return relax.const(rng.normal(0.0, scale, shape).astype(np.float32))

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((seq, dim), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            w = 1 / np.sqrt(dim)
            q, k, v = (bb.emit(R.matmul(x, const(dim, dim, scale=w))) for _ in range(3))
            scores = bb.emit(R.multiply(bb.emit(R.matmul(q, bb.emit(R.permute_dims(k)))),
                                        relax.const(np.float32(w))))
            attn = bb.emit(R.matmul(bb.emit(R.nn.softmax(scores, axis=-1)), v))
            h = bb.emit(R.add(bb.emit(R.matmul(attn, const(dim, dim, scale=w))), x))
            up = bb.emit(R.nn.gelu(bb.emit(R.add(bb.emit(R.matmul(h, const(dim, hidden, scale=w))),
                                                 const(hidden, scale=0.1)))))
            down = bb.emit(R.add(bb.emit(R.matmul(up, const(hidden, dim, scale=1 / np.sqrt(hidden)))),
                                 const(dim, scale=0.1)))
            out = bb.emit_output(bb.emit(R.add(down, h)))
        bb.emit_func_output(out)
    return bb.get()


def models(quick: bool) -> dict[str, Callable[[], LoadedModel]]:
    """Name -> loader, in the order they are benchmarked."""
    table: dict[str, Callable[[], LoadedModel]] = {"tiny_convnet": BUNDLED["tiny_convnet"]}
    for name, load in BUNDLED.items():
        if name.startswith("light_"):
            table[name] = lambda load=load: randomize_weights(load(), seed=0)
    table["transformer_block"] = transformer_block
    return {k: v for k, v in table.items() if k in QUICK} if quick else table


def bar_plot(path: Path, names: list[str], series: dict[str, list[float]], ylabel: str, title: str,
             log: bool = False, reference: float | None = None) -> None:
    """Grouped bars, one group per model."""
    fig = Figure(figsize=(max(6.0, 1.1 * len(names) + 2), 4.8), layout="constrained")
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
    if len(series) > 1:
        ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.savefig(path, format="png", dpi=120)


def plots(results: list[BenchResult], out: Path, suffix: str) -> list[Path]:
    names = [r.model for r in results]
    paths = [out / f"compare_llvm_{kind}{suffix}.png" for kind in ("latency", "ratios", "efficiency")]
    bar_plot(paths[0], names, {"llvm (median wall)": [r.llvm_latency_s * 1e3 for r in results],
                               "NPU (simulated)": [r.npu_latency_s * 1e3 for r in results]},
             "latency per inference (ms)", "llvm on this CPU vs the simulated NPU", log=True)
    bar_plot(paths[1], names, {"llvm latency / NPU latency": [r.speedup or 0.0 for r in results],
                               "simulator wall / llvm latency": [r.simulator_over_llvm for r in results]},
             "ratio", "NPU speed-up over llvm, and the simulator's cost", log=True, reference=1.0)
    bar_plot(paths[2], names, {"roofline efficiency (model)": [r.efficiency for r in results],
                               "geomean conv/matmul efficiency": [r.geomean_efficiency for r in results],
                               "share of MACs on the NPU": [r.npu_mac_share for r in results]},
             "fraction", "How close the NPU comes to its bound, and how much of the model it runs",
             reference=1.0)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}, 3 llvm runs each")
    parser.add_argument("--repeat", type=int, help="timed llvm runs per model (default 10, 3 with --quick)")
    parser.add_argument("--target", default="npu", help="NPU target string (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results)")
    args = parser.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 10)
    target = str(parse_target(args.target))
    results: list[BenchResult] = []
    skipped: dict[str, str] = {}
    start = time.perf_counter()
    for name, load in models(args.quick).items():
        try:
            model = load()
            result = bench(name, model, target, default_inputs(model), repeat=repeat)
        except Exception as e:  # a model the compiler cannot handle yet is reported, not fatal
            reason = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            skipped[name] = reason
            print(f"SKIPPED {name}: build or run failed ({reason})", flush=True)
            continue
        results.append(result)
        print("\n".join(result.lines()) + "\n", flush=True)
    total_s = time.perf_counter() - start

    print(f"{'model':<20} {'NPU/llvm speed':>14} {'sim wall/llvm':>13} {'efficiency':>10} {'max |err|':>9} "
          f"{'MACs on NPU':>11} {'build NPU/llvm':>14}")
    for r in results:
        speed = f"{r.speedup:.2f}x" if r.speedup is not None else "-"
        print(f"{r.model:<20} {speed:>14} {r.simulator_over_llvm:>12.3g}x {r.efficiency:>10.3f} "
              f"{r.max_abs_error:>9.2g} {r.npu_mac_share:>11.1%} {r.npu_build_s / r.llvm_build_s:>13.1f}x")
    for name, reason in skipped.items():
        print(f"{name:<20} skipped: {reason}")
    print(f"total {total_s:.0f} s")

    suffix = "_quick" if args.quick else ""
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"compare_llvm{suffix}.json"
    path.write_text(json.dumps({"environment": environment(), "target": target, "repeat": repeat,
                                "total_seconds": total_s, "models": [r.to_json() for r in results],
                                "skipped": skipped}, indent=1) + "\n")
    written = [path, *(plots(results, args.out, suffix) if results else [])]
    print("wrote " + ", ".join(str(p) for p in written))
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
