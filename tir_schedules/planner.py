"""Tile choice: enumerate legal template parameters, estimate each, keep the cheapest.

The analytic cost model, in one place::

    per instruction   the simulator's own formulas (tvm_npu.simulator.timing): a DMA
                      descriptor costs dma_latency + ceil(bursts * B / BW) on its engine,
                      a tensor tile ceil(K/R) * ceil(N/C) * M * P + issue, a vector
                      step ceil(n/L) * c + issue;
    per tile          the descriptors the codegen will emit (same copy planner,
                      tvm_npu.tir_schedules.dma), clamped at tensor edges;
    per operator      a flow-shop over the pipelined loop: a tile's load waits for the
                      buffer version it overwrites (``stages`` versions when pipelined,
                      otherwise one), the tensor engine for the load and for its
                      accumulator, the vector engine for the tensor engine and the
                      output buffer, the store for the vector engine; stationary
                      operands load at the start of their outer iteration. The DRAM
                      channel is shared: total = max(flow, channel busy + first load).

The SRAM footprint is the sum of the aligned buffers the template allocates
(streamed buffers times their number of versions); a test checks it against the
codegen's allocation. ``-tile-min``/``-tile-max`` bound every tile extent.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from tvm_npu.simulator import timing

from tvm_npu.config import ACCUMULATOR, CompilerOptions, DType, HardwareConfig

from .dma import copy_plan, pad3, split_outer
from .ops import (
    Broadcast,
    Conv2dSpec,
    ElementwiseSpec,
    EpiKind,
    MatmulSpec,
    OpSpec,
    PoolSpec,
    TensorRef,
    spec_key,
)
from .params import ConvTile, EltwiseTile, MatmulTile, Order, PoolTile, TileParams

TRANSCENDENTAL = {EpiKind.SIGMOID, EpiKind.TANH, EpiKind.GELU}


class NoTileFits(ValueError):
    """No legal tile of an operator fits the SRAM budget (the operator stays on the host)."""


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _row_major(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return out[::-1]


# ------------------------------------------------------------------ estimates
@dataclass(frozen=True)
class Estimate:
    """Predicted cost of one operator with one tile choice."""

    cycles: float
    tensor_cycles: int
    vector_cycles: int
    load_cycles: int
    store_cycles: int
    channel_cycles: int
    dram_bytes: int  # moved, burst waste included
    wasted_bytes: int
    sram_bytes: int


@dataclass(frozen=True)
class _Copy:
    """Cost of copies: engine cycles (latency included), channel cycles, bytes moved and useful."""

    engine: int = 0
    channel: int = 0
    moved: int = 0
    useful: int = 0

    def __add__(self, other: _Copy) -> _Copy:
        return _Copy(self.engine + other.engine, self.channel + other.channel, self.moved + other.moved,
                     self.useful + other.useful)


@functools.lru_cache(maxsize=1 << 18)
def copy_cost(hw: HardwareConfig, dtype: DType, tensor_shape: Sequence[int], lo: Sequence[int],
              ext: Sequence[int], sram_strides: Sequence[int] | None = None) -> _Copy:
    """Cost of copying the box ``[lo, lo+ext)`` (clamped) of a row-major DRAM tensor."""
    lo2, ext2 = [], []
    for a, e, n in zip(lo, ext, tensor_shape, strict=True):  # clamp to the tensor, as the codegen does
        b, c = max(a, 0), min(a + e, n)
        if c <= b:
            return _Copy()
        lo2.append(b)
        ext2.append(c - b)
    dstr = _row_major(tensor_shape)
    offset = sum(a * s for a, s in zip(lo2, dstr, strict=True))
    # bursts depend on the start address only modulo the burst size: cache on that residue
    residue = offset * dtype.itemsize % hw.dram_burst_bytes
    return _copy_cost(hw, dtype, tuple(tensor_shape), tuple(ext2), tuple(sram_strides or _row_major(ext)), residue)


@functools.lru_cache(maxsize=1 << 16)
def _copy_cost(hw: HardwareConfig, dtype: DType, tensor_shape: tuple[int, ...], ext: tuple[int, ...],
               sram_strides: tuple[int, ...], residue: int) -> _Copy:
    isz = dtype.itemsize
    res = _Copy()
    for (od, _), inner in split_outer(copy_plan(ext, _row_major(tensor_shape), sram_strides)):
        shape, strides = pad3(inner, 0)
        start = (residue + od * isz) % hw.dram_burst_bytes
        bursts = timing.dram_bursts(hw, shape, strides, start // isz, isz)
        xfer = _ceil(bursts * hw.dram_burst_bytes, hw.dram_bytes_per_cycle)
        res = res + _Copy(hw.dma_latency + xfer, xfer, bursts * hw.dram_burst_bytes, math.prod(shape) * isz)
    return res


def window_cost(hw: HardwareConfig, dtype: DType, data: TensorRef, lo_nchw: Sequence[int], ext_nchw: Sequence[int],
                tile_layout: str) -> _Copy:
    """Cost of loading an input window (given in NCHW order) from ``data`` in its own layout
    into an SRAM tile laid out in ``tile_layout`` (the DMA transposes through strides)."""
    src = data.layout
    perm = [ "NCHW".index(a) for a in src]
    ext_tile = [ext_nchw["NCHW".index(a)] for a in tile_layout]
    tile_strides = dict(zip(tile_layout, _row_major(ext_tile), strict=True))
    return copy_cost(hw, dtype, data.shape, tuple(lo_nchw[i] for i in perm), tuple(ext_nchw[i] for i in perm),
                     tuple(tile_strides[a] for a in src))


@dataclass(frozen=True)
class _Step:
    """One iteration of the pipelined loop."""

    loads: _Copy
    tensor: int = 0
    finish: bool = True  # the output tile is complete after this step (epilogue and store follow)
    vector: int = 0
    store: _Copy = _Copy()
    stationary: _Copy | None = None  # loaded before this step, once per outer iteration
    operands: _Copy = _Copy()  # the epilogue's operands (bias, residual), loaded after ``loads``
    slot: int = 0  # iteration of the pipelined loop (restarts with every outer iteration)


class _Pruned(Exception):
    """The estimate already exceeds the search's cutoff."""


#: Passed as ``cutoff`` to an estimator: return its steps (an iterator) instead of an estimate.
_FIRST = -1.0


class _Flow:
    """The flow-shop of the module docstring, fed one step at a time.

    Buffer versions rotate with the pipelined loop's own counter (``_Step.slot``), which
    restarts at every outer iteration, as ``InjectSoftwarePipeline`` indexes them; with a
    streamed reduction the per-output-tile buffers have one version.

    ``floor`` is the tensor-engine work of all steps; once a lower bound of the result
    (an engine's finish time, the tensor engine's plus the work still to come, or the
    channel time so far) passes ``cutoff``, the candidate is abandoned.
    """

    def __init__(self, versions: tuple[int, int, int, int, bool], streamed: bool, floor: int = 0,
                 cutoff: float = math.inf) -> None:
        self.v_in, self.v_acc, self.v_out, self.v_opnd, self.release_at_store = versions
        self.streamed = streamed
        self.remaining, self.cutoff = floor, cutoff
        self.load_free = self.tensor_free = self.vector_free = self.store_free = 0.0
        self.stationary_wait = 0.0
        self.in_free: dict[int, float] = {}  # input version -> when the tensor engine is done with it
        self.acc_free: dict[int, float] = {}
        self.out_free: dict[int, float] = {}
        self.opnd_free: dict[int, float] = {}
        self.unit_slot = 0  # the pipelined-loop slot of the current output tile
        self.first_load: float | None = None
        self.total = _Copy()
        self.tensor = self.vector = self.loads = self.stores = 0

    def add(self, st: _Step) -> None:
        start = self.load_free
        if st.stationary is not None:
            start = max(start, self.stationary_wait) + st.stationary.engine
            self.total = self.total + st.stationary
            self.loads += st.stationary.engine
        v_in = st.slot % self.v_in
        start = max(start, self.in_free.get(v_in, 0.0))
        self.load_free = start + st.loads.engine
        data_ready = self.load_free
        unit = 0 if self.streamed else st.slot  # per-output-tile buffers rotate with the loop too
        operands_ready = 0.0
        if st.operands.engine:
            free = self.opnd_free.get(unit % self.v_opnd, 0.0)
            self.load_free = max(self.load_free, free) + st.operands.engine
            operands_ready = self.load_free
            self.total = self.total + st.operands
            self.loads += st.operands.engine
        if self.first_load is None:
            self.first_load = self.load_free
        acc_free = self.acc_free.get(unit % self.v_acc, 0.0)
        self.tensor_free = max(self.tensor_free, data_ready, acc_free) + st.tensor
        self.in_free[v_in] = self.tensor_free
        self.stationary_wait = self.tensor_free
        self.remaining -= st.tensor
        if max(self.tensor_free + self.remaining, self.load_free) > self.cutoff:
            raise _Pruned
        self.total = self.total + st.loads + st.store
        self.tensor += st.tensor
        self.loads += st.loads.engine
        if not st.finish:
            return
        if not st.tensor:  # vector-only operators: the loaded data is read by the vector engine
            self.in_free[v_in] = 0.0
        out_v = unit % self.v_out
        self.vector_free = max(self.vector_free, self.tensor_free, self.out_free.get(out_v, 0.0),
                               operands_ready) + st.vector
        self.opnd_free[unit % self.v_opnd] = self.vector_free
        if not st.tensor:
            self.in_free[v_in] = self.vector_free
        self.store_free = max(self.store_free, self.vector_free) + st.store.engine
        self.out_free[out_v] = self.store_free
        self.acc_free[unit % self.v_acc] = self.store_free if self.release_at_store else self.vector_free
        self.vector += st.vector
        self.stores += st.store.engine
        if max(self.store_free, self.total.channel) > self.cutoff:  # finish times only grow
            raise _Pruned

    def cycles(self) -> float:
        flow = max(self.store_free, self.vector_free, self.tensor_free, self.load_free)
        return max(flow, self.total.channel + (self.first_load or 0.0))


def _vector(hw: HardwareConfig, spec: OpSpec, n: int) -> int:
    return sum(timing.vector_cycles(hw, n, hw.transcendental_cycles if e.kind in TRANSCENDENTAL else 1)
               for e in spec.epilogue)


def _versions(stages: int, pipelined: bool, streamed_reduction: bool,
              has_epilogue: bool) -> tuple[int, int, int, int, bool]:
    """SRAM versions the template gives (inputs, accumulator, output, epilogue operands),
    and whether the accumulator is only free again once the store has read it."""
    if stages == 1 or not pipelined:
        return 1, 1, 1, 1, True
    if streamed_reduction:  # only the reduction loop is pipelined
        return stages, 1, 1, 1, not has_epilogue  # an epilogue writes a result buffer of its own
    if has_epilogue:  # accumulator worked on in place, result in a separate double buffer
        return stages, 1, 2, stages, False
    return stages, 2, 2, stages, True  # the accumulator is the stored buffer


def _run(hw: HardwareConfig, spec: OpSpec, tile: TileParams, steps: Iterable[_Step], pipelined: bool,
         cutoff: float, streamed_reduction: bool = False) -> Estimate:
    versions = _versions(tile.stages, pipelined, streamed_reduction, bool(spec.epilogue))
    flow = _Flow(versions, streamed_reduction, compute_floor(spec, tile, hw), cutoff)
    for st in steps:
        flow.add(st)
    return Estimate(
        cycles=flow.cycles(),
        tensor_cycles=flow.tensor,
        vector_cycles=flow.vector,
        load_cycles=flow.loads,
        store_cycles=flow.stores,
        channel_cycles=flow.total.channel,
        dram_bytes=flow.total.moved,
        wasted_bytes=flow.total.moved - flow.total.useful,
        sram_bytes=footprint(spec, tile, hw),
    )


def _axis_tiles(total: int, t: int) -> list[tuple[int, int]]:
    """(start, extent) of every tile along an axis (the last one clamped)."""
    return [(i * t, min(t, total - i * t)) for i in range(_ceil(total, t))]


# ------------------------------------------------------------------- conv
def _conv_window(spec: Conv2dSpec, tile: ConvTile) -> tuple[int, int]:
    (kh, kw), (sh, sw), (dh, dw) = spec.kernel, spec.strides, spec.dilation
    return (tile.toh - 1) * sh + (kh - 1) * dh + 1, (tile.tow - 1) * sw + (kw - 1) * dw + 1


def _conv_estimate(spec: Conv2dSpec, tile: ConvTile, hw: HardwareConfig, cutoff: float = math.inf) -> Estimate:
    nchw = spec.layout == "NCHW"
    n, c = spec.data.dim("N"), spec.data.dim("C")
    o, oh, ow = spec.out.dim("C"), spec.out.dim("H"), spec.out.dim("W")
    g = spec.groups
    cg, og = c // g, o // g
    kh, kw = spec.kernel
    (sh, sw), (pt, pl) = spec.strides, spec.padding[:2]
    rows, cols = _conv_window(spec, tile)
    dt = spec.data.dtype
    tic = min(tile.tic, cg)
    rc_tiles = _axis_tiles(cg, tic)
    g_tiles = _axis_tiles(g, tile.tg)
    oc_tiles = _axis_tiles(og, tile.toc)
    y_tiles, x_tiles = _axis_tiles(oh, tile.toh), _axis_tiles(ow, tile.tow)
    n_sp = len(y_tiles) * len(x_tiles)
    oshape = spec.out.shape

    def data_box(b, gt, ct, y, x):
        cl = gt[0] * cg + ct[0]
        ce = (gt[1] - 1) * cg + ct[1] if gt[1] > 1 else ct[1]
        r0, c0 = y[0] * sh - pt, x[0] * sw - pl
        return window_cost(hw, dt, spec.data, (b, cl, r0, c0), (1, ce, rows, cols), spec.layout)

    def weight_box(gt, ot, ct):
        o0 = gt[0] * og + ot[0]
        oe = (gt[1] - 1) * og + ot[1] if gt[1] > 1 else ot[1]
        return copy_cost(hw, dt, spec.weight.shape, (o0, ct[0], 0, 0), (oe, ct[1], kh, kw))

    def out_box(b, gt, ot, y, x, dtype=None):
        o0 = gt[0] * og + ot[0]
        oe = (gt[1] - 1) * og + ot[1] if gt[1] > 1 else ot[1]
        dtype = dtype or spec.out.dtype
        if nchw:
            return copy_cost(hw, dtype, oshape, (b, o0, y[0], x[0]), (1, oe, y[1], x[1]))
        return copy_cost(hw, dtype, oshape, (b, y[0], x[0], o0), (1, y[1], x[1], oe))

    def epi_loads(b, gt, ot, y, x):
        cost = _Copy()
        for e in spec.epilogue:
            if e.operand is None:
                continue
            if e.broadcast == Broadcast.CHANNEL:
                o0 = gt[0] * og + ot[0]
                cost += copy_cost(hw, e.operand.dtype, (e.operand.size,), (o0,), (gt[1] * ot[1],))
            else:
                cost += out_box(b, gt, ot, y, x, e.operand.dtype)
        return cost

    outer_b = tile.order == Order.B_STATIONARY
    pipelined_rc = len(rc_tiles) > 1

    def gen() -> Iterator[_Step]:
        for b in range(n):
            if outer_b:
                pairs = (((gt, ot), (y, x)) for gt in g_tiles for ot in oc_tiles for y in y_tiles for x in x_tiles)
            else:
                pairs = (((gt, ot), (y, x)) for gt in g_tiles for y in y_tiles for x in x_tiles for ot in oc_tiles)
            prev_outer = None
            slot = 0
            for (gt, ot), (y, x) in pairs:
                outer_key = (gt, ot) if outer_b else (gt, y, x)
                new_outer = outer_key != prev_outer
                slot = 0 if new_outer else slot + 1
                prev_outer = outer_key
                m = y[1] * x[1]
                oe = ot[1]
                vec = _vector(hw, spec, gt[1] * oe * m)
                store = out_box(b, gt, ot, y, x)
                for ri, ct in enumerate(rc_tiles):
                    tensor = timing.matmul_cycles(hw, m, oe, ct[1] * kh * kw, dt, gt[1])
                    loads = _Copy()
                    stationary = None
                    if pipelined_rc:
                        loads += data_box(b, gt, ct, y, x)
                        loads += weight_box(gt, ot, ct)
                    elif outer_b:
                        loads += data_box(b, gt, ct, y, x)
                        stationary = weight_box(gt, ot, ct) if new_outer else None
                    else:
                        loads += weight_box(gt, ot, ct)
                        stationary = data_box(b, gt, ct, y, x) if new_outer else None
                    last = ri == len(rc_tiles) - 1
                    yield _Step(loads, tensor, last, vec if last else 0, store if last else _Copy(), stationary,
                                epi_loads(b, gt, ot, y, x) if last else _Copy(), ri if pipelined_rc else slot)

    pipelined = pipelined_rc or (n_sp if outer_b else len(oc_tiles)) > 1
    if cutoff is _FIRST:
        return gen()
    return _run(hw, spec, tile, gen(), pipelined, cutoff, pipelined_rc)


def _conv_footprint(spec: Conv2dSpec, tile: ConvTile, hw: HardwareConfig) -> int:
    g, cg = spec.groups, spec.in_channels // spec.groups
    kh, kw = spec.kernel
    rows, cols = _conv_window(spec, tile)
    tic = min(tile.tic, cg)
    streamed_rc = tic < cg
    outer_b = tile.order == Order.B_STATIONARY
    n_sp = _ceil(spec.out.dim("H"), tile.toh) * _ceil(spec.out.dim("W"), tile.tow)
    n_ch = _ceil(spec.out.dim("C") // g, tile.toc)
    pipelined = streamed_rc or (n_sp if outer_b else n_ch) > 1
    s = tile.stages if pipelined else 1
    isz = spec.data.dtype.itemsize
    asz = ACCUMULATOR[spec.data.dtype].itemsize
    out_tile = tile.tg * tile.toc * tile.toh * tile.tow
    data_v = s if (streamed_rc or outer_b) else 1
    w_v = s if (streamed_rc or not outer_b) else 1
    out_v = 1 if streamed_rc else (2 if s > 1 else 1)
    sizes = [data_v * tile.tg * tic * rows * cols * isz, w_v * tile.tg * tile.toc * tic * kh * kw * isz]
    sizes += _epilogue_sizes(spec, out_tile, tile.tg * tile.toc, asz, 1 if streamed_rc else s, out_v, streamed_rc)
    return sum(hw.align(x) for x in sizes)


def _chain(stages: Sequence[tuple[int, int]]) -> list[int]:
    """Bytes of a chain of elementwise stages, each ``(versions, bytes per version)``.

    A stage shares its predecessor's storage when both have the same shape, as the
    codegen's allocator does (the step runs in place).
    """
    sizes, prev = [], None
    for st in stages:
        if st != prev:
            sizes.append(st[0] * st[1])
        prev = st
    return sizes


def _epilogue_sizes(spec: OpSpec, out_elems: int, channels: int, asz: int, operand_v: int, out_v: int,
                    own_output: bool = False) -> list[int]:
    """Accumulator, epilogue stages, final output buffer and epilogue operands.

    ``own_output``: the template gives the result a buffer of its own even when it has
    the accumulator's shape (streamed reductions).
    """
    n_epi = len(spec.epilogue)
    if n_epi:
        chain = [(1, out_elems * asz)] * n_epi
        sizes = _chain(chain)
        final = (out_v, out_elems * spec.out.dtype.itemsize)
        if own_output or final != chain[-1]:
            sizes.append(final[0] * final[1])
    else:
        sizes = [out_v * out_elems * asz]
    for e in spec.epilogue:
        if e.operand is not None:
            n = channels if e.broadcast == Broadcast.CHANNEL else out_elems
            sizes.append(operand_v * n * e.operand.dtype.itemsize)
    return sizes


# ----------------------------------------------------------------- matmul
def _matmul_estimate(spec: MatmulSpec, tile: MatmulTile, hw: HardwareConfig, cutoff: float = math.inf) -> Estimate:
    m, n, k = spec.mnk
    dt = spec.a.dtype
    tk = min(tile.tk, k)
    k_tiles = _axis_tiles(k, tk)
    m_tiles, n_tiles = _axis_tiles(m, tile.tm), _axis_tiles(n, tile.tn)
    order = _matmul_order(spec, tile)
    nb = spec.batch
    a_batch = len(spec.a.shape) > 2
    b_batch = len(spec.b.shape) > 2

    def a_box(bi, mt, kt):
        lo, ext = (mt[0], kt[0]), (mt[1], kt[1])
        if a_batch:
            return copy_cost(hw, dt, spec.a.shape, (bi, *lo), (1, *ext))
        return copy_cost(hw, dt, spec.a.shape, lo, ext)

    def b_box(bi, nt, kt):
        lo, ext = ((nt[0], kt[0]), (nt[1], kt[1])) if spec.transpose_b else ((kt[0], nt[0]), (kt[1], nt[1]))
        if b_batch:
            return copy_cost(hw, dt, spec.b.shape, (bi, *lo), (1, *ext))
        return copy_cost(hw, dt, spec.b.shape, lo, ext)

    def out_box(bi, mt, nt, dtype=None):
        dtype = dtype or spec.out.dtype
        if len(spec.out.shape) > 2:
            return copy_cost(hw, dtype, spec.out.shape, (bi, mt[0], nt[0]), (1, mt[1], nt[1]))
        return copy_cost(hw, dtype, spec.out.shape, (mt[0], nt[0]), (mt[1], nt[1]))

    streamed_k = len(k_tiles) > 1

    def gen() -> Iterator[_Step]:
        for bi in range(nb):
            pairs = ([(mt, nt) for mt in m_tiles for nt in n_tiles] if order == Order.A_STATIONARY
                     else [(mt, nt) for nt in n_tiles for mt in m_tiles])
            prev = None
            slot = 0
            for mt, nt in pairs:
                key = mt if order == Order.A_STATIONARY else nt
                new_outer = key != prev
                slot = 0 if new_outer else slot + 1
                prev = key
                vec = _vector(hw, spec, mt[1] * nt[1])
                store = out_box(bi, mt, nt)
                for ki, kt in enumerate(k_tiles):
                    loads = _Copy()
                    stationary = None
                    if streamed_k:
                        loads += a_box(bi, mt, kt)
                        loads += b_box(bi, nt, kt)
                    elif order == Order.A_STATIONARY:
                        loads += b_box(bi, nt, kt)
                        stationary = a_box(bi, mt, kt) if new_outer else None
                    else:
                        loads += a_box(bi, mt, kt)
                        stationary = b_box(bi, nt, kt) if new_outer else None
                    last = ki == len(k_tiles) - 1
                    operands = _Copy()
                    for e in spec.epilogue if last else ():
                        if e.operand is None:
                            continue
                        if e.broadcast == Broadcast.CHANNEL:
                            operands += copy_cost(hw, e.operand.dtype, (e.operand.size,), (nt[0],), (nt[1],))
                        else:
                            operands += out_box(bi, mt, nt, e.operand.dtype)
                    tensor = timing.matmul_cycles(hw, mt[1], nt[1], kt[1], dt)
                    yield _Step(loads, tensor, last, vec if last else 0, store if last else _Copy(),
                                stationary, operands, ki if streamed_k else slot)

    inner = len(n_tiles) if order == Order.A_STATIONARY else len(m_tiles)
    if cutoff is _FIRST:
        return gen()
    return _run(hw, spec, tile, gen(), streamed_k or inner > 1, cutoff, streamed_k)


def _matmul_order(spec: MatmulSpec, tile: MatmulTile) -> Order:
    """The template swaps the order when the designated inner loop has a single iteration."""
    m, n, _ = spec.mnk
    n_m, n_n = _ceil(m, tile.tm), _ceil(n, tile.tn)
    if tile.order == Order.A_STATIONARY and n_n == 1 < n_m:
        return Order.B_STATIONARY
    if tile.order == Order.B_STATIONARY and n_m == 1 < n_n:
        return Order.A_STATIONARY
    return tile.order


def _matmul_footprint(spec: MatmulSpec, tile: MatmulTile, hw: HardwareConfig) -> int:
    m, n, k = spec.mnk
    tk = min(tile.tk, k)
    streamed_k = tk < k
    order = _matmul_order(spec, tile)
    inner = _ceil(n, tile.tn) if order == Order.A_STATIONARY else _ceil(m, tile.tm)
    pipelined = streamed_k or inner > 1
    s = tile.stages if pipelined else 1
    isz, asz = spec.a.dtype.itemsize, ACCUMULATOR[spec.a.dtype].itemsize
    a_v = s if (streamed_k or order == Order.B_STATIONARY) else 1
    b_v = s if (streamed_k or order == Order.A_STATIONARY) else 1
    out_v = 1 if streamed_k else (2 if s > 1 else 1)
    sizes = [a_v * tile.tm * tk * isz, b_v * tk * tile.tn * isz]
    sizes += _epilogue_sizes(spec, tile.tm * tile.tn, tile.tn, asz, 1 if streamed_k else s, out_v, streamed_k)
    return sum(hw.align(x) for x in sizes)


# ------------------------------------------------------------------- pool
def _pool_window(spec: PoolSpec, tile: PoolTile) -> tuple[int, int]:
    (kh, kw), (sh, sw) = spec.kernel, spec.strides
    return (tile.toh - 1) * sh + kh, (tile.tow - 1) * sw + kw


def _pool_estimate(spec: PoolSpec, tile: PoolTile, hw: HardwareConfig, cutoff: float = math.inf) -> Estimate:
    nchw = spec.layout == "NCHW"
    n, c, _, _ = (spec.data.dim(a) for a in "NCHW")
    oh, ow = spec.out.dim("H"), spec.out.dim("W")
    (kh, kw), (sh, sw), (pt, pl) = spec.kernel, spec.strides, spec.padding[:2]
    rows, cols = _pool_window(spec, tile)
    dt = spec.data.dtype
    steps = []
    n_sp = _ceil(oh, tile.toh) * _ceil(ow, tile.tow)
    spatial = [(y, x) for y in _axis_tiles(oh, tile.toh) for x in _axis_tiles(ow, tile.tow)]
    for b in range(n):
        for ci, ct in enumerate(_axis_tiles(c, tile.tc)):
            for si, (y, x) in enumerate(spatial):
                r0, c0 = y[0] * sh - pt, x[0] * sw - pl
                load = window_cost(hw, dt, spec.data, (b, ct[0], r0, c0), (1, ct[1], rows, cols), spec.layout)
                if nchw:
                    store = copy_cost(hw, dt, spec.out.shape, (b, ct[0], y[0], x[0]), (1, ct[1], y[1], x[1]))
                else:
                    store = copy_cost(hw, dt, spec.out.shape, (b, y[0], x[0], ct[0]), (1, y[1], x[1], ct[1]))
                nout = ct[1] * y[1] * x[1]
                vec = timing.vector_cycles(hw, nout, kh * kw) + _vector(hw, spec, nout)
                # the template pipelines the spatial loop, or the channel loop when there is one spatial tile
                steps.append(_Step(_Copy(), 0, True, vec, store, None, load, si if n_sp > 1 else ci))
    if cutoff is _FIRST:
        return iter(steps)
    return _run(hw, spec, tile, steps, len(steps) > 1, cutoff)


def _pool_footprint(spec: PoolSpec, tile: PoolTile, hw: HardwareConfig) -> int:
    rows, cols = _pool_window(spec, tile)
    n_tiles = (_ceil(spec.data.dim("C"), tile.tc) * _ceil(spec.out.dim("H"), tile.toh)
               * _ceil(spec.out.dim("W"), tile.tow))
    s = tile.stages if n_tiles > 1 else 1
    isz = spec.data.dtype.itemsize
    out_tile = tile.tc * tile.toh * tile.tow
    sizes = [s * tile.tc * rows * cols * isz]
    sizes += _epilogue_sizes(spec, out_tile, tile.tc, isz, s, 2 if s > 1 else 1)
    return sum(hw.align(x) for x in sizes)


# ------------------------------------------------------------ elementwise
def _eltwise_estimate(spec: ElementwiseSpec, tile: EltwiseTile, hw: HardwareConfig,
                      cutoff: float = math.inf) -> Estimate:
    shape = spec.out.shape
    chan = spec.out.layout.index("C") if "C" in spec.out.layout else len(shape) - 1

    def gen() -> Iterator[_Step]:  # lazily: quick_estimate looks at the first few tiles only
        for slot, box in enumerate(itertools.product(*(_axis_tiles(n, t) for n, t in zip(shape, tile.tiles,
                                                                                             strict=True)))):
            lo = tuple(a for a, _ in box)
            ext = tuple(e for _, e in box)
            loads = copy_cost(hw, spec.data.dtype, shape, lo, ext)
            for e in spec.epilogue:
                if e.operand is None:
                    continue
                if e.broadcast == Broadcast.CHANNEL:
                    loads += copy_cost(hw, e.operand.dtype, (e.operand.size,), (lo[chan],), (ext[chan],))
                else:
                    loads += copy_cost(hw, e.operand.dtype, shape, lo, ext)
            store = copy_cost(hw, spec.out.dtype, shape, lo, ext)
            # everything is consumed by the vector engine: model the loads as epilogue operands
            yield _Step(_Copy(), 0, True, _vector(hw, spec, math.prod(ext)), store, None, loads, slot)

    if cutoff is _FIRST:
        return gen()
    n_tiles = math.prod(_ceil(n, t) for n, t in zip(shape, tile.tiles, strict=True))
    return _run(hw, spec, tile, gen(), n_tiles > 1, cutoff)


def _eltwise_footprint(spec: ElementwiseSpec, tile: EltwiseTile, hw: HardwareConfig) -> int:
    n_tiles = math.prod(_ceil(a, t) for a, t in zip(spec.out.shape, tile.tiles, strict=True))
    s = tile.stages if n_tiles > 1 else 1
    chan = spec.out.layout.index("C") if "C" in spec.out.layout else len(spec.out.shape) - 1
    elems = math.prod(tile.tiles)
    isz = spec.data.dtype.itemsize
    n_epi = len(spec.epilogue)
    # the loaded data is worked on in place only when not pipelined (see the template)
    sizes = [s * elems * isz] if s > 1 else []
    sizes += _chain([(1, elems * isz)] * (n_epi - 1 if s > 1 else n_epi)
                    + [(2 if s > 1 else 1, elems * spec.out.dtype.itemsize)])
    for e in spec.epilogue:
        if e.operand is not None:
            n = tile.tiles[chan] if e.broadcast == Broadcast.CHANNEL else elems
            sizes.append(s * n * e.operand.dtype.itemsize)
    return sum(hw.align(x) for x in sizes)


# ------------------------------------------------------------- dispatch
_ESTIMATE = {Conv2dSpec: _conv_estimate, MatmulSpec: _matmul_estimate, PoolSpec: _pool_estimate,
             ElementwiseSpec: _eltwise_estimate}
_FOOTPRINT = {Conv2dSpec: _conv_footprint, MatmulSpec: _matmul_footprint, PoolSpec: _pool_footprint,
              ElementwiseSpec: _eltwise_footprint}


def estimate(spec: OpSpec, tile: TileParams, hw: HardwareConfig) -> Estimate:
    """Predicted cycles, DRAM traffic and SRAM use of ``spec`` scheduled with ``tile``."""
    return _ESTIMATE[type(spec)](spec, tile, hw)


def _estimate_below(spec: OpSpec, tile: TileParams, hw: HardwareConfig, cutoff: float) -> Estimate | None:
    """Like :func:`estimate`, or None as soon as the result is sure to exceed ``cutoff``."""
    try:
        return _ESTIMATE[type(spec)](spec, tile, hw, cutoff)
    except _Pruned:
        return None


def footprint(spec: OpSpec, tile: TileParams, hw: HardwareConfig) -> int:
    """SRAM bytes the template allocates for ``tile`` (aligned, versions included)."""
    return _FOOTPRINT[type(spec)](spec, tile, hw)


def _sizes(total: int, quantum: int, opts: CompilerOptions, limit: int = 12) -> list[int]:
    """Tile extents worth trying along one axis (smallest first).

    The whole axis, even splits of it and powers of two times ``quantum``; on axes
    mapped to the array (``quantum > 1``) only multiples of ``quantum`` (rounding
    the even splits up), since other extents leave array rows or columns idle.
    All within ``-tile-min``/``-tile-max`` (an axis shorter than ``-tile-min`` is whole).
    """
    cands = {total}
    for parts in range(2, limit + 1):
        cands.add(_ceil(_ceil(total, parts), quantum) * quantum)
    q = quantum
    while q < total:
        cands.add(q)
        q *= 2
    lo, hi = opts.tile_min, opts.tile_max
    return sorted(x for x in cands if x <= total and (lo <= x <= hi or x == total < lo))


def _axes(spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions) -> tuple[type, dict[str, list]]:
    """The tile class and, per parameter, the values the search tries (smallest first)."""
    s = [opts.pipeline_stages]
    orders = list(Order)
    if isinstance(spec, Conv2dSpec):
        g = spec.groups
        og, cg = spec.out.dim("C") // g, spec.in_channels // g
        oh, ow = spec.out.dim("H"), spec.out.dim("W")
        if g > 1:
            tg = _sizes(g, 1, opts) if og == 1 else [1]  # several groups per tile only when depthwise
            toc = [og] if og == 1 else [t for t in _sizes(og, hw.mac_cols, opts) if og % t == 0]
            tic = [cg]
        else:
            tg, toc, tic = [1], _sizes(og, hw.mac_cols, opts), _sizes(cg, hw.mac_rows, opts, limit=4)
        return ConvTile, {"toc": toc, "toh": _sizes(oh, 1, opts, limit=16), "tow": _sizes(ow, 1, opts, limit=4),
                          "tic": tic, "order": orders, "stages": s, "tg": tg}
    if isinstance(spec, MatmulSpec):
        m, n, k = spec.mnk
        return MatmulTile, {"tm": _sizes(m, hw.mac_rows, opts), "tn": _sizes(n, hw.mac_cols, opts),
                            "tk": _sizes(k, hw.mac_rows, opts, limit=4), "order": orders, "stages": s}
    if isinstance(spec, PoolSpec):
        c, oh, ow = spec.data.dim("C"), spec.out.dim("H"), spec.out.dim("W")
        return PoolTile, {"tc": _sizes(c, hw.vector_lanes, opts), "toh": _sizes(oh, 1, opts, limit=16),
                          "tow": _sizes(ow, 1, opts, limit=4), "stages": s}
    if isinstance(spec, ElementwiseSpec):
        shape = spec.out.shape
        # tile the outermost non-unit axis (keeping inner rows whole: long DRAM runs), or also the next one
        axis = next((i for i, d in enumerate(shape) if d > 1), 0)
        tiles = []
        if axis + 1 < len(shape):
            for t2 in _sizes(shape[axis + 1], 1, opts, limit=16):
                tiles.append(tuple(1 if i <= axis else t2 if i == axis + 1 else d for i, d in enumerate(shape)))
        for t in _sizes(shape[axis], 1, opts, limit=64):
            tiles.append(tuple(1 if i < axis else t if i == axis else d for i, d in enumerate(shape)))
        return EltwiseTile, {"tiles": tiles, "stages": s}
    raise TypeError(f"no tile search for {type(spec).__name__}")


def candidates(spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions) -> list[TileParams]:
    """Every tile the search considers (before the SRAM check)."""
    cls, axes = _axes(spec, hw, opts)
    out = [cls(**dict(zip(axes, values, strict=True))) for values in itertools.product(*axes.values())]
    if cls is ConvTile:  # a multi-group tile holds whole groups
        out = [t for t in out if t.tg == 1 or t.toc == spec.out.dim("C") // spec.groups]
    return out


def legal(spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions) -> list[tuple[TileParams, int]]:
    """Candidates whose footprint fits ``-max-sram-bytes``, with their footprints.

    Tiles spanning whole rows (``tow`` = output width) come first: they give the longest
    DRAM runs and no column halo. Narrower tiles are only considered when no
    whole-row tile fits.
    """
    budget = hw.max_sram_bytes
    fitting = [(t, fp) for t in candidates(spec, hw, opts) if (fp := footprint(spec, t, hw)) <= budget]
    if isinstance(spec, Conv2dSpec | PoolSpec):
        whole = [(t, fp) for t, fp in fitting if t.tow == spec.out.dim("W")]
        return whole or fitting
    return fitting


def _sum_ceil(total: int, tile: int, q: int, mult: int = 1) -> int:
    """``sum(ceil(extent * mult / q))`` over the tiles of an axis, in O(1)."""
    full, rest = divmod(total, tile)
    return full * _ceil(tile * mult, q) + (_ceil(rest * mult, q) if rest else 0)


def compute_floor(spec: OpSpec, tile: TileParams, hw: HardwareConfig) -> int:
    """Tensor-engine cycles of all tiles back to back: a lower bound of :func:`estimate`.

    Closed form (the sums over tiles separate by axis), so every candidate can be ranked.
    """
    if isinstance(spec, Conv2dSpec):
        g = spec.groups
        kh, kw = spec.kernel
        og, cg = spec.out.dim("C") // g, spec.in_channels // g
        tic = min(tile.tic, cg)
        oh, ow = spec.out.dim("H"), spec.out.dim("W")
        n_steps = _ceil(g, tile.tg) * _ceil(og, tile.toc) * _ceil(cg, tic) * _ceil(oh, tile.toh) * _ceil(ow, tile.tow)
        passes = g * _sum_ceil(og, tile.toc, hw.mac_cols) * _sum_ceil(cg, tic, hw.mac_rows, kh * kw)
        work = passes * oh * ow * hw.mac_pass_cycles(spec.data.dtype)
        return spec.data.dim("N") * (n_steps * hw.tensor_issue_cycles + work)
    if isinstance(spec, MatmulSpec):
        m, n, k = spec.mnk
        tk = min(tile.tk, k)
        n_steps = _ceil(m, tile.tm) * _ceil(n, tile.tn) * _ceil(k, tk)
        work = _sum_ceil(k, tk, hw.mac_rows) * _sum_ceil(n, tile.tn, hw.mac_cols) * m * hw.mac_pass_cycles(spec.a.dtype)
        return spec.batch * (n_steps * hw.tensor_issue_cycles + work)
    return 0


def _window_sum(out: int, tile: int, stride: int, kernel: int, dilation: int, size: int, pad: int) -> int:
    """Input rows (or columns) the tiles of one spatial axis load, clamped to the tensor."""
    total = 0
    span = (kernel - 1) * dilation + 1
    for y0 in range(0, out, tile):
        n = min(tile, out - y0)
        lo = y0 * stride - pad
        hi = lo + (n - 1) * stride + span
        total += max(0, min(hi, size) - max(lo, 0))
    return total


def traffic_floor(spec: OpSpec, tile: TileParams, hw: HardwareConfig) -> float:
    """DRAM channel cycles for the useful bytes this tile choice must move (re-loads included)."""
    bw = hw.dram_bytes_per_cycle
    extra = sum(e.operand.nbytes for e in spec.epilogue if e.operand is not None and e.broadcast == Broadcast.FULL)
    if isinstance(spec, Conv2dSpec):
        g = spec.groups
        kh, kw = spec.kernel
        oh, ow = spec.out.dim("H"), spec.out.dim("W")
        h, w = spec.data.dim("H"), spec.data.dim("W")
        og, cg = spec.out.dim("C") // g, spec.in_channels // g
        rows = _window_sum(oh, tile.toh, spec.strides[0], kh, spec.dilation[0], h, spec.padding[0])
        cols = _window_sum(ow, tile.tow, spec.strides[1], kw, spec.dilation[1], w, spec.padding[1])
        data = spec.data.dim("N") * spec.in_channels * rows * cols * spec.data.dtype.itemsize
        n_oc, n_sp = _ceil(og, tile.toc), _ceil(oh, tile.toh) * _ceil(ow, tile.tow)
        streamed = min(tile.tic, cg) < cg
        b_stat = tile.order == Order.B_STATIONARY
        data_loads = n_oc if (b_stat or streamed) else 1
        weight_loads = spec.data.dim("N") * (n_sp if (streamed or not b_stat) else 1)
        total = data * data_loads + spec.weight.nbytes * weight_loads + spec.out.nbytes + extra
        return total / bw
    if isinstance(spec, MatmulSpec):
        m, n, k = spec.mnk
        n_m, n_n = _ceil(m, tile.tm), _ceil(n, tile.tn)
        streamed = min(tile.tk, k) < k
        order = _matmul_order(spec, tile)
        a_loads = n_n if (streamed or order == Order.B_STATIONARY) else 1
        b_loads = n_m if (streamed or order == Order.A_STATIONARY) else 1
        return (spec.a.nbytes * a_loads + spec.b.nbytes * b_loads + spec.out.nbytes + extra) / bw
    if isinstance(spec, PoolSpec):
        kh, kw = spec.kernel
        rows = _window_sum(spec.out.dim("H"), tile.toh, spec.strides[0], kh, 1, spec.data.dim("H"), spec.padding[0])
        cols = _window_sum(spec.out.dim("W"), tile.tow, spec.strides[1], kw, 1, spec.data.dim("W"), spec.padding[1])
        data = spec.data.dim("N") * spec.data.dim("C") * rows * cols * spec.data.dtype.itemsize
        return (data + spec.out.nbytes + extra) / bw
    return (spec.data.nbytes + spec.out.nbytes + extra) / bw


def floor(spec: OpSpec, tile: TileParams, hw: HardwareConfig) -> float:
    """A lower bound of :func:`estimate`: the first load, then all tensor-engine work back
    to back; or the channel time of the bytes the tiles must move, whichever is larger."""
    first = next(_ESTIMATE[type(spec)](spec, tile, hw, _FIRST))
    fill = first.loads.engine + first.operands.engine + (first.stationary.engine if first.stationary else 0)
    return max(fill + compute_floor(spec, tile, hw), traffic_floor(spec, tile, hw))


def choose(spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions) -> TileParams:
    """The cheapest legal tile by the cost model; raises :class:`NoTileFits` if none fits.

    Identical operators (same :func:`~.ops.spec_key`, e.g. repeated ResNet blocks) are
    searched once per process.
    """
    key = (spec_key(spec), hw, opts)
    if key not in _CHOICES:
        _CHOICES[key] = _search(spec, hw, opts)
    return _CHOICES[key]


#: Memo of :func:`choose` (the search is a pure function of the key).
_CHOICES: dict[tuple[str, HardwareConfig, CompilerOptions], TileParams] = {}


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
    steps = _ESTIMATE[type(spec)](spec, tile, hw, _FIRST)
    unit = _Copy()
    store = _Copy()
    tensor = vector = n = 0
    stationary = 0
    for st in itertools.islice(steps, _QUICK_STEPS):  # a long reduction: its first steps stand for all
        n += 1
        unit = unit + st.loads + st.operands
        store = store + st.store
        tensor += st.tensor
        vector += st.vector
        if st.stationary is not None:
            stationary = st.stationary.engine
        if st.finish:
            break
    units = _step_count(spec, tile) / max(n, 1)
    per_unit = max(unit.engine, store.engine, unit.channel + store.channel, tensor, vector)
    outer = _outer_count(spec, tile)
    return units * per_unit + outer * stationary + unit.engine


def _outer_count(spec: OpSpec, tile: TileParams) -> int:
    """Iterations of the loop outside the pipelined one (stationary operands reload per iteration)."""
    if isinstance(spec, Conv2dSpec):
        if tile.order == Order.B_STATIONARY:
            return _ceil(spec.groups, tile.tg) * _ceil(spec.out.dim("C") // spec.groups, tile.toc)
        return _ceil(spec.groups, tile.tg) * _ceil(spec.out.dim("H"), tile.toh) * _ceil(spec.out.dim("W"), tile.tow)
    if isinstance(spec, MatmulSpec):
        m, n, _ = spec.mnk
        return _ceil(m, tile.tm) if _matmul_order(spec, tile) == Order.A_STATIONARY else _ceil(n, tile.tn)
    return 1


def _step_count(spec: OpSpec, tile: TileParams) -> int:
    if isinstance(spec, Conv2dSpec):
        g = spec.groups
        return (spec.data.dim("N") * _ceil(g, tile.tg) * _ceil(spec.out.dim("C") // g, tile.toc)
                * _ceil(spec.in_channels // g, min(tile.tic, spec.in_channels // g))
                * _ceil(spec.out.dim("H"), tile.toh) * _ceil(spec.out.dim("W"), tile.tow))
    if isinstance(spec, MatmulSpec):
        m, n, k = spec.mnk
        return spec.batch * _ceil(m, tile.tm) * _ceil(n, tile.tn) * _ceil(k, min(tile.tk, k))
    if isinstance(spec, PoolSpec):
        return (spec.data.dim("N") * _ceil(spec.data.dim("C"), tile.tc) * _ceil(spec.out.dim("H"), tile.toh)
                * _ceil(spec.out.dim("W"), tile.tow))
    return math.prod(_ceil(a, t) for a, t in zip(spec.out.shape, tile.tiles, strict=True))


def _search(spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions) -> TileParams:
    """The search itself.

    Every legal tile is ranked twice in closed form, by :func:`quick_estimate` (speed)
    and by :func:`traffic_floor` (DRAM traffic); the best ``SHORTLIST`` of each are
    estimated with the flow model. The fastest wins, except that a tile within
    ``TRAFFIC_SLACK`` of its cycles that moves fewer DRAM bytes is preferred: DRAM
    traffic costs energy and the bandwidth other operators could use.
    """
    ok = legal(spec, hw, opts)
    if not ok:
        raise NoTileFits(
            f"{spec.name}: no tile of this {type(spec).__name__.removesuffix('Spec').lower()} fits "
            f"-max-sram-bytes={hw.max_sram_bytes} with -pipeline-stages={opts.pipeline_stages} "
            f"(tile extents {opts.tile_min}..{opts.tile_max})"
        )
    short = _shortlist(spec, hw, ok)
    # fastest-looking first, so the cutoff prunes most of the rest early: a candidate pruned
    # at (1 + slack) x the running best can never be within the slack of the final best
    short.sort(key=lambda tf: quick_estimate(spec, tf[0], hw))
    estimates: list[tuple[Estimate, int, int]] = []
    fastest = math.inf
    for i, (t, fp) in enumerate(short):
        e = _estimate_below(spec, t, hw, fastest * (1 + TRAFFIC_SLACK))
        if e is not None:
            estimates.append((e, fp, i))
            fastest = min(fastest, e.cycles)
    near = [(e.dram_bytes, e.cycles, fp, i) for e, fp, i in estimates if e.cycles <= fastest * (1 + TRAFFIC_SLACK)]
    return short[min(near)[3]][0]


def _shortlist(spec: OpSpec, hw: HardwareConfig, ok: list[tuple[TileParams, int]]) -> list[tuple[TileParams, int]]:
    by_speed = sorted(range(len(ok)), key=lambda i: quick_estimate(spec, ok[i][0], hw))
    by_traffic = sorted(range(len(ok)), key=lambda i: (traffic_floor(spec, ok[i][0], hw), ok[i][1]))
    return [ok[i] for i in dict.fromkeys(by_speed[:SHORTLIST] + by_traffic[:SHORTLIST])]


def shortlist(spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions) -> list[TileParams]:
    """The tiles the search estimates with the flow model (the tuner measures these first)."""
    return [t for t, _ in _shortlist(spec, hw, legal(spec, hw, opts))]


def fits(spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions) -> bool:
    """Whether some legal tile of ``spec`` fits the SRAM budget.

    The footprint grows with every tile extent, so only the smallest value of each
    parameter (both loop orders) needs checking.
    """
    cls, axes = _axes(spec, hw, opts)
    smallest = {k: v[0] for k, v in axes.items()}
    tiles = [cls(**{**smallest, "order": o}) for o in Order] if "order" in axes else [cls(**smallest)]
    return any(footprint(spec, t, hw) <= hw.max_sram_bytes for t in tiles)

