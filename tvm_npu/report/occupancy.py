"""When each layer of a run works, and what the engines that run it can do at most.

A layer's *cycles* are the cycles in which at least one of its instructions works on an engine
(:func:`occupancy`): every resource it uses is busy only inside them, so its DRAM bytes and MACs always
fit them (bytes / cycles <= the DRAM rate, MACs / cycles <= the peak). Layers whose instructions run at
the same time (the next layer's first loads under the last layer's last tiles) share those cycles: each
counts them, and the report shows the overlap beside the span from a layer's first instruction's start
to its last one's end. (An additive split of the run's cycles cannot keep every layer's work inside its
share: a layer streaming from DRAM under another that computes needs the same cycles whole.)

The *engine bound* (:func:`engine_bound`) is the layer's bound on the engines that actually run it,
beside the datasheet's tensor-peak bound: a depthwise convolution, a pool or an elementwise layer on the
vector engine is held to the vector engine's lanes, a convolution to the tensor peak and to the vector
work of its epilogue, every layer to its compulsory DRAM bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tvm_npu.config import DType, HardwareConfig
from tvm_npu.core.artifact import LayerInfo
from tvm_npu.simulator import isa


@dataclass(frozen=True)
class Occupancy:
    """The cycles in which one layer works (see the module docstring)."""

    cycles: int  # cycles in which an instruction of the layer works on some engine
    start: int  # its first instruction's start ...
    end: int  # ... and its last one's end
    overlap: int  # of ``cycles``, those in which another layer works too


def _merged(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``intervals`` as sorted disjoint intervals covering the same cycles."""
    out: list[list[int]] = []
    for a, b in sorted(iv for iv in intervals if iv[1] > iv[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def occupancy(spans: Sequence[Iterable[tuple[int, int]]]) -> list[Occupancy]:
    """:class:`Occupancy` of each layer from ``spans[k]``, the (start, end) intervals in which layer ``k``
    has an instruction working (an engine busy with it; waiting on a semaphore is not work)."""
    merged = [_merged(sp) for sp in spans]
    edges = sorted((t, d, k) for k, ivs in enumerate(merged) for a, b in ivs for t, d in ((a, 1), (b, -1)))
    overlap = [0] * len(merged)
    active: set[int] = set()
    prev = 0
    for t, d, k in edges:  # at one time, ends (-1) sort before starts (+1): touching intervals do not overlap
        if len(active) > 1:
            for j in active:
                overlap[j] += t - prev
        if d > 0:
            active.add(k)
        else:
            active.discard(k)
        prev = t
    return [Occupancy(sum(b - a for a, b in ivs), ivs[0][0] if ivs else 0, ivs[-1][1] if ivs else 0, overlap[k])
            for k, ivs in enumerate(merged)]


def lane_ops(hw: HardwareConfig, ins: object) -> int:
    """Lane-cycles of vector-engine work in one instruction (0 for any other engine's): the simulator's
    cost (``simulator.timing``) without its issue cycles and without rounding up to whole lane groups, so
    ``lane_ops / vector_lanes`` never exceeds the cycles the instruction takes."""
    if isinstance(ins, isa.Pool | isa.DwConv):  # one window tap per lane per cycle, every dtype
        return ins.channels * ins.out_h * ins.out_w * ins.kernel_h * ins.kernel_w
    if isinstance(ins, isa.VecReduce):
        return ins.nelems
    if isinstance(ins, isa.VecUnary) and ins.op in isa.VecUnary.TRANSCENDENTAL:
        return ins.nelems * hw.transcendental_cycles
    if isinstance(ins, isa.VecPow):
        return ins.nelems * isa.VecPow.EVALUATIONS * hw.transcendental_cycles
    if isinstance(ins, isa.VecLut):
        return ins.nelems * isa.VecLut.CYCLES_PER_GROUP
    if isinstance(ins, isa._VecBase):
        return ins.nelems
    return 0


@dataclass(frozen=True)
class EngineBound:
    """A layer's bound on the engines that run it: the largest of its parts, named by ``bound_by``."""

    cycles: float
    tensor: float  # MACs on the tensor engine / the peak for the layer's dtype
    vector: float  # lane-cycles of its vector instructions / vector lanes
    dram: float  # compulsory bytes / DRAM bytes per cycle (the datasheet bound's DRAM part)

    @property
    def bound_by(self) -> str:
        parts = {"tensor": self.tensor, "vector": self.vector, "dma": self.dram}
        return max(parts, key=parts.get)


def engine_bound(hw: HardwareConfig, layer: LayerInfo, instructions: Iterable[object]) -> EngineBound:
    """The engine bound of ``layer`` whose instructions are ``instructions`` (see the module docstring).

    The MACs count at the tensor peak only when the tensor engine runs them (a depthwise convolution on
    the vector engine has its taps among the vector work instead); the vector part is the work the
    layer's vector instructions state (outputs x window for a pool or depthwise tap loop, elements x steps
    for an epilogue or elementwise chain, x the transcendental cost where the simulator charges it).
    """
    on_tensor = vector = 0
    for ins in instructions:
        on_tensor |= isinstance(ins, isa.Conv | isa.MatMul)
        vector += lane_ops(hw, ins)
    tensor = layer.macs / hw.peak_macs_per_cycle(DType.from_str(layer.dtype)) if on_tensor and layer.macs else 0.0
    dram = (layer.input_bytes + layer.weight_bytes + layer.output_bytes) / hw.dram_bytes_per_cycle
    parts = (tensor, vector / hw.vector_lanes, dram)
    return EngineBound(max(parts), *parts)
