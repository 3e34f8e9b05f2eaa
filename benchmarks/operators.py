"""Operator coverage: for every benchmark and exporter-style model, how much runs on the NPU and how well.

Usage: ``python benchmarks/operators.py [--models a,b,...] [--target T] [--out DIR]``.

Per model: the NPU build against TVM's llvm build of the same module and against
onnxruntime (ONNX models; the error is the largest absolute difference over the
reference output's range), the share of MACs on the NPU, the host operator calls (named),
partitions, simulated cycles, the sum of per-layer bounds and the model's efficiency
(sum of bounds / cycles, the report's model line) and the geo-mean per-layer efficiency.
Writes ``operators.json`` and ``operators.md`` (the table of the note) to ``--out``; with
``--models`` only those rows are replaced (cycle counts are deterministic, so rows of one
tree can be measured separately).
The goals are issue 10's: >= 99% of MACs on the NPU, <= 4 host calls, error <= 1e-4 of the
output range; efficiency >= 0.75 (ShuffleNet), >= 0.80 (MobileNetV2), >= 0.85 (ViT-Tiny,
BERT layer).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from tvm_npu.config import parse_target
from tvm_npu.models.light import randomize_weights
from tvm_npu.models.registry import transformer_block
from tvm_npu.tools.bench import BUNDLED, LoadedModel, compare, default_inputs, environment, input_names

RESULTS = Path(__file__).parent / "results"
#: The eleven benchmark models, then the exporter-style ones (bundled by ``tvm_npu.models.bundled``).
BENCHMARK = ("tiny_convnet", *(n for n in BUNDLED if n.startswith("light_")), "transformer_block")
GOALS = {"light_shufflenet": 0.75, "mobilenet_v2": 0.80, "vit_tiny": 0.85, "bert_layer": 0.85}


def loaders() -> dict[str, Callable[[], LoadedModel]]:
    """Name -> loader: light models get seeded random weights, so outputs mean something."""
    table: dict[str, Callable[[], LoadedModel]] = {}
    for name in BENCHMARK:
        if name == "transformer_block":
            table[name] = transformer_block
        elif name.startswith("light_"):
            table[name] = lambda load=BUNDLED[name]: randomize_weights(load(), seed=0)
        else:
            table[name] = BUNDLED[name]
    for name, load in BUNDLED.items():
        table.setdefault(name, load)
    return table


def onnxruntime_error(model: LoadedModel, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> float | None:
    """max |NPU - onnxruntime| over the range of onnxruntime's outputs (None for a Relax module)."""
    if not isinstance(model, onnx.ModelProto):
        return None
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # light models carry unused initializers: one warning each
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    expected = session.run(None, dict(zip(input_names(model), inputs, strict=True)))
    worst = 0.0
    for got, ref in zip(outputs, expected, strict=True):
        ref = np.asarray(ref, np.float64)
        span = float(ref.max() - ref.min()) if ref.size else 0.0
        worst = max(worst, float(np.max(np.abs(np.asarray(got, np.float64) - ref))) / max(span, 1e-30))
    return worst


def measure(name: str, model: LoadedModel, target: str) -> dict[str, Any]:
    """One row of the table."""
    inputs = default_inputs(model)
    cmp = compare(name, model, target, inputs, repeat=1, progress=False)
    r = cmp.result
    expected_span = max((float(np.ptp(np.asarray(e, np.float64))) for e in cmp.expected if e.size), default=0.0)
    return {
        "model": name,
        "llvm_error": r.max_abs_error / max(expected_span, 1e-30),
        "onnxruntime_error": onnxruntime_error(model, inputs, cmp.outputs),
        "npu_mac_share": r.npu_mac_share,
        "macs": r.npu_macs + r.host_macs,
        "host_ops": r.host_ops,
        "host_op_names": dict(cmp.info.host_ops),
        "partitions": r.partitions,
        "cycles": r.npu_cycles,
        "bound_cycles": r.bound_cycles,
        "efficiency": r.efficiency,
        "geomean_efficiency": r.geomean_efficiency,
        "goal": GOALS.get(name),
        "npu_build_s": r.npu_build_s,
    }


def named(ops: dict[str, int]) -> str:
    """``conv2d x3, reshape`` from ``{"conv2d": 3, "reshape": 1}``."""
    return ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(ops.items(), key=lambda kv: -kv[1])) or "-"


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The table of the note."""
    head = ("| model | err vs llvm | err vs ORT | MACs on NPU | host calls | host operators | partitions | cycles | "
            "bound sum / cycles | goal | geo-mean layer eff. |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        ort = "n/a" if r["onnxruntime_error"] is None else f"{r['onnxruntime_error']:.1e}"
        goal = "" if r["goal"] is None else f"{r['goal']:.2f} {'met' if r['efficiency'] >= r['goal'] else 'MISSED'}"
        lines.append(f"| {r['model']} | {r['llvm_error']:.1e} | {ort} | {r['npu_mac_share']:.2%} | {r['host_ops']} | "
                     f"{named(r['host_op_names'])} | "
                     f"{r['partitions']} | {r['cycles']:,} | {r['efficiency']:.3f} | {goal} | "
                     f"{r['geomean_efficiency']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--target", default="npu", help="NPU target string (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results)")
    args = parser.parse_args(argv)
    table = loaders()
    names = args.models.split(",") if args.models else list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(table)}")
    target = str(parse_target(args.target))
    rows, failed = [], {}
    start = time.perf_counter()
    for name in names:
        try:
            row = measure(name, table[name](), target)
        except Exception as e:  # a model the compiler cannot handle yet is reported, not fatal
            failed[name] = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
            print(f"FAILED {name}: {failed[name]}", flush=True)
            continue
        rows.append(row)
        print(markdown([row]).splitlines()[-1], flush=True)
    path = args.out / "operators.json"
    if args.models and path.is_file():  # a partial run updates its rows of the full table
        previous = {r["model"]: r for r in json.loads(path.read_text())["models"]}
        previous.update({r["model"]: r for r in rows})
        rows = [previous[n] for n in table if n in previous]
        print(f"kept the rows of {', '.join(sorted(set(previous) - set(names)))} from the previous run")
    effs = [r["efficiency"] for r in rows if r["efficiency"] > 0]
    summary = {"environment": environment(), "target": target, "total_seconds": time.perf_counter() - start,
               "geomean_model_efficiency": float(np.exp(np.mean(np.log(effs)))) if effs else None,
               "models": rows, "failed": failed}
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "operators.md").write_text(markdown(rows))
    print(markdown(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
