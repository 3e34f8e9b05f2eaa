"""The tuning design space of one NPU operator: the legal tiles, how meta_schedule's decisions encode them,
and the workload attributes that tie a record to its operator and target.

A leaf of the tuning floor (it imports the shared records and the schedules, never the driver), so the
build can read a tuning database (:mod:`tvm_npu.tuning.database`) without importing the tuner.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

import tvm
from tvm import s_tir, tirx

from tvm_npu.config import NpuTarget, parse_target
from tvm_npu.core.ops import OpSpec
from tvm_npu.core.plan import spec_from_json
from tvm_npu.core.tiles import TileParams
from tvm_npu.tir_schedules import tile_search

#: Workload attributes: the operator, its signature and the NPU target (``str(NpuTarget)``).
SPEC_ATTR, KEY_ATTR, TARGET_ATTR = "npu.spec", "npu.key", "npu.target"
#: Version of the design space; a change in how decisions map to tiles changes every workload.
SPACE_VERSION = 1
SPACE_ATTR = "npu.space"
#: Prefix of the candidate's annotations that carry the template parameters.
ANNOTATION = "npu.tile."
#: Pipeline stages the space offers (1, no double buffering, never beats 2 on this machine).
STAGES = (2, 3)
#: meta_schedule's database files in a work directory.
WORKLOAD_FILE, RECORD_FILE = "database_workload.json", "database_tuning_record.json"
#: A failed measurement's run_secs in meta_schedule's records.
FAILED_SECS = 1e9


def task_of(func: tirx.PrimFunc) -> tuple[OpSpec, NpuTarget]:
    return parse_spec(str(func.attrs[SPEC_ATTR])), parse_target(str(func.attrs[TARGET_ATTR]))


@cache
def parse_spec(text: str) -> OpSpec:
    return spec_from_json(text)



# --------------------------------------------------------------------------- space
@dataclass(frozen=True)
class TileSpace:
    """The legal tiles of one operator on one target and how decisions encode them.

    Each tile field is one decision: integers by value, enums by their index in the enum, tuples
    (elementwise tile shapes) by their index in the sorted list of values legal tiles take.
    """

    tiles: tuple[TileParams, ...]
    choices: dict[str, tuple]  # field -> the values legal tiles take (decoded)

    @property
    def legal(self) -> frozenset[TileParams]:
        return frozenset(self.tiles)

    def encoded(self, field: str) -> list[int]:
        return [self.encode(field, v) for v in self.choices[field]]

    def encode(self, field: str, value: object) -> int:
        if isinstance(value, bool | int):
            return int(value)
        if hasattr(value, "value") and hasattr(type(value), "__members__"):  # an enum
            return list(type(value)).index(value)
        return self.choices[field].index(value)

    def decode(self, values: Mapping[str, int]) -> TileParams:
        kw = {}
        for field, options in self.choices.items():
            code = values[field]
            sample = options[0]
            if isinstance(sample, bool | int):
                kw[field] = code
            elif hasattr(type(sample), "__members__"):
                kw[field] = list(type(sample))[code]
            else:
                kw[field] = options[code]
        return type(self.tiles[0])(**kw)


@cache
def tile_space(spec_text: str, target_text: str) -> TileSpace:
    """Every legal tile of an operator over the pipeline depths in :data:`STAGES`."""
    spec, npu = parse_spec(spec_text), parse_target(target_text)
    tiles: dict[TileParams, None] = {}
    for stages in STAGES:
        opts = dataclasses.replace(npu.options, pipeline_stages=stages)
        tiles.update((t, None) for t, _ in tile_search.legal(spec, npu.hw, opts))
    if not tiles:
        raise tile_search.NoTileFits(f"no legal tile for {spec.name} within {npu.hw.max_sram_bytes} SRAM bytes")
    fields = [f.name for f in dataclasses.fields(next(iter(tiles)))]
    choices = {f: tuple(sorted({getattr(t, f) for t in tiles}, key=_order_key)) for f in fields}
    return TileSpace(tuple(tiles), choices)


def _order_key(v: object) -> object:
    return list(type(v)).index(v) if hasattr(type(v), "__members__") else v


def space_of(func: tirx.PrimFunc) -> TileSpace:
    return tile_space(str(func.attrs[SPEC_ATTR]), str(func.attrs[TARGET_ATTR]))


def design_space(sch: s_tir.Schedule) -> None:
    """meta_schedule's ``ScheduleFn``: one ``sample_categorical`` per template parameter with more
    than one legal value, each recorded as an annotation of the root block (what the builder reads)."""
    space = space_of(sch.mod["main"])
    root = sch.get_sblock("root")
    for field in space.choices:
        codes = space.encoded(field)
        if len(codes) == 1:
            sch.annotate(root, ANNOTATION + field, codes[0])
        else:
            rv = sch.sample_categorical(codes, [1.0 / len(codes)] * len(codes))
            sch.annotate(root, ANNOTATION + field, rv)


def tile_of(mod: tvm.IRModule) -> TileParams:
    """The tile a candidate (the workload with the space's annotations) stands for."""
    func = mod["main"]
    annotations = func.body.block.annotations
    values = {k[len(ANNOTATION):]: int(v) for k, v in annotations.items() if str(k).startswith(ANNOTATION)}
    return space_of(func).decode(values)


def trace_for(mod: tvm.IRModule, tile: TileParams) -> s_tir.Trace:
    """A trace of :func:`design_space` on ``mod`` whose decisions select ``tile``."""
    space = space_of(mod["main"])
    sch = s_tir.Schedule(mod)
    design_space(sch)
    trace = sch.trace
    field_of = {inst.inputs[1]: str(inst.attrs[0])[len(ANNOTATION):]
                for inst in trace.insts if inst.kind.name == "Annotate"}
    for inst in trace.insts:
        if inst.kind.name == "SampleCategorical":
            field = field_of[inst.outputs[0]]
            code = space.encode(field, getattr(tile, field))
            trace = trace.with_decision(inst, space.encoded(field).index(code), remove_postproc=True)
    return trace

