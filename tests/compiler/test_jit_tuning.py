"""Tuning records reach the NPU partitions a JIT executable compiles at run time: ``build(model, database=DIR)``
of a model built for every shape keeps the records in its JIT program, and a run-time compile of a shape whose
operators were tuned uses the tuned tile (the database is replaced by a record of a legal tile that the cost
model does not choose, so the difference shows)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm_npu.relay_patterns.graph import partition_graph
from tvm_npu.tir_schedules import tile_search
from tvm_npu.tir_schedules.scheduler import schedule_partition

import tvm_npu
from tvm_npu.compiler import dynamic
from tvm_npu.compiler.relayout import relayout
from tvm_npu.config import parse_target
from tvm_npu.core.ops import spec_key
from tvm_npu.core.tiles import TileParams, tile_to_json
from tvm_npu.runtime import jit
from tvm_npu.runtime.npu_module import module_blob
from tvm_npu.testing.dynamic_models import classifier
from tvm_npu.tools.bench import profile_model

SHAPE = (1, 3, 16, 24)


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path) -> Iterator[jit.JitCache]:
    with jit.use_cache(jit.JitCache(jit.DiskCache(tmp_path / "cache"))) as cache:
        yield cache


def _run(executable: object, x: np.ndarray) -> tuple[list[str], list[dict]]:
    """SHA-256 of every NPU program the run executed, in call order (as benchmarks/fingerprint.py hashes them),
    and the tile of each of its layers."""
    _, prof, _ = profile_model(executable, [x], timing_only=True)
    return ([hashlib.sha256(r.artifact.program).hexdigest() for r in prof.runs],
            [layer.tile for r in prof.runs for layer in r.artifact.layers])


def _other_tile(model: object) -> tuple[str, TileParams]:
    """A legal tile for the first operator of ``model``'s JIT partition at SHAPE that the cost model does not
    choose, by its operator signature."""
    with jit.use_cache(jit.JitCache(disk=None)):
        _, info = tvm_npu.build_with_info(model)
    (mod,) = info.compiled.attrs["external_mods"]
    (part,) = jit.Program.decode(module_blob(mod)).partitions.values()
    sizes = part.sizes([np.zeros(SHAPE, np.float32)])
    npu = parse_target("npu")
    func = relayout(dynamic.bind_partition(tvm.ir.load_json(part.func_json), sizes), npu)  # as compile_partition
    op = schedule_partition(partition_graph(func, part.symbol), npu).ops[0]
    return spec_key(op.spec), next(t for t in tile_search.candidates(op.spec, npu.hw, npu.options) if t != op.tile)


def test_database_records_apply_to_run_time_compiles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     private_cache: jit.JitCache) -> None:
    model = classifier()
    key, tile = _other_tile(model)
    monkeypatch.setattr(dynamic, "best_tiles", lambda work_dir, target: {key: tile})
    monkeypatch.setattr(dynamic, "load_choices", lambda work_dir, target: {})
    tuned_jit, info = tvm_npu.build_with_info(model, database=tmp_path)
    (mod,) = info.compiled.attrs["external_mods"]
    assert jit.Program.decode(module_blob(mod)).tuning["tiles"] == {key: tile_to_json(tile)}
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    tuned, tuned_tiles = _run(tuned_jit, x)
    assert private_cache.compiles == 1 and tuned_tiles[0] == tile_to_json(tile)
    untuned_jit = tvm_npu.build(model)
    untuned, untuned_tiles = _run(untuned_jit, x)
    assert private_cache.compiles == 2  # the records are part of the cache key: no reuse across them
    assert tuned != untuned and untuned_tiles[0] != tile_to_json(tile)
    np.testing.assert_allclose(tvm_npu.run(tuned_jit, x), tvm_npu.run(untuned_jit, x), rtol=1e-4, atol=1e-5)
