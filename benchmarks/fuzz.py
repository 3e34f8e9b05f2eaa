"""Differential fuzzing campaign: random ONNX graphs x random targets, NPU against llvm and onnxruntime.

    python benchmarks/fuzz.py --examples 300 --seed 0 [--out benchmarks/results/fuzz] [--timeout 600]
                              [--precision fp32|int8|uint8|fp16|int16|uint16|all] [--minutes M]

The graphs and targets come from ``tests/fuzz/graphs.py`` (hypothesis strategies), the verdict from
``tests/fuzz/oracle.py``. ``--precision`` converts every graph to int8 / uint8 (QDQ, onnxruntime's
quantizer; ``int16`` / ``uint16``: each activation tensor 8 or 16 bits, A16W8) or fp16, or draws one of
them per case (``all``); ``--minutes`` stops generating
cases after that long (a shrink under way finishes). Every case runs in a worker process, so a crash
(signal) or a hang (no answer within ``--timeout`` seconds) is a failure of its own and the campaign
goes on with a fresh worker.

Hypothesis drives the campaign in rounds: a round generates cases until the first failure of a new
kind (verdict, exception class and the project function that raised it), then shrinks it to a
minimal graph; the next round starts from the next seed with the cases left. Failures of a kind
already minimised, and known bugs (``tests/fuzz/known_bugs.py``), are counted without stopping.
Each minimal failure is saved in ``<out>/failures/<n>-<kind>/``: ``model.onnx``, ``repro.py`` (the
``GraphBuilder`` program, the target string and the input seed) and ``outcome.txt`` (the verdict and
the head of the traceback). The summary (also ``<out>/summary.json``) gives the cases, how many
matched, fell back to the host (and why), differed only by rounding of an ill-conditioned output
(settled against float64, or 8-bit values at exact half-step ties), raised the project's own errors
(by type) or failed, in all and per precision.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import multiprocessing as mp
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from tvm_npu.testing.graphs import PRECISIONS, FuzzGraph, graphs, targets
from tvm_npu.testing.known_bugs import known_bug
from tvm_npu.testing.oracle import Outcome, case_repro

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------ worker
def _worker(conn: Any) -> None:
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from tvm_npu.testing.oracle import run_case

    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        model_bytes, target, seed = request
        outcome = run_case(onnx.ModelProto.FromString(model_bytes), target, seed, timeout=None)
        conn.send(outcome.to_dict())


class Worker:
    """One process running cases; restarted after a crash, a timeout, or ``recycle`` cases."""

    def __init__(self, timeout: float, recycle: int = 150) -> None:
        self.timeout, self.recycle = timeout, recycle
        self.ctx = mp.get_context("spawn")
        self.proc: Any = None
        self.conn: Any = None
        self.served = 0

    def _start(self) -> None:
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.conn, self.served = parent, 0

    def stop(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self.conn.send(None)
            self.proc.join(5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()
        self.proc = self.conn = None

    def run(self, model: onnx.ModelProto, target: str, seed: int) -> Outcome:
        if self.proc is None or not self.proc.is_alive() or self.served >= self.recycle:
            self.stop()
            self._start()
        self.served += 1
        t0 = time.perf_counter()
        self.conn.send((model.SerializeToString(), target, seed))
        if not self.conn.poll(self.timeout):
            self.proc.kill()
            self.proc.join()
            self.proc = None
            return Outcome("failure", "timeout", f"no answer within {self.timeout:g} s",
                           seconds=time.perf_counter() - t0)
        try:
            return Outcome(**self.conn.recv())
        except (EOFError, ConnectionError):
            self.proc.join()
            code = self.proc.exitcode
            self.proc = None
            return Outcome("failure", "crash", f"the worker process died (exit code {code})",
                           seconds=time.perf_counter() - t0)


# ------------------------------------------------------------------------------------------ campaign
@dataclass
class Failure:
    signature: str
    outcome: Outcome
    graph: FuzzGraph
    target: str
    seed: int
    count: int = 1
    minimised: bool = False
    known: str = ""
    saved: str = ""


@dataclass
class Campaign:
    worker: Worker
    out: Path
    shrink_seconds: float
    precisions: tuple[str, ...] = ("fp32",)
    deadline: float = float("inf")  # time.monotonic() after which no new case starts
    out_of_time: bool = False
    cases: int = 0
    shrink_calls: int = 0
    verdicts: collections.Counter = field(default_factory=collections.Counter)
    by_precision: dict[str, collections.Counter] = field(default_factory=dict)
    fallback_reasons: collections.Counter = field(default_factory=collections.Counter)
    own_errors: collections.Counter = field(default_factory=collections.Counter)
    own_examples: dict = field(default_factory=dict)
    npu_cases: int = 0
    layers: collections.Counter = field(default_factory=collections.Counter)
    failures: dict[str, Failure] = field(default_factory=dict)
    seen: set = field(default_factory=set)
    seconds: float = 0.0


class OutOfTime(BaseException):
    """Ends the campaign at its deadline (a BaseException: hypothesis lets it through without shrinking)."""


class NewFailure(Exception):
    """Raised inside a hypothesis round so that it shrinks the case (one subclass per signature:
    hypothesis tells bugs apart by exception type and origin)."""


_FAILURE_TYPES: dict[str, type[NewFailure]] = {}


def _failure_type(signature: str) -> type[NewFailure]:
    if signature not in _FAILURE_TYPES:
        name = "Failure_" + re.sub(r"\W+", "_", signature)[:80]
        _FAILURE_TYPES[signature] = type(name, (NewFailure,), {})
    return _FAILURE_TYPES[signature]


def _key(graph: FuzzGraph, target: str, seed: int) -> tuple:
    return graph.code, target, seed


def _verdict(c: Campaign, state: dict[str, Any], graph: FuzzGraph, target: str, seed: int) -> Failure | None:
    """Run one case of a round; the failure hypothesis should see (shrink), or None."""
    shrinking = state["target"] is not None
    key = _key(graph, target, seed)
    if shrinking and time.monotonic() - state["since"] > c.shrink_seconds:
        # out of shrinking time: fail only on the best case so far (hypothesis replays it last)
        best = state["best"]
        return best if key == _key(best.graph, best.target, best.seed) else None
    if not shrinking and key in c.seen:  # the same graph, target and inputs again: nothing to learn
        return None
    if not shrinking and time.monotonic() > c.deadline:
        raise OutOfTime
    outcome = c.worker.run(graph.model, target, seed)
    if shrinking:
        c.shrink_calls += 1
    else:
        c.seen.add(key)
        c.cases += 1
        c.verdicts[outcome.status] += 1
        c.by_precision.setdefault(graph.precision, collections.Counter())[outcome.status] += 1
        c.fallback_reasons.update({_reason(f) for f in outcome.fallbacks})
        c.npu_cases += outcome.npu_runs > 0
        c.layers.update(outcome.npu_layers)
        if outcome.status == "own-error":
            c.own_errors[outcome.kind] += 1
            c.own_examples.setdefault(outcome.signature, (graph, target, seed, outcome))
        print(f"[{c.cases}] {graph.precision:5s} {outcome.status:9s} {outcome.kind:28s} {outcome.seconds:5.1f}s "
              f"npu_runs={outcome.npu_runs} nodes={len(graph.model.graph.node)} {target!r}", flush=True)
    if outcome.ok:
        return None
    sig = f"{graph.precision}/{outcome.signature}"  # one bug in two precisions is minimised twice
    if shrinking:
        if sig != state["target"]:
            return None
        state["best"] = Failure(sig, outcome, graph, target, seed)
        return state["best"]
    bug = known_bug(outcome)
    if sig in c.failures or bug is not None:
        f = c.failures.setdefault(sig, Failure(sig, outcome, graph, target, seed, count=0, known=bug.id if bug else ""))
        f.count += 1
        return None
    state.update(target=sig, best=Failure(sig, outcome, graph, target, seed), since=time.monotonic())
    return state["best"]


def run_round(c: Campaign, examples: int, round_seed: int, max_nodes: int, extended: bool = False) -> None:
    state: dict[str, Any] = {"target": None, "best": None, "since": 0.0}

    @settings(max_examples=examples, deadline=None, database=None, report_multiple_bugs=False,
              phases=[Phase.generate, Phase.shrink], print_blob=False,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    @hypothesis_seed(round_seed)
    @given(graph=graphs(max_nodes=max_nodes, precisions=c.precisions), target=targets(extended),
           seed=st.integers(0, 2**16))
    def case(graph: FuzzGraph, target: str, seed: int) -> None:
        failing = _verdict(c, state, graph, target, seed)
        if failing is not None:  # one raise site: hypothesis tells bugs apart by type and origin
            raise _failure_type(failing.signature)(failing.outcome.report())

    try:
        case()
    except NewFailure:
        pass
    except OutOfTime:
        c.out_of_time = True
    except Exception as e:  # hypothesis: flaky failure, health check ...
        print(f"round {round_seed}: hypothesis stopped: {type(e).__name__}: {str(e)[:500]}", flush=True)
        traceback.print_exc()
    if state["best"] is not None:
        best: Failure = state["best"]
        best.minimised = True
        c.failures[best.signature] = best
        save_failure(c, best, len(c.failures))


def _reason(warning: str) -> str:
    """A HostFallbackWarning message without its shapes and numbers (one per kind of fallback)."""
    return re.sub(r"\b\d+\b(?!-bit)", "N", re.sub(r"R\.shape\(\[[^\]]*\]\)|\[[\d, ]+\]", "", warning))[:160]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:60]


def save_failure(c: Campaign, f: Failure, index: int) -> None:
    d = c.out / "failures" / f"{index:02d}-{_slug(f.outcome.kind + '-' + f.outcome.location)}"
    d.mkdir(parents=True, exist_ok=True)
    onnx.save(f.graph.model, str(d / "model.onnx"))
    (d / "repro.py").write_text(case_repro("\n".join(f.graph.code), f.target, f.seed, f.outcome))
    (d / "outcome.txt").write_text(f"target: {f.target!r}\ninput seed: {f.seed}\n\n{f.outcome.report()}\n")
    f.saved = str(d)


def summary(c: Campaign) -> dict:
    return {
        "cases": c.cases,
        "matched": c.verdicts["match"],
        "fallbacks": c.verdicts["fallback"],
        "ill_conditioned": c.verdicts["ill-conditioned"],
        "own_errors": dict(c.own_errors),
        "failures": c.verdicts["failure"],
        "by_precision": {p: dict(v) for p, v in sorted(c.by_precision.items())},
        "fallback_reasons": dict(c.fallback_reasons.most_common()),
        "cases_with_npu_runs": c.npu_cases,
        "npu_layers": dict(c.layers),
        "shrink_calls": c.shrink_calls,
        "seconds": round(c.seconds, 1),
        "distinct_failures": [
            {"signature": f.signature, "cases": f.count, "known_bug": f.known, "minimised": f.minimised,
             "target": f.target, "input_seed": f.seed, "saved": f.saved, "nodes": len(f.graph.model.graph.node),
             "head": f.outcome.report().splitlines()[:3]}
            for f in c.failures.values()
        ],
        "own_error_examples": [
            {"signature": sig, "target": t, "input_seed": s, "graph": list(g.code), "head": o.report().splitlines()[:3]}
            for sig, (g, t, s, o) in c.own_examples.items()
        ],
    }


def print_summary(c: Campaign) -> None:
    s = summary(c)
    print("\n=== fuzz summary ===")
    print(f"cases {s['cases']} in {s['seconds']:.0f} s ({s['shrink_calls']} more runs while shrinking); "
          f"NPU ran in {s['cases_with_npu_runs']} cases; NPU layers {s['npu_layers']}")
    print(f"matched {s['matched']}, host fallbacks {s['fallbacks']}, ill-conditioned (rounding settled in float64, "
          f"8-bit ties) {s['ill_conditioned']}, own errors {sum(c.own_errors.values())} {s['own_errors']}, "
          f"failures {s['failures']}")
    for precision, verdicts in s["by_precision"].items():
        print(f"  {precision}: {sum(verdicts.values())} cases, {verdicts}")
    for reason, cases in s["fallback_reasons"].items():
        print(f"  host fallback in {cases} case(s): {reason}")
    for f in c.failures.values():
        tag = f"known bug {f.known}" if f.known else ("minimised" if f.minimised else "not minimised")
        print(f"\n- {f.signature}: {f.count} case(s), {tag}; target {f.target!r}, input seed {f.seed}")
        for line in f.outcome.report().splitlines()[:3]:
            print(f"    {line[:300]}")
        if f.saved:
            print(f"    reproduction: {f.saved}/repro.py (model.onnx, outcome.txt)")
        if f.minimised or not f.known:
            print("    " + "\n    ".join(f.graph.code))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=300, help="cases to generate (shrinking runs not counted)")
    p.add_argument("--seed", type=int, default=0, help="hypothesis seed of the first round")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fuzz")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per case before it counts as a hang")
    p.add_argument("--max-nodes", type=int, default=8)
    p.add_argument("--shrink-seconds", type=float, default=900.0, help="shrinking budget per new failure")
    p.add_argument("--extended-targets", action="store_true",
                   help="also draw the other documented target options (EXTENDED_TARGET_OPTIONS in graphs.py)")
    p.add_argument("--precision", choices=[*PRECISIONS, "all"], default="fp32",
                   help="the graphs' precision (graphs.py PRECISIONS); all: one of them drawn per case")
    p.add_argument("--minutes", type=float, default=None, help="stop starting new cases after this long")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    precisions = PRECISIONS if args.precision == "all" else (args.precision,)
    deadline = t0 + 60 * args.minutes if args.minutes is not None else float("inf")
    c = Campaign(Worker(args.timeout), args.out, args.shrink_seconds, precisions, deadline)
    round_seed = args.seed
    idle = 0
    try:
        while c.cases < args.examples and idle < 3 and not c.out_of_time:  # 3 rounds of repeats: give up
            before = c.cases
            run_round(c, args.examples - c.cases, round_seed, args.max_nodes, args.extended_targets)
            round_seed += 1
            idle = idle + 1 if c.cases == before else 0
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    finally:
        c.worker.stop()
        c.seconds = time.monotonic() - t0
    print_summary(c)
    (args.out / "summary.json").write_text(json.dumps(summary(c), indent=1))
    return 1 if any(not f.known for f in c.failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
