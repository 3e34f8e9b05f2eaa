"""Model-level plan search: the plan's own choices, measured on whole partitions.

The plan stage decides per partition what no single operator's tuning can: the fusion level
and, at ``-fusion=3``, which operators run together as layer groups and in how many slices. Its
cost model judges these least well (issue 12), so :func:`search` measures a few plans of every
NPU partition and records the fastest: the default plan, the other fusion levels, and the layer
groupings the cost model ranks next (the next of the k best groupings of the interval search,
the best one with one group at another slice count, with one group dissolved), then, for
``rounds > 1``, the same one-group changes of the fastest grouping measured so far. Each variant
is a :class:`~tvm_npu.core.plan.PlanChoice`, lowered by the codegen into an artifact and measured by a
runner of :mod:`tvm_npu.tuning.measure` (timing-only simulation, in parallel; a failed measurement is
recorded as failed and the search goes on).

Records go to ``work_dir/npu_plans.json`` (JSON, versioned, each record with its target; written
to a temporary file and renamed, so an interrupted run leaves the previous complete file), keyed
by :func:`partition_key`, which identical partitions share. Resuming skips variants already
measured. :func:`load_choices` gives the winners, which the driver's plan stage applies
(``stages(..., choices=...)``; ``build(..., database=work_dir)`` loads them). A record holds for
the tiles the search planned with: search with the tiles the build will use (the operator-level
tuner's).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tvm_npu.codegen.partition import lower_plan
from tvm_npu.config import NpuTarget, parse_target
from tvm_npu.core.plan import GroupChoice, PartitionGraph, PartitionPlan, PlanChoice, PlanChoiceWarning
from tvm_npu.core.tiles import TileParams, tile_to_json
from tvm_npu.tir_schedules import groups
from tvm_npu.tir_schedules.scheduler import group_planner, schedule_partition
from tvm_npu.tuning.database import Measured, PartitionRecord, fastest, partition_key, read_records, write_records
from tvm_npu.tuning.measure import NpuLocalRunner, measure_paths, seconds_to_cycles, write_artifact

#: Variants measured per partition unless told otherwise.
DEFAULT_VARIANTS = 6


# ------------------------------------------------------------------ variants
@dataclass(frozen=True)
class Variant:
    """One plan of a partition worth measuring, and what the cost model expects of it."""

    choice: PlanChoice
    plan: PartitionPlan
    predicted: float


def predicted_cycles(plan: PartitionPlan) -> float:
    """The plan's cycles by the cost model: its groups' estimates and those of the operators outside them."""
    alone = sum(op.predicted_cycles for k, op in enumerate(plan.ops) if plan.group_of(k) is None)
    return alone + sum(g.predicted_cycles for g in plan.groups)


def variants(graph: PartitionGraph, target: str | NpuTarget, count: int = DEFAULT_VARIANTS,
             tiles: Mapping[str, TileParams] | None = None) -> list[Variant]:
    """Up to ``count`` distinct plans of ``graph``, the default first: the other fusion levels, then the
    layer groupings the cost model ranks next (at ``-fusion=0`` the default only: nothing was fused)."""
    if count < 1:
        raise ValueError(f"variants={count}; accepted: 1 or more plans per partition")
    npu = parse_target(target)
    level = npu.options.fusion
    default = schedule_partition(graph, npu, tiles)
    choices = [PlanChoice.of(default, level)]
    if level >= 1 and count > 1:
        p = group_planner(graph, npu, tiles)
        ranked = _groupings(p, count)
        choices += [PlanChoice(f) for f in (1, 2) if f != level] + [PlanChoice(3, g) for g in ranked]
    out: list[Variant] = []
    seen: set[str] = set()
    for choice in choices:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PlanChoiceWarning)  # every choice here comes from the planner itself
            plan = default if choice == choices[0] else schedule_partition(graph, npu, tiles, choice)
        text = plan.to_json()
        if text not in seen:
            seen.add(text)
            out.append(Variant(choice, plan, predicted_cycles(plan)))
        if len(out) == count:
            break
    return out


#: Groupings with what ranks them: their estimated cycles, or the estimated change of them.
_Ranked = list[tuple[float, tuple[GroupChoice, ...]]]


def _groupings(p: groups.Planner, k: int) -> list[tuple[GroupChoice, ...]]:
    """Groupings of ``p``'s operators worth measuring: the one with the least estimated cycles first, then,
    taking turns so that a small budget still covers each kind of change, (a) the next of the ``k`` best
    by estimate, (b) the best one with one group at another slice count, (c) the best one with one group
    dissolved (its members run alone), each kind ranked by estimate.

    The k best come from the interval search over prefixes (``best[j]``: the k cheapest splits of the
    first ``j`` operators), which, unlike :func:`groups.interval_dp`'s split tree, reaches each grouping
    once."""
    n = len(p.ops)
    found: dict[tuple[int, int], groups.Choice | None] = {}

    def group(i: int, j: int) -> groups.Choice | None:
        if (i, j) not in found:
            found[i, j] = p.group(i, j)
        return found[i, j]

    best: list[_Ranked] = [[(0.0, ())]]
    for j in range(1, n + 1):
        options: _Ranked = []
        for i in range(max(0, j - groups.MAX_MEMBERS), j):
            if i == j - 1:
                options += [(c + p.single_cost(i), parts) for c, parts in best[i]]
            elif (g := group(i, j - 1)) is not None:
                options += [(c + g.cost, (*parts, GroupChoice(i, j - 1, g.slices))) for c, parts in best[i]]
        best.append(heapq.nsmallest(k, options, key=lambda o: o[0]))
    if not best[n]:
        return []
    top = best[n][0][1]
    return [top, *_turns([best[n][1:], *_changes(p, top)], top)]


def neighbours(p: groups.Planner, grouping: tuple[GroupChoice, ...]) -> list[tuple[GroupChoice, ...]]:
    """Groupings one change away from ``grouping``, in turns of kind (b) and (c) of :func:`_groupings`."""
    return _turns(_changes(p, grouping), grouping)


def _changes(p: groups.Planner, grouping: tuple[GroupChoice, ...]) -> list[_Ranked]:
    """``grouping`` with one group at another slice count, and with one group dissolved: two lists, each
    ranked by the estimated change."""
    resliced: _Ranked = []
    dissolved: _Ranked = []
    for x, g in enumerate(grouping):
        base = p.group(g.first, g.last, g.slices)
        if base is None:
            continue
        for slices in groups.SLICE_COUNTS:
            alt = p.group(g.first, g.last, slices) if slices != g.slices else None
            if alt is not None:
                resliced.append((alt.cost - base.cost,
                                 (*grouping[:x], GroupChoice(g.first, g.last, slices), *grouping[x + 1:])))
        alone = sum(p.single_cost(m) for m in range(g.first, g.last + 1))
        dissolved.append((alone - base.cost, (*grouping[:x], *grouping[x + 1:])))
    return [sorted(resliced, key=lambda o: o[0]), sorted(dissolved, key=lambda o: o[0])]


def _turns(kinds: Sequence[_Ranked], skip: tuple[GroupChoice, ...]) -> list[tuple[GroupChoice, ...]]:
    """The groupings of ``kinds`` taking turns (the first of each, then the second of each, ...), once each."""
    turns = [kind[r][1] for r in range(max(map(len, kinds), default=0)) for kind in kinds if r < len(kind)]
    return list(dict.fromkeys(t for t in turns if t != skip))


# --------------------------------------------------------------------- search
def npu_partitions(model: Any, target: str | NpuTarget, *,
                   params: Mapping[str, Any] | None = None) -> dict[str, PartitionGraph]:
    """``model``'s NPU partitions as the plan stage sees them, one per :func:`partition_key`."""
    from tvm_npu.compiler.driver import is_npu_function, load_model, stages  # (the driver applies these records)
    from tvm_npu.relay_patterns.graph import partition_graph

    npu = parse_target(target)
    mod = load_model(model)
    for stage in stages(npu, params):
        if stage.name == "schedule":
            break
        mod = stage.run(mod)
    out: dict[str, PartitionGraph] = {}
    for _, func in sorted(mod.functions.items(), key=lambda kv: kv[0].name_hint):
        if is_npu_function(func):
            graph = partition_graph(func, str(func.attrs["global_symbol"]))
            out.setdefault(partition_key(graph, npu), graph)
    return out


def search(model: Any, target: str | NpuTarget, work_dir: str | os.PathLike, *, runner: Any = None,
           variants: int = DEFAULT_VARIANTS, rounds: int = 1, tiles: Mapping[str, TileParams] | None = None,
           params: Mapping[str, Any] | None = None, progress: bool = True) -> dict[str, PartitionRecord]:
    """Measure up to ``variants`` plans of every distinct NPU partition of ``model`` and record them and
    the winner per partition in ``work_dir/npu_plans.json`` (module docstring). Each further round (up to
    ``rounds`` in all) measures up to ``variants`` unmeasured :func:`neighbours` of the fastest layer
    grouping so far, while the previous round found a faster plan. ``runner``: a :mod:`tvm_npu.tuning.measure`
    runner (default: :class:`~tvm_npu.tuning.measure.NpuLocalRunner`, one worker per core). Returns this model's
    records by partition key."""
    if variants < 1 or rounds < 1:
        raise ValueError(f"variants={variants}, rounds={rounds}; accepted: 1 or more of each")
    npu = parse_target(target)
    graphs = npu_partitions(model, npu, params=params)
    records = read_records(work_dir)
    own = runner is None
    runner = NpuLocalRunner() if own else runner
    try:
        with tempfile.TemporaryDirectory(prefix="npu_plans_", dir=_made(work_dir)) as scratch:
            for key, graph in tqdm(graphs.items(), desc="plan search", unit="partition", disable=not progress):
                records[key] = _search_partition(key, graph, npu, records.get(key), runner, variants, rounds,
                                                 tiles, Path(scratch))
                write_records(work_dir, records)  # after every partition: an interrupted run keeps them
    finally:
        if own:
            runner.shutdown()
    return {k: records[k] for k in graphs}


def _made(folder: str | os.PathLike) -> Path:
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _search_partition(key: str, graph: PartitionGraph, target: NpuTarget, old: PartitionRecord | None, runner: Any,
                      count: int, rounds: int, tiles: Mapping[str, TileParams] | None,
                      scratch: Path) -> PartitionRecord:
    """Measure the variants of one partition that ``old`` has not measured; the merged record."""
    fingerprint = tiles_fingerprint(tiles)
    # measurements made with other tuned tiles do not count: their plans compiled other programs
    same = old is not None and old.tiles == fingerprint
    done = {m.choice: m for m in (old.variants if same else ()) if m.cycles is not None}
    ranked = variants(graph, target, count, tiles)
    results = _measure(ranked, ranked[0].choice, graph, target, done, runner, scratch)
    seen = {v.plan.to_json() for v in ranked}
    for _ in range(rounds - 1):
        best = fastest(results.values())
        if best is None or not best.choice.groups:
            break
        fresh = []
        for grouping in neighbours(group_planner(graph, target, tiles), best.choice.groups):
            choice = PlanChoice(3, grouping)
            plan = schedule_partition(graph, target, tiles, choice) if choice not in results else None
            if plan is not None and plan.to_json() not in seen:
                seen.add(plan.to_json())
                fresh.append(Variant(choice, plan, predicted_cycles(plan)))
            if len(fresh) == count:
                break
        results.update(_measure(fresh, ranked[0].choice, graph, target, done, runner, scratch))
        if fastest(results.values()) == best:
            break
    # this run's variants in the order measured, then those measured before that this run did not rank
    kept = [replace(m, default=False) for c, m in done.items() if c not in results]
    return PartitionRecord(key, str(target), graph.symbol, (*results.values(), *kept), fingerprint)


def tiles_fingerprint(tiles: Mapping[str, TileParams] | None) -> str:
    """A short hash of the tuned tiles ("" for none). All of them, not only a partition's: which ones its
    plans use depends on the fusion each variant applies."""
    used = sorted((k, json.dumps(tile_to_json(t), sort_keys=True)) for k, t in (tiles or {}).items())
    return hashlib.sha1(json.dumps(used).encode()).hexdigest()[:16] if used else ""


def _measure(vs: Sequence[Variant], default: PlanChoice, graph: PartitionGraph, target: NpuTarget,
             done: Mapping[PlanChoice, Measured], runner: Any, scratch: Path) -> dict[PlanChoice, Measured]:
    """Lower and measure ``vs`` (those in ``done`` are not measured again), in their order."""
    results: dict[PlanChoice, Measured] = {}
    paths: list[str] = []
    built: list[Variant] = []
    for v in vs:
        if v.choice in done:
            results[v.choice] = replace(done[v.choice], predicted=v.predicted, default=v.choice == default)
            continue
        results[v.choice] = Measured(v.choice, v.predicted, None, "not measured", v.choice == default)
        try:
            paths.append(write_artifact(lower_plan(v.plan, graph.constants, target.hw), scratch))
            built.append(v)
        except Exception as e:  # a candidate the codegen cannot lower: that variant's result, the run goes on
            results[v.choice] = replace(results[v.choice], error=f"codegen: {type(e).__name__}: {e}")
    for v, seconds, path in zip(built, measure_paths(runner, paths) if paths else [], paths, strict=True):
        cycles = None if seconds is None else seconds_to_cycles(seconds, str(target))
        failed = "measurement failed (the runner returned no time)" if cycles is None else None
        results[v.choice] = replace(results[v.choice], cycles=cycles, error=failed)
        Path(path).unlink(missing_ok=True)
    return results


def summary(records: Sequence[PartitionRecord]) -> str:
    """One line per partition: variants measured, default and best cycles, the winning choice."""
    lines = []
    for r in records:
        best, measured = r.best, sum(m.cycles is not None for m in r.variants)
        gain = f"{r.default_cycles / best.cycles:.3f}x" if best is not None and r.default_cycles else "-"
        lines.append(f"{r.symbol[:40]:40s} {measured}/{len(r.variants)} measured  default "
                     f"{r.default_cycles or '-'}  best {best.cycles if best else '-'} ({gain})  "
                     f"{best.choice if best else 'none'}")
    return "\n".join(lines)
