"""Tile choice: enumerate legal template parameters, estimate each, keep the cheapest.

Kind-agnostic: every operator kind (``kind.py``) supplies its tile axes, footprint,
pipeline steps and closed-form floors; the flow-shop model that turns steps into
cycles is ``cost.py`` (its formula is written at the top of that file). The SRAM
footprint of a tile is what its template allocates (a test checks it against the
codegen's allocation); ``-tile-min``/``-tile-max`` bound every tile extent.
"""

from __future__ import annotations

import itertools
import math

from tvm_npu.config import CompilerOptions, HardwareConfig
from tvm_npu.core.ops import OpSpec, spec_key
from tvm_npu.core.tiles import Order, TileParams

from .cost import Estimate, Pruned, Versions, flow_estimate, with_table_loads
from .kind import kind_of


class NoTileFits(ValueError):
    """No legal tile of an operator fits the SRAM budget (the operator stays on the host)."""


def estimate(spec: OpSpec, tile: TileParams, hw: HardwareConfig, cutoff: float = math.inf) -> Estimate:
    """Predicted cycles, DRAM traffic and SRAM use of ``spec`` scheduled with ``tile``.

    Raises :class:`~.cost.Pruned` as soon as the result is sure to exceed ``cutoff``. Without a
    cutoff, identical operators (same :func:`~tvm_npu.core.ops.spec_key` and :func:`_aliasing`) are
    estimated once per process (the plan stage estimates every operator's chosen tile).
    """
    if cutoff == math.inf:
        key = (spec_key(spec), _aliasing(spec), tile, hw)
        if key not in _ESTIMATES:
            _ESTIMATES[key] = _estimate(spec, tile, hw, cutoff)
        return _ESTIMATES[key]
    return _estimate(spec, tile, hw, cutoff)


#: Memo of :func:`estimate` without a cutoff (a pure function of the key).
_ESTIMATES: dict[tuple[str, tuple[int, ...], TileParams, HardwareConfig], Estimate] = {}


def _aliasing(spec: OpSpec) -> tuple[int, ...]:
    """Which operands are one tensor (``x + x`` is loaded once): per operand, the first position of its
    name. :func:`~tvm_npu.core.ops.spec_key` leaves names out, and with them this."""
    names = [t.name for t in (*spec.inputs, spec.out)]
    return tuple(names.index(n) for n in names)


def _estimate(spec: OpSpec, tile: TileParams, hw: HardwareConfig, cutoff: float) -> Estimate:
    kind = kind_of(spec)
    p = kind.pipelining(spec, tile)
    return flow_estimate(with_table_loads(kind.steps(spec, tile, hw), hw, spec),
                         Versions.of(tile.stages, p, bool(spec.epilogue)),
                         p.streamed_reduction, kind.compute_floor(spec, tile, hw), kind.footprint(spec, tile, hw),
                         cutoff)


def _estimate_below(spec: OpSpec, tile: TileParams, hw: HardwareConfig, cutoff: float) -> Estimate | None:
    """Like :func:`estimate`, or None as soon as the result is sure to exceed ``cutoff``."""
    try:
        return estimate(spec, tile, hw, cutoff)
    except Pruned:
        return None


def footprint(spec: OpSpec, tile: TileParams, hw: HardwareConfig) -> int:
    """SRAM bytes the template allocates for ``tile`` (aligned, versions included)."""
    return kind_of(spec).footprint(spec, tile, hw)


def candidates(spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions, fallback: bool = False) -> list[TileParams]:
    """Every tile the search considers (before the SRAM check); with ``fallback``, those of the kind's
    :meth:`~tvm_npu.tir_schedules.kind.OpKind.fallback_axes` instead."""
    kind = kind_of(spec)
    axes = kind.fallback_axes(spec, hw, opts) if fallback else kind.axes(spec, hw, opts)
    if axes is None:
        return []
    out = [kind.tile_type(**dict(zip(axes, values, strict=True))) for values in itertools.product(*axes.values())]
    return [t for t in out if kind.admits(spec, t)]


def legal(spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions,
          budget: int | None = None) -> list[tuple[TileParams, int]]:
    """Candidates whose footprint fits ``budget`` (default ``-max-sram-bytes``), with their footprints.

    Where the kind prefers whole output rows (the longest DRAM runs, no column halo),
    narrower tiles are only considered when no whole-row tile fits; the kind's fallback tiles only
    when none of its ordinary ones fits.
    """
    kind = kind_of(spec)
    budget = hw.max_sram_bytes if budget is None else budget
    for fallback in (False, True):
        tiles = candidates(spec, hw, opts, fallback)
        # footprints of the whole-row tiles first: the others are needed only when none of those fits
        # (a footprint costs as much as a quick estimate, and most candidates are not whole-row ones)
        whole = [(t, fp) for t in tiles if kind.whole_rows(spec, t) and (fp := kind.footprint(spec, t, hw)) <= budget]
        found = whole or [(t, fp) for t in tiles if (fp := kind.footprint(spec, t, hw)) <= budget]
        if found:
            return found
    return []


def choose(spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions, budget: int | None = None) -> TileParams:
    """The cheapest legal tile by the cost model within ``budget`` SRAM bytes (default
    ``-max-sram-bytes``; less when a plan reserves regions); :class:`NoTileFits` if none fits.

    Identical operators (same :func:`~tvm_npu.core.ops.spec_key`, e.g. repeated ResNet blocks, and the
    same :func:`_aliasing`: ``x + x`` needs less SRAM than ``x + y``) are searched once per process.
    """
    budget = hw.max_sram_bytes if budget is None else budget
    key = (spec_key(spec), _aliasing(spec), hw, opts, budget)
    if key not in _CHOICES:
        _CHOICES[key] = _search(spec, hw, opts, budget)
    return _CHOICES[key]


#: Memo of :func:`choose` (the search is a pure function of the key).
_CHOICES: dict[tuple[str, tuple[int, ...], HardwareConfig, CompilerOptions, int], TileParams] = {}


#: How many of the best candidates by each closed-form ranking the flow model re-estimates.
SHORTLIST = 16
#: Steps of an output tile :func:`quick_estimate` looks at.
_QUICK_STEPS = 4
#: A tile this much slower than the fastest may still win by moving fewer DRAM bytes.
TRAFFIC_SLACK = 0.02


def quick_estimate(spec: OpSpec, tile: TileParams, hw: HardwareConfig) -> float:
    """A cheap estimate for ranking: the steps of the first output tile, taken as typical.

    Per output tile the pipeline advances by its slowest resource (load engine, store
    engine, DRAM channel, tensor or vector engine); stationary loads come on top once
    per outer iteration, and the first load is not overlapped.
    """
    kind = kind_of(spec)
    # plain ints rather than summed Copy records: this runs for every legal candidate
    unit_engine = unit_channel = store_engine = store_channel = 0
    tensor = vector = n = 0
    stationary = 0
    steps = with_table_loads(kind.steps(spec, tile, hw), hw, spec)
    for st in itertools.islice(steps, _QUICK_STEPS):  # a long reduction: its first steps
        n += 1
        unit_engine += st.loads.engine + st.operands.engine
        unit_channel += st.loads.channel + st.operands.channel
        store_engine += st.store.engine
        store_channel += st.store.channel
        tensor += st.tensor
        vector += st.vector
        if st.stationary is not None:
            stationary = st.stationary.engine
        if st.finish:
            break
    units = kind.step_count(spec, tile) / max(n, 1)
    per_unit = max(unit_engine, store_engine, unit_channel + store_channel, tensor, vector)
    return units * per_unit + kind.outer_count(spec, tile) * stationary + unit_engine


def _search(spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions, budget: int) -> TileParams:
    """The search itself.

    Every legal tile is ranked twice in closed form, by :func:`quick_estimate` (speed)
    and by the kind's traffic floor (DRAM traffic); the best ``SHORTLIST`` of each are
    estimated with the flow model. The fastest wins, except that a tile within
    ``TRAFFIC_SLACK`` of its cycles that moves fewer DRAM bytes is preferred: DRAM
    traffic costs energy and the bandwidth other operators could use.
    """
    ok = legal(spec, hw, opts, budget)
    if not ok:
        reserved = f" ({budget} bytes left below on-chip intermediates)" if budget < hw.max_sram_bytes else ""
        raise NoTileFits(
            f"{spec.name}: no tile of this {kind_of(spec).name} fits "
            f"-max-sram-bytes={hw.max_sram_bytes}{reserved} with -pipeline-stages={opts.pipeline_stages} "
            f"(tile extents {opts.tile_min}..{opts.tile_max})"
        )
    short = _shortlist(spec, hw, ok)
    # fastest-looking first, so the cutoff prunes most of the rest early: a candidate pruned
    # at (1 + slack) x the running best can never be within the slack of the final best
    short.sort(key=lambda tfq: tfq[2])
    estimates: list[tuple[Estimate, int, int]] = []
    fastest = math.inf
    for i, (t, fp, _) in enumerate(short):
        e = _estimate_below(spec, t, hw, fastest * (1 + TRAFFIC_SLACK))
        if e is not None:
            estimates.append((e, fp, i))
            fastest = min(fastest, e.cycles)
    near = [(e.dram_bytes, e.cycles, fp, i) for e, fp, i in estimates if e.cycles <= fastest * (1 + TRAFFIC_SLACK)]
    return short[min(near)[3]][0]


def _shortlist(spec: OpSpec, hw: HardwareConfig,
               ok: list[tuple[TileParams, int]]) -> list[tuple[TileParams, int, float]]:
    """The best of ``ok`` by each closed-form ranking, with their footprints and quick estimates."""
    kind = kind_of(spec)
    quick = [quick_estimate(spec, t, hw) for t, _ in ok]
    by_speed = sorted(range(len(ok)), key=quick.__getitem__)
    by_traffic = sorted(range(len(ok)), key=lambda i: (kind.traffic_floor(spec, ok[i][0], hw), ok[i][1]))
    return [(*ok[i], quick[i]) for i in dict.fromkeys(by_speed[:SHORTLIST] + by_traffic[:SHORTLIST])]


def fits(spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions) -> bool:
    """Whether some legal tile of ``spec`` fits the SRAM budget.

    The footprint grows with every tile extent, so only the smallest value of each
    parameter (every loop order) needs checking.
    """
    kind = kind_of(spec)
    for axes in (kind.axes(spec, hw, opts), kind.fallback_axes(spec, hw, opts)):
        if axes is None or not all(axes.values()):  # an axis with no extent within -tile-min/-tile-max
            continue
        smallest = {k: v[0] for k, v in axes.items()}
        orders = [{"order": o} for o in Order] if "order" in axes else [{}]
        if any(kind.footprint(spec, kind.tile_type(**{**smallest, **o}), hw) <= hw.max_sram_bytes for o in orders):
            return True
    return False
