"""Autotuning with records and best-of replay, the way TVM users tune.

``tune(model, target, records)`` measures, for every distinct NPU operator of the
model, a set of candidate tiles on the simulator (timing-only: cycles are
deterministic, so one measurement per candidate suffices) and appends one JSON line
per measurement to ``records``. ``build(model, target, records=...)`` then replays
the best measured tile of every operator signature recorded for the same target.

Candidates: the cost model's shortlist (its best by estimated speed and by DRAM
traffic) plus a seeded random sample of the remaining legal tiles, so the tuner can
find what the model misjudges. Records are plain JSON lines (never pickle), checked
on load; a malformed line is an error that names the file and line.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from tvm_npu.codegen.operator import standalone_program
from tvm_npu.config import NpuTarget, parse_target
from tvm_npu.ops import OpSpec, spec_key
from tvm_npu.simulator import Simulator
from tvm_npu.tiles import TileParams, tile_from_json, tile_to_json
from tvm_npu.tir_schedules import planner

RECORD_VERSION = 1


@dataclass(frozen=True)
class Record:
    """One measurement: an operator signature, a tile and its simulated cycles on a target."""

    target: str
    spec_key: str
    tile: TileParams
    cycles: int
    predicted: float

    def to_json(self) -> dict:
        return {"version": RECORD_VERSION, "target": self.target, "spec": self.spec_key,
                "tile": tile_to_json(self.tile), "cycles": self.cycles, "predicted": self.predicted}


def load_records(path: str | Path) -> list[Record]:
    """Read a records file; raises ValueError naming the line of anything malformed."""
    path = Path(path)
    records = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            if d.get("version") != RECORD_VERSION:
                raise ValueError(f"record version {d.get('version')!r}, expected {RECORD_VERSION}")
            records.append(Record(str(d["target"]), str(d["spec"]), tile_from_json(d["tile"]), int(d["cycles"]),
                                  float(d["predicted"])))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{lineno}: malformed tuning record ({e})") from None
    return records


def best_tiles(records: Iterable[Record], target: str | NpuTarget) -> dict[str, TileParams]:
    """Best-of replay: the fastest measured tile per operator signature, for ``target`` only."""
    want = str(parse_target(target))
    best: dict[str, Record] = {}
    for r in records:
        if str(parse_target(r.target)) != want:
            continue
        if r.spec_key not in best or r.cycles < best[r.spec_key].cycles:
            best[r.spec_key] = r
    return {k: r.tile for k, r in best.items()}


def measure(spec: OpSpec, tile: TileParams, target: NpuTarget) -> int:
    """Simulated cycles of one operator compiled with ``tile`` (the real codegen, timing-only)."""
    program, _ = standalone_program(spec, tile, target.hw)
    return Simulator(target.hw).run(program, timing_only=True).stats.total_cycles


def _candidates(spec: OpSpec, target: NpuTarget, trials: int, seed: int) -> list[TileParams]:
    """The cost model's choice first (so every tuning run measures what an untuned build
    gets), then its shortlist, then a seeded sample of the other legal tiles."""
    chosen = planner.choose(spec, target.hw, target.options)
    ranked = [chosen, *(t for t in planner.shortlist(spec, target.hw, target.options) if t != chosen)]
    legal = [t for t, _ in planner.legal(spec, target.hw, target.options)]
    rest = [t for t in legal if t not in ranked]
    random.Random(seed).shuffle(rest)
    return (ranked + rest)[:trials]


def tune_specs(specs: Iterable[OpSpec], target: str | NpuTarget, records: str | Path, trials: int = 16,
               seed: int = 0, progress: bool = True) -> list[Record]:
    """Measure up to ``trials`` tiles per distinct operator and append the records."""
    npu = parse_target(target)
    unique: dict[str, OpSpec] = {}
    for s in specs:
        unique.setdefault(spec_key(s), s)
    path = Path(records)
    done = {(r.spec_key, json.dumps(tile_to_json(r.tile), sort_keys=True))
            for r in (load_records(path) if path.exists() else []) if str(parse_target(r.target)) == str(npu)}
    out = []
    with path.open("a") as f:
        for key, spec in tqdm(unique.items(), desc="tuning", unit="op", disable=not progress):
            for tile in _candidates(spec, npu, trials, seed):
                if (key, json.dumps(tile_to_json(tile), sort_keys=True)) in done:
                    continue  # resuming: already measured
                rec = Record(str(npu), key, tile, measure(spec, tile, npu), planner.estimate(spec, tile, npu.hw).cycles)
                f.write(json.dumps(rec.to_json()) + "\n")
                f.flush()  # an interrupted run keeps what it measured
                out.append(rec)
    return out


@dataclass(frozen=True)
class Gain:
    """What tuning bought on one operator signature: measured cycles of the cost model's
    tile against the best measured tile."""

    spec_key: str
    default_cycles: int
    best_cycles: int

    @property
    def speedup(self) -> float:
        return self.default_cycles / self.best_cycles


def gains(specs: Iterable[OpSpec], target: str | NpuTarget, records: Iterable[Record]) -> list[Gain]:
    """Per distinct operator of ``specs`` whose default tile was measured: default vs best cycles."""
    npu = parse_target(target)
    measured: dict[str, dict[str, int]] = {}
    for r in records:
        if str(parse_target(r.target)) == str(npu):
            measured.setdefault(r.spec_key, {})[json.dumps(tile_to_json(r.tile), sort_keys=True)] = r.cycles
    out = {}
    for spec in specs:
        key = spec_key(spec)
        cycles = measured.get(key, {})
        default = json.dumps(tile_to_json(planner.choose(spec, npu.hw, npu.options)), sort_keys=True)
        if key not in out and default in cycles:
            out[key] = Gain(key, cycles[default], min(cycles.values()))
    return list(out.values())


def tiles_for(records: str | Path | None, target: str | NpuTarget) -> Mapping[str, TileParams] | None:
    """The tiles ``build(..., records=...)`` replays (None when no records are given)."""
    if records is None:
        return None
    return best_tiles(load_records(records), target)
