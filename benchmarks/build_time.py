"""Build time: the NPU build of a model against TVM's llvm build of the same model, in one process.

Usage: ``python benchmarks/build_time.py [--models light_resnet50 ...] [--target "npu ..."] [--repeat N]``.

Per model and repetition a fresh process imports ``tvm_npu``, warms TVM up with an llvm build of
``tiny_convnet`` (one-time initialisation is nobody's build time), then times
``tvm_npu.build_reference(model)`` (ONNX import and ``relax.build`` for llvm) and
``tvm_npu.build_with_info(model, target)`` (ONNX import and every stage, whose seconds are recorded).
A fresh process per repetition keeps the planner's memo of one build from speeding up the next;
with ``--repeat`` the fastest repetition of each build is kept. Both builds start from the
``onnx.ModelProto``. Goals (issue 12): NPU build at most 2x the llvm build for light_resnet50 and 3x
for light_densenet121. Wall times depend on the machine and on what else runs on it: the load
average at the start of each run is recorded. Writes ``results/build_time.json`` and
``results/build_time.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
MODELS = ("light_resnet50", "light_densenet121", "mobilenet_v2", "light_squeezenet")
#: NPU build time / llvm build time, at most (issue 12).
GOALS = {"light_resnet50": 2.0, "light_densenet121": 3.0}
STAGES = ("import", "bind", "canonicalize", "precision", "layout", "fold-layout", "partition", "schedule", "codegen",
          "host")


def child(model: str, target: str) -> dict[str, Any]:
    """One repetition, in this process: warm-up, llvm build, NPU build."""
    import tvm_npu
    from tvm_npu.models.registry import BUNDLED

    tvm_npu.build_reference(BUNDLED["tiny_convnet"]())
    proto = BUNDLED[model]()
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    tvm_npu.build_reference(proto)
    llvm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, info = tvm_npu.build_with_info(proto, target)
    npu_s = time.perf_counter() - t0
    return {"llvm_build_s": llvm_s, "npu_build_s": npu_s, "stage_seconds": info.stage_seconds, "load_avg_1min": load}


def measure(model: str, target: str, repeat: int) -> dict[str, Any]:
    """The fastest of ``repeat`` fresh-process runs of each build, and the stage seconds of the fastest NPU build."""
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, __file__, "--child", model, "--target", target],
                             capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError(f"building {model} failed:\n{out.stderr[-2000:]}")
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r["npu_build_s"])
    llvm = min(r["llvm_build_s"] for r in runs)
    goal = GOALS.get(model)
    ratio = best["npu_build_s"] / llvm
    return {"model": model, "target": target, "repeat": repeat, "llvm_build_s": llvm,
            "npu_build_s": best["npu_build_s"], "ratio": ratio, "goal": goal,
            "met": None if goal is None else ratio <= goal, "stage_seconds": best["stage_seconds"],
            "load_avg_1min": [r["load_avg_1min"] for r in runs]}


def markdown(rows: list[dict[str, Any]]) -> str:
    """One line per model: both build times, their ratio against the goal, and the NPU build's stages."""
    head = ("| model | llvm build s | NPU build s | NPU / llvm | goal | load avg | "
            + " | ".join(STAGES) + " |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        goal = "" if r["goal"] is None else f"<= {r['goal']:.0f}x {'met' if r['met'] else 'MISSED'}"
        stages = " | ".join(f"{r['stage_seconds'].get(s, 0.0):.2f}" for s in STAGES)
        load = "/".join(f"{x:.1f}" for x in r["load_avg_1min"])
        lines.append(f"| {r['model']} | {r['llvm_build_s']:.2f} | {r['npu_build_s']:.2f} | {r['ratio']:.2f}x | "
                     f"{goal} | {load} | {stages} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), help="bundled model names")
    parser.add_argument("--target", default="npu", help='NPU target string (default: "npu")')
    parser.add_argument("--repeat", type=int, default=1, help="fresh-process runs per model; the fastest is kept")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results)")
    parser.add_argument("--child", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.target)))
        return 0
    from tvm_npu.models.registry import BUNDLED
    from tvm_npu.tools.bench import environment

    unknown = [m for m in args.models if m not in BUNDLED]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; bundled: {', '.join(BUNDLED)}")
    if args.repeat < 1:
        parser.error(f"--repeat must be a positive integer, not {args.repeat}")
    rows = []
    for model in args.models:
        r = measure(model, args.target, args.repeat)
        rows.append(r)
        goal = "" if r["goal"] is None else f" (goal <= {r['goal']:.0f}x: {'met' if r['met'] else 'MISSED'})"
        print(f"{model:18s} llvm {r['llvm_build_s']:6.2f} s  NPU {r['npu_build_s']:6.2f} s  "
              f"= {r['ratio']:.2f}x{goal}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "build_time.json").write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1))
    (args.out / "build_time.md").write_text(markdown(rows))
    print(f"wrote {args.out / 'build_time.json'} and {args.out / 'build_time.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
