"""The analytic cost model's shared machinery: copy costs, pipeline steps and the flow-shop.

The model, in one place::

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

Each operator kind (``conv2d.py``, ``matmul.py``, ...) describes its own loop nest as a
sequence of :class:`Step`; this module turns steps into an :class:`Estimate`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from tvm_npu.simulator import timing
from tvm_npu.simulator.builder import row_major

from tvm_npu.config import CompilerOptions, DType, HardwareConfig
from tvm_npu.core.epilogue import result_dtype, step_cycles
from tvm_npu.core.ops import Broadcast, OpSpec, TensorRef

from .dma import copy_plan, pad3, split_outer


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


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


class Copy(NamedTuple):
    """Cost of copies: DMA engine cycles (latency included), channel cycles, bytes moved and useful,
    and vector-engine cycles (copies within SRAM, of a layer group's intermediates).

    A named tuple rather than a dataclass: the search builds millions of them, and a tuple is
    several times cheaper to create (immutable all the same)."""

    engine: int = 0
    channel: int = 0
    moved: int = 0
    useful: int = 0
    vector: int = 0

    def __add__(self, other: Copy) -> Copy:  # type: ignore[override]  # field-wise, not concatenation
        return Copy(self[0] + other[0], self[1] + other[1], self[2] + other[2], self[3] + other[3],
                    self[4] + other[4])


def copy_cost(hw: HardwareConfig, dtype: DType, tensor_shape: Sequence[int], lo: Sequence[int],
              ext: Sequence[int], sram_strides: Sequence[int] | None = None, on_chip: bool = False) -> Copy:
    """Cost of copying the box ``[lo, lo+ext)`` (clamped) of a row-major DRAM tensor, or of an on-chip
    one (a layer group's intermediate: vector-engine copies, no DRAM traffic)."""
    return boxes(hw, dtype, tuple(tensor_shape), on_chip).cost(
        tuple(lo), tuple(ext), None if sram_strides is None else tuple(sram_strides))


#: Memo entries all shared :class:`Boxes` and :class:`Windows` hold before they start over (bounds memory).
_MEMO_LIMIT = 1 << 19
_memo_entries = 0


def _remember(memo: dict[tuple, Copy], key: tuple, value: Copy) -> Copy:
    global _memo_entries
    _memo_entries += 1
    memo[key] = value
    return value


class Boxes:
    """Copy costs of boxes of one tensor (see :func:`copy_cost`); boxes given as tuples.

    The tensor's strides are computed once, and costs are memoised twice: by the box
    itself (the search prices the same boxes for many candidate tiles: most lookups), and
    by what a cost depends on, the extents before and after clamping, the SRAM strides and
    the start address modulo the burst size (most boxes are translates of a few). Hashing
    the hardware record and the box for every lookup (an ``lru_cache``) dominated the search.
    """

    __slots__ = ("burst", "dtype", "exact", "hw", "itemsize", "memo", "on_chip", "shape", "strides")

    def __init__(self, hw: HardwareConfig, dtype: DType, shape: tuple[int, ...], on_chip: bool,
                 strides: tuple[int, ...] | None = None) -> None:
        self.hw, self.dtype, self.shape, self.on_chip = hw, dtype, shape, on_chip
        self.itemsize, self.burst = dtype.itemsize, hw.dram_burst_bytes
        self.strides = strides or row_major(shape)  # element strides in DRAM (a strided view's, see storage)
        self.exact: dict[tuple, Copy] = {}
        self.memo: dict[tuple, Copy] = {}

    def cost(self, lo: tuple[int, ...], ext: tuple[int, ...], sram_strides: tuple[int, ...] | None = None) -> Copy:
        key = (lo, ext, sram_strides)
        hit = self.exact.get(key)
        if hit is None:
            hit = _remember(self.exact, key, self._cost(lo, ext, sram_strides))
        return hit

    def _cost(self, lo: tuple[int, ...], ext: tuple[int, ...], sram_strides: tuple[int, ...] | None) -> Copy:
        ext2 = []
        offset = 0
        for a, e, n, s in zip(lo, ext, self.shape, self.strides, strict=True):  # clamp, as the codegen does
            c = a + e
            if c > n:
                c = n
            if a < 0:
                a = 0
            if c <= a:
                return NO_COPY
            ext2.append(c - a)
            offset += a * s
        # bursts depend on the start address only modulo the burst size
        residue = 0 if self.on_chip else offset * self.itemsize % self.burst
        key = (ext, tuple(ext2), sram_strides, residue)
        hit = self.memo.get(key)
        if hit is None:
            strides = tuple(sram_strides or row_major(ext))
            if self.on_chip:
                hit = _on_chip_cost(self.hw, self.strides, key[1], strides)
            else:
                hit = _copy_cost(self.hw, self.dtype, self.strides, key[1], strides, residue)
            _remember(self.memo, key, hit)
        return hit


#: No copy (one shared record: the cost model builds steps by the million).
NO_COPY = Copy()
#: :func:`boxes` and :func:`windows` by the hardware record's identity (an entry keeps the record alive,
#: so its id is not reused): hashing the record's fields on every lookup cost more than the lookup.
_SHARED: dict[tuple, tuple[HardwareConfig, Boxes | Windows]] = {}


def _shared(hw: HardwareConfig, key: tuple, make: Callable[[], Boxes | Windows]) -> Boxes | Windows:
    global _memo_entries
    if _memo_entries > _MEMO_LIMIT:  # start over with empty memos (a caller may still hold an old one)
        _SHARED.clear()
        _memo_entries = 0
    hit = _SHARED.get(key)
    if hit is None or hit[0] is not hw:
        hit = _SHARED[key] = (hw, make())
    return hit[1]


def boxes(hw: HardwareConfig, dtype: DType, shape: tuple[int, ...], on_chip: bool = False,
          strides: tuple[int, ...] | None = None) -> Boxes:
    """The (shared, memoising) :class:`Boxes` of a tensor (``strides``: its DRAM element strides, default
    row-major)."""
    return _shared(hw, ("b", id(hw), dtype, shape, on_chip, strides),
                   lambda: Boxes(hw, dtype, shape, on_chip, strides))


def storage(data: TensorRef) -> tuple[int, ...] | None:
    """The DRAM element strides of a tensor read through a strided view of its own storage (a strided
    operator's row-skipping input, ``strided.py``); None (row-major) for any other tensor. Other views are
    priced as row-major tensors of their shape, as before."""
    view = data.view
    if view is None or view.base != data.name or any(len(d) != 1 for d in view.dims):
        return None
    return tuple(d[0][1] for d in view.dims)


@functools.lru_cache(maxsize=1 << 16)
def _copy_cost(hw: HardwareConfig, dtype: DType, tensor_strides: tuple[int, ...], ext: tuple[int, ...],
               sram_strides: tuple[int, ...], residue: int) -> Copy:
    isz = dtype.itemsize
    res = Copy()
    for (od, _), inner in split_outer(copy_plan(ext, tensor_strides, sram_strides)):
        shape, strides = pad3(inner, 0)
        start = (residue + od * isz) % hw.dram_burst_bytes
        bursts = timing.dram_bursts(hw, shape, strides, start // isz, isz)
        xfer = ceil_div(bursts * hw.dram_burst_bytes, hw.dram_bytes_per_cycle)
        res = res + Copy(hw.dma_latency + xfer, xfer, bursts * hw.dram_burst_bytes, math.prod(shape) * isz)
    return res


@functools.lru_cache(maxsize=1 << 14)
def _on_chip_cost(hw: HardwareConfig, tensor_strides: tuple[int, ...], ext: tuple[int, ...],
                  sram_strides: tuple[int, ...]) -> Copy:
    """One ``VCOPY`` per block the codegen's copy plan gives (as for a DMA descriptor), on the vector engine."""
    cycles = 0
    for _, inner in split_outer(copy_plan(ext, tensor_strides, sram_strides)):
        shape, _ = pad3(inner, 0)
        cycles += timing.vector_cycles(hw, math.prod(shape), 1)
    return Copy(vector=cycles)


def window_cost(hw: HardwareConfig, dtype: DType, data: TensorRef, lo_nchw: Sequence[int], ext_nchw: Sequence[int],
                tile_layout: str) -> Copy:
    """Cost of loading an input window (given in NCHW order) from ``data`` in its own layout
    into an SRAM tile laid out in ``tile_layout`` (the DMA transposes through strides)."""
    return windows(hw, dtype, data, tile_layout).cost(tuple(lo_nchw), tuple(ext_nchw))


class Windows:
    """:func:`window_cost` of one tensor and tile layout, with the axis permutations worked out once
    and a memo by window (given as tuples)."""

    __slots__ = ("box", "exact", "src", "tile", "tile_of_src")

    def __init__(self, hw: HardwareConfig, dtype: DType, data: TensorRef, tile_layout: str) -> None:
        self.box = boxes(hw, dtype, tuple(data.shape), data.on_chip, storage(data))
        self.src = tuple("NCHW".index(a) for a in data.layout)  # NCHW position of each source axis
        self.tile = tuple("NCHW".index(a) for a in tile_layout)  # NCHW position of each tile axis
        self.tile_of_src = tuple(tile_layout.index(a) for a in data.layout)  # tile position of each source axis
        self.exact: dict[tuple, Copy] = {}

    def cost(self, lo_nchw: tuple[int, ...], ext_nchw: tuple[int, ...]) -> Copy:
        key = (lo_nchw, ext_nchw)
        hit = self.exact.get(key)
        if hit is None:
            tile_strides = row_major([ext_nchw[i] for i in self.tile])
            hit = _remember(self.exact, key, self.box.cost(tuple([lo_nchw[i] for i in self.src]),
                                                          tuple([ext_nchw[i] for i in self.src]),
                                                          tuple([tile_strides[i] for i in self.tile_of_src])))
        return hit


def windows(hw: HardwareConfig, dtype: DType, data: TensorRef, tile_layout: str) -> Windows:
    """The (shared, memoising) :class:`Windows` of a tensor read into tiles of ``tile_layout``."""
    key = ("w", id(hw), dtype, tuple(data.shape), data.layout, data.on_chip, storage(data), tile_layout)
    return _shared(hw, key, lambda: Windows(hw, dtype, data, tile_layout))


class Step(NamedTuple):
    """One iteration of the pipelined loop (a named tuple: cheap to create, see :class:`Copy`)."""

    loads: Copy
    tensor: int = 0
    finish: bool = True  # the output tile is complete after this step (epilogue and store follow)
    vector: int = 0
    store: Copy = Copy()
    stationary: Copy | None = None  # loaded before this step, once per outer iteration
    operands: Copy = Copy()  # the epilogue's operands (bias, residual), loaded after ``loads``
    slot: int = 0  # iteration of the pipelined loop (restarts with every outer iteration)
    out_slot: int = 0  # iteration of the innermost output-tile loop (``slot`` unless the reduction is streamed)


class Pruned(Exception):
    """The estimate already exceeds the search's cutoff."""


class Flow:
    """The flow-shop of the module docstring, fed one step at a time.

    Buffer versions rotate with the pipelined loop's own counter (``Step.slot``), which
    restarts at every outer iteration, as ``InjectSoftwarePipeline`` indexes them; with a
    streamed reduction the per-output-tile buffers rotate with the output-tile loop's
    (``Step.out_slot``: one version unless that loop is pipelined too).

    ``floor`` is the tensor-engine work of all steps; once a lower bound of the result
    (an engine's finish time, the tensor engine's plus the work still to come, or the
    channel time so far) passes ``cutoff``, the candidate is abandoned.
    """

    def __init__(self, versions: Versions, streamed: bool, floor: int = 0, cutoff: float = math.inf) -> None:
        v = versions
        self.v_in, self.v_acc, self.v_out, self.v_opnd, self.release_at_store = (
            v.inputs, v.acc, v.out, v.operands, v.release_at_store)
        self.streamed = streamed
        self.remaining, self.cutoff = floor, cutoff
        self.load_free = self.tensor_free = self.vector_free = self.store_free = 0.0
        self.stationary_wait = 0.0
        self.in_free: dict[int, float] = {}  # input version -> when the tensor engine is done with it
        self.acc_free: dict[int, float] = {}
        self.out_free: dict[int, float] = {}
        self.opnd_free: dict[int, float] = {}
        self.first_load: float | None = None
        # DRAM totals as plain ints (summing Copy records per step was a large share of the search)
        self.channel = self.moved = self.useful = 0
        self.tensor = self.vector = self.loads = self.stores = 0

    def add(self, st: Step) -> None:
        loads, stationary, operands, store = st.loads, st.stationary, st.operands, st.store
        start = self.load_free
        copies = loads.vector
        if stationary is not None:
            start = max(start, self.stationary_wait) + stationary.engine
            self._total(stationary)
            self.loads += stationary.engine
            copies += stationary.vector
        v_in = st.slot % self.v_in
        start = max(start, self.in_free.get(v_in, 0.0))
        self.load_free = start + loads.engine
        data_ready = self.load_free
        if copies:  # on-chip operands: copied by the vector engine into the tile before the compute
            self.vector_free = max(self.vector_free, start) + copies
            data_ready = max(data_ready, self.vector_free)
            self.vector += copies
        unit = st.out_slot if self.streamed else st.slot  # per-output-tile buffers rotate with their loop
        operands_ready = 0.0
        if operands.engine:
            free = self.opnd_free.get(unit % self.v_opnd, 0.0)
            self.load_free = max(self.load_free, free) + operands.engine
            operands_ready = self.load_free
            self._total(operands)
            self.loads += operands.engine
        if self.first_load is None:
            self.first_load = self.load_free
        acc_free = self.acc_free.get(unit % self.v_acc, 0.0)
        tensor_free = self.tensor_free = max(self.tensor_free, data_ready, acc_free) + st.tensor
        self.in_free[v_in] = tensor_free
        self.stationary_wait = tensor_free
        self.remaining -= st.tensor
        if max(tensor_free + self.remaining, self.load_free) > self.cutoff:
            raise Pruned
        self._total(loads)
        self._total(store)
        self.tensor += st.tensor
        self.loads += loads.engine
        if not st.finish:
            return
        out_v = unit % self.v_out
        if operands.vector:  # on-chip epilogue operands (or a vector-only operator's input)
            self.vector_free = max(self.vector_free, tensor_free) + operands.vector
            self.vector += operands.vector
        vector_free = self.vector_free = max(self.vector_free, tensor_free, self.out_free.get(out_v, 0.0),
                                             operands_ready) + st.vector + store.vector
        self.vector += store.vector
        self.opnd_free[unit % self.v_opnd] = vector_free
        if not st.tensor:  # vector-only operators: the loaded data is read by the vector engine
            self.in_free[v_in] = vector_free
        store_free = self.store_free = max(self.store_free, vector_free) + store.engine
        self.out_free[out_v] = store_free
        self.acc_free[unit % self.v_acc] = store_free if self.release_at_store else vector_free
        self.vector += st.vector
        self.stores += store.engine
        if max(store_free, self.channel) > self.cutoff:  # finish times only grow
            raise Pruned

    def _total(self, c: Copy) -> None:
        self.channel += c.channel
        self.moved += c.moved
        self.useful += c.useful

    def cycles(self) -> float:
        flow = max(self.store_free, self.vector_free, self.tensor_free, self.load_free)
        return max(flow, self.channel + (self.first_load or 0.0))


def vector_cycles(hw: HardwareConfig, spec: OpSpec, n: int) -> int:
    """Vector-engine cycles of the epilogue over ``n`` output elements."""
    return sum(step_cycles(hw, e, n) for e in spec.epilogue)


@dataclass(frozen=True)
class Pipelining:
    """Which loop of a template is software-pipelined: decided once per (spec, tile) by the
    operator kind, read by its schedule, its footprint and the flow model alike."""

    pipelined: bool  # some tile loop with more than one iteration carries the pipeline
    streamed_reduction: bool = False  # that loop is the reduction (per-output buffers have one version)
    # the epilogue runs in a pipeline stage of its own (``common.pipeline``): the accumulator has two
    # versions, so the tensor engine computes tile i+1 while the vector engine finishes tile i
    # (the result then has a buffer of its own: ``common.schedule_epilogue``'s ``own_result``)
    epilogue_stage: bool = False


@dataclass(frozen=True)
class Versions:
    """SRAM versions the template gives each buffer class, and whether the accumulator is
    only free again once the store has read it."""

    inputs: int
    acc: int
    out: int
    operands: int
    release_at_store: bool

    @classmethod
    def of(cls, stages: int, p: Pipelining, has_epilogue: bool) -> Versions:
        if stages == 1 or not p.pipelined:
            return cls(1, 1, 1, 1, True)
        if p.epilogue_stage and p.streamed_reduction:  # the output-tile loop pipelined too (around it)
            return cls(stages, 2, 2, 2, not has_epilogue)
        if p.epilogue_stage and has_epilogue:  # operands loaded one stage before the epilogue reads them
            return cls(stages, 2, 2, 2, False)
        if p.streamed_reduction:  # only the reduction loop is pipelined
            return cls(stages, 1, 1, 1, not has_epilogue)  # an epilogue writes a result buffer of its own
        if has_epilogue:  # accumulator worked on in place, result in a separate double buffer
            return cls(stages, 1, 2, stages, False)
        return cls(stages, 2, 2, stages, True)  # the accumulator is the stored buffer


def flow_estimate(steps: Iterable[Step], versions: Versions, streamed_reduction: bool, floor: int,
                  sram_bytes: int, cutoff: float = math.inf) -> Estimate:
    """Run the flow-shop over an operator's steps (raises :class:`Pruned` past ``cutoff``)."""
    flow = Flow(versions, streamed_reduction, floor, cutoff)
    for st in steps:
        flow.add(st)
    return Estimate(
        cycles=flow.cycles(),
        tensor_cycles=flow.tensor,
        vector_cycles=flow.vector,
        load_cycles=flow.loads,
        store_cycles=flow.stores,
        channel_cycles=flow.channel,
        dram_bytes=flow.moved,
        wasted_bytes=flow.moved - flow.useful,
        sram_bytes=sram_bytes,
    )


def with_table_loads(steps: Iterable[Step], hw: HardwareConfig, spec: OpSpec) -> Iterator[Step]:
    """``steps`` (any kind's) with the operator's lookup tables loaded at the first: each whole, once per
    operator (``tir_schedules.common.stage_operand``), so no kind counts them per tile."""
    tables = NO_COPY
    for e in spec.epilogue:
        if e.broadcast == Broadcast.TABLE:
            tables += copy_cost(hw, e.operand.dtype, e.operand.shape, (0,), e.operand.shape)
    for i, st in enumerate(steps):
        yield st._replace(loads=st.loads + tables) if i == 0 and tables != NO_COPY else st


@functools.lru_cache(maxsize=1 << 14)
def axis_tiles(total: int, t: int) -> tuple[tuple[int, int], ...]:
    """(start, extent) of every tile along an axis (the last one clamped); shared, hence a tuple."""
    return tuple((i * t, min(t, total - i * t)) for i in range(ceil_div(total, t)))


def chain(stages: Sequence[tuple[int, int]]) -> list[int]:
    """Bytes of a chain of elementwise stages, each ``(versions, bytes per version)``.

    A stage shares its predecessor's storage when both have the same shape, as the
    codegen's allocator does (the step runs in place).
    """
    out, prev = [], None
    for st in stages:
        if st != prev:
            out.append(st[0] * st[1])
        prev = st
    return out


def step_itemsizes(spec: OpSpec, first: DType) -> list[int]:
    """Element size of every epilogue step's result, starting from a value of type ``first``
    (a requantisation or a cast changes it)."""
    sizes, value = [], first
    for step in spec.epilogue:
        value = result_dtype(step, value)
        sizes.append(value.itemsize)
    return sizes


def epilogue_sizes(spec: OpSpec, out_elems: int, channels: int, acc: DType, operand_v: int, out_v: int,
                    own_output: bool = False, resident_channels: int | None = None, acc_v: int = 1) -> list[int]:
    """Accumulator, epilogue stages, final output buffer and epilogue operands.

    ``acc`` is the accumulator type; ``own_output``: the template gives the result a
    buffer of its own even when it has the accumulator's shape (streamed reductions);
    ``resident_channels``: per-channel operands are loaded once for that many channels
    (one version) instead of per tile; ``acc_v``: versions of the accumulator (two when the
    epilogue has a pipeline stage of its own: its intermediate steps then get one buffer of their own).
    """
    n_epi = len(spec.epilogue)
    asz = acc.itemsize
    if n_epi:
        steps = [(acc_v, out_elems * asz)] + [(1, out_elems * isz) for isz in step_itemsizes(spec, acc)[:-1]]
        buffers = chain(steps)
        final = (out_v, out_elems * spec.out.dtype.itemsize)
        if own_output or final != steps[-1]:
            buffers.append(final[0] * final[1])
    else:
        buffers = [out_v * out_elems * asz]
    for e in spec.epilogue:
        if e.operand is None:
            continue
        if e.broadcast == Broadcast.TABLE:  # loaded whole, once per operator (tir_schedules.common.stage_operand)
            buffers.append(e.operand.nbytes)
        elif e.broadcast != Broadcast.CHANNEL:
            buffers.append(operand_v * out_elems * e.operand.dtype.itemsize)
        elif resident_channels is not None:
            buffers.append(resident_channels * e.operand.dtype.itemsize)
        else:
            buffers.append(operand_v * channels * e.operand.dtype.itemsize)
    return buffers


def tile_extents(total: int, quantum: int, opts: CompilerOptions, limit: int = 12) -> list[int]:
    """Tile extents worth trying along one axis (smallest first).

    The whole axis, even splits of it and powers of two times ``quantum``; on axes
    mapped to the array (``quantum > 1``) only multiples of ``quantum`` (rounding
    the even splits up), since other extents leave array rows or columns idle.
    All within ``-tile-min``/``-tile-max`` (an axis shorter than ``-tile-min`` is whole).
    """
    cands = {total}
    for parts in range(2, limit + 1):
        cands.add(ceil_div(ceil_div(total, parts), quantum) * quantum)
    q = quantum
    while q < total:
        cands.add(q)
        q *= 2
    lo, hi = opts.tile_min, opts.tile_max
    out = sorted(x for x in cands if x <= total and (lo <= x <= hi or x == total < lo))
    # -tile-max below the array size leaves no multiple of it: the user's limit wins
    return out or [min(total, hi)]


def sum_ceil(total: int, tile: int, q: int, mult: int = 1) -> int:
    """``sum(ceil(extent * mult / q))`` over the tiles of an axis, in O(1)."""
    full, rest = divmod(total, tile)
    return full * ceil_div(tile * mult, q) + (ceil_div(rest * mult, q) if rest else 0)


def window_sum(out: int, tile: int, stride: int, kernel: int, dilation: int, size: int, pad: int) -> int:
    """Input rows (or columns) the tiles of one spatial axis load, clamped to the tensor."""
    total = 0
    span = (kernel - 1) * dilation + 1
    for y0 in range(0, out, tile):
        n = min(tile, out - y0)
        lo = y0 * stride - pad
        hi = lo + (n - 1) * stride + span
        total += max(0, min(hi, size) - max(lo, 0))
    return total


def touched(out: int, stride: int, kernel: int, dilation: int, size: int, pad: int) -> int:
    """How many of an axis' ``size`` input positions some output position's window reads."""
    hit = np.zeros(size, dtype=bool)
    for k in range(kernel):
        first = k * dilation - pad
        pos = np.arange(first, first + out * stride, stride)
        hit[pos[(pos >= 0) & (pos < size)]] = True
    return int(hit.sum())
