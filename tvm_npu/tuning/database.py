"""What tuning recorded, as the build reads it: meta_schedule's ``JSONDatabase`` of operator tiles and the
plan search's per-partition records (``npu_plans.json``), both in one work directory.

A leaf of the tuning floor: the driver imports it to apply a database (``build(..., database=DIR)``); the
tuner and the plan search, which call the driver, write the records through it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tvm import s_tir

from tvm_npu.config import NpuTarget, parse_target
from tvm_npu.core.ops import TensorRef, spec_key
from tvm_npu.core.plan import PartitionGraph, PlanChoice
from tvm_npu.core.tiles import TileParams
from tvm_npu.tuning.space import (
    FAILED_SECS,
    KEY_ATTR,
    RECORD_FILE,
    SPACE_ATTR,
    SPACE_VERSION,
    TARGET_ATTR,
    WORKLOAD_FILE,
    tile_of,
)

#: The record file in a tuning work dir.
PLANS_FILE = "npu_plans.json"
#: Bump when the record file's form changes incompatibly; other versions are rejected with a clear error.
PLANS_VERSION = 1


# ------------------------------------------------------------------- operator tiles
def open_database(work_dir: str | os.PathLike, *, create: bool = True):
    """meta_schedule's ``JSONDatabase`` in ``work_dir``, checked first: a last line cut short by an
    interrupted run is dropped (with a warning); any other malformed line is a ``ValueError`` naming it."""
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    folder = Path(work_dir)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a tuning work directory: tuning records of the old "
                         f"one-file format are no longer read; tune again with 'tvm-npu tune MODEL --work-dir DIR'")
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    elif not folder.is_dir():
        raise FileNotFoundError(f"tuning work directory {str(folder)!r} does not exist")
    for name in (WORKLOAD_FILE, RECORD_FILE):
        if not create and not (folder / name).is_file():
            raise ValueError(f"tuning database in {folder} is incomplete: {name} is missing")
        _check_lines(folder / name)
    return JSONDatabase(str(folder / WORKLOAD_FILE), str(folder / RECORD_FILE), allow_missing=create,
                        module_equality="structural")


def _check_lines(path: Path) -> None:
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    for n, line in enumerate(lines, start=1):
        try:
            if line.strip():
                json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines) and not line.endswith("\n"):
                warnings.warn(f"{path}:{n}: dropping a record cut short by an interrupted run", stacklevel=3)
                tmp = path.with_suffix(".tmp")
                tmp.write_text("".join(lines[:-1]))
                os.replace(tmp, path)
                return
            raise ValueError(f"{path}:{n}: malformed tuning database line") from None


@dataclass(frozen=True)
class Best:
    """The best measured tile of one operator signature."""

    key: str
    tile: TileParams
    seconds: float
    trials: int  # distinct tiles of this operator measured successfully


def measurements(work_dir: str | os.PathLike, target: str | NpuTarget) -> dict[str, dict[TileParams, float]]:
    """Per operator signature, the seconds of every tile measured for ``target`` (failed trials left out;
    records of other targets ignored, with a warning when the directory holds none for this one)."""
    npu = parse_target(target)
    if Path(work_dir).is_dir() and not (Path(work_dir) / RECORD_FILE).is_file():  # plan records only
        return {}
    db = open_database(work_dir, create=False)
    out: dict[str, dict[TileParams, float]] = {}
    others: set[str] = set()
    for rec in db.get_all_tuning_records():
        func = rec.workload.mod["main"]
        if func.attrs is None or TARGET_ATTR not in func.attrs or int(func.attrs.get(SPACE_ATTR, 0)) != SPACE_VERSION:
            continue
        if str(func.attrs[TARGET_ATTR]) != str(npu):
            others.add(str(func.attrs[TARGET_ATTR]))
            continue
        secs = [float(s) for s in rec.run_secs] if rec.run_secs is not None else []
        if not secs or min(secs) >= FAILED_SECS:
            continue
        sch = s_tir.Schedule(rec.workload.mod)
        rec.trace.apply_to_schedule(sch, remove_postproc=True)
        tiles = out.setdefault(str(func.attrs[KEY_ATTR]), {})
        tile = tile_of(sch.mod)
        tiles[tile] = min(min(secs), tiles.get(tile, math.inf))
    if not out and others:
        warnings.warn(f"tuning database {work_dir} holds records for {sorted(others)}, not for '{npu}': "
                      f"ignored", stacklevel=2)
    return out


def best_records(work_dir: str | os.PathLike, target: str | NpuTarget) -> dict[str, Best]:
    """Per operator signature, the fastest measured tile for ``target`` (see :func:`measurements`)."""
    best = {}
    for key, tiles in measurements(work_dir, target).items():
        tile = min(tiles, key=tiles.__getitem__)
        best[key] = Best(key, tile, tiles[tile], len(tiles))
    return best


def best_tiles(work_dir: str | os.PathLike, target: str | NpuTarget) -> dict[str, TileParams]:
    """What ``build(..., database=work_dir)`` replays: the best measured tile per operator signature."""
    return {k: b.tile for k, b in best_records(work_dir, target).items()}


# ---------------------------------------------------------------------- keys
def partition_key(graph: PartitionGraph, target: str | NpuTarget) -> str:
    """A stable, name-free key of one partition on one target: the target, every operator's signature
    (:func:`~tvm_npu.core.ops.spec_key`) and fused patterns, and the wiring (which input, constant, buffer or
    operator result each operand is, which results leave). Identical partitions share it."""
    roles: dict[str, str] = {t.name: f"in{k}" for k, t in enumerate(graph.inputs)}
    roles.update({t.name: f"buf{k}" for k, t in enumerate(graph.buffers)})
    roles.update({name: "const" for name in graph.constants})

    def role(t: TensorRef) -> str:
        own = roles.get(t.name, "?")
        return own if t.view is None else f"{own}@{roles.get(t.view.base, '?')}"

    lines = [str(parse_target(target))]
    lines += [f"buffer {t.dtype.name}{list(t.shape)}" for t in graph.buffers]
    for k, op in enumerate(graph.ops):
        reads = " ".join(role(t) for t in op.spec.inputs)
        lines.append(f"{spec_key(op.spec)} {'+'.join(op.fused)} <- {reads}")
        roles.setdefault(op.spec.out.name, f"op{k}")
        if op.spec.out.view is not None:
            roles.setdefault(op.spec.out.view.base, f"op{k}")
        lines[-1] += f" -> {role(op.spec.out)}"
    lines.append("outputs " + " ".join(roles.get(o, "?") for o in graph.outputs))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:24]


# -------------------------------------------------------------------- records
@dataclass(frozen=True)
class Measured:
    """One measured variant: its choice, the cost model's cycles and the simulated ones (None: failed)."""

    choice: PlanChoice
    predicted: float
    cycles: int | None
    error: str | None = None
    default: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"choice": self.choice.to_dict(), "predicted": self.predicted, "cycles": self.cycles,
                "error": self.error, "default": self.default}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Measured:
        cycles = d["cycles"]
        if cycles is not None and (isinstance(cycles, bool) or not isinstance(cycles, int)):
            raise TypeError(f"cycles {cycles!r} is not an integer")
        error = d.get("error")
        return cls(PlanChoice.from_dict(d["choice"]), float(d["predicted"]), cycles,
                   None if error is None else str(error), bool(d.get("default", False)))


@dataclass(frozen=True)
class PartitionRecord:
    """Every measured variant of one partition on one target, and the winner."""

    key: str
    target: str
    symbol: str
    variants: tuple[Measured, ...]
    #: :func:`tiles_fingerprint` of the tuned tiles the variants were planned with ("" for none)
    tiles: str = ""

    @property
    def best(self) -> Measured | None:
        """The fastest measured variant (the earliest of equals: the default comes first)."""
        return fastest(self.variants)

    @property
    def default_cycles(self) -> int | None:
        return next((m.cycles for m in self.variants if m.default), None)

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {"target": self.target, "symbol": self.symbol, "tiles": self.tiles,
                "variants": [m.to_dict() for m in self.variants],
                "best": None if best is None else {"choice": best.choice.to_dict(), "cycles": best.cycles}}

    @classmethod
    def from_dict(cls, key: str, d: Mapping[str, Any]) -> PartitionRecord:
        rec = cls(key, str(parse_target(str(d["target"]))), str(d["symbol"]),
                  tuple(Measured.from_dict(m) for m in d["variants"]), str(d.get("tiles", "")))
        stated = d.get("best")
        best = rec.best
        if (stated is None) != (best is None) or (best is not None and (
                PlanChoice.from_dict(stated["choice"]) != best.choice or stated["cycles"] != best.cycles)):
            raise ValueError(f"partition {key}: the recorded winner is not the fastest measured variant")
        return rec


def read_records(work_dir: str | os.PathLike) -> dict[str, PartitionRecord]:
    """The records in ``work_dir/npu_plans.json`` (none when there is no such file); ``ValueError`` naming
    the file for anything malformed."""
    path = Path(work_dir) / PLANS_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("version") != PLANS_VERSION:
            version = data.get("version") if isinstance(data, dict) else None
            raise ValueError(f"version {version!r}, expected {PLANS_VERSION}")
        return {str(k): PartitionRecord.from_dict(str(k), d) for k, d in data["partitions"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: malformed plan records ({type(e).__name__}: {e}); "
                         "delete the file or run the plan search again") from None


def write_records(work_dir: str | os.PathLike, records: Mapping[str, PartitionRecord]) -> None:
    """Write ``work_dir/npu_plans.json`` atomically: a temporary file in the same directory, then renamed."""
    folder = Path(work_dir)
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"version": PLANS_VERSION, "partitions": {k: r.to_dict() for k, r in records.items()}},
                      indent=1)
    fd, tmp = tempfile.mkstemp(prefix=f".{PLANS_FILE}.", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, folder / PLANS_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_choices(work_dir: str | os.PathLike, target: str | NpuTarget) -> dict[str, PlanChoice]:
    """The winning plan choice per :func:`partition_key` recorded in ``work_dir`` for ``target``. Records of
    other targets are ignored (a warning when the file has records but none for ``target``)."""
    want = str(parse_target(target))
    records = read_records(work_dir)
    out = {k: r.best.choice for k, r in records.items() if r.target == want and r.best is not None}
    if records and not any(r.target == want for r in records.values()):
        others = sorted({r.target for r in records.values()})
        warnings.warn(f"{Path(work_dir) / PLANS_FILE}: no plan records for target {want!r} (only for "
                      f"{', '.join(map(repr, others))}); partitions are planned by default", stacklevel=2)
    return out


def fastest(measured: Iterable[Measured]) -> Measured | None:
    """The fastest of ``measured`` (the earliest of equals), None if none was measured."""
    ok = [m for m in measured if m.cycles is not None]
    return min(ok, key=lambda m: m.cycles) if ok else None
