"""Whole models tuned with meta_schedule against untuned: simulated cycles, tuning time, per-operator gains.

Usage: ``python benchmarks/tuning_models.py [--models a,b] [--trials 64,256] [--no-plans] [--out DIR]``.

Per model (bundled ``light_resnet50`` with seed-0 weights, and the exporter-style ``mobilenet_v2``
in fp32, the "MobileNetV2-style model" of issue 12) at target ``npu``:

* **untuned**: ``build_with_info(model, target)``, one timing-only run under ``tvm_npu.profile``:
  total NPU cycles (``Profile.total_cycles``; deterministic).
* **tuned with N trials**: ``tvm_npu.tune(model, target, work_dir, trials, plans=False)`` (the cost
  model's tile of every distinct operator measured and recorded first, then ``trials``
  measurements of meta_schedule's evolutionary search with the XGB model, ``--workers`` build and
  measure processes), then ``build_with_info(..., database=DIR)`` and the same run, DIR a copy of
  the work dir's meta_schedule database without plan records (tiles only). The trial counts are
  reached in one work dir, each continuing the previous one (tuning time and trials are cumulative).
* **+ plans**: then ``tvm_npu.tuning.group_search.search`` with the tuned tiles (what ``tune(plans=True)`` runs
  after the operators; the plan records of a previous trial count are removed first, since they
  were measured with other tiles), and the build with the whole work dir and the run again.

Per operator (``TaskResult``): calls, space size, measurements, the cost model's tile against the
best found (cycles of one call). "Predicted saving" = sum over operators of calls x (default - best),
the saving the operator measurements promise, against the whole-model saving the tuned build shows.
Wall times are on a 2-core machine shared with other jobs. Writes ``tuning_models.json`` and
``tuning_models.md``; with ``--models`` only those models' rows are replaced.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx

from tvm_npu.config import parse_target
from tvm_npu.models.light import randomize_weights
from tvm_npu.tools.bench import BUNDLED, build_model, default_inputs, environment, profile_model
from tvm_npu.tuning.measure import seconds_to_cycles

RESULTS = Path(__file__).parent / "results"
MODELS = ("light_resnet50", "mobilenet_v2")
TARGET = "npu"
#: Where the tuning work dirs go unless told otherwise (kept, so a run can be inspected or resumed).
WORK_ROOT = Path(tempfile.gettempdir()) / "tvm_npu_tuning_models"


def load(name: str) -> onnx.ModelProto:
    """The bundled model; light models with seed-0 random weights (as in the other benchmarks)."""
    proto = BUNDLED[name]()
    return randomize_weights(proto, seed=0) if name.startswith("light_") else proto


def simulate(model: onnx.ModelProto, target: str, database: Path | None) -> dict[str, Any]:
    """Build (with or without the database) and run once timing-only: NPU cycles and build time."""
    executable, info, build_s = build_model(model, target, database=database, progress=False)
    _, prof, sim_s = profile_model(executable, default_inputs(model), timing_only=True)
    return {"cycles": prof.total_cycles, "build_s": build_s, "simulator_s": sim_s,
            "host_ops": sum(info.host_ops.values()), "partitions": len(prof.runs)}


def simulate_tiles(model: onnx.ModelProto, target: str, work_dir: Path) -> dict[str, Any]:
    """:func:`simulate` with the work dir's tiles only: its meta_schedule database, without plan records."""
    from tvm_npu.tuning.tuner import RECORD_FILE, WORKLOAD_FILE

    with tempfile.TemporaryDirectory(prefix="tuning_models.") as tmp:
        for name in (WORKLOAD_FILE, RECORD_FILE):
            shutil.copy(work_dir / name, Path(tmp) / name)
        return simulate(model, target, Path(tmp))


def operator_rows(results: Sequence[Any], defaults: dict[str, float], target: str) -> list[dict[str, Any]]:
    """Per operator: the cost model's tile (measured at the first trial count) against the best so far."""
    rows = []
    for r in results:
        default = defaults.get(r.key, r.default_seconds)
        rows.append({"name": r.name, "key": r.key, "calls": r.calls, "space": r.space, "trials": r.trials,
                     "default_cycles": seconds_to_cycles(default, target),
                     "best_cycles": seconds_to_cycles(r.best_seconds, target), "speedup": default / r.best_seconds})
    return rows


def run_model(name: str, trial_counts: Sequence[int], work_root: Path, workers: int, seed: int,
              plans: bool) -> list[dict[str, Any]]:
    """Rows of one model: untuned, then each trial count (tiles, and tiles + plans)."""
    from tvm_npu.tuning.group_search import PLANS_FILE, search
    from tvm_npu.tuning.tuner import best_tiles, tune

    target = str(parse_target(TARGET))
    model = load(name)
    work_dir = work_root / name
    shutil.rmtree(work_dir, ignore_errors=True)
    base = simulate(model, target, None)
    print(f"{name}: untuned {base['cycles']:,} cycles (build {base['build_s']:.0f} s)", flush=True)
    rows = []
    tune_s = plan_s = 0.0
    done = 0
    defaults: dict[str, float] = {}
    for n in sorted(trial_counts):
        start = time.perf_counter()
        results = tune(model, target, work_dir, trials=n - done, plans=False, workers=workers, seed=seed,
                       progress=False)
        tune_s += time.perf_counter() - start
        done = n
        # a continued run reports the previous run's best as its default: keep the first run's (the cost model's)
        defaults = defaults or {r.key: r.default_seconds for r in results}
        ops = operator_rows(results, defaults, target)
        tuned = simulate_tiles(model, target, work_dir)  # a previous count's plan records measured other tiles
        row = {"model": name, "precision": "fp32", "target": target, "trials": n, "seed": seed, "workers": workers,
               "untuned": base, "tuned": tuned, "tune_s": tune_s, "measurements": sum(o["trials"] for o in ops),
               "tasks": len(ops), "speedup": base["cycles"] / tuned["cycles"],
               "predicted_saving": sum(o["calls"] * (o["default_cycles"] - o["best_cycles"]) for o in ops),
               "operators": ops}
        print(f"{name}: {n} trials: {tuned['cycles']:,} cycles ({row['speedup']:.4f}x), tuning {tune_s:.0f} s",
              flush=True)
        if plans:
            (work_dir / PLANS_FILE).unlink(missing_ok=True)
            start = time.perf_counter()
            records = search(model, target, work_dir, tiles=best_tiles(work_dir, target), progress=False)
            plan_s = time.perf_counter() - start
            planned = simulate(model, target, work_dir)
            row.update(plans=planned, plan_search_s=plan_s, plan_speedup=base["cycles"] / planned["cycles"],
                       plan_variants=sum(len(r.variants) for r in records.values()),
                       plan_partitions=len(records))
            print(f"{name}: {n} trials + plans: {planned['cycles']:,} cycles ({row['plan_speedup']:.4f}x), "
                  f"plan search {plan_s:.0f} s", flush=True)
        rows.append(row)
    return rows


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """What each figure is, the model table, then the operators of each model's largest trial count."""
    lines = [
        f"# Models tuned with meta_schedule against untuned (target `{TARGET}`)",
        "",
        "Machine: 2 cores shared with 3-4 other jobs: wall times are noisy, cycles are the simulator's "
        "(deterministic, timing-only run of the whole model). *trials* = meta_schedule's trial budget over all "
        "of the model's distinct operators, on top of the cost model's tile of each, measured first; "
        "*measurements* = all successful operator measurements in the database; *tuning s* = wall time of "
        "`tvm_npu.tune(..., plans=False)` (cumulative over the trial counts, which continue one work dir); "
        "*+ plans* = after the plan search (`tvm_npu.tuning.group_search.search`, whole partitions measured) with the "
        "tuned tiles; *predicted saving* = sum over operators of calls x (cost model's tile - best tile) "
        "cycles, from the operator measurements.",
        "",
        "| model | trials | tasks | measurements | untuned cycles | tuned cycles | speedup | predicted saving | "
        "actual saving | tuning s | + plans cycles | + plans speedup | plan search s (variants) | "
        "build s untuned / tuned |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        base, tuned = r["untuned"], r["tuned"]
        planned = (f"{r['plans']['cycles']:,} | {r['plan_speedup']:.4f}x | {r['plan_search_s']:.0f} "
                   f"({r['plan_variants']})" if "plans" in r else "not run | - | -")
        lines.append(f"| {r['model']} ({r['precision']}) | {r['trials']} | {r['tasks']} | {r['measurements']} | "
                     f"{base['cycles']:,} | {tuned['cycles']:,} | {r['speedup']:.4f}x | {r['predicted_saving']:,} | "
                     f"{base['cycles'] - tuned['cycles']:,} | {r['tune_s']:.0f} | {planned} | "
                     f"{base['build_s']:.0f} / {tuned['build_s']:.0f} |")
    lines += [f"\nNote ({r['model']}, {r['trials']} trials): {r['note']}" for r in rows if "note" in r]
    last = {}
    for r in rows:
        if r["model"] not in last or r["trials"] > last[r["model"]]["trials"]:
            last[r["model"]] = r
    for r in last.values():
        ops = sorted(r["operators"], key=lambda o: -o["calls"] * (o["default_cycles"] - o["best_cycles"]))
        gained = sum(o["speedup"] > 1 for o in ops)
        lines += ["", f"## {r['model']}: operators after {r['trials']} trials ({gained} of {len(ops)} faster than "
                  f"the cost model's tile; sorted by cycles saved per inference)", "",
                  "| operator | calls | space | measurements | cost model's tile cycles | best cycles | speedup |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {o['name']} | {o['calls']} | {o['space']} | {o['trials']} | {o['default_cycles']:,} | "
                  f"{o['best_cycles']:,} | {o['speedup']:.4f}x |" for o in ops]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated bundled models (default: "
                        f"{','.join(MODELS)})")
    parser.add_argument("--trials", default="64,256", help="comma-separated trial counts (default 64,256)")
    parser.add_argument("--workers", type=int, default=2, help="build/measure processes (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="meta_schedule's seed (default 0)")
    parser.add_argument("--no-plans", action="store_true", help="skip the plan search")
    parser.add_argument("--work-root", type=Path, default=WORK_ROOT, help=f"tuning work dirs (default {WORK_ROOT})")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results)")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in BUNDLED]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; bundled: {', '.join(BUNDLED)}")
    try:
        counts = sorted({int(t) for t in args.trials.split(",")})
    except ValueError:
        parser.error(f"--trials takes comma-separated positive integers, got {args.trials!r}")
    if not counts or counts[0] < 1:
        parser.error(f"--trials takes comma-separated positive integers, got {args.trials!r}")
    start = time.perf_counter()
    path = args.out / "tuning_models.json"
    rows: list[dict[str, Any]] = []
    for name in names:
        rows += run_model(name, counts, args.work_root, args.workers, args.seed, not args.no_plans)
        # after every model: a long run that is stopped keeps what it measured
        previous = json.loads(path.read_text())["rows"] if path.is_file() else []
        merged = [r for r in previous if r["model"] not in {x["model"] for x in rows}] + rows
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"environment": environment(), "last_run_seconds": time.perf_counter() - start,
                                    "rows": merged}, indent=1) + "\n")
        (args.out / "tuning_models.md").write_text(markdown(merged))
    print(markdown(merged))
    print(f"wrote {path} and {args.out / 'tuning_models.md'}; {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
