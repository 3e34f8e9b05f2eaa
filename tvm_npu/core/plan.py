"""What the plan stage decides for one NPU partition, as typed, serialisable records.

The partition stage hands over a :class:`PartitionGraph` (the operators a partition
computes, before any cross-operator decision); the plan stage
(``tir_schedules/plan.py``) turns it into a :class:`PartitionPlan`: the operators after
fusion, in the order they run, the tile of each, which intermediates stay in SRAM and
where (regions with lifetimes), and each operator's SRAM budget. The codegen only
lowers a plan; tuning, the report and ``BuildInfo`` read the same plan. Plans round-trip
through JSON (:meth:`PartitionPlan.to_json` / :meth:`PartitionPlan.from_json`): the
dump and the hand-over from the plan stage to the codegen use that form.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tvm_npu.core.ops import OpSpec, TensorRef
from tvm_npu.core.tiles import TileParams, tile_from_json, tile_to_json

#: Bump when the JSON form changes incompatibly; older plans are rejected with a clear error.
PLAN_VERSION = 1
#: The attribute under which the plan stage attaches a plan (as JSON) to its partition function.
PLAN_ATTR = "npu.plan"
#: Attribute of a partition function holding its constants (name -> tensor, in the plan's layouts).
CONSTANTS_ATTR = "npu.constants"


@dataclass(frozen=True)
class GraphOp:
    """One operator as partitioning matched it, and the composite pattern(s) it came from."""

    spec: OpSpec
    fused: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class PartitionGraph:
    """A partition's operators in program order, its DRAM inputs and outputs, and the
    constants the operators name (weights, already in the layout the specs state)."""

    symbol: str
    inputs: tuple[TensorRef, ...]
    outputs: tuple[str, ...]
    ops: tuple[GraphOp, ...]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    #: DRAM tensors no operator computes as a whole: the outputs of concats (their inputs are
    #: views into them) and outputs that operators write through a view.
    buffers: tuple[TensorRef, ...] = ()


@dataclass(frozen=True)
class SramRegion:
    """An intermediate kept in SRAM from the operator that writes it to the last that reads it."""

    tensor: str
    addr: int
    nbytes: int
    producer: int  # index into PartitionPlan.ops
    last_use: int

    def live_at(self, op: int) -> bool:
        return self.producer <= op <= self.last_use


@dataclass(frozen=True)
class OpPlan:
    """One operator of the plan: its (fused) spec, its tile and what the cost model expects."""

    spec: OpSpec
    tile: TileParams
    fused: tuple[str, ...]  # the composite patterns folded into this operator
    sram_limit: int  # the operator's own buffers live in [0, sram_limit); resident regions above
    predicted_cycles: float
    sram_bytes: int  # of the operator's own buffers (the tile's footprint)


@dataclass(frozen=True)
class GroupBuffer:
    """A layer group's intermediate: one SRAM region per version; slice ``s`` uses ``addrs[s % len(addrs)]``."""

    tensor: str
    addrs: tuple[int, ...]
    nbytes: int


@dataclass(frozen=True)
class GroupStep:
    """One member of a layer group computing one slice: an operator of its own over slice tensors."""

    member: int  # index into PartitionPlan.ops
    slice: int
    op: OpPlan


@dataclass(frozen=True)
class GroupPlan:
    """Operators ``first..last`` of the plan run together, slice by slice along H (``-fusion=3``).

    The slices of the group's outputs are ``rows`` rows each; every member computes, per slice, the
    rows its readers need (halo rows recomputed), intermediates only ever in ``buffers``. ``steps``
    are in execution order (slice-major); each is lowered like any operator.
    """

    first: int
    last: int
    rows: int
    slices: int
    buffers: tuple[GroupBuffer, ...]
    steps: tuple[GroupStep, ...]
    predicted_cycles: float

    @property
    def members(self) -> range:
        return range(self.first, self.last + 1)

    @property
    def sram_bytes(self) -> int:
        """Peak SRAM: the intermediates' regions plus the largest step's own buffers."""
        return sum(b.nbytes * len(b.addrs) for b in self.buffers) + max(s.op.sram_bytes for s in self.steps)


def slice_name(tensor: str, s: int) -> str:
    """The name of slice ``s`` of a layer group's tensor (the planner and the codegen agree on it)."""
    return f"{tensor}_s{s}"


@dataclass(frozen=True)
class PartitionPlan:
    """Everything the codegen needs to decide nothing: see the module docstring."""

    symbol: str
    target: str
    inputs: tuple[TensorRef, ...]
    outputs: tuple[str, ...]
    ops: tuple[OpPlan, ...]
    resident: tuple[SramRegion, ...] = ()
    buffers: tuple[TensorRef, ...] = ()  # as in PartitionGraph
    groups: tuple[GroupPlan, ...] = ()

    def group_of(self, op: int) -> GroupPlan | None:
        return next((g for g in self.groups if g.first <= op <= g.last), None)

    def region(self, tensor: str) -> SramRegion | None:
        return next((r for r in self.resident if r.tensor == tensor), None)

    @property
    def dump_stem(self) -> str:
        """A short, stable file-name stem for this partition's dumps (symbols can be very long)."""
        return dump_stem(self.symbol)

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> str:
        return json.dumps({"version": PLAN_VERSION, **_encode(self)}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> PartitionPlan:
        """Parse :meth:`to_json`'s output; ``ValueError`` naming what is wrong otherwise."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"a partition plan is not valid JSON: {e}") from None
        if not isinstance(data, dict) or data.pop("version", None) != PLAN_VERSION:
            raise ValueError(f"not a partition plan of version {PLAN_VERSION}")
        try:
            return _decode(cls, data)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed partition plan: {e}") from None

    # ------------------------------------------------------------------ text
    def text(self) -> str:
        """A readable summary: one line per operator, then the SRAM regions."""
        lines = [f"plan {self.symbol}  target: {self.target}",
                 f"  inputs  {', '.join(f'{t.name}{list(t.shape)}' for t in self.inputs)}",
                 f"  outputs {', '.join(self.outputs)}"]
        for i, op in enumerate(self.ops):
            lines.append(f"  [{i}] {op.spec.name:<22s} -> {op.spec.out.name}{list(op.spec.out.shape)}  "
                         f"tile {tile_to_json(op.tile)}  sram {op.sram_bytes}/{op.sram_limit} B  "
                         f"~{op.predicted_cycles:,.0f} cycles  fused {'+'.join(op.fused)}")
        for g in self.groups:
            lines.append(f"  group [{g.first}..{g.last}]: {g.slices} slices of {g.rows} rows, {len(g.steps)} steps, "
                         f"sram {g.sram_bytes} B, ~{g.predicted_cycles:,.0f} cycles, on chip "
                         f"{', '.join(b.tensor for b in g.buffers) or '-'}")
        for r in self.resident:
            lines.append(f"  sram [{r.addr}, {r.addr + r.nbytes}) {r.tensor}: ops {r.producer}..{r.last_use}")
        for b in self.buffers:
            lines.append(f"  dram {b.name}{list(b.shape)}: written through views")
        for t in {t.name: t for op in self.ops for t in (*op.spec.inputs, op.spec.out) if t.view}.values():
            v = t.view
            lines.append(f"  view {t.name}{list(t.shape)} = {v.base}[{v.offset} + {[list(d) for d in v.dims]}]")
        return "\n".join(lines) + "\n"


class PlanChoiceWarning(UserWarning):
    """A recorded :class:`PlanChoice` does not apply to the partition it was looked up for (planned by default)."""


@dataclass(frozen=True)
class GroupChoice:
    """One layer group of a :class:`PlanChoice`: operators ``first..last`` in ``slices`` slices."""

    first: int
    last: int
    slices: int


@dataclass(frozen=True)
class PlanChoice:
    """What the plan stage can be told for one partition instead of deciding itself (the model-level plan
    search, ``tvm_npu.tuning.group_search``, measures such choices): the fusion level and, at 3, the layer groups,
    by operator index after fusion; every operator outside them runs alone. With the same tiles, a choice
    reproduces its plan exactly (the tiles themselves are the operator-level tuner's)."""

    fusion: int
    groups: tuple[GroupChoice, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.fusion, bool) or not isinstance(self.fusion, int) or not 0 <= self.fusion <= 3:
            raise ValueError(f"plan choice fusion={self.fusion!r}; accepted: 0, 1, 2 or 3")
        if self.groups and self.fusion != 3:
            raise ValueError(f"plan choice with layer groups at fusion={self.fusion}; "
                             "accepted: groups at fusion 3 only")
        end = -1
        for g in self.groups:
            if not end < g.first < g.last or g.slices < 1:
                raise ValueError(f"plan choice group {g.first}..{g.last} in {g.slices} slices; accepted: disjoint "
                                 "intervals of at least 2 operators in increasing order, 1 or more slices")
            end = g.last

    @classmethod
    def of(cls, plan: PartitionPlan, fusion: int) -> PlanChoice:
        """The choice that reproduces ``plan``, made at ``fusion``."""
        return cls(fusion, tuple(GroupChoice(g.first, g.last, g.slices) for g in plan.groups))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"fusion": 3, "groups": [[first, last, slices], ...]}``."""
        return {"fusion": self.fusion, "groups": [[g.first, g.last, g.slices] for g in self.groups]}

    @classmethod
    def from_dict(cls, data: Any) -> PlanChoice:
        """Inverse of :meth:`to_dict`; ``ValueError`` naming what is wrong otherwise."""
        try:
            groups = tuple(GroupChoice(*(_int(x) for x in g)) for g in data.get("groups", ()))
            return cls(_int(data["fusion"]), groups)
        except (AttributeError, KeyError, TypeError) as e:
            raise ValueError(f"malformed plan choice {data!r} ({type(e).__name__}: {e}); accepted: "
                             '{"fusion": 0..3, "groups": [[first, last, slices], ...]}') from None

    def __str__(self) -> str:
        groups = " ".join(f"[{g.first}..{g.last}]x{g.slices}" for g in self.groups)
        return f"fusion={self.fusion}" + (f" groups {groups}" if self.groups else "")


def _int(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"expected an integer, got {x!r}")
    return x


def dump_stem(symbol: str, keep: int = 48) -> str:
    """``symbol`` itself when short, else its first ``keep`` characters and a hash of the whole."""
    if len(symbol) <= keep + 11:
        return symbol
    return f"{symbol[:keep]}_{hashlib.sha1(symbol.encode()).hexdigest()[:10]}"


# --------------------------------------------------------------------------- codec
_SPECS: dict[str, type] = {c.__name__: c for c in typing.get_args(OpSpec)}
_TAG = "spec"  # the key naming a spec's class


def _encode(obj: Any) -> Any:
    """Dataclasses as dicts (specs tagged with their class), enums by name, tuples as lists."""
    if isinstance(obj, enum.Enum):
        return obj.name
    if dataclasses.is_dataclass(obj):
        if isinstance(obj, TileParams):
            return tile_to_json(obj)
        d = {f.name: _encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        return {_TAG: type(obj).__name__, **d} if type(obj).__name__ in _SPECS else d
    if isinstance(obj, tuple | list):
        return [_encode(x) for x in obj]
    return obj


def _decode(tp: Any, data: Any) -> Any:
    """Inverse of :func:`_encode` for the annotated type ``tp``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if data is None and type(None) in options:
            return None
        if all(o in _SPECS.values() for o in options if o is not type(None)):
            return _decode(_SPECS[data[_TAG]], data)
        if set(options) == set(typing.get_args(TileParams)):
            return tile_from_json(data)
        (only,) = [o for o in options if o is not type(None)]
        return _decode(only, data)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], x) for x in data)
        return tuple(_decode(a, x) for a, x in zip(args, data, strict=True))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp[data]
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        kw = {f.name: _decode(hints[f.name], data[f.name]) for f in dataclasses.fields(tp) if f.name in data}
        return tp(**kw)
    if tp is float:
        return float(data)
    if tp in (int, str, bool) and not isinstance(data, tp):
        raise TypeError(f"expected {tp.__name__}, got {data!r}")
    return data


def spec_to_json(spec: OpSpec) -> str:
    """One operator spec as JSON (a tuning task's workload carries it)."""
    return json.dumps(_encode(spec), sort_keys=True)


def spec_from_json(text: str) -> OpSpec:
    """Inverse of :func:`spec_to_json`; ``ValueError`` on anything else."""
    try:
        return _decode(OpSpec, json.loads(text))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"malformed operator spec: {e}") from None
