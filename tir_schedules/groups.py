"""Layer groups (``-fusion=3``): consecutive operators run together, slice by slice along H.

A group is an interval ``i..j`` of a partition's operators (after fusion). Its *outputs* are the
members' results that something outside reads (or that leave the partition); every other result is
an *intermediate*, read only by members and never stored to DRAM. The group runs slice by slice:
the outputs are cut into slices of ``rows`` rows, and per slice every member, in order, computes the
rows its readers in the group need. Those rows come from propagating each slice backwards through
the members' row windows (:class:`~.kind.RowWindow`: kernel, stride, dilation, padding), so a
member computes the halo rows of its 3x3 reader again in the next slice (recompute, not a rolling
buffer). An intermediate's slice lives in an SRAM region with two versions (slice ``s`` in version
``s % 2``), so slice ``s + 1``'s producer can start while slice ``s``'s readers still read. A
member's work on one slice is an ordinary operator of its own (the same templates, tile search and
cost model), whose intermediate operands are marked ``on_chip``: the cost model prices them as
vector-engine copies, the codegen copies them within SRAM. Weights are loaded by every slice
(streamed, not held resident): the cost model sees that and the search avoids groups whose weights
would be reloaded too often.

The search (:func:`search`) is interval dynamic programming over the operator order,
``cost[i][j] = min(group cost of i..j, min over k of cost[i][k] + cost[k+1][j])``, with a group's
cost the sum of its steps' flow estimates at the best slice count; groups whose intermediates leave
no room for the members' tiles are invalid. Estimates are cached by the sliced operators' name-free
signatures, so ResNet's repeated blocks are estimated once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from tvm_npu.config import NpuTarget
from tvm_npu.ops import Broadcast, OpSpec, TensorRef, spec_key
from tvm_npu.plan import slice_name
from tvm_npu.tiles import TileParams
from tvm_npu.views import compose, strided

from . import planner
from .cost import Estimate
from .kind import kind_of

#: The longest group the search considers.
MAX_MEMBERS = 8
#: Slice counts tried per group (the output's rows split as evenly as these allow).
SLICE_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16)
#: How many slice counts are estimated, from the fewest whose intermediates fit.
SLICINGS_TRIED = 2
#: A group's intermediates may take at most this share of the SRAM (the rest is the members' tiles).
BUFFER_SHARE = 0.5

Rows = tuple[int, int]
_TOO_BIG = object()


@dataclass(frozen=True)
class Step:
    """One member computing one slice: the sliced operator, its tile and its estimate."""

    member: int  # offset in the group
    slice: int
    spec: OpSpec
    tile: TileParams
    estimate: Estimate


@dataclass(frozen=True)
class Choice:
    """The best way found to run a group: its slicing, intermediates and steps."""

    rows: int
    slices: int
    buffers: tuple[tuple[str, int], ...]  # (intermediate, bytes of its largest slice, aligned)
    versions: int
    steps: tuple[Step, ...]
    cost: float

    @property
    def buffer_bytes(self) -> int:
        return self.versions * sum(n for _, n in self.buffers)


class Planner:
    """Evaluates groups of one partition's operators, caching estimates by signature."""

    def __init__(self, ops: Sequence[OpSpec], outputs: Sequence[str], target: NpuTarget,
                 tiles: Mapping[str, TileParams]) -> None:
        self.ops, self.outputs, self.target, self.tiles = list(ops), set(outputs), target, tiles
        self.readers: dict[str, set[int]] = {}
        for k, op in enumerate(self.ops):
            for t in op.inputs:
                self.readers.setdefault(t.name, set()).add(k)
                if t.view is not None:
                    self.readers.setdefault(t.view.base, set()).add(k)
        self._tile_cache: dict[tuple[str, int], tuple[TileParams, Estimate] | None] = {}

    # ------------------------------------------------------------------ search
    def single_cost(self, k: int) -> float:
        hw = self.target.hw
        best = self._tile(self.ops[k], hw.max_sram_bytes)
        if best is None:
            raise planner.NoTileFits(f"{self.ops[k].name}: no tile fits the SRAM")
        return best[1].cycles

    def group(self, i: int, j: int) -> Choice | None:
        """The best slicing of operators ``i..j`` as a group, or None when they cannot form one."""
        members = self.ops[i:j + 1]
        windows = [kind_of(m).row_window(m) for m in members]
        if any(w is None for w in windows) or not all(_rows_axis(t) for m in members for t in _sliced_refs(m)):
            return None
        inside = set(range(i, j + 1))
        produced = {m.out.name for m in members}
        internal = {n for n in produced if n not in self.outputs and self.readers.get(n) and self.readers[n] <= inside}
        external = [m.out for m in members if m.out.name not in internal]
        if not internal or not external or any(self.readers.get(t.name, set()) & inside for t in external):
            return None
        if any(t.name in internal and (t.view is not None or not _read_by_rows(m, t.name))
               for m in members for t in m.inputs):
            return None  # an intermediate read through a view, per channel or as weights: not sliceable
        if any(t.view is not None and t.view.base in internal for m in members for t in m.inputs):
            return None
        height = {t.dim("H") for t in external}
        if len(height) != 1:
            return None
        (h_out,) = height
        best: Choice | None = None
        seen: set[int] = set()
        tried = 0
        for n in SLICE_COUNTS:
            rows = -(-h_out // n)
            slices = -(-h_out // rows)
            if slices in seen:
                continue
            seen.add(slices)
            choice = self._slicing(members, windows, internal, external, rows, slices)
            if choice is _TOO_BIG:
                continue
            tried += 1
            if choice is not None and (best is None or choice.cost < best.cost):
                best = choice
            if tried == SLICINGS_TRIED:  # more slices only add halo rows and per-step overhead
                break
        return best

    # ----------------------------------------------------------------- slicing
    def _slicing(self, members: Sequence[OpSpec], windows, internal: set[str], external: Sequence[TensorRef],
                 rows: int, slices: int) -> Choice | object | None:
        """The group cut into ``slices`` slices of ``rows`` output rows: None when a step has no tile,
        ``_TOO_BIG`` when the intermediates alone take too much of the SRAM."""
        hw = self.target.hw
        plans = [slice_rows(members, windows, internal, external, rows, s) for s in range(slices)]
        shapes = {m.out.name: m.out for m in members}
        sizes: dict[str, int] = {}
        for ranges in plans:
            for name in internal:
                a, b = ranges.get(name, (0, 0))
                t = shapes[name]
                sizes[name] = max(sizes.get(name, 0), hw.align(t.nbytes // t.dim("H") * max(b - a, 0)))
        versions = 2 if slices > 1 else 1
        buffers = tuple(sorted(sizes.items()))
        total = versions * sum(n for _, n in buffers)
        if total > hw.max_sram_bytes * BUFFER_SHARE:
            return _TOO_BIG
        # rounded down to a sixteenth of the SRAM, so the same sliced operator in overlapping groups
        # shares one tile search
        quantum = max(hw.sram_align_bytes, hw.max_sram_bytes // 16 // hw.sram_align_bytes * hw.sram_align_bytes)
        limit = (hw.max_sram_bytes - total) // quantum * quantum
        steps: list[Step] = []
        for s, ranges in enumerate(plans):
            for k, m in enumerate(members):
                spec = sliced_spec(m, windows[k], ranges, internal, s)
                if spec is None:
                    continue
                best = self._tile(spec, limit)
                if best is None:
                    return None
                steps.append(Step(k, s, spec, *best))
        cost = sum(st.estimate.cycles for st in steps)
        return Choice(rows, slices, buffers, versions, tuple(steps), cost)

    def _tile(self, spec: OpSpec, limit: int) -> tuple[TileParams, Estimate] | None:
        key = (spec_key(spec), limit)
        if key not in self._tile_cache:
            hw, opts = self.target.hw, self.target.options
            tile = self.tiles.get(key[0])
            if tile is None or planner.footprint(spec, tile, hw) > limit:
                try:
                    tile = planner.choose(spec, hw, opts, limit)
                except planner.NoTileFits:
                    self._tile_cache[key] = None
                    return None
            self._tile_cache[key] = (tile, planner.estimate(spec, tile, hw))
        return self._tile_cache[key]


# --------------------------------------------------------------------- row maths
def _rows_axis(t: TensorRef) -> bool:
    return len(t.shape) == 4 and "H" in t.layout


def _sliced_refs(spec: OpSpec) -> list[TensorRef]:
    """The tensors a slice of ``spec`` reads or writes by rows: its data, its output, full operands."""
    return [spec.inputs[0], spec.out, *(e.operand for e in spec.epilogue
                                        if e.operand is not None and e.broadcast == Broadcast.FULL)]


def _read_by_rows(spec: OpSpec, name: str) -> bool:
    """Whether ``spec`` reads tensor ``name`` only by rows (as its data or a full-size operand)."""
    operands = [e.operand for e in spec.epilogue if e.operand is not None]
    main = spec.inputs[:len(spec.inputs) - len(operands)]
    return not any(t.name == name for t in main[1:]) and not any(
        e.operand is not None and e.operand.name == name and e.broadcast != Broadcast.FULL for e in spec.epilogue)


def slice_rows(members: Sequence[OpSpec], windows, internal: set[str], external: Sequence[TensorRef], rows: int,
               s: int) -> dict[str, Rows]:
    """Rows of every member's output (and of every intermediate) that slice ``s`` computes: the
    outputs' own slice, propagated backwards (an intermediate: the union of what its readers need)."""
    h = external[0].dim("H")
    ranges: dict[str, Rows] = {t.name: (s * rows, min(h, (s + 1) * rows)) for t in external}
    for m, w in zip(reversed(members), reversed(windows), strict=True):
        lo, hi = ranges.get(m.out.name, (0, 0))
        if hi <= lo:
            continue
        data = m.inputs[0]
        a, b, _, _ = w.needs(lo, hi, data.dim("H"))
        needs = [(data.name, (a, b))] + [(e.operand.name, (lo, hi)) for e in m.epilogue
                                         if e.operand is not None and e.broadcast == Broadcast.FULL]
        for name, (x, y) in needs:
            if name in internal and y > x:
                p, q = ranges.get(name, (x, y))
                ranges[name] = (min(p, x), max(q, y))
    return ranges


def sliced_spec(m: OpSpec, window, ranges: Mapping[str, Rows], internal: set[str], s: int) -> OpSpec | None:
    """Member ``m`` restricted to its rows of slice ``s``, reading and writing slice tensors (None: no rows)."""
    lo, hi = ranges.get(m.out.name, (0, 0))
    if hi <= lo:
        return None
    data = m.inputs[0]
    a, b, pad_top, pad_bottom = window.needs(lo, hi, data.dim("H"))

    def read(t: TensorRef, x: int, y: int) -> TensorRef:
        if t.name in internal:
            p, q = ranges[t.name]
            whole = _with_rows(TensorRef(slice_name(t.name, s), t.shape, t.dtype, t.layout, on_chip=True), q - p)
            if (x, y) == (p, q):
                return whole
            return _row_view(whole, x - p, y - p, f"{whole.name}_r{x}")
        return _row_view(t, x, y, f"{slice_name(t.name, s)}_r{x}")

    if m.out.name in internal:
        p, q = ranges[m.out.name]
        out = _with_rows(TensorRef(slice_name(m.out.name, s), m.out.shape, m.out.dtype, m.out.layout, on_chip=True),
                         q - p)
        if (lo, hi) != (p, q):
            raise AssertionError("a member computes exactly the rows its readers need")
    else:
        out = _row_view(m.out, lo, hi, slice_name(m.out.name, s))
    epilogue = tuple(replace(e, operand=read(e.operand, lo, hi))
                     if e.operand is not None and e.broadcast == Broadcast.FULL else e for e in m.epilogue)
    changes = {"name": f"{m.name}_s{s}", "out": out, "data": read(data, a, b), "epilogue": epilogue}
    if hasattr(m, "padding"):
        _, left, _, right = m.padding
        changes["padding"] = (pad_top, left, pad_bottom, right)
    return replace(m, **changes)


def _with_rows(t: TensorRef, n: int) -> TensorRef:
    h = t.layout.index("H")
    return replace(t, shape=tuple(n if d == h else x for d, x in enumerate(t.shape)))


def _row_view(t: TensorRef, a: int, b: int, name: str) -> TensorRef:
    """Rows ``[a, b)`` of ``t`` as a view (composed with ``t``'s own view, if it has one)."""
    h = t.layout.index("H")
    begin = [a if d == h else 0 for d in range(len(t.shape))]
    extent = [b - a if d == h else x for d, x in enumerate(t.shape)]
    view = strided(t.name, t.shape, begin, [1] * len(t.shape), extent)
    if t.view is not None:
        view = compose(view, t.view)
    return TensorRef(name, tuple(extent), t.dtype, t.layout, view, t.on_chip)


# ---------------------------------------------------------------------- search
def interval_dp(n: int, single: Callable[[int], float],
                group: Callable[[int, int], float | None]) -> tuple[float, list[tuple[int, int]]]:
    """Minimum-cost split of operators ``0..n-1`` into intervals, each a single operator or a group:
    ``cost[i][j] = min(group(i, j), min over k of cost[i][k] + cost[k+1][j])``. Returns the cost and
    the intervals in order."""
    cost: dict[tuple[int, int], float] = {}
    split: dict[tuple[int, int], int | None] = {}
    for length in range(1, n + 1):
        for i in range(n - length + 1):
            j = i + length - 1
            if i == j:
                cost[i, j], split[i, j] = single(i), None
                continue
            g = group(i, j) if length <= MAX_MEMBERS else None
            best, arg = (math.inf, None) if g is None else (g, None)
            for k in range(i, j):
                c = cost[i, k] + cost[k + 1, j]
                if c < best:
                    best, arg = c, k
            cost[i, j], split[i, j] = best, arg

    def intervals(i: int, j: int) -> list[tuple[int, int]]:
        k = split[i, j]
        return [(i, j)] if k is None else intervals(i, k) + intervals(k + 1, j)

    return (cost[0, n - 1], intervals(0, n - 1)) if n else (0.0, [])


def search(p: Planner) -> list[tuple[int, int, Choice | None]]:
    """The grouping of ``p``'s operators with the least estimated cycles: ``(first, last, choice)`` per
    interval (``choice`` None for a single operator)."""
    choices: dict[tuple[int, int], Choice | None] = {}

    def group(i: int, j: int) -> float | None:
        choices[i, j] = p.group(i, j)
        return None if choices[i, j] is None else choices[i, j].cost

    _, parts = interval_dp(len(p.ops), p.single_cost, group)
    return [(i, j, None if i == j else choices[i, j]) for i, j in parts]
