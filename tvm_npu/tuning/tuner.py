"""Autotuning the TVM way: meta_schedule tasks over the NPU templates, measured on the simulator.

Two levels, one work directory:

* **Operators** (this module). Every distinct NPU operator of the model's plans (by
  :func:`~tvm_npu.core.ops.spec_key`) is a meta_schedule task. Its workload is the template's TE
  definition, tagged with the operator spec and the NPU target (so records of another target never
  match). The design space samples every template parameter with ``sample_categorical``, restricted
  to the values legal tiles take (``sample_perfect_tile`` draws exact divisors only, while the
  templates let edge tiles overhang, so tile extents are categorical too), pipeline stages 2 and 3
  included; a postprocessor rejects combinations that are not a legal tile (SRAM budget, admissible
  loop order). The sampled parameters are block annotations of the candidate, which the builder (our
  template + codegen, in worker processes) compiles into an artifact; the runner simulates it
  (``tvm_npu.tuning.measure``: local workers or TVM's RPC tracker) and returns simulated seconds as
  ``run_secs``. Records go to meta_schedule's ``JSONDatabase``; the search is its evolutionary
  search with the ``xgb`` cost model. The model reads features of our own (the template parameters
  and the analytic cost model's breakdown) rather than TVM's per-store features: an NPU operator's
  cost is decided by those parameters, and the loops of the candidate's TIR do not show them.
  Before searching, the cost model's own tile of every task is measured and recorded, so the search
  starts from it and tuning can never make an operator slower.
* **Plans** (:mod:`tvm_npu.tuning.group_search`): layer-group boundaries, slice counts and fusion per
  partition, measured as whole partitions, recorded in the same directory.

``build(model, target, database=DIR)`` applies both: the best measured tile per operator signature and
the winning plan per partition, for that target only.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import types
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm
from tvm import s_tir

from tvm_npu.config import NpuTarget, parse_target
from tvm_npu.core.ops import OpSpec, spec_key
from tvm_npu.core.plan import spec_to_json
from tvm_npu.tir_schedules import tile_search
from tvm_npu.tir_schedules.kind import kind_of
from tvm_npu.tuning.candidate import N_FEATURES, build_candidate, features  # noqa: F401 (re-exported)
from tvm_npu.tuning.database import best_records, best_tiles, measurements, open_database
from tvm_npu.tuning.space import (
    KEY_ATTR,
    SPACE_ATTR,
    SPACE_VERSION,
    SPEC_ATTR,
    TARGET_ATTR,
    design_space,
    parse_spec,  # noqa: F401 (re-exported)
    space_of,  # noqa: F401 (re-exported)
    task_of,  # noqa: F401 (re-exported)
    tile_of,  # noqa: F401 (re-exported)
    tile_space,
    trace_for,
)


def ms_target(target: NpuTarget) -> tvm.target.Target:
    """The meta_schedule target of an NPU target: TVM's external-device kind, the NPU target as model."""
    return tvm.target.Target({"kind": "ext_dev", "keys": ["npu"], "model": str(target)})


# --------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class Task:
    """One distinct NPU operator of a model: what a meta_schedule task tunes."""

    key: str  # spec_key: what the plan stage looks tuned tiles up by
    spec: OpSpec
    calls: int  # how often the model runs it (the task's weight)

    @property
    def name(self) -> str:
        return f"{kind_of(self.spec).name}:{kind_of(self.spec).describe(self.spec)}"


def extract_tasks(plans: Sequence) -> list[Task]:
    """The distinct operators of ``plans`` (``PartitionPlan``s), weighted by how often each runs."""
    calls: Counter[str] = Counter()
    first: dict[str, OpSpec] = {}
    for plan in plans:
        for op in plan.ops:
            key = spec_key(op.spec)
            calls[key] += 1
            first.setdefault(key, op.spec)
    return [Task(k, first[k], calls[k]) for k in first]


def workload(task: Task, target: NpuTarget) -> tvm.IRModule:
    """The task's workload: the template's definition at the cost model's tile, tagged with the
    spec and the target (two targets never share a record)."""
    tile = tile_search.choose(task.spec, target.hw, target.options)
    func = kind_of(task.spec).workload(task.spec, tile)
    func = func.with_attrs({SPEC_ATTR: spec_to_json(task.spec), KEY_ATTR: task.key, TARGET_ATTR: str(target),
                            SPACE_ATTR: SPACE_VERSION, "global_symbol": "main"})
    return tvm.IRModule({"main": func})




# ----------------------------------------------------- meta_schedule components
def _components() -> tuple[type, type, type, type]:
    """LegalTile, MutateParameter, TileFeatures, NpuBuilder (:mod:`tvm_npu.tuning.components`),
    imported here, when tuning starts: importing this module does not import meta_schedule."""
    from tvm_npu.tuning.components import LegalTile, MutateParameter, NpuBuilder, TileFeatures

    return LegalTile, MutateParameter, TileFeatures, NpuBuilder


# --------------------------------------------------------------------------- tuning
@dataclass(frozen=True)
class TaskResult:
    """What tuning bought on one operator: the cost model's tile measured against the best found."""

    name: str
    key: str
    calls: int
    default_seconds: float
    best_seconds: float
    trials: int
    space: int  # legal tiles in the design space

    @property
    def speedup(self) -> float:
        return self.default_seconds / self.best_seconds


def _commit_defaults(tasks: Sequence[Task], mods: Sequence[tvm.IRModule], npu: NpuTarget, db, builder,
                     runner) -> dict[str, float]:
    """Measure the cost model's tile of every task not yet in ``db`` and record it; secs per key."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    target = ms_target(npu)
    todo = []
    for task, mod in zip(tasks, mods, strict=True):
        tile = tile_search.choose(task.spec, npu.hw, npu.options)
        trace = trace_for(mod, tile)
        sch = s_tir.Schedule(mod)
        trace.apply_to_schedule(sch, remove_postproc=False)
        todo.append((task, mod, trace, sch.mod))
    built = builder.build([BuilderInput(m, target) for *_, m in todo])
    ok = [(t, b) for t, b in zip(todo, built, strict=True) if b.error_msg is None]
    futures = runner.run([RunnerInput(b.artifact_path, "cpu", ArgInfo.from_prim_func(t[1]["main"])) for t, b in ok])
    out = {}
    for ((task, mod, trace, _), b), fut in zip(ok, futures, strict=True):
        res = fut.result()
        Path(b.artifact_path).unlink(missing_ok=True)
        if res.error_msg is not None:
            warnings.warn(f"measuring the cost model's tile of {task.name} failed: {res.error_msg}", stacklevel=2)
            continue
        secs = [float(s) for s in res.run_secs]
        db.commit_tuning_record(TuningRecord(trace, db.commit_workload(mod), secs, target,
                                             ArgInfo.from_prim_func(mod["main"])))
        out[task.key] = min(secs)
    return out


def tune(
    model: object,
    target: str | NpuTarget,
    work_dir: str | os.PathLike,
    trials: int = 64,
    *,
    params: Mapping | None = None,
    rpc: str | None = None,
    key: str = "npu-sim",
    workers: int | None = None,
    trials_per_iter: int = 16,
    plans: bool = True,
    seed: int = 0,
    timeout_sec: float = 600.0,
    progress: bool = True,
    shapes: Mapping[str, Sequence[int]] | None = None,
) -> list[TaskResult]:
    """Tune ``model`` for ``target`` with meta_schedule; records go to ``work_dir`` (see the module
    docstring). ``trials`` is meta_schedule's global trial budget for the operator tasks;
    ``rpc="HOST:PORT"`` measures on the servers registered with that tracker under ``key``
    (``python -m tvm_npu.tuning.rpc_server``), else ``workers`` local processes (default: one per core).
    ``plans`` also searches the plans of the model's partitions (:mod:`tvm_npu.tuning.group_search`). A candidate
    whose build or measurement takes longer than ``timeout_sec`` is recorded as a failed trial. ``shapes``
    binds symbolic input dimensions (:func:`tvm_npu.load_model`)."""
    from tvm_npu.compiler.driver import load_model, partition_plans
    from tvm_npu.tuning.measure import NpuLocalRunner, rpc_runner, shutdown_runner

    npu = parse_target(target)
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    model = load_model(model, shapes)  # imported once, for the operators and the plan search
    tasks = extract_tasks(partition_plans(model, npu, params=params))
    if not tasks:
        raise ValueError("the model has no NPU operators to tune")
    runner = (rpc_runner(rpc, key, timeout_sec=timeout_sec) if rpc
              else NpuLocalRunner(workers, timeout_sec=timeout_sec))
    try:
        results = tune_tasks(tasks, npu, work_dir, trials, runner=runner, workers=workers,
                             trials_per_iter=trials_per_iter, seed=seed, timeout_sec=timeout_sec)
        if plans:
            from tvm_npu.tuning.group_search import search

            search(model, npu, work_dir, runner=runner, tiles=best_tiles(work_dir, npu), params=params,
                   progress=progress)
    finally:  # the runner's worker processes, local or RPC clients, also when tuning failed or was interrupted
        shutdown_runner(runner)
    return results


#: What ``TuneContext.__init__`` imports (see :func:`_without_tensor_intrinsics`).
_TENSOR_INTRIN = "tvm.s_tir.tensor_intrin"


@contextlib.contextmanager
def _without_tensor_intrinsics() -> Iterator[None]:
    """``TuneContext.__init__`` imports ``tvm.s_tir.tensor_intrin``, which registers the CUDA, ARM, x86,
    ROCm and Hexagon tensorization intrinsics of TVM's own schedule rules: 35-40 s of TVMScript parsing
    per process. Our design space has no schedule rules and tensorizes nothing, so while the contexts
    are made an empty module answers that import; it is removed afterwards, and a later real import
    (by anyone who does need the intrinsics) loads them as usual."""
    if _TENSOR_INTRIN in sys.modules:
        yield
        return
    stand_in = sys.modules[_TENSOR_INTRIN] = types.ModuleType(_TENSOR_INTRIN)
    try:
        yield
    finally:
        if sys.modules.get(_TENSOR_INTRIN) is stand_in:
            del sys.modules[_TENSOR_INTRIN]


def tune_tasks(tasks: Sequence[Task], target: str | NpuTarget, work_dir: str | os.PathLike, trials: int, *,
               runner: object, workers: int | None = None, trials_per_iter: int = 16,
               seed: int = 0, timeout_sec: float = 600.0) -> list[TaskResult]:
    """meta_schedule over ``tasks`` (see :func:`extract_tasks`), measured with ``runner``
    (``tvm_npu.tuning.measure``); returns per task the cost model's tile and the best one, measured."""
    import tvm.s_tir.meta_schedule as ms

    npu = parse_target(target)
    db = open_database(work_dir)
    LegalTile, MutateParameter, TileFeatures, NpuBuilder = _components()
    builder = NpuBuilder(workers, timeout_sec=timeout_sec)
    mods = [workload(t, npu) for t in tasks]
    known = measurements(work_dir, npu)
    chosen = {t.key: tile_search.choose(t.spec, npu.hw, npu.options) for t in tasks}
    defaults = {k: known[k][chosen[k]] for k in chosen if chosen[k] in known.get(k, {})}
    missing = [(t, m) for t, m in zip(tasks, mods, strict=True) if t.key not in defaults]
    if missing:
        defaults.update(_commit_defaults([t for t, _ in missing], [m for _, m in missing], npu, db, builder, runner))
    with _without_tensor_intrinsics():
        contexts = [
            ms.TuneContext(
                mod=mod, target=ms_target(npu), task_name=task.name, rand_state=seed + 1 + i, num_threads=1,
                space_generator=ms.space_generator.ScheduleFn(
                    design_space, sch_rules=[], postprocs=[LegalTile()],
                    mutator_probs={MutateParameter(seed + i): 1.0}),
                search_strategy=ms.search_strategy.EvolutionarySearch(
                    population_size=64, init_measured_ratio=0.25, init_min_unmeasured=8, max_fail_count=8,
                    genetic_num_iters=3, genetic_mutate_prob=0.85, genetic_max_fail_count=8, eps_greedy=0.1),
            )
            for i, (task, mod) in enumerate(zip(tasks, mods, strict=True))
        ]
    cost_model = ms.cost_model.XGBModel(extractor=TileFeatures(), num_warmup_samples=8, verbose_eval=0,
                                        adaptive_training=False)
    # Seeded, so that a run is reproducible and local and RPC runs agree: XGBModel's warm-up predictions
    # come from numpy's global generator, and the "gradient" scheduler breaks ties with a random seed.
    numpy_state = np.random.get_state()
    np.random.seed(seed)
    try:
        ms.tune_tasks(tasks=contexts, task_weights=[float(t.calls) for t in tasks], work_dir=str(work_dir),
                      max_trials_global=trials, num_trials_per_iter=trials_per_iter, builder=builder, runner=runner,
                      database=db, cost_model=cost_model,
                      task_scheduler=ms.task_scheduler.GradientBased(seed=seed))
    finally:
        np.random.set_state(numpy_state)
    best = best_records(work_dir, npu)
    return [TaskResult(t.name, t.key, t.calls, defaults.get(t.key, math.nan), best[t.key].seconds,
                       best[t.key].trials, len(tile_space(spec_to_json(t.spec), str(npu)).tiles))
            for t in tasks if t.key in best]
