"""The NPU's cost model: cycles of every instruction, DMA bursts, and the roofline bound.

Every number comes from :class:`~tvm_npu.config.HardwareConfig`; with R = mac_rows,
C = mac_cols, P = hw.mac_pass_cycles(dtype) (MAC slots per MAC: fp32 and 16x8 take more than one),
L = vector_lanes, B = dram_burst_bytes,
BW = dram_bytes_per_cycle::

    MatMul  tensor_issue_cycles + ceil(K/R) * ceil(N/C) * M * P
    Conv    tensor_issue_cycles + groups * ceil(K/R) * ceil(N/C) * M * P       (implicit GEMM,
            per group M = out_h*out_w, K = (in_c/groups)*kernel_h*kernel_w, N = out_c/groups)
    Vec*    vector_issue_cycles + ceil(n/L) * c                                 (n = prod(shape);
            c = transcendental_cycles for VSIGMOID/VTANH/VGELU/VGELU_TANH/VEXP/VLOG/VRECIP/VRSQRT/VSILU,
            else 1; VPOW: 2 * transcendental_cycles, a log and an exp; VLUT: 1, one table
            lookup per lane per cycle, the 256-entry table having come in by an ordinary DMA load,
            priced like any: dma_latency + ceil(bursts * B / BW), 256 bytes = 4 bursts at B = 64)
    VRMAX/VRSUM  vector_issue_cycles + a*b * ceil(r/L)                          (rows of a
            (a, b, r) shape reduced over r; lanes never mix two rows)
    Pool    vector_issue_cycles + ceil(channels*out_h*out_w / L) * kernel_h*kernel_w
    DwConv  vector_issue_cycles + ceil(channels*out_h*out_w / L) * kernel_h*kernel_w  (one tap per
            lane per cycle, every dtype, like every vector instruction)
    Signal, Wait, End: 0 cycles

    DMA     the DRAM side is split into contiguous runs (dims whose strides make them
            contiguous are merged; a non-unit innermost stride gives 1-element runs).
            A run of n bytes at byte address a (tensor bases are burst-aligned) touches
            ceil((a % B + n) / B) bursts; moved = bursts * B; wasted = moved - useful;
            transfer = ceil(moved / BW). A descriptor issued at t reaches the one DRAM
            channel shared by both DMA engines at t + dma_latency, is granted at
            max(t + dma_latency, channel_free) first come first served, and holds the
            channel and its engine until grant + transfer.

    lower_bound = max(sum over MAC instructions (Conv, MatMul, DwConv) of MACs / peak_macs_per_cycle(dtype),
                      compulsory_bytes / BW)
            compulsory_bytes = nbytes of every OUTPUT and CONSTANT tensor, plus the distinct
            elements of each INPUT tensor that the program reads (an operator may need only
            part of its input: a strided 1x1 convolution reads a quarter of it).

The event loop that strings these costs together lives in :mod:`.machine`; the same
formulas are documented in ``docs/architecture.md``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tvm_npu.config import DType, HardwareConfig

from . import isa


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def matmul_cycles(hw: HardwareConfig, m: int, n: int, k: int, dtype: DType, groups: int = 1) -> int:
    """Cycles of ``groups`` independent (M x K) @ (K x N) products on the R x C array."""
    passes = _ceil_div(k, hw.mac_rows) * _ceil_div(n, hw.mac_cols)
    return hw.tensor_issue_cycles + groups * passes * m * hw.mac_pass_cycles(dtype)


def vector_cycles(hw: HardwareConfig, nelems: int, cycles_per_group: int = 1) -> int:
    """Cycles of a vector instruction over ``nelems`` elements, L lanes at a time."""
    return hw.vector_issue_cycles + _ceil_div(nelems, hw.vector_lanes) * cycles_per_group


def reduce_cycles(hw: HardwareConfig, shape: tuple[int, int, int]) -> int:
    """Cycles of a row reduction (VRMAX/VRSUM): every row of ``shape[2]`` elements takes
    ``ceil(shape[2] / L)`` lane groups (lanes never mix two rows)."""
    return hw.vector_issue_cycles + shape[0] * shape[1] * _ceil_div(shape[2], hw.vector_lanes)


def compute_cycles(hw: HardwareConfig, instr: isa.Instruction) -> int:
    """Cycles a non-DMA instruction occupies its engine (0 for Signal, Wait and End)."""
    if isinstance(instr, isa.MatMul):
        return matmul_cycles(hw, instr.m, instr.n, instr.k, instr.in_dtype)
    if isinstance(instr, isa.Conv):
        g = instr.groups
        k = (instr.in_c // g) * instr.kernel_h * instr.kernel_w
        return matmul_cycles(hw, instr.out_h * instr.out_w, instr.out_c // g, k, instr.in_dtype, g)
    if isinstance(instr, isa.Pool | isa.DwConv):
        n = instr.channels * instr.out_h * instr.out_w
        return vector_cycles(hw, n, instr.kernel_h * instr.kernel_w)
    if isinstance(instr, isa.VecReduce):
        return reduce_cycles(hw, instr.shape)
    if isinstance(instr, isa.VecUnary) and instr.op in isa.VecUnary.TRANSCENDENTAL:
        return vector_cycles(hw, instr.nelems, hw.transcendental_cycles)
    if isinstance(instr, isa.VecPow):
        return vector_cycles(hw, instr.nelems, isa.VecPow.EVALUATIONS * hw.transcendental_cycles)
    if isinstance(instr, isa.VecLut):
        return vector_cycles(hw, instr.nelems, isa.VecLut.CYCLES_PER_GROUP)
    if isinstance(instr, isa._VecBase):
        return vector_cycles(hw, instr.nelems)
    return 0


def contiguous_runs(
    shape: Sequence[int], strides: Sequence[int]
) -> tuple[int, list[tuple[int, int]]]:
    """Split a strided access into (elements per contiguous run, [(extent, stride) of the outer dims])."""
    dims = [(n, s) for n, s in zip(shape, strides, strict=True) if n > 1]
    if not dims or dims[-1][1] != 1:
        return 1, dims
    run = dims.pop()[0]
    while dims and dims[-1][1] == run:
        run *= dims.pop()[0]
    return run, dims


@dataclass(frozen=True, slots=True)
class DmaCost:
    """What one DMA descriptor costs on the DRAM side."""

    useful_bytes: int
    bursts: int
    transfer_cycles: int
    burst_bytes: int

    @property
    def moved_bytes(self) -> int:
        return self.bursts * self.burst_bytes

    @property
    def wasted_bytes(self) -> int:
        return self.moved_bytes - self.useful_bytes


def dram_bursts(
    hw: HardwareConfig, shape: Sequence[int], strides: Sequence[int], offset: int, itemsize: int
) -> int:
    """Bursts touched by a strided DRAM access starting ``offset`` elements into a tensor.

    Only where a run starts within its burst matters, so the run starts are kept as a
    histogram over the B possible residues: outer dims whose byte stride is a multiple
    of B just multiply it, the others shift it once per residue of one stride period.
    Memory and time are O(B^2) at most, whatever the extents.
    """
    burst = hw.dram_burst_bytes
    run, outer = contiguous_runs(shape, strides)
    first = offset * itemsize % burst
    if all(s * itemsize % burst == 0 for _, s in outer):  # burst-periodic rows: closed form
        return math.prod(n for n, _ in outer) * ((first + run * itemsize + burst - 1) // burst)
    hist = np.zeros(burst, dtype=np.int64)
    hist[first] = 1
    for n, s in outer:
        step = s * itemsize % burst
        if step == 0:
            hist *= n
            continue
        period = burst // math.gcd(step, burst)
        residues = np.arange(period, dtype=np.int64) * step % burst
        full, rest = divmod(n, period)
        counts = np.zeros(burst, dtype=np.int64)
        counts[residues] = full
        counts[residues[:rest]] += 1
        shifted = np.zeros(burst, dtype=np.int64)
        for r in np.flatnonzero(counts):
            shifted += np.roll(hist, r) * counts[r]
        hist = shifted
    per_start = (np.arange(burst, dtype=np.int64) + run * itemsize + burst - 1) // burst
    return int(hist @ per_start)


def dma_cost(hw: HardwareConfig, instr: isa.DmaLoad | isa.DmaStore) -> DmaCost:
    """Bursts and channel cycles of one DMA descriptor (latency excluded: see :mod:`.machine`)."""
    return dram_cost(hw, instr.accesses()[0])


def dram_cost(hw: HardwareConfig, dram: isa.Access) -> DmaCost:
    """:func:`dma_cost` of the descriptor whose DRAM side is ``dram``."""
    itemsize = dram.dtype.itemsize
    bursts = dram_bursts(hw, dram.shape, dram.strides, dram.base, itemsize)
    moved = bursts * hw.dram_burst_bytes
    return DmaCost(dram.nelems * itemsize, bursts, _ceil_div(moved, hw.dram_bytes_per_cycle), hw.dram_burst_bytes)


def compulsory_bytes(tensors: Sequence[isa.TensorDecl], reads: Iterable[isa.Access]) -> int:
    """Bytes that must cross DRAM at least once: every OUTPUT and CONSTANT tensor whole, and
    of every INPUT tensor each element that ``reads`` (the DRAM sides of the loads) reach.

    SCRATCH tensors never need to (they could stay on chip). Each input element counts once,
    however often it is loaded, so no program can move fewer bytes than this.
    """
    hit = {i: np.zeros(t.size, dtype=bool) for i, t in enumerate(tensors) if t.kind == isa.TensorKind.INPUT}
    for a in reads:
        mask = hit.get(a.tensor)
        if mask is not None:
            idx = np.array(a.base, dtype=np.int64)
            for n, stride in zip(a.shape, a.strides, strict=True):
                idx = np.add.outer(idx, np.arange(n, dtype=np.int64) * stride)
            mask[idx.ravel()] = True
    read = sum(int(m.sum()) * tensors[i].dtype.itemsize for i, m in hit.items())
    whole = sum(t.nbytes for t in tensors if t.kind in (isa.TensorKind.OUTPUT, isa.TensorKind.CONSTANT))
    return read + whole


def lower_bound_cycles(hw: HardwareConfig, macs: dict[DType, int], dram_bytes: int) -> float:
    """The datasheet's bound: max(MACs / peak MACs per cycle, compulsory bytes / bandwidth)."""
    compute = sum(n / hw.peak_macs_per_cycle(dt) for dt, n in macs.items())
    return max(compute, dram_bytes / hw.dram_bytes_per_cycle)
