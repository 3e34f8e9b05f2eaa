"""Fingerprints of the compiled models: did a compiler change alter what the NPU runs?

Usage::

    python benchmarks/fingerprint.py --out results/fingerprints.json        # record
    python benchmarks/fingerprint.py --compare results/fingerprints.json    # check against a record

For every benchmark model (weights randomised with seed 0) and target, builds the model
once and runs it in timing-only mode, then records per partition the SHA-256 of its
program (instructions, tensors and constants), its simulated cycles and DRAM bytes.
A refactoring that claims "no behaviour change" must leave every digest equal; a change
that moves the numbers is listed partition by partition with the cycles and DRAM bytes
before and after, so a reviewer sees exactly what moved.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from tvm_npu.models.registry import benchmark_models
from tvm_npu.tools.bench import build_model, default_inputs, profile_model

TARGETS = {
    "light_resnet50": ("npu", "npu -max-sram-bytes=262144", "npu -fusion=0", "npu -fusion=2",
                       "npu -layout-pref=NCHW", "npu -layout-pref=NHWC"),
    "light_squeezenet": ("npu", "npu -max-sram-bytes=262144", "npu -fusion=0", "npu -fusion=2",
                         "npu -layout-pref=NCHW", "npu -layout-pref=NHWC"),
    "tiny_convnet": ("npu", "npu -fusion=0", "npu -fusion=2", "npu -pipeline-stages=1", "npu -pipeline-stages=3"),
}


def fingerprint(model: Any, target: str) -> dict[str, Any]:
    """Digest, cycles and DRAM bytes of every partition of ``model`` built for ``target``."""
    executable, _, build_s = build_model(model, target, progress=False)
    _, prof, _ = profile_model(executable, default_inputs(model), timing_only=True)
    parts = {}
    for run in prof.runs:
        s = run.stats
        parts[run.symbol] = {"sha256": hashlib.sha256(run.artifact.program).hexdigest(),
                             "cycles": s.total_cycles, "dram_bytes": s.dma_load_bytes + s.dma_store_bytes}
    return {"build_s": build_s, "cycles": prof.total_cycles, "partitions": parts}


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Lines naming every partition whose program changed (empty: identical)."""
    lines = []
    for key, rec in new.items():
        before = old.get(key)
        if before is None:
            lines.append(f"{key}: not in the reference record")
            continue
        for sym, p in rec["partitions"].items():
            q = before["partitions"].get(sym)
            if q is None or q["sha256"] != p["sha256"]:
                was = f"{q['cycles']:,} cycles, {q['dram_bytes']:,} B" if q else "absent"
                lines.append(f"{key} {sym}: program changed ({was} -> {p['cycles']:,} cycles, "
                             f"{p['dram_bytes']:,} B)")
        if before["cycles"] != rec["cycles"]:
            lines.append(f"{key}: model cycles {before['cycles']:,} -> {rec['cycles']:,} "
                         f"({rec['cycles'] / before['cycles']:.4f}x)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", help="subset of the benchmark models (default: all)")
    parser.add_argument("--out", type=Path, help="write the fingerprints to this JSON file")
    parser.add_argument("--compare", type=Path, help="compare with a recorded JSON file; exit 1 on a difference")
    args = parser.parse_args(argv)
    table = benchmark_models(quick=False)
    names = args.models or list(table)
    unknown = sorted(set(names) - set(table))
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(table)}")
    start = time.perf_counter()
    result: dict[str, Any] = {}
    for name in names:
        model = table[name]()
        for target in TARGETS.get(name, ("npu",)):
            rec = fingerprint(model, target)
            result[f"{name} | {target}"] = rec
            print(f"{name:18s} {target:30s} {rec['cycles']:>12,} cycles  {len(rec['partitions'])} partitions  "
                  f"build {rec['build_s']:.1f} s", flush=True)
    print(f"{time.perf_counter() - start:.0f} s in all")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out}")
    if args.compare:
        diff = compare(json.loads(args.compare.read_text()), result)
        print("\n".join(diff) if diff else f"identical to {args.compare}: every program digest is equal")
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
