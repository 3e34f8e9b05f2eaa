"""Layer groups (``-fusion=3``) against epilogue fusion alone (``-fusion=1``), and the cost model on groups.

Usage: ``python benchmarks/layer_groups.py [--cases a,b,...] [--out DIR]``.

Per case (a model, its precision and ``-max-sram-bytes``) the model is built at ``-fusion=1`` and
at ``-fusion=3`` and run once in timing-only mode with a timeline (cycles equal a functional
run's). Recorded per build: simulated NPU cycles, the model-level bound
(``ModelReport.model_bound_cycles``: only the model's inputs, weights and outputs cross the DRAM
channel) and cycles over it, DRAM bytes moved, the sum of the per-layer bounds, the build time,
and the layer groups: members, slicing (slices of ``rows`` output rows), SRAM, the DRAM bytes
``-fusion=1`` moves for their intermediates, and the cost model's prediction
(``GroupInfo.predicted_cycles``) against the simulated cycles of the group (its members'
attributed cycles in the per-layer report), with the share of groups predicted within 10%.

Light models get seeded random weights (seed 0), as in ``operators.py``; int8 cases are that fp32
model quantized to QDQ by onnxruntime's ``quantize_static`` (``tvm_npu.tools.quantize``: per-channel
int8 weights, int8 activations, 8 seeded random calibration samples), as in ``precision.py``.
The goals bound cycles / model-level bound at ``-fusion=3``; the ``-fusion=1`` row shows the
same ratio for comparison. Writes ``layer_groups.json`` and ``layer_groups.md``; with
``--cases`` only those cases' rows are replaced (cycle counts are deterministic).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from tvm_npu.config import parse_target
from tvm_npu.models.light import randomize_weights
from tvm_npu.report.layers import ModelReport
from tvm_npu.runtime.execute import Profile
from tvm_npu.tools.bench import build_model, default_inputs, environment, model_report, profile_model, resolve_model
from tvm_npu.tools.quantize import quantize_model

RESULTS = Path(__file__).parent / "results"
KIB = 1024
FUSION = (1, 3)
#: The fusion level the goals are for (the other row is the baseline).
GOAL_FUSION = 3
#: A group's prediction is "accurate" within this relative error of its simulated cycles.
TOLERANCE = 0.10


@dataclass(frozen=True)
class Case:
    """One model in one precision on one SRAM size; ``goal`` bounds cycles / model-level bound at -fusion=3."""

    model: str
    int8: bool
    sram: int | None  # -max-sram-bytes; None: the target's default
    goal: float | None
    smoke: bool = False  # cheap, for checking the script; not part of the default set

    def target(self, fusion: int) -> str:
        sram = "" if self.sram is None else f" -max-sram-bytes={self.sram}"
        return str(parse_target(f"npu{sram} -fusion={fusion}"))


CASES: dict[str, Case] = {
    "light_resnet50": Case("light_resnet50", False, None, 1.02),
    "light_squeezenet": Case("light_squeezenet", False, None, 1.08),
    "light_squeezenet_int8_1m": Case("light_squeezenet", True, 1024 * KIB, 1.15),
    "light_squeezenet_int8_256k": Case("light_squeezenet", True, 256 * KIB, 1.15),
    "light_resnet50_int8_1m": Case("light_resnet50", True, 1024 * KIB, 1.15),
    "light_resnet50_int8_256k": Case("light_resnet50", True, 256 * KIB, 1.15),
    "mobilenet_v2_int8_1m": Case("mobilenet_v2", True, 1024 * KIB, 1.5),
    "tiny_convnet_64k": Case("tiny_convnet", False, 64 * KIB, None, smoke=True),
    "tiny_convnet_int8_64k": Case("tiny_convnet", True, 64 * KIB, None, smoke=True),
}


@functools.cache
def load(model: str, int8: bool) -> onnx.ModelProto:
    """The case's model: light models with seed-0 weights, int8 ones quantized (once per process)."""
    _, proto = resolve_model(model)
    if model.startswith("light_"):
        proto = randomize_weights(proto, seed=0)
    if not int8:
        return proto
    with tempfile.TemporaryDirectory(prefix="layer_groups.") as tmp:
        src = Path(tmp) / "fp32.onnx"
        onnx.save(proto, src)
        return onnx.load(quantize_model(src, Path(tmp) / "int8.onnx", random=8, seed=0))


def groups_of(prof: Profile, rep: ModelReport) -> list[dict[str, Any]]:
    """Every layer group of the run: slicing, SRAM, bytes saved, predicted vs simulated cycles, and the
    sum of its members' bounds.

    ``rep.layers`` lists each partition run's layers in artifact order, run after run, so a
    group's members ``first..last`` are found at the run's offset.
    """
    out = []
    offset = 0
    for run in prof.runs:
        layers = rep.layers[offset:offset + len(run.artifact.layers)]
        offset += len(run.artifact.layers)
        for n, g in enumerate(run.artifact.groups):
            members = layers[g.first:g.last + 1]
            if any(run.artifact.layers[k].group != n for k in range(g.first, g.last + 1)):
                raise ValueError(f"{run.symbol}: group {n}'s layers {g.first}..{g.last} do not all name it")
            simulated = sum(x.share_cycles for x in members)  # the members' shares of the run add up
            out.append({
                "partition": run.symbol, "first": g.first, "last": g.last, "members": [x.name for x in members],
                "rows": g.rows, "slices": g.slices, "sram_bytes": g.sram_bytes, "saved_bytes": g.saved_bytes,
                "predicted_cycles": g.predicted_cycles, "simulated_cycles": simulated,
                "bound_cycles": sum(x.bound_cycles for x in members),
                "error": g.predicted_cycles / simulated - 1 if simulated else None,
            })
    return out


def measure(name: str, case: Case, fusion: int) -> dict[str, Any]:
    """One row: a build at ``fusion`` and one timing-only traced run."""
    target = case.target(fusion)
    row: dict[str, Any] = {"case": name, "model": case.model, "precision": "int8" if case.int8 else "fp32",
                           "max_sram_bytes": parse_target(target).hw.max_sram_bytes, "fusion": fusion,
                           "target": target, "goal": case.goal}
    model = load(case.model, case.int8)
    try:
        executable, info, build_s = build_model(model, target, progress=False)
    except Exception as e:  # a configuration the compiler refuses is a result, not a crash
        return {**row, "error": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"}
    _, prof, sim_s = profile_model(executable, default_inputs(model), trace=True, timing_only=True)
    rep = model_report(prof, info)
    groups = groups_of(prof, rep)
    judged = [g for g in groups if g["error"] is not None]
    accurate = sum(abs(g["error"]) <= TOLERANCE for g in judged)
    return {
        **row, "build_s": build_s, "simulator_s": sim_s, "cycles": rep.cycles,
        "model_bound_cycles": rep.model_bound_cycles, "over_model_bound": rep.cycles / rep.model_bound_cycles,
        "dram_bytes": rep.dram_bytes, "layer_bound_sum": rep.bound_cycles, "efficiency": rep.efficiency,
        "npu_macs": info.npu_macs, "host_ops": sum(info.host_ops.values()), "partitions": len(prof.runs),
        "layers": len(rep.layers), "grouped_layers": sum(g["last"] - g["first"] + 1 for g in groups),
        "saved_bytes": sum(g["saved_bytes"] for g in groups),
        "group_predicted_cycles": sum(g["predicted_cycles"] for g in groups),
        "group_simulated_cycles": sum(g["simulated_cycles"] for g in groups),
        "groups_within_10pct": accurate / len(judged) if judged else None,
        "groups": groups,
    }


def met(row: dict[str, Any]) -> str:
    """``FAILED``, ``met``, ``MISSED`` or, for a baseline row or a case without a goal, nothing."""
    if "error" in row:
        return "FAILED"
    if row["goal"] is None or row["fusion"] != GOAL_FUSION:
        return ""
    return "met" if row["over_model_bound"] <= row["goal"] else "MISSED"


def slicing(groups: Sequence[dict[str, Any]]) -> str:
    """``3x2 slices x4, 2x1 x1``: members x slices, and how many groups are so."""
    counts = Counter(f"{g['last'] - g['first'] + 1}x{g['slices']}" for g in groups)
    return ", ".join(f"{k} ({v})" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) or "-"


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """One line per case and fusion level."""
    head = ("| case | precision | SRAM KiB | fusion | cycles | model bound | cycles / model bound | goal | "
            "DRAM MiB | layer bounds sum | groups (members x slices (count)) | group pred. / sim. | "
            "groups within 10% (worst error) | build s |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        start = f"| {r['case']} | {r['precision']} | {r['max_sram_bytes'] // KIB} | {r['fusion']} |"
        goal = f"<= {r['goal']:.2f}x {met(r)}" if r["goal"] is not None and r["fusion"] == GOAL_FUSION else ""
        if "error" in r:
            lines.append(f"{start} build failed: {r['error']} |||{goal}|||||||")
            continue
        errors = [g["error"] for g in r["groups"] if g["error"] is not None]
        share = "-" if not errors else f"{r['groups_within_10pct']:.0%} (worst {max(errors, key=abs):+.1%})"
        accuracy = (f"{r['group_predicted_cycles'] / r['group_simulated_cycles']:.3f}"
                    if r["group_simulated_cycles"] else "-")
        lines.append(f"{start} {r['cycles']:,} | {r['model_bound_cycles']:,.0f} | {r['over_model_bound']:.3f}x | "
                     f"{goal} | {r['dram_bytes'] / 2**20:.2f} | {r['layer_bound_sum']:,.0f} | {len(r['groups'])}: "
                     f"{slicing(r['groups'])} | {accuracy} | {share} | {r['build_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help=f"comma-separated case names (default: all but the smoke cases; known: "
                        f"{', '.join(CASES)})")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results)")
    args = parser.parse_args(argv)
    names = args.cases.split(",") if args.cases else [n for n, c in CASES.items() if not c.smoke]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    start = time.perf_counter()
    rows = []
    for name in names:
        for fusion in FUSION:
            row = measure(name, CASES[name], fusion)
            rows.append(row)
            print(markdown([row]).splitlines()[-1], flush=True)
    total_s = time.perf_counter() - start
    path = args.out / "layer_groups.json"
    if args.cases and path.is_file():  # a partial run updates its rows of the full table
        previous = {(r["case"], r["fusion"]): r for r in json.loads(path.read_text())["rows"]}
        previous.update({(r["case"], r["fusion"]): r for r in rows})
        order = {n: i for i, n in enumerate(CASES)}
        rows = sorted(previous.values(), key=lambda r: (order.get(r["case"], len(order)), r["case"], r["fusion"]))
        kept = sorted({r["case"] for r in rows} - set(names))
        if kept:
            print(f"kept the rows of {', '.join(kept)} from the previous run")
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"environment": environment(), "tolerance": TOLERANCE, "last_run_seconds": total_s,
                                "rows": rows}, indent=1) + "\n")
    (args.out / "layer_groups.md").write_text(markdown(rows))
    print(markdown(rows))
    print(f"wrote {path} and {args.out / 'layer_groups.md'}; {total_s:.0f} s")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
