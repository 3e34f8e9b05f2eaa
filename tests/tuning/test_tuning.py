"""meta_schedule tuning: the design space, the database, replay at build time; and the planner's budgets."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
from helpers import conv, matmul
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import s_tir
from tvm_npu.tir_schedules import tile_search

import tvm_npu
from tvm_npu.config import CompilerOptions, HardwareConfig, parse_target
from tvm_npu.core.ops import spec_key
from tvm_npu.core.tiles import tile_to_json
from tvm_npu.models.light import tiny_convnet
from tvm_npu.tuning import space as tile_spaces
from tvm_npu.tuning import tuner as tuning
from tvm_npu.tuning.measure import measure_artifact

SPECS = [conv(32, 32, 16, k=3, pad=1, epi=("bias", "relu")), conv(32, 64, 16, k=1, stride=2),
         conv(32, 32, 14, k=3, pad=1, groups=32), matmul(4, 64, 96)]


def _workload(spec, target: str = "npu"):
    return tuning.workload(tuning.Task(spec_key(spec), spec, 1), parse_target(target))


@pytest.mark.parametrize("spec", SPECS, ids=["conv3x3", "conv1x1s2", "depthwise", "matmul"])
def test_every_legal_tile_is_one_point_of_the_design_space(spec) -> None:
    mod = _workload(spec)
    space = tuning.space_of(mod["main"])
    assert {t.stages for t in space.tiles} == set(tile_spaces.STAGES)  # pipeline depth is searched too
    for tile in space.tiles:  # the decisions that select a tile replay to exactly that tile
        sch = s_tir.Schedule(mod)
        tuning.trace_for(mod, tile).apply_to_schedule(sch, remove_postproc=True)
        assert tuning.tile_of(sch.mod) == tile


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(1, 2**30))
def test_sampled_points_are_legal_or_rejected_by_the_postprocessor(seed: int) -> None:
    mod = _workload(SPECS[0], "npu -max-sram-bytes=65536")
    space = tuning.space_of(mod["main"])
    sch = s_tir.Schedule(mod, seed=seed)
    tuning.design_space(sch)
    tile = tuning.tile_of(sch.mod)
    legal_tile = tile in space.legal
    fits = tile_search.footprint(SPECS[0], tile, HardwareConfig(max_sram_bytes=65536)) <= 65536
    assert legal_tile <= fits  # what the postprocessor accepts always fits the SRAM
    LegalTile = tuning._components()[0]
    assert LegalTile().apply(sch) == legal_tile


def test_a_candidate_is_measured_as_the_simulator_times_it() -> None:
    spec = SPECS[0]
    npu = parse_target("npu")
    tile = tile_search.choose(spec, npu.hw, npu.options)
    path = tuning.build_candidate(tvm_npu.core.plan.spec_to_json(spec), json.dumps(tile_to_json(tile)), str(npu), None)
    from tvm_npu.codegen.operator import standalone_program
    from tvm_npu.simulator import Simulator

    program, _ = standalone_program(spec, tile, npu.hw)
    cycles = Simulator(npu.hw).run(program, timing_only=True).stats.total_cycles
    assert measure_artifact(path) == pytest.approx(npu.hw.cycles_to_seconds(cycles), rel=1e-12)


def test_tune_contexts_are_made_without_tvms_tensor_intrinsics(monkeypatch: pytest.MonkeyPatch) -> None:
    """``TuneContext()`` imports every TVM tensor intrinsic (35-40 s per process), which this space never uses."""
    from tvm.s_tir.meta_schedule import TuneContext

    monkeypatch.delitem(sys.modules, tuning._TENSOR_INTRIN, raising=False)  # as in a fresh process
    with tuning._without_tensor_intrinsics():
        TuneContext(_workload(SPECS[3]), target=tuning.ms_target(parse_target("npu")), num_threads=1)
        assert not hasattr(sys.modules[tuning._TENSOR_INTRIN], "__file__")  # its import met the stand-in
    assert tuning._TENSOR_INTRIN not in sys.modules  # a later import loads the real module


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    path = tmp_path_factory.mktemp("tune")
    # one worker: every build batch starts its own worker processes (a tvm_npu import each, more than the
    # batch's builds cost here); the records are the same with two (the search is seeded)
    results = tvm_npu.tune(tiny_convnet(), "npu", path, trials=12, plans=False, workers=1, progress=False)
    return path, results


@pytest.mark.slow  # the tuning run of the work_dir fixture
def test_tuning_writes_meta_schedules_json_database(work_dir: tuple[Path, list]) -> None:
    path, results = work_dir
    assert (path / tile_spaces.WORKLOAD_FILE).is_file() and (path / tile_spaces.RECORD_FILE).is_file()
    db = tuning.open_database(path, create=False)
    records = db.get_all_tuning_records()
    assert len(records) >= len(results) >= 4  # every distinct operator has at least its default measured
    for rec in records[:6]:  # a record's run_secs are what the simulator measures for its tile
        sch = s_tir.Schedule(rec.workload.mod)
        rec.trace.apply_to_schedule(sch, remove_postproc=True)
        func = rec.workload.mod["main"]
        tile = json.dumps(tile_to_json(tuning.tile_of(sch.mod)))
        built = tuning.build_candidate(str(func.attrs[tuning.SPEC_ATTR]), tile, str(func.attrs[tuning.TARGET_ATTR]),
                                       None)
        assert measure_artifact(built) == pytest.approx(float(rec.run_secs[0]), rel=1e-9)


@pytest.mark.slow  # the tuning run of the work_dir fixture
def test_tuning_never_loses_to_the_cost_model(work_dir: tuple[Path, list]) -> None:
    path, results = work_dir
    assert all(r.best_seconds <= r.default_seconds for r in results)
    assert sum(r.trials for r in results) > len(results)  # the search measured more than the defaults
    measured = tuning.measurements(path, "npu")
    npu = parse_target("npu")
    for task in tuning.extract_tasks(tvm_npu.compiler.driver.partition_plans(tiny_convnet(), npu)):
        result = next(r for r in results if r.key == task.key)  # "default" is the cost model's own tile
        assert result.default_seconds == measured[task.key][tile_search.choose(task.spec, npu.hw, npu.options)]


@pytest.mark.slow  # the tuning run of the work_dir fixture
def test_build_with_the_database_compiles_the_best_tiles(work_dir: tuple[Path, list], tmp_path: Path) -> None:
    path, _ = work_dir
    best = tuning.best_tiles(path, "npu")
    dump = tmp_path / "dump"
    _, info = tvm_npu.build_with_info(tiny_convnet(), "npu", database=path, dump_dir=dump)
    used = {p.read_text().splitlines()[1] for p in dump.glob("*.0_spec.txt")}
    assert {str(t) for t in best.values()} <= used
    assert info.tuned_ops == sum(len(p.ops) for p in info.plans)  # every operator has a record


@pytest.mark.slow  # the tuning run of the work_dir fixture
def test_a_database_of_another_target_is_ignored_with_a_warning(work_dir: tuple[Path, list]) -> None:
    path, _ = work_dir
    with pytest.warns(UserWarning, match="not for 'npu -max-sram-bytes=262144"):
        assert tuning.best_tiles(path, "npu -max-sram-bytes=262144") == {}


@pytest.mark.slow  # the tuning run of the work_dir fixture
def test_a_record_cut_short_is_dropped_and_other_damage_is_named(work_dir: tuple[Path, list], tmp_path: Path) -> None:
    path, _ = work_dir
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in (tile_spaces.WORKLOAD_FILE, tile_spaces.RECORD_FILE):
        (copy / name).write_text((path / name).read_text())
    records = copy / tile_spaces.RECORD_FILE
    good = records.read_text()
    records.write_text(good + good.splitlines()[0][:40])  # an interrupted append
    with pytest.warns(UserWarning, match="cut short"):
        assert tuning.best_tiles(copy, "npu") == tuning.best_tiles(path, "npu")
    assert records.read_text() == good
    lines = good.splitlines()
    records.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match=r"database_tuning_record.json:2: malformed"):
        tuning.best_tiles(copy, "npu")


def test_an_old_records_file_is_rejected_in_one_line(tmp_path: Path) -> None:
    old = tmp_path / "records.jsonl"
    old.write_text('{"version": 1, "target": "npu"}\n')
    with pytest.raises(ValueError, match="old one-file format") as e:
        tvm_npu.build(tiny_convnet(), "npu", database=old)
    assert "\n" not in str(e.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(FileNotFoundError, match="does not exist"):
            tuning.best_tiles(tmp_path / "missing", "npu")


@pytest.mark.parametrize("budget", [64 << 10, 128 << 10, 256 << 10, 1 << 20, 4 << 20])
@pytest.mark.parametrize("spec", [conv(64, 64, 56, k=3, pad=1, epi=("bias", "add", "relu")),
                                  conv(256, 512, 28, k=1, stride=2), conv(512, 512, 7, k=3, pad=1),
                                  conv(3, 64, 224, k=7, stride=2, pad=3), matmul(1, 1000, 2048)],
                         ids=["3x3_56", "1x1s2_28", "3x3_7", "stem", "fc"])
def test_chosen_tiles_fit_every_budget(spec, budget: int) -> None:
    hw = HardwareConfig(max_sram_bytes=budget)
    for stages in (1, 2, 3):
        opts = CompilerOptions(pipeline_stages=stages)
        if not tile_search.fits(spec, hw, opts):
            with pytest.raises(tile_search.NoTileFits):
                tile_search.choose(spec, hw, opts)
            continue
        tile = tile_search.choose(spec, hw, opts)
        assert tile_search.footprint(spec, tile, hw) <= budget
