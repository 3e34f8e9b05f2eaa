"""Model-level plan search (``tvm_npu.tuning.group_search``): plan choices, variants, measured records, replay.

The search runs once per module on ``conv_chain`` at ``-fusion=3`` with a 64 KiB SRAM (a layer group of
six slices forms), measured by the local runner with two workers; the tests check what it recorded
against builds of the same model with the recorded choices applied.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import relax_models as rm
from tvm import relax
from tvm_npu.tir_schedules import tile_search
from tvm_npu.tir_schedules.scheduler import group_planner, schedule_partition

import tvm_npu
import tvm_npu.tuning.group_search as ps
from tvm_npu.compiler.driver import host_target, load_model, stages
from tvm_npu.core.ops import spec_key
from tvm_npu.core.plan import GroupChoice, PlanChoice, PlanChoiceWarning
from tvm_npu.tools.bench import default_inputs, profile_model
from tvm_npu.tuning import database
from tvm_npu.tuning.measure import NpuLocalRunner

pytestmark = pytest.mark.slow  # whole partitions measured for several plans: the quick tier leaves it out

TARGET = "npu -fusion=3 -max-sram-bytes=65536"
VARIANTS = 3
ROUNDS = 2


def _model():
    return rm.conv_chain("NCHW")


def _profile(model, target: str, inputs: list, choices: dict[str, PlanChoice] | None) -> tvm_npu.Profile:
    """The timing-only profile of ``model`` built for ``target`` with the plan ``choices`` applied."""
    mod = load_model(model)
    for stage in stages(tvm_npu.parse_target(target), choices=choices):  # tvm_npu.build, with the choices
        mod = stage.run(mod)
    return profile_model(relax.build(mod, target=host_target()), inputs, timing_only=True)[1]


def _cycles(choices: dict[str, PlanChoice] | None) -> int:
    """Simulated cycles of the model built at TARGET with ``choices`` applied."""
    model = _model()
    prof = _profile(model, TARGET, rm.inputs_for(model), choices)
    assert len(prof.runs) == 1  # one partition, run once: its cycles are the model's
    return prof.total_cycles


class _Counting:
    """The local runner, counting the artifacts it is given (to see what a resumed search measures)."""

    def __init__(self, inner: NpuLocalRunner) -> None:
        self.inner, self.measured = inner, 0

    def run(self, inputs: list) -> list:
        self.measured += len(inputs)
        return self.inner.run(inputs)


@dataclass(frozen=True)
class Searched:
    work_dir: Path
    records: dict[str, ps.PartitionRecord]
    resumed: int  # artifacts the second, resumed search measured


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Searched:
    work = tmp_path_factory.mktemp("plans")
    runner = NpuLocalRunner(workers=2, timeout_sec=120)
    try:
        records = ps.search(_model(), TARGET, work, runner=runner, variants=VARIANTS, rounds=ROUNDS, progress=False)
        counting = _Counting(runner)
        again = ps.search(_model(), TARGET, work, runner=counting, variants=VARIANTS, rounds=ROUNDS, progress=False)
    finally:
        runner.shutdown()
    assert again == records
    return Searched(work, records, counting.measured)


def test_search_records_the_fastest_of_several_variants(searched: Searched) -> None:
    (record,) = searched.records.values()
    measured = [m for m in record.variants if m.cycles is not None]
    assert len(measured) == len(record.variants) >= 2, record.variants
    assert any(m.choice.groups for m in measured)  # layer groupings among them, not only fusion levels
    assert len({m.choice for m in measured}) == len(measured)
    assert record.best.cycles == min(m.cycles for m in measured)
    first = min(measured[:VARIANTS], key=lambda m: m.cycles)  # the first round's winner
    assert first.choice.groups, "the case needs a grouped winner for a second round"
    graph = next(iter(ps.npu_partitions(_model(), TARGET).values()))
    near = ps.neighbours(group_planner(graph, tvm_npu.parse_target(TARGET)), first.choice.groups)
    assert 0 < len(measured) - VARIANTS <= VARIANTS  # the second round: the first's winner's neighbours
    assert all(m.choice.fusion == 3 and m.choice.groups in near for m in measured[VARIANTS:])
    assert searched.resumed == 0  # resuming measures nothing already measured
    on_disk = ps.read_records(searched.work_dir)
    assert on_disk == searched.records
    assert not list(searched.work_dir.glob(".npu_plans.json.*"))  # no temporary file left behind


def test_measurements_made_with_other_tuned_tiles_are_not_reused(searched: Searched, tmp_path: Path) -> None:
    work = tmp_path / "copy"
    work.mkdir()
    (work / database.PLANS_FILE).write_text((searched.work_dir / database.PLANS_FILE).read_text())
    (record,) = searched.records.values()
    spec = next(iter(ps.npu_partitions(_model(), TARGET).values())).ops[0].spec
    npu = tvm_npu.parse_target(TARGET)
    tiles = {spec_key(spec): tile_search.choose(spec, npu.hw, npu.options)}  # as a tuning database would give
    counting = _Counting(NpuLocalRunner(workers=1, timeout_sec=120))
    try:
        (again,) = ps.search(_model(), TARGET, work, runner=counting, variants=1, progress=False, tiles=tiles).values()
    finally:
        counting.inner.shutdown()
    assert counting.measured == 1 and again.tiles == ps.tiles_fingerprint(tiles) != record.tiles == ""


def test_default_plan_is_measured_and_never_beaten_by_the_winner(searched: Searched) -> None:
    (record,) = searched.records.values()
    graph = next(iter(ps.npu_partitions(_model(), TARGET).values()))
    untuned = schedule_partition(graph, tvm_npu.parse_target(TARGET))
    (default,) = [m for m in record.variants if m.default]
    assert default is record.variants[0]
    assert default.choice == PlanChoice.of(untuned, 3)
    assert default.cycles == _cycles(None)
    assert record.best.cycles <= default.cycles


def test_build_with_recorded_choices_runs_in_the_measured_cycles(searched: Searched) -> None:
    choices = database.load_choices(searched.work_dir, TARGET)
    (key, record), = searched.records.items()
    assert choices == {key: record.best.choice}
    assert _cycles(choices) == record.best.cycles
    other = next(m for m in record.variants if m.choice != record.best.choice)  # any variant replays exactly
    assert _cycles({key: other.choice}) == other.cycles


def test_choice_reproduces_its_plan_and_a_stale_one_falls_back() -> None:
    graph = next(iter(ps.npu_partitions(_model(), TARGET).values()))
    target = tvm_npu.parse_target(TARGET)
    default = schedule_partition(graph, target)
    assert default.groups, "the case needs a layer group"
    assert schedule_partition(graph, target, choice=PlanChoice.of(default, 3)).to_json() == default.to_json()
    for v in ps.variants(graph, target, VARIANTS):
        assert schedule_partition(graph, target, choice=v.choice).to_json() == v.plan.to_json()
    stale = PlanChoice(3, (GroupChoice(3, len(default.ops) + 2, 2),))
    with pytest.warns(PlanChoiceWarning, match="does not apply"):
        assert schedule_partition(graph, target, choice=stale).to_json() == default.to_json()


def test_partition_key_is_name_and_weight_free_but_target_and_shape_bound() -> None:
    def key(model, target: str = TARGET) -> str:
        (k,) = ps.npu_partitions(model, target)
        return k

    base = key(rm.conv_chain("NCHW", seed=0))
    assert key(rm.conv_chain("NCHW", seed=1)) == base
    assert key(rm.conv_chain("NCHW", c=16)) != base
    assert key(rm.conv_chain("NCHW"), "npu -fusion=3 -max-sram-bytes=131072") != base


def test_bad_search_arguments(tmp_path: Path) -> None:
    for kw in ({"variants": 0}, {"rounds": 0}):
        with pytest.raises(ValueError, match="accepted: 1 or more"):
            ps.search(_model(), TARGET, tmp_path, progress=False, **kw)
    assert not (tmp_path / database.PLANS_FILE).exists()


def test_plan_choice_json_round_trip_and_bad_choices() -> None:
    choice = PlanChoice(3, (GroupChoice(0, 2, 4), GroupChoice(4, 5, 1)))
    assert PlanChoice.from_dict(json.loads(json.dumps(choice.to_dict()))) == choice
    for bad in ({"fusion": 4}, {"fusion": 1, "groups": [[0, 1, 2]]}, {"fusion": 3, "groups": [[0, 2, 1], [2, 3, 1]]},
                {"fusion": 3, "groups": [[1, 1, 2]]}, {"fusion": "3"}, {"groups": []}, [3]):
        with pytest.raises(ValueError, match="plan choice"):
            PlanChoice.from_dict(bad)


def _write_one(work: Path, target: str) -> str:
    choice = PlanChoice(3, (GroupChoice(0, 3, 6),))
    rec = ps.PartitionRecord("k0", str(tvm_npu.parse_target(target)), "f",
                             (ps.Measured(choice, 100.0, 120, default=True), ps.Measured(PlanChoice(1), 90.0, None,
                                                                                         "measurement failed")))
    ps.write_records(work, {"k0": rec})
    return "k0"


def test_records_of_another_target_are_ignored(tmp_path: Path) -> None:
    key = _write_one(tmp_path, TARGET)
    assert database.load_choices(tmp_path, TARGET) == {key: PlanChoice(3, (GroupChoice(0, 3, 6),))}
    with pytest.warns(UserWarning, match="no plan records for target"):
        assert database.load_choices(tmp_path, "npu -fusion=3") == {}
    assert database.load_choices(tmp_path / "empty", TARGET) == {}  # no file: nothing recorded


def test_truncated_or_edited_records_give_a_one_line_error(tmp_path: Path) -> None:
    _write_one(tmp_path, TARGET)
    path = tmp_path / database.PLANS_FILE
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=r"npu_plans\.json: malformed plan records \(JSONDecodeError") as e:
        database.load_choices(tmp_path, TARGET)
    assert "\n" not in str(e.value)
    data = json.loads(text)
    data["partitions"]["k0"]["best"]["cycles"] = 1  # a winner that is not the fastest measured
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="not the fastest measured"):
        database.load_choices(tmp_path, TARGET)
    path.write_text(json.dumps({**data, "version": 99}))
    with pytest.raises(ValueError, match="version 99"):
        database.load_choices(tmp_path, TARGET)


def test_failed_measurements_are_recorded_as_failed(tmp_path: Path) -> None:
    runner = NpuLocalRunner(workers=1, timeout_sec=0.001)  # too short for any simulation: every one times out
    try:
        (record,) = ps.search(_model(), TARGET, tmp_path, runner=runner, variants=1, progress=False).values()
    finally:
        runner.shutdown()
    assert [m.cycles for m in record.variants] == [None]
    assert all(m.error for m in record.variants) and record.best is None
    assert database.load_choices(tmp_path, TARGET) == {}


@pytest.mark.benchmark
@pytest.mark.parametrize("name", ["light_squeezenet", "mobilenet_v2"])
def test_benchmark_searched_plans_against_untuned(name: str, tmp_path: Path) -> None:
    """fp32 at ``npu -fusion=3``: simulated cycles of the untuned build and of the build with the searched
    plans, and what the search measured (printed; run with ``-s``)."""
    target = "npu -fusion=3"
    model = tvm_npu.models.registry.BUNDLED[name]()
    inputs = default_inputs(model)
    start = time.perf_counter()
    runner = NpuLocalRunner(workers=2)
    try:
        records = ps.search(model, target, tmp_path, runner=runner, progress=False)
    finally:
        runner.shutdown()
    seconds = time.perf_counter() - start
    measured = sum(m.cycles is not None for r in records.values() for m in r.variants)
    print(f"\n{name}: {len(records)} distinct partition(s), {measured} variants measured in {seconds:.0f} s\n"
          + ps.summary(list(records.values())))
    for r in records.values():
        for m in r.variants:
            print(f"  {m.cycles or 'failed':>10} cycles  predicted {m.predicted:12,.0f}  {m.choice}")
    cycles = {label: _profile(model, target, inputs, choices).total_cycles
              for label, choices in (("untuned", None), ("searched", database.load_choices(tmp_path, target)))}
    print(f"{name}: model cycles untuned {cycles['untuned']:,} searched {cycles['searched']:,} "
          f"({cycles['untuned'] / cycles['searched']:.4f}x)")
    assert cycles["searched"] <= cycles["untuned"]
