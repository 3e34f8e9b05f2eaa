"""Layer groups (``-fusion=3``): consecutive operators run together, slice by slice along H.

A group is an interval ``i..j`` of a partition's operators (after fusion). Its *outputs* are the
members' results that something outside reads (or that leave the partition); every other result is
an *intermediate* (a member's output, or a concat's buffer that members write blocks of), read only
by members and never stored to DRAM. The group runs slice by slice: the outputs are cut into slices
of ``rows`` rows, and per slice every member, in order, computes the rows its readers in the group
need. Those rows come from propagating each slice backwards through the members' row windows
(:class:`~.kind.RowWindow`: kernel, stride, dilation, padding). Rows of an intermediate that the
previous slice already computed (a 3x3 reader's halo) are copied over from that slice's buffer
(:func:`halo_copy`, a rolling buffer by copy) instead of computed again. An intermediate's slice
lives in an SRAM region with two versions (slice ``s`` in version ``s % 2``), so slice ``s + 1``'s
producer can start while slice ``s``'s readers still read. A member's work on one slice is an
ordinary operator of its own (the same templates, tile search and cost model), whose intermediate
operands are marked ``on_chip``: the cost model prices them as vector-engine copies, the codegen
copies them within SRAM. Weights are loaded by every slice (streamed, not held resident): the cost
model sees that and the search avoids groups whose weights would be reloaded too often.

The search (:func:`search`) is interval dynamic programming over the operator order,
``cost[i][j] = min(group cost of i..j, min over k of cost[i][k] + cost[k+1][j])``, with a group's
cost from its steps' flow estimates (:func:`group_cycles`) at the best slice count; groups whose
intermediates leave no room for the members' tiles are invalid. Estimates are cached by the sliced
operators' name-free signatures, so ResNet's repeated blocks are estimated once. A step takes its
member's own tile (searched once per operator and SRAM limit; :meth:`Planner._seed`), not a search of
its own, and a group is chosen only where it beats the best split by ``WIN_MARGIN``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from tvm_npu.simulator.builder import row_major

from tvm_npu.config import NpuTarget
from tvm_npu.core.ops import Broadcast, OpSpec, PoolKind, PoolSpec, TensorRef, spec_key
from tvm_npu.core.plan import slice_name
from tvm_npu.core.tiles import TileParams
from tvm_npu.core.views import compose, slice_of, storage, strided

from . import tile_search
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
#: A group is chosen only when its estimate beats the ungrouped alternative by this share: its
#: estimate is within a few percent of the simulator, so a closer win may be a loss (issue 27).
WIN_MARGIN = 0.01

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
    """Evaluates groups of one partition's operators, caching estimates by signature.

    Tensors are tracked by their *storage*: an operator writing through a concat-slice view stores
    into the concat's buffer (``buffers``), which is then the group intermediate, written by several
    members (their channel blocks) and read by others.
    """

    def __init__(self, ops: Sequence[OpSpec], outputs: Sequence[str], target: NpuTarget,
                 tiles: Mapping[str, TileParams], buffers: Sequence[TensorRef] = ()) -> None:
        self.ops, self.outputs, self.target, self.tiles = list(ops), set(outputs), target, tiles
        self.tensors = {t.name: t for t in buffers} | {op.out.name: op.out for op in self.ops}
        for op in self.ops:  # a concat buffer has the layout its inputs are written in
            base = self.tensors.get(storage(op.out))
            if base is not None and not base.layout and len(base.shape) == len(op.out.shape):
                self.tensors[base.name] = replace(base, layout=op.out.layout)
        self.readers: dict[str, set[int]] = {}
        self.writers: dict[str, set[int]] = {}
        for k, op in enumerate(self.ops):
            self.writers.setdefault(storage(op.out), set()).add(k)
            for t in op.inputs:
                self.readers.setdefault(t.name, set()).add(k)
                if t.view is not None:
                    self.readers.setdefault(t.view.base, set()).add(k)
        self._tile_cache: dict[tuple[str, int, TileParams | None], tuple[TileParams, Estimate] | None] = {}

    # ------------------------------------------------------------------ search
    def single_cost(self, k: int) -> float:
        hw = self.target.hw
        best = self._tile(self.ops[k], hw.max_sram_bytes)
        if best is None:
            raise tile_search.NoTileFits(f"{self.ops[k].name}: no tile fits the SRAM")
        return best[1].cycles

    def group(self, i: int, j: int, slices: int | None = None) -> Choice | None:
        """The best slicing of operators ``i..j`` as a group, or None when they cannot form one; with
        ``slices``, that slicing only (a recorded plan choice, or a variant the plan search measures)."""
        members = self.ops[i:j + 1]
        windows = [kind_of(m).row_window(m) for m in members]
        if any(w is None for w in windows) or not all(_rows_axis(t) for m in members for t in _sliced_refs(m)):
            return None
        layouts: dict[str, set[tuple[str, tuple[int, ...]]]] = {}
        for t in (t for m in members for t in _sliced_refs(m)):
            layouts.setdefault(t.name, set()).add((t.layout, t.shape))
        if any(len(v) > 1 for v in layouts.values()):
            return None  # one tensor labelled with two layouts (an elementwise op of a scalar): rows disagree
        inside = set(range(i, j + 1))
        internal = {b for b in map(storage, (m.out for m in members))
                    if b not in self.outputs and self.readers.get(b) and self.readers[b] <= inside
                    and self.writers[b] <= inside}
        external = [m.out for m in members if storage(m.out) not in internal]
        if not internal or not external:
            return None
        if any(self.readers.get(storage(t), set()) & inside for t in external):
            return None  # a member reads what the group only stores at the end
        for m in members:
            if storage(m.out) in internal and m.out.view is not None and _concat_slice(m.out, self.tensors) is None:
                return None  # written through a view other than a concat slice
            for t in m.inputs:
                if storage(t) in internal and (t.view is not None or not _read_by_rows(m, t.name)
                                               or (t.layout, t.shape) != (self.tensors[t.name].layout,
                                                                          self.tensors[t.name].shape)):
                    return None  # an intermediate read through a view, per channel, as weights or relabelled
        height = {t.dim("H") for t in external}
        if len(height) != 1:
            return None
        (h_out,) = height
        best: Choice | None = None
        seen: set[int] = set()
        tried = 0
        for n in SLICE_COUNTS if slices is None else (slices,):
            rows = -(-h_out // n)
            count = -(-h_out // rows)
            if count in seen or (slices is not None and count != n):
                continue
            seen.add(count)
            choice = self._slicing(i, windows, internal, external, rows, count, members)
            if choice is _TOO_BIG:
                continue
            tried += 1
            if choice is not None and (best is None or choice.cost < best.cost):
                best = choice
            if tried == SLICINGS_TRIED:  # more slices only add halo rows and per-step overhead
                break
        return best

    # ----------------------------------------------------------------- slicing
    def _slicing(self, first: int, windows, internal: set[str], external: Sequence[TensorRef],
                 rows: int, slices: int, members: Sequence[OpSpec]) -> Choice | object | None:
        """The group cut into ``slices`` slices of ``rows`` output rows: None when a step has no tile,
        ``_TOO_BIG`` when the intermediates alone take too much of the SRAM."""
        hw = self.target.hw
        plans: list[dict[str, Rows]] = []
        for s in range(slices):
            plans.append(slice_rows(members, windows, internal, external, rows, s, plans[-1] if plans else None))
        sizes: dict[str, int] = {}
        for ranges in plans:
            for name in internal:
                a, b = ranges.get(name, (0, 0))
                t = self.tensors[name]
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
        if slices > 1:  # a step's buffers take half, so the next step's first loads can go beside them
            limit = limit // 2 // quantum * quantum
        steps: list[Step] = []
        writer = {storage(m.out): k for k, m in reversed(list(enumerate(members)))}
        for s, ranges in enumerate(plans):
            prev = plans[s - 1] if s else None
            halos = {t: halo_copy(self.tensors[t], prev[t], ranges[t], s)
                     for t in sorted(internal) if prev is not None and _rolls(prev.get(t), ranges.get(t))}
            specs = []
            for k, m in enumerate(members):  # a halo copy right before its writer: one span per member and slice
                specs += [(k, h) for t, h in halos.items() if writer[t] == k]
                specs.append((k, sliced_spec(m, windows[k], ranges, internal, self.tensors, s, prev)))
            for k, spec in specs:
                if spec is None:
                    continue
                best = self._tile(spec, limit, self._seed(first + k, spec, limit))
                if best is None:
                    return None
                steps.append(Step(k, s, spec, *best))
        return Choice(rows, slices, buffers, versions, tuple(steps), group_cycles(steps, slices))

    def _seed(self, k: int, step: OpSpec, limit: int) -> TileParams | None:
        """Operator ``k``'s own tile within ``limit`` bytes, its rows clamped to ``step``'s, for a step of
        ``k`` (None for a halo copy, another kind). The step has the operator's shape but fewer rows and
        on-chip operands, different in every group it is in; the whole operator's search is shared by all
        of them (the limit is quantised), where searching every step was most of the build time."""
        op = self.ops[k]
        if type(kind_of(op)) is not type(kind_of(step)):
            return None
        tile = self._tile(op, self.target.hw.max_sram_bytes)
        if tile is not None and tile_search.footprint(step, tile[0], self.target.hw) > limit:
            tile = self._tile(op, limit)  # the operator's own tile is too big beside the intermediates
        if tile is None:
            return None
        return self._fitted(step, tile[0])

    def _fitted(self, step: OpSpec, tile: TileParams) -> TileParams | None:
        """``tile`` made one of ``step``'s candidates: a value the step's axes do not offer becomes the
        largest they offer below it (fewer rows), a choice they do not offer at all (a strided read of a
        tensor the step reads through a row view) rules the tile out."""
        kind, hw, opts = kind_of(step), self.target.hw, self.target.options
        for axes in (kind.axes(step, hw, opts), kind.fallback_axes(step, hw, opts)):
            fixed: dict[str, object] = {}
            for name, values in (axes or {}).items():
                value = getattr(tile, name)
                if value in values:
                    continue
                below = [v for v in values if type(v) is int and type(value) is int and v <= value]
                if not below:
                    break
                fixed[name] = max(below)
            else:
                if axes is not None and kind.admits(step, fitted := replace(tile, **fixed)):
                    return fitted
        return None

    def _tile(self, spec: OpSpec, limit: int, seed: TileParams | None = None) -> tuple[TileParams, Estimate] | None:
        """The tuned tile of ``spec``, else ``seed`` where it fits ``limit``, else the best searched."""
        key = (spec_key(spec), limit, seed)
        if key not in self._tile_cache:
            hw, opts = self.target.hw, self.target.options
            tile = self.tiles.get(key[0])
            if (tile is None or tile_search.footprint(spec, tile, hw) > limit) and seed is not None:
                tile = seed
            if tile is None or tile_search.footprint(spec, tile, hw) > limit:
                try:
                    tile = tile_search.choose(spec, hw, opts, limit)
                except tile_search.NoTileFits:
                    self._tile_cache[key] = None
                    return None
            self._tile_cache[key] = (tile, tile_search.estimate(spec, tile, hw))
        return self._tile_cache[key]


def group_cycles(steps: Sequence[Step], slices: int) -> float:
    """A group's estimated cycles from its steps' flow estimates.

    One slice: the members run one after the other, each reading what the previous one wrote
    whole, so the steps' cycles add up. Several slices of float operators: a step overlaps its
    neighbours (the next slice's first member runs beside this slice's last, on other SRAM and
    another version of the intermediates), so each step's fill and drain hide under their work and
    only its busiest resource counts, plus the group's first fill and last drain. Not so in 8 bits:
    there a tile's requantisation on the vector engine is a large part of its array work and holds
    the accumulator (one version with an epilogue), so the steps' own estimates add up again
    (measured on SqueezeNet int8: the overlap model 15-25% under the simulator, the sum within
    -6% / +13%; ``benchmarks/layer_groups.py``).
    """
    if slices == 1 or any(st.spec.inputs[0].dtype.is_quantized for st in steps):
        return sum(st.estimate.cycles for st in steps)

    def busy(e: Estimate) -> int:
        return max(e.tensor_cycles, e.vector_cycles, e.channel_cycles, e.load_cycles, e.store_cycles)

    first, last = steps[0].estimate, steps[-1].estimate
    return sum(busy(st.estimate) for st in steps) + first.cycles - busy(first) + last.cycles - busy(last)


# --------------------------------------------------------------------- row maths
def _concat_slice(t: TensorRef, tensors: Mapping[str, TensorRef]) -> tuple[int, int] | None:
    """``(axis, start)`` when ``t`` is a block of its view's base along one axis other than H (a concat input)."""
    base = tensors.get(t.view.base) if t.view is not None else None
    if base is None or len(base.shape) != len(t.shape) or base.layout != t.layout:
        return None
    for axis, (n, m) in enumerate(zip(t.shape, base.shape, strict=True)):
        if n != m and axis != t.layout.index("H"):
            stride = row_major(base.shape)[axis]
            start, rem = divmod(t.view.offset, stride)
            if not rem and t.view == slice_of(base.name, base.shape, t.shape, axis, start):
                return axis, start
            return None
    return None


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


def _key(t: TensorRef, internal: set[str]) -> str:
    """What a member's output rows are tracked under: its storage when that is an intermediate."""
    return storage(t) if storage(t) in internal else t.name


def _rolls(prev: Rows | None, cur: Rows | None) -> bool:
    """Whether rows of an intermediate that slice ``s`` needs were computed by slice ``s - 1`` (then they
    are copied over from its buffer, not computed again)."""
    return prev is not None and cur is not None and prev[0] <= cur[0] < prev[1] < cur[1] + 1 and cur[0] < cur[1]


def _computed(key: str, ranges: Mapping[str, Rows], internal: set[str], prev: Mapping[str, Rows] | None) -> Rows:
    """Rows a member writing ``key`` computes in this slice: the rows its readers need, less those the
    previous slice computed (an intermediate's overlap rows are copied over)."""
    lo, hi = ranges.get(key, (0, 0))
    if key in internal and prev is not None and _rolls(prev.get(key), (lo, hi)):
        lo = min(hi, prev[key][1])
    return lo, hi


def slice_rows(members: Sequence[OpSpec], windows, internal: set[str], external: Sequence[TensorRef], rows: int,
               s: int, prev: Mapping[str, Rows] | None = None) -> dict[str, Rows]:
    """Rows of every member's output (and of every intermediate) that slice ``s`` holds: the outputs'
    own slice, propagated backwards (an intermediate: the union of what its readers need). With the
    previous slice's rows ``prev``, a member only computes the rows the previous slice did not
    (:func:`_computed`), so what it reads shrinks accordingly."""
    h = external[0].dim("H")
    ranges: dict[str, Rows] = {t.name: (s * rows, min(h, (s + 1) * rows)) for t in external}
    for m, w in zip(reversed(members), reversed(windows), strict=True):
        lo, hi = _computed(_key(m.out, internal), ranges, internal, prev)
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


def sliced_spec(m: OpSpec, window, ranges: Mapping[str, Rows], internal: set[str],
                tensors: Mapping[str, TensorRef], s: int, prev: Mapping[str, Rows] | None = None) -> OpSpec | None:
    """Member ``m`` restricted to the rows it computes in slice ``s``, reading and writing slice tensors
    (None: no rows to compute)."""
    lo, hi = _computed(_key(m.out, internal), ranges, internal, prev)
    if hi <= lo:
        return None
    data = m.inputs[0]
    a, b, pad_top, pad_bottom = window.needs(lo, hi, data.dim("H"))

    def on_chip(name: str) -> TensorRef:
        t = tensors[name]
        p, q = ranges[name]
        return _with_rows(TensorRef(slice_name(name, s), t.shape, t.dtype, t.layout, on_chip=True), q - p)

    def read(t: TensorRef, x: int, y: int) -> TensorRef:
        if t.name in internal:
            whole, p = on_chip(t.name), ranges[t.name][0]
            return whole if whole.dim("H") == y - x else _row_view(whole, x - p, y - p, f"{whole.name}_r{x}_{y}")
        return _row_view(t, x, y, f"{slice_name(t.name, s)}_r{x}_{y}")  # (a residual may read other rows)

    key = storage(m.out)
    if key in internal:
        buf, p = on_chip(key), ranges[key][0]
        whole = buf
        if m.out.view is not None:  # a concat input: its block of the concat's slice
            axis, start = _concat_slice(m.out, tensors)
            part = _with_rows(m.out, buf.dim("H")).shape
            whole = TensorRef(f"{slice_name(m.out.name, s)}_all", part, m.out.dtype, m.out.layout,
                              slice_of(buf.name, buf.shape, part, axis, start), on_chip=True)
        rows = f"{slice_name(m.out.name, s)}_w{lo}"
        out = whole if (lo, hi) == ranges[key] else _row_view(whole, lo - p, hi - p, rows)
    else:
        out = _row_view(m.out, lo, hi, slice_name(m.out.name, s))
    epilogue = tuple(replace(e, operand=read(e.operand, lo, hi))
                     if e.operand is not None and e.broadcast == Broadcast.FULL else e for e in m.epilogue)
    changes = {"name": f"{m.name}_s{s}", "out": out, "data": read(data, a, b), "epilogue": epilogue}
    if hasattr(m, "padding"):
        _, left, _, right = m.padding
        changes["padding"] = (pad_top, left, pad_bottom, right)
    return replace(m, **changes)


def halo_copy(t: TensorRef, prev: Rows, cur: Rows, s: int) -> PoolSpec:
    """The rows ``[cur[0], prev[1])`` of intermediate ``t`` that slice ``s - 1`` computed, copied from its
    buffer into slice ``s``'s (a 1x1 max pool is an exact copy through SRAM), instead of computed again."""

    def buffer(k: int, rng: Rows) -> TensorRef:
        return _with_rows(TensorRef(slice_name(t.name, k), t.shape, t.dtype, t.layout, on_chip=True), rng[1] - rng[0])

    src = _row_view(buffer(s - 1, prev), cur[0] - prev[0], prev[1] - prev[0], f"{slice_name(t.name, s - 1)}_halo")
    dst = _row_view(buffer(s, cur), 0, prev[1] - cur[0], f"{slice_name(t.name, s)}_halo")
    return PoolSpec(f"{t.name}_halo_s{s}", dst, data=src, kind=PoolKind.MAX, kernel=(1, 1))


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
                group: Callable[[int, int, float], float | None]) -> tuple[float, list[tuple[int, int]]]:
    """Minimum-cost split of operators ``0..n-1`` into intervals, each a single operator or a group:
    ``cost[i][j] = min(group(i, j), min over k of cost[i][k] + cost[k+1][j])``. Returns the cost and
    the intervals in order. The splits are priced first and ``group(i, j, cutoff)`` told the best of
    them, so it may skip its search (return None) when it cannot beat ``cutoff``; on a tie the split wins."""
    cost: dict[tuple[int, int], float] = {}
    split: dict[tuple[int, int], int | None] = {}
    for length in range(1, n + 1):
        for i in range(n - length + 1):
            j = i + length - 1
            if i == j:
                cost[i, j], split[i, j] = single(i), None
                continue
            best, arg = math.inf, None
            for k in range(i, j):
                c = cost[i, k] + cost[k + 1, j]
                if c < best:
                    best, arg = c, k
            g = group(i, j, best) if length <= MAX_MEMBERS else None
            if g is not None and g < best:
                best, arg = g, None
            cost[i, j], split[i, j] = best, arg

    def intervals(i: int, j: int) -> list[tuple[int, int]]:
        k = split[i, j]
        return [(i, j)] if k is None else intervals(i, k) + intervals(k + 1, j)

    return (cost[0, n - 1], intervals(0, n - 1)) if n else (0.0, [])


def search(p: Planner) -> list[tuple[int, int, Choice | None]]:
    """The grouping of ``p``'s operators with the least estimated cycles: ``(first, last, choice)`` per
    interval (``choice`` None for a single operator)."""
    choices: dict[tuple[int, int], Choice | None] = {}

    def group(i: int, j: int, cutoff: float) -> float | None:
        # a group must beat its alternative by WIN_MARGIN: estimates within that are too close to call
        choices[i, j] = p.group(i, j)
        return None if choices[i, j] is None or choices[i, j].cost > cutoff * (1 - WIN_MARGIN) else choices[i, j].cost

    _, parts = interval_dp(len(p.ops), p.single_cost, group)
    return [(i, j, None if i == j else choices[i, j]) for i, j in parts]
