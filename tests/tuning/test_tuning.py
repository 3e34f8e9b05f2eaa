"""Tuning records, best-of replay, and the planner's budgets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import conv, matmul
from tvm_npu.tir_schedules import planner

import tvm_npu
from tvm_npu.config import CompilerOptions, HardwareConfig, parse_target
from tvm_npu.models import tiny_convnet
from tvm_npu.tiles import tile_to_json
from tvm_npu.tuning import best_tiles, load_records, measure, tune_specs


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tune") / "records.json"
    tvm_npu.tune(tiny_convnet(), "npu", path, trials=6, progress=False)
    return path


def test_records_are_json_lines_with_measured_cycles(records: Path) -> None:
    lines = records.read_text().splitlines()
    assert lines
    recs = load_records(records)
    assert len(recs) == len(lines)
    target = parse_target("npu")
    keys = {r.spec_key for r in recs}
    assert len(keys) >= 4  # every distinct NPU operator of the model was tuned
    for r in recs[:5]:  # a record's cycles are what the simulator measures for that tile
        spec = next(s for s in tvm_npu.npu_operators(tiny_convnet(), "npu") if _key(s) == r.spec_key)
        assert r.cycles == measure(spec, r.tile, target)


def _key(spec):
    from tvm_npu.ops import spec_key

    return spec_key(spec)


def test_best_of_replay_builds_with_the_fastest_tiles(records: Path, tmp_path: Path) -> None:
    recs = load_records(records)
    best = best_tiles(recs, "npu")
    for key, tile in best.items():
        assert min(r.cycles for r in recs if r.spec_key == key) == next(
            r.cycles for r in recs if r.spec_key == key and r.tile == tile)
    dump = tmp_path / "dump"
    tvm_npu.build(tiny_convnet(), "npu", records=str(records), dump_dir=dump)
    used = {p.read_text().splitlines()[1] for p in dump.glob("*.0_spec.txt")}
    assert {str(t) for t in best.values()} <= used  # the replayed tiles are the ones compiled


def test_records_for_another_target_are_ignored(records: Path) -> None:
    assert best_tiles(load_records(records), "npu -max-sram-bytes=262144") == {}


def test_tuning_resumes_without_remeasuring(records: Path) -> None:
    before = records.read_text()
    added = tune_specs(tvm_npu.npu_operators(tiny_convnet(), "npu"), "npu", records, trials=6, progress=False)
    assert added == [] and records.read_text() == before


@pytest.mark.parametrize("line", ['{"version": 1}', "not json", json.dumps({"version": 99, "target": "npu"})])
def test_malformed_records_name_the_line(tmp_path: Path, line: str) -> None:
    path = tmp_path / "bad.json"
    good = {"version": 1, "target": "npu", "spec": "x", "cycles": 1, "predicted": 1.0,
            "tile": tile_to_json(planner.choose(matmul(8, 8, 8), HardwareConfig(), CompilerOptions()))}
    path.write_text(json.dumps(good) + "\n" + line + "\n")
    with pytest.raises(ValueError, match=r"bad.json:2"):
        load_records(path)


@pytest.mark.parametrize("budget", [64 << 10, 128 << 10, 256 << 10, 1 << 20, 4 << 20])
@pytest.mark.parametrize("spec", [conv(64, 64, 56, k=3, pad=1, epi=("bias", "add", "relu")),
                                  conv(256, 512, 28, k=1, stride=2), conv(512, 512, 7, k=3, pad=1),
                                  conv(3, 64, 224, k=7, stride=2, pad=3), matmul(1, 1000, 2048)],
                         ids=["3x3_56", "1x1s2_28", "3x3_7", "stem", "fc"])
def test_chosen_tiles_fit_every_budget(spec, budget: int) -> None:
    hw = HardwareConfig(max_sram_bytes=budget)
    for stages in (1, 2, 3):
        opts = CompilerOptions(pipeline_stages=stages)
        if not planner.fits(spec, hw, opts):
            with pytest.raises(planner.NoTileFits):
                planner.choose(spec, hw, opts)
            continue
        tile = planner.choose(spec, hw, opts)
        assert planner.footprint(spec, tile, hw) <= budget
