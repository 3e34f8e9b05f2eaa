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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from tvm_npu.simulator import timing
from tvm_npu.simulator.builder import row_major

from tvm_npu.config import CompilerOptions, DType, HardwareConfig
from tvm_npu.epilogue import result_dtype, step_cycles
from tvm_npu.ops import Broadcast, OpSpec, TensorRef

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


@dataclass(frozen=True)
class Copy:
    """Cost of copies: DMA engine cycles (latency included), channel cycles, bytes moved and useful,
    and vector-engine cycles (copies within SRAM, of a layer group's intermediates)."""

    engine: int = 0
    channel: int = 0
    moved: int = 0
    useful: int = 0
    vector: int = 0

    def __add__(self, other: Copy) -> Copy:
        return Copy(self.engine + other.engine, self.channel + other.channel, self.moved + other.moved,
                     self.useful + other.useful, self.vector + other.vector)


@functools.lru_cache(maxsize=1 << 18)
def copy_cost(hw: HardwareConfig, dtype: DType, tensor_shape: Sequence[int], lo: Sequence[int],
              ext: Sequence[int], sram_strides: Sequence[int] | None = None, on_chip: bool = False) -> Copy:
    """Cost of copying the box ``[lo, lo+ext)`` (clamped) of a row-major DRAM tensor, or of an on-chip
    one (a layer group's intermediate: vector-engine copies, no DRAM traffic)."""
    lo2, ext2 = [], []
    for a, e, n in zip(lo, ext, tensor_shape, strict=True):  # clamp to the tensor, as the codegen does
        b, c = max(a, 0), min(a + e, n)
        if c <= b:
            return Copy()
        lo2.append(b)
        ext2.append(c - b)
    if on_chip:
        return _on_chip_cost(hw, tuple(tensor_shape), tuple(ext2), tuple(sram_strides or row_major(ext)))
    dstr = row_major(tensor_shape)
    offset = sum(a * s for a, s in zip(lo2, dstr, strict=True))
    # bursts depend on the start address only modulo the burst size: cache on that residue
    residue = offset * dtype.itemsize % hw.dram_burst_bytes
    return _copy_cost(hw, dtype, tuple(tensor_shape), tuple(ext2), tuple(sram_strides or row_major(ext)), residue)


@functools.lru_cache(maxsize=1 << 16)
def _copy_cost(hw: HardwareConfig, dtype: DType, tensor_shape: tuple[int, ...], ext: tuple[int, ...],
               sram_strides: tuple[int, ...], residue: int) -> Copy:
    isz = dtype.itemsize
    res = Copy()
    for (od, _), inner in split_outer(copy_plan(ext, row_major(tensor_shape), sram_strides)):
        shape, strides = pad3(inner, 0)
        start = (residue + od * isz) % hw.dram_burst_bytes
        bursts = timing.dram_bursts(hw, shape, strides, start // isz, isz)
        xfer = ceil_div(bursts * hw.dram_burst_bytes, hw.dram_bytes_per_cycle)
        res = res + Copy(hw.dma_latency + xfer, xfer, bursts * hw.dram_burst_bytes, math.prod(shape) * isz)
    return res


@functools.lru_cache(maxsize=1 << 14)
def _on_chip_cost(hw: HardwareConfig, tensor_shape: tuple[int, ...], ext: tuple[int, ...],
                  sram_strides: tuple[int, ...]) -> Copy:
    """One ``VCOPY`` per block the codegen's copy plan gives (as for a DMA descriptor), on the vector engine."""
    cycles = 0
    for _, inner in split_outer(copy_plan(ext, row_major(tensor_shape), sram_strides)):
        shape, _ = pad3(inner, 0)
        cycles += timing.vector_cycles(hw, math.prod(shape), 1)
    return Copy(vector=cycles)


def window_cost(hw: HardwareConfig, dtype: DType, data: TensorRef, lo_nchw: Sequence[int], ext_nchw: Sequence[int],
                tile_layout: str) -> Copy:
    """Cost of loading an input window (given in NCHW order) from ``data`` in its own layout
    into an SRAM tile laid out in ``tile_layout`` (the DMA transposes through strides)."""
    src = data.layout
    perm = ["NCHW".index(a) for a in src]
    ext_tile = [ext_nchw["NCHW".index(a)] for a in tile_layout]
    tile_strides = dict(zip(tile_layout, row_major(ext_tile), strict=True))
    return copy_cost(hw, dtype, data.shape, tuple(lo_nchw[i] for i in perm), tuple(ext_nchw[i] for i in perm),
                     tuple(tile_strides[a] for a in src), data.on_chip)


@dataclass(frozen=True)
class Step:
    """One iteration of the pipelined loop."""

    loads: Copy
    tensor: int = 0
    finish: bool = True  # the output tile is complete after this step (epilogue and store follow)
    vector: int = 0
    store: Copy = Copy()
    stationary: Copy | None = None  # loaded before this step, once per outer iteration
    operands: Copy = Copy()  # the epilogue's operands (bias, residual), loaded after ``loads``
    slot: int = 0  # iteration of the pipelined loop (restarts with every outer iteration)


class Pruned(Exception):
    """The estimate already exceeds the search's cutoff."""


class Flow:
    """The flow-shop of the module docstring, fed one step at a time.

    Buffer versions rotate with the pipelined loop's own counter (``Step.slot``), which
    restarts at every outer iteration, as ``InjectSoftwarePipeline`` indexes them; with a
    streamed reduction the per-output-tile buffers have one version.

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
        self.unit_slot = 0  # the pipelined-loop slot of the current output tile
        self.first_load: float | None = None
        self.total = Copy()
        self.tensor = self.vector = self.loads = self.stores = 0

    def add(self, st: Step) -> None:
        start = self.load_free
        if st.stationary is not None:
            start = max(start, self.stationary_wait) + st.stationary.engine
            self.total = self.total + st.stationary
            self.loads += st.stationary.engine
        v_in = st.slot % self.v_in
        start = max(start, self.in_free.get(v_in, 0.0))
        self.load_free = start + st.loads.engine
        data_ready = self.load_free
        copies = st.loads.vector + (st.stationary.vector if st.stationary is not None else 0)
        if copies:  # on-chip operands: copied by the vector engine into the tile before the compute
            self.vector_free = max(self.vector_free, start) + copies
            data_ready = max(data_ready, self.vector_free)
            self.vector += copies
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
            raise Pruned
        self.total = self.total + st.loads + st.store
        self.tensor += st.tensor
        self.loads += st.loads.engine
        if not st.finish:
            return
        if not st.tensor:  # vector-only operators: the loaded data is read by the vector engine
            self.in_free[v_in] = 0.0
        out_v = unit % self.v_out
        if st.operands.vector:  # on-chip epilogue operands (or a vector-only operator's input)
            self.vector_free = max(self.vector_free, self.tensor_free) + st.operands.vector
            self.vector += st.operands.vector
        self.vector_free = max(self.vector_free, self.tensor_free, self.out_free.get(out_v, 0.0),
                               operands_ready) + st.vector + st.store.vector
        self.vector += st.store.vector
        self.opnd_free[unit % self.v_opnd] = self.vector_free
        if not st.tensor:
            self.in_free[v_in] = self.vector_free
        self.store_free = max(self.store_free, self.vector_free) + st.store.engine
        self.out_free[out_v] = self.store_free
        self.acc_free[unit % self.v_acc] = self.store_free if self.release_at_store else self.vector_free
        self.vector += st.vector
        self.stores += st.store.engine
        if max(self.store_free, self.total.channel) > self.cutoff:  # finish times only grow
            raise Pruned

    def cycles(self) -> float:
        flow = max(self.store_free, self.vector_free, self.tensor_free, self.load_free)
        return max(flow, self.total.channel + (self.first_load or 0.0))


def vector_cycles(hw: HardwareConfig, spec: OpSpec, n: int) -> int:
    """Vector-engine cycles of the epilogue over ``n`` output elements."""
    return sum(step_cycles(hw, e, n) for e in spec.epilogue)


@dataclass(frozen=True)
class Pipelining:
    """Which loop of a template is software-pipelined: decided once per (spec, tile) by the
    operator kind, read by its schedule, its footprint and the flow model alike."""

    pipelined: bool  # some tile loop with more than one iteration carries the pipeline
    streamed_reduction: bool = False  # that loop is the reduction (per-output buffers have one version)


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
        channel_cycles=flow.total.channel,
        dram_bytes=flow.total.moved,
        wasted_bytes=flow.total.moved - flow.total.useful,
        sram_bytes=sram_bytes,
    )


def axis_tiles(total: int, t: int) -> list[tuple[int, int]]:
    """(start, extent) of every tile along an axis (the last one clamped)."""
    return [(i * t, min(t, total - i * t)) for i in range(ceil_div(total, t))]


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
                    own_output: bool = False, resident_channels: int | None = None) -> list[int]:
    """Accumulator, epilogue stages, final output buffer and epilogue operands.

    ``acc`` is the accumulator type; ``own_output``: the template gives the result a
    buffer of its own even when it has the accumulator's shape (streamed reductions);
    ``resident_channels``: per-channel operands are loaded once for that many channels
    (one version) instead of per tile.
    """
    n_epi = len(spec.epilogue)
    asz = acc.itemsize
    if n_epi:
        steps = [(1, out_elems * asz)] + [(1, out_elems * isz) for isz in step_itemsizes(spec, acc)[:-1]]
        buffers = chain(steps)
        final = (out_v, out_elems * spec.out.dtype.itemsize)
        if own_output or final != steps[-1]:
            buffers.append(final[0] * final[1])
    else:
        buffers = [out_v * out_elems * asz]
    for e in spec.epilogue:
        if e.operand is None:
            continue
        if e.broadcast != Broadcast.CHANNEL:
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
