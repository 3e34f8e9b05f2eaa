"""A tuning candidate (an operator and a tile): compiled into an artifact file by a builder worker, and
the features the cost model reads of it. No meta_schedule here (:mod:`tvm_npu.tuning.components` has it)."""

from __future__ import annotations

import json
import math
from functools import cache

import tvm

from tvm_npu.config import NpuTarget, parse_target
from tvm_npu.core.ops import OpSpec
from tvm_npu.core.tiles import TileParams, tile_from_json
from tvm_npu.tir_schedules import tile_search
from tvm_npu.tir_schedules.kind import kind_of
from tvm_npu.tuning.space import parse_spec, task_of, tile_of


def build_candidate(spec_text: str, tile_text: str, target_text: str, out_dir: str | None) -> str:
    """Compile one operator with one tile into an artifact file (runs in a builder worker)."""
    from tvm_npu.codegen.operator import standalone_program
    from tvm_npu.core.artifact import Artifact
    from tvm_npu.core.views import without_views
    from tvm_npu.tuning.measure import write_artifact

    spec, tile, npu = parse_spec(spec_text), tile_from_json(json.loads(tile_text)), parse_target(target_text)
    program, _ = standalone_program(spec, tile, npu.hw)
    bare = without_views(spec)
    blob = Artifact.pack(spec.name, str(npu), [t.name for t in bare.inputs], [bare.out.name], [], program)
    return write_artifact(blob, out_dir)


#: Width of :func:`features` (meta_schedule's XGB model stacks every task's rows in one matrix).
N_FEATURES = 18
_KINDS = ("conv2d", "matmul", "pool", "elementwise", "rowwise")


def features(mod: tvm.IRModule) -> list[float]:
    """The analytic model's view of a candidate: log2 of its predicted cycles and their parts, DRAM
    bytes moved and wasted, SRAM share, steps, plus stages, loop order, engine and operator kind."""
    func = mod["main"]
    spec, npu = task_of(func)
    tile = tile_of(mod)
    return list(_features(spec, tile, npu))


@cache
def _features(spec: OpSpec, tile: TileParams, npu: NpuTarget) -> tuple[float, ...]:
    kind = kind_of(spec)
    est = tile_search.estimate(spec, tile, npu.hw)
    lg = [math.log2(1 + x) for x in (est.cycles, est.tensor_cycles, est.vector_cycles, est.load_cycles,
                                      est.store_cycles, est.channel_cycles, est.dram_bytes, est.wasted_bytes,
                                      kind.step_count(spec, tile), kind.outer_count(spec, tile))]
    order = getattr(tile, "order", None)
    engine = getattr(tile, "engine", None)
    row = [*lg, est.sram_bytes / npu.hw.max_sram_bytes, float(tile.stages),
           float(order is not None and order.value == "b"), float(engine is not None and engine.value == "vector"),
           *(float(kind.name == k) for k in _KINDS[:4])]
    assert len(row) == N_FEATURES
    return tuple(row)
