"""How close the compiled models get to the datasheet's bound, under the targets that matter.

Usage: ``python benchmarks/roofline.py [--models light_resnet50 light_squeezenet] [--out DIR]``.

For each model (weights randomised with seed 0) and each target below, builds the model,
runs it once in timing-only mode (the cycles are those of a functional run) and records
the report's whole-model figures next to the in-process baselines: the sum of the
per-layer roofline bounds and the compulsory DRAM bytes (every layer's inputs, weights
and outputs once). Targets: the default; ``-max-sram-bytes=262144``; ``-fusion=0`` and
``-fusion=2`` (against the default ``-fusion=1``); each forced ``-layout-pref`` (against
the planner's ``auto``). Writes ``roofline.json`` and prints one line per run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from tvm_npu.models.light import randomize_weights
from tvm_npu.tools.bench import build_model, default_inputs, environment, model_report, profile_model, resolve_model

RESULTS = Path(__file__).parent / "results"
MODELS = ("light_resnet50", "light_squeezenet")
TARGETS = ("npu", "npu -max-sram-bytes=262144", "npu -fusion=0", "npu -fusion=2", "npu -layout-pref=NCHW",
           "npu -layout-pref=NHWC")


def measure(model: Any, inputs: list, target: str) -> dict[str, Any]:
    """One build and one timing-only run: the figures of issue 4 for ``target``."""
    executable, info, build_s = build_model(model, target, progress=False)
    _, prof, _ = profile_model(executable, inputs, trace=True, timing_only=True)
    rep = model_report(prof, info)
    return {
        "target": target, "build_s": build_s, "cycles": rep.cycles, "bound_cycles": rep.bound_cycles,
        "cycles_over_bound": rep.cycles / rep.bound_cycles, "geomean_efficiency": rep.geomean_efficiency(),
        "min_efficiency": min((x.efficiency for x in rep.layers if x.op in ("conv2d", "matmul")), default=0.0),
        "dram_bytes": rep.dram_bytes, "compulsory_bytes": rep.compulsory_bytes,
        "dram_over_compulsory": rep.dram_bytes / rep.compulsory_bytes, "npu_macs": info.npu_macs,
        "host_macs": info.host_macs, "transforms_inserted": info.transforms_inserted,
        "transforms_on_host": info.layout_transforms,
        "npu_ops": sum(info.npu_ops.values()), "host_ops": sum(info.host_ops.values()),
    }


def line(name: str, r: dict[str, Any]) -> str:
    return (f"{name:17s} {r['target']:29s} cycles {r['cycles']:>11,} = {r['cycles_over_bound']:.3f}x bound; "
            f"geomean eff {r['geomean_efficiency']:.3f} (min {r['min_efficiency']:.2f}); DRAM "
            f"{r['dram_bytes'] / 2**20:6.1f} MiB = {r['dram_over_compulsory']:.2f}x compulsory; layout transforms "
            f"{r['transforms_inserted']} inserted, {r['transforms_on_host']} on host; build {r['build_s']:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), help="bundled names or .onnx paths")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    results: dict[str, list[dict[str, Any]]] = {}
    for spec in args.models:
        name, model = resolve_model(spec)
        model = randomize_weights(model, seed=0)
        inputs = default_inputs(model)
        results[name] = []
        for target in TARGETS:
            r = measure(model, inputs, target)
            results[name].append(r)
            print(line(name, r), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "roofline.json"
    path.write_text(json.dumps({"environment": environment(), "total_seconds": time.perf_counter() - start,
                                "models": results}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
