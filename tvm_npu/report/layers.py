"""The per-layer report: what each NPU operator did, and how close it came to the hardware limit.

For every layer of every partition run: operator, shapes, layouts, tile parameters,
MACs, DRAM bytes (inputs, weights, outputs; moved by DMA; wasted on partial bursts),
SRAM peak, simulated cycles, the datasheet bound and the efficiency against it, the
bound on the engines that run it and the efficiency against that, which resource binds,
and the layout transforms the host ran. Cycles per layer come from the simulator's
timeline, so a run must be profiled with ``trace=True``: a layer's cycles are those in
which its instructions work (:mod:`tvm_npu.report.occupancy`), so its bytes and MACs
always fit them; neighbours that work at the same time both count the shared cycles,
which the report shows (overlap, span). Each layer's share of the run (:func:`attribute`)
adds up to the run's cycles.

A layer's bound is ``max(MACs / peak(dtype), compulsory bytes / bandwidth)``, its
compulsory bytes what it must read and write at least once: each distinct tensor once,
only the elements it needs (a strided 1x1 convolution reads a quarter of its input),
nothing for a tensor kept on chip. Its engine bound holds it to the engines that run
it as well (a depthwise convolution or a pool on the vector engine to the vector lanes:
:func:`tvm_npu.report.occupancy.engine_bound`). The model line adds the model-level bound
``max(total MACs / peak, (model inputs + weights + model outputs) / bandwidth)``.

Layer groups (``-fusion=3``) get a row each: members, slicing, SRAM peak, DRAM bytes
saved against ``-fusion=1``, cycles (those in which any member works), the datasheet's
bound for a fused group (only what enters or leaves it crosses DRAM), the efficiency and
the planner's prediction.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tvm_npu.config import DType, HardwareConfig, parse_target
from tvm_npu.core.artifact import Artifact, LayerInfo
from tvm_npu.report.occupancy import EngineBound, engine_bound, occupancy
from tvm_npu.report.text import columns, kib
from tvm_npu.runtime.execute import PartitionRun, Profile
from tvm_npu.simulator import decode_program, isa
from tvm_npu.simulator.timing import dma_cost


@dataclass(frozen=True)
class LayerReport:
    """One NPU layer of a profiled run (bytes are DRAM bytes; cycles at the NPU clock)."""

    partition: str
    name: str
    op: str
    dtype: str  # what the layer computes in (its bound uses this type's peak)
    description: str
    layout_in: str
    layout_out: str
    tile: dict
    macs: int
    input_bytes: int
    weight_bytes: int
    output_bytes: int
    dram_bytes: int  # moved by the layer's DMA descriptors (useful bytes)
    wasted_bytes: int  # moved in partial bursts beyond what was asked for
    sram_peak_bytes: int
    cycles: int
    bound_cycles: float
    efficiency: float
    bound_by: str
    predicted_cycles: float
    fused: tuple[str, ...]
    group: str = ""  # the layer group it runs in (a :class:`GroupReport`'s label), "" for none
    label: str = ""  # unique in the model: "p0/conv2d_0" (see :func:`partition_labels`)
    # when it ran (see tvm_npu.report.occupancy): ``cycles`` are those in which its instructions work, of
    # them ``overlap_cycles`` shared with other layers; its span runs from ``start`` to ``end``
    start: int = 0
    end: int = 0
    overlap_cycles: int = 0
    share_cycles: int = 0  # its share of the run when every cycle is split among the layers then working
    # the bound on the engines that run it (tvm_npu.report.occupancy.engine_bound) and the efficiency against it
    engine_bound_cycles: float = 0.0
    engine_efficiency: float = 0.0
    engine_bound_by: str = ""


@dataclass(frozen=True)
class GroupReport:
    """A layer group (``-fusion=3``) of a profiled run: its members taken together, so the saving of
    keeping their intermediates on chip can be weighed against the halo rows they recompute."""

    partition: str
    label: str  # "g0", "g1", ... numbered across the model; the members' ``LayerReport.group``
    members: tuple[str, ...]
    rows: int  # output rows per slice
    slices: int
    sram_peak_bytes: int  # the intermediates' regions plus the largest step's buffers
    saved_bytes: int  # DRAM bytes -fusion=1 would move for the intermediates
    dram_bytes: int  # moved by the members' DMA descriptors
    cycles: int  # the cycles in which any member works
    bound_cycles: float  # max(the members' MACs / peak, their compulsory DRAM bytes / bandwidth)
    efficiency: float  # bound_cycles / cycles
    predicted_cycles: float  # the planner's estimate for the whole group
    prediction_error: float  # (predicted - simulated) / simulated
    share_cycles: int = 0  # the members' shares of the run (LayerReport.share_cycles) summed


@dataclass(frozen=True)
class DeploymentMemory:
    """What a model needs on the device (bytes): :func:`tvm_npu.report.memory.deployment_memory` explains each figure;
    ``tvm-npu inspect`` and ``tvm-npu profile`` print it alike (:meth:`lines`)."""

    npu_weight_bytes: int
    host_weight_bytes: int
    peak_activation_bytes: int
    program_bytes: int
    sram_high_water: int
    sram_largest_op: int
    sram_bytes: int  # the target's -max-sram-bytes

    @property
    def dram_bytes(self) -> int:
        return self.npu_weight_bytes + self.host_weight_bytes + self.peak_activation_bytes + self.program_bytes

    def to_json(self) -> dict[str, int]:
        return {**asdict(self), "dram_bytes": self.dram_bytes}

    def lines(self) -> list[str]:
        """The device DRAM and the SRAM high-water, one line each."""
        return [f"device DRAM: {kib(self.dram_bytes)} KiB = weights {kib(self.npu_weight_bytes)} KiB (NPU) + "
                f"{kib(self.host_weight_bytes)} KiB (host operators) + peak live activations "
                f"{kib(self.peak_activation_bytes)} KiB + NPU programs {kib(self.program_bytes)} KiB",
                f"SRAM high-water: {kib(self.sram_high_water)} KiB of {kib(self.sram_bytes)} KiB (-max-sram-bytes)"
                + (f"; the largest operator needs {kib(self.sram_largest_op)} KiB, consecutive operators' buffers "
                   f"are placed apart so that one's loads overlap the other's work"
                   if self.sram_high_water > 1.1 * self.sram_largest_op else "")]


@dataclass(frozen=True)
class ModelReport:
    """All NPU layers of one profiled run, plus the whole-model figures."""

    layers: tuple[LayerReport, ...]
    cycles: int  # sum of the partitions' simulated cycles
    bound_cycles: float  # sum of the per-layer bounds
    dram_bytes: int
    compulsory_bytes: int  # every layer's compulsory bytes (see the module docstring)
    npu_macs: int
    host_macs: int
    layout_transforms: int
    model_bound_cycles: float = 0.0  # max(MACs / peak, (model inputs + weights + outputs) / bandwidth)
    groups: tuple[GroupReport, ...] = ()
    # device memory of the partitions that ran (each distinct program once): see :func:`program_memory`
    weight_bytes: int = 0
    program_bytes: int = 0
    sram_high_water: int = 0  # the simulator's: the highest SRAM byte any run touched
    memory: DeploymentMemory | None = None  # the build's (tvm-npu inspect's figures), when the report has its build
    # the input shapes of the run it describes ("x=(1, 3, 32, 320)"): a model built for every shape runs other
    # programs at other shapes, so a report names its own ("" when not known)
    shape: str = ""

    @property
    def efficiency(self) -> float:
        return self.bound_cycles / self.cycles if self.cycles else 0.0

    def geomean_efficiency(self, ops: Sequence[str] = ("conv2d", "matmul")) -> float:
        """Geometric mean of the efficiency of every layer of ``ops`` (a layer at 0 makes it 0)."""
        vals = [x.efficiency for x in self.layers if x.op in ops]
        if not vals or min(vals) <= 0:
            return 0.0
        return math.exp(sum(math.log(v) for v in vals) / len(vals))

    def to_json(self) -> dict:
        """The machine-readable form of ``tvm-npu profile --json``."""
        return {
            "model": {"shape": self.shape, "cycles": self.cycles, "bound_cycles": self.bound_cycles,
                      "efficiency": self.efficiency,
                      "model_bound_cycles": self.model_bound_cycles,
                      "dram_bytes": self.dram_bytes, "compulsory_bytes": self.compulsory_bytes,
                      "npu_macs": self.npu_macs, "host_macs": self.host_macs,
                      "layout_transforms": self.layout_transforms, "weight_bytes": self.weight_bytes,
                      "program_bytes": self.program_bytes, "sram_high_water": self.sram_high_water,
                      "memory": self.memory.to_json() if self.memory is not None else None},
            "layers": [asdict(x) for x in self.layers],
            "groups": [asdict(g) for g in self.groups],
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))

    def table(self) -> str:
        """The report as fixed-width text: the shape it describes (when known), the layers, the layer groups
        (if any), the model line."""
        head = ("layer", "group", "op", "dtype", "tile", "MACs", "DRAM KiB", "waste KiB", "SRAM KiB", "cycles",
                "span", "overlap", "bound", "eff", "bound by", "engine bound", "eng eff", "engine")
        rows = []
        for x in self.layers:
            tile = " ".join(f"{k}={v}" for k, v in x.tile.items() if k not in ("kind", "stages"))
            # DRAM: every byte that crossed the channel, so the part wasted on partial bursts is within it
            rows.append((x.label or x.name, x.group or "-", x.description, x.dtype, tile[:40], f"{x.macs / 1e6:.1f}M",
                         f"{(x.dram_bytes + x.wasted_bytes) / 1024:.0f}",
                         f"{x.wasted_bytes / 1024:.0f}", f"{x.sram_peak_bytes / 1024:.0f}", str(x.cycles),
                         f"{x.start}-{x.end}", str(x.overlap_cycles), f"{x.bound_cycles:.0f}", f"{x.efficiency:.2f}",
                         x.bound_by, f"{x.engine_bound_cycles:.0f}", f"{x.engine_efficiency:.2f}",
                         x.engine_bound_by))
        lines = ([f"per-layer report at {self.shape}"] if self.shape else []) + columns(head, rows) + [
            "cycles: those in which the layer's instructions work on some engine, of them 'overlap' shared with "
            "other layers (counted by each); span: its first instruction's start to its last one's end.",
            "bound: the datasheet's (MACs at the tensor peak, compulsory DRAM bytes); engine bound: on the engines "
            "that run the layer (vector work at the vector lanes, MACs at the tensor peak only on the tensor "
            "engine)."]
        if self.groups:
            head = ("group", "layers", "slices x rows", "SRAM KiB", "saved KiB", "DRAM KiB", "cycles", "bound",
                    "eff", "predicted", "error")
            rows = [(g.label, " ".join(g.members), f"{g.slices} x {g.rows}", f"{g.sram_peak_bytes / 1024:.0f}",
                     f"{g.saved_bytes / 1024:.0f}", f"{g.dram_bytes / 1024:.0f}", str(g.cycles),
                     f"{g.bound_cycles:.0f}", f"{g.efficiency:.2f}", f"{g.predicted_cycles:.0f}",
                     f"{g.prediction_error:+.1%}") for g in self.groups]
            lines += ["", *columns(head, rows),
                      "a group's cycles: those in which any member works. saved: the DRAM bytes -fusion=1 moves for "
                      "the group's intermediates. bound: max(the members' MACs / peak,",
                      "their compulsory bytes / bandwidth): an intermediate on chip costs no DRAM bytes, a recomputed "
                      "halo row no MACs. error: (predicted - cycles) / cycles."]
        lines.append("")
        lines.append(f"model: {self.cycles} cycles, sum of layer bounds {self.bound_cycles:.0f} (efficiency "
                     f"{self.efficiency:.3f}), model-level bound {self.model_bound_cycles:.0f} "
                     f"({self.cycles / max(self.model_bound_cycles, 1):.3f}x), "
                     f"geomean conv/matmul efficiency {self.geomean_efficiency():.3f}, "
                     f"DRAM {self.dram_bytes / 2**20:.1f} MiB "
                     f"({self.dram_bytes / max(self.compulsory_bytes, 1):.2f}x compulsory), "
                     f"NPU MACs {self.npu_macs / 1e9:.3f} G, host MACs {self.host_macs / 1e9:.3f} G, "
                     f"layout transforms on host {self.layout_transforms}")
        if self.memory is not None:
            lines += self.memory.lines()
        else:
            lines.append(f"device memory: NPU weights {kib(self.weight_bytes)} KiB, NPU programs "
                         f"{kib(self.program_bytes)} KiB, SRAM high-water {kib(self.sram_high_water)} KiB "
                         f"(activations and host weights: tvm-npu inspect)")
        return "\n".join(lines)


def layer_bound(hw: HardwareConfig, layer: LayerInfo) -> tuple[float, float, float]:
    """(bound, compute part, DRAM part) of one layer by the datasheet's formula."""
    compute = layer.macs / hw.peak_macs_per_cycle(DType.from_str(layer.dtype)) if layer.macs else 0.0
    dram = (layer.input_bytes + layer.weight_bytes + layer.output_bytes) / hw.dram_bytes_per_cycle
    return max(compute, dram), compute, dram


def attribute(spans: Sequence[Sequence[tuple[int, int]]], total: int,
              floors: Sequence[float] | None = None) -> list[int]:
    """Cycles charged to each layer of a run: the rule the report states.

    ``spans[k]`` are the (start, end) intervals in which layer ``k`` has an instruction
    working (an engine busy with it; waiting on a semaphore is not work). Every cycle in
    which layers work is split equally among them, so no layer is charged for a cycle in
    which only others work. A cycle in which no layer works (pipeline bubbles) is charged
    to the layer that works next (to the last layer at the very end).

    Layers that overlap can each need the shared cycles whole (one loads on the DRAM
    channel while the other computes on the array): where a layer's equal share falls
    below ``floors[k]`` (its lower bound), cycles that it worked together with a layer
    charged above that layer's own floor move to it, so no layer is reported faster than
    its bound while another has time to spare. The charges are rounded to whole cycles by
    largest remainder: they add up to ``total`` exactly.
    """
    points = sorted({0, total, *(t for sp in spans for iv in sp for t in iv)})
    edges: list[tuple[int, int, int]] = []  # (time, +1 start / -1 end, layer)
    for k, sp in enumerate(spans):
        for a, b in sp:
            if b > a:
                edges += [(a, 1, k), (b, -1, k)]
    edges.sort(key=lambda e: (e[0], e[1]))
    share = [0.0] * len(spans)
    shared: dict[tuple[int, int], float] = {}  # (j, k): cycles charged to j while k also worked
    active: dict[int, int] = {}
    pending = 0.0  # idle cycles waiting for the next layer that works
    prev = 0
    ei = 0
    for t in points:
        if t > prev:
            if active:
                part = (t - prev) / len(active)
                for k in active:
                    share[k] += part
                    for other in active:
                        if other != k:
                            shared[k, other] = shared.get((k, other), 0.0) + part
            else:
                pending += t - prev
        while ei < len(edges) and edges[ei][0] == t:
            _, d, k = edges[ei]
            if d > 0:
                if pending and not active:
                    share[k] += pending
                    pending = 0.0
                active[k] = active.get(k, 0) + 1
            else:
                active[k] -= 1
                if not active[k]:
                    del active[k]
            ei += 1
        prev = t
    if spans:
        share[-1] += pending
    if floors is not None:
        need = [math.ceil(f) for f in floors]
        for (j, k), cycles in sorted(shared.items()):
            move = min(cycles, max(0.0, need[k] - share[k]), max(0.0, share[j] - need[j]))
            share[j] -= move
            share[k] += move
    whole = [math.floor(x + 1e-9) for x in share]
    rest = total - sum(whole)
    for k in sorted(range(len(share)), key=lambda k: whole[k] - share[k])[:max(rest, 0)]:
        whole[k] += 1
    return whole


def partition_labels(runs: Sequence[PartitionRun]) -> list[str]:
    """A short label per run: ``p0``, ``p1``, ... by partition in order of first call (``tvm-npu inspect``
    numbers partitions the same way); a partition's later calls get ``.2``, ``.3``, ... (``p0.2``)."""
    number: dict[str, int] = {}
    calls: dict[str, int] = {}
    labels = []
    for run in runs:
        k = number.setdefault(run.symbol, len(number))
        calls[run.symbol] = calls.get(run.symbol, 0) + 1
        labels.append(f"p{k}" + (f".{calls[run.symbol]}" if calls[run.symbol] > 1 else ""))
    return labels


def _work_of(run: PartitionRun) -> list[tuple[LayerInfo, dict[str, int], int, int, list[tuple[int, int]],
                                                 EngineBound]]:
    """Per layer of one partition run: (layer, busy cycles per timeline track, useful and wasted DRAM bytes,
    the intervals in which its instructions work, its engine bound). Waiting on or signalling a semaphore
    is not work; the DRAM channel's time lies inside its DMA instruction's."""
    hw = parse_target(run.artifact.target).hw
    program = decode_program(run.artifact.program)
    events: dict[int, list] = {}
    for ev in run.trace:
        events.setdefault(ev.index, []).append(ev)
    out = []
    for layer in run.artifact.layers:
        busy = {"tensor": 0, "vector": 0, "DMA_LOAD": 0, "DMA_STORE": 0, "DRAM": 0}  # per timeline track
        moved = wasted = 0
        working = []
        index = [i for a, b in layer.ranges() for i in range(a, b)]
        for i in index:
            ins = program.instructions[i]
            if isinstance(ins, isa.Wait | isa.Signal):  # synchronisation, not work
                continue
            for ev in events.get(i, ()):
                key = ev.track.lower() if ev.track in ("TENSOR", "VECTOR") else ev.track
                busy[key] += ev.end - ev.start
                if ev.track != "DRAM":  # the channel time lies inside its DMA instruction's span
                    working.append((ev.start, ev.end))
            if isinstance(ins, isa.DmaLoad | isa.DmaStore):
                cost = dma_cost(hw, ins)
                moved += cost.useful_bytes
                wasted += cost.wasted_bytes
        out.append((layer, busy, moved, wasted, working,
                    engine_bound(hw, layer, (program.instructions[i] for i in index))))
    return out


def _layers_of(run: PartitionRun, first_group: int, label: str = "") -> tuple[list[LayerReport],
                                                                               list[list[tuple[int, int]]]]:
    """Per-layer figures of one partition run, and each layer's working intervals; its layer groups are
    labelled from ``g{first_group}`` on, its layers ``{label}/{name}``.

    A layer's cycles are those in which its instructions work (:func:`tvm_npu.report.occupancy.occupancy`);
    its share of the run's cycles is :func:`attribute`'s. The binding resource is the busiest of the tensor
    engine, the vector engine and the DRAM channel (cycles spent moving the layer's bytes); an engine
    blocked on a semaphore is waiting, not busy.
    """
    hw = parse_target(run.artifact.target).hw
    work = _work_of(run)
    spans = [w[4] for w in work]
    bounds = [layer_bound(hw, w[0])[0] for w in work]
    shares = attribute(spans, run.stats.total_cycles, bounds)
    layers = []
    for (layer, busy, moved, wasted, _, eng), occ, share, bound in zip(work, occupancy(spans), shares, bounds,
                                                                        strict=True):
        load = {"tensor": busy["tensor"], "vector": busy["vector"], "dma": busy["DRAM"]}
        cycles = occ.cycles
        layers.append(LayerReport(
            partition=run.symbol, name=layer.name, op=layer.op, dtype=layer.dtype, description=layer.description,
            layout_in=layer.layout_in, layout_out=layer.layout_out, tile=layer.tile, macs=layer.macs,
            input_bytes=layer.input_bytes, weight_bytes=layer.weight_bytes, output_bytes=layer.output_bytes,
            dram_bytes=moved, wasted_bytes=wasted, sram_peak_bytes=layer.sram_bytes, cycles=cycles,
            bound_cycles=bound, efficiency=bound / cycles if cycles else 0.0,
            bound_by=max(load, key=load.get), predicted_cycles=layer.predicted_cycles, fused=tuple(layer.fused),
            group=f"g{first_group + layer.group}" if layer.group >= 0 else "", label=f"{label}/{layer.name}",
            start=occ.start, end=occ.end, overlap_cycles=occ.overlap, share_cycles=share,
            engine_bound_cycles=eng.cycles, engine_efficiency=eng.cycles / cycles if cycles else 0.0,
            engine_bound_by=eng.bound_by,
        ))
    return layers, spans


def _groups_of(run: PartitionRun, layers: Sequence[LayerReport], spans: Sequence[Sequence[tuple[int, int]]],
               first_group: int) -> Iterable[GroupReport]:
    """The layer groups of one partition run, from its layers' figures and working intervals (``layers``,
    ``spans``: :func:`_layers_of`'s).

    A group's cycles are those in which any member works; its bound the datasheet's for a fused group,
    ``max(the members' MACs / peak, the bytes entering or leaving the group / bandwidth)`` (an
    intermediate kept on chip is no member's compulsory bytes)."""
    hw = parse_target(run.artifact.target).hw
    for n, g in enumerate(run.artifact.groups):
        label = f"g{first_group + n}"
        index = [k for k, x in enumerate(layers) if x.group == label]
        members = [layers[k] for k in index]
        (occ,) = occupancy([[iv for k in index for iv in spans[k]]])
        parts = [layer_bound(hw, run.artifact.layers[k]) for k in index]
        bound = max(sum(p[1] for p in parts), sum(p[2] for p in parts))
        yield GroupReport(
            partition=run.symbol, label=label, members=tuple(x.name for x in members), rows=g.rows,
            slices=g.slices, sram_peak_bytes=g.sram_bytes, saved_bytes=g.saved_bytes,
            dram_bytes=sum(x.dram_bytes for x in members), cycles=occ.cycles, bound_cycles=bound,
            efficiency=bound / occ.cycles if occ.cycles else 0.0, predicted_cycles=g.predicted_cycles,
            prediction_error=(g.predicted_cycles - occ.cycles) / occ.cycles if occ.cycles else 0.0,
            share_cycles=sum(x.share_cycles for x in members),
        )


@dataclass(frozen=True)
class ProgramMemory:
    """What one compiled partition needs in the device's DRAM (bytes)."""

    program_bytes: int  # instructions and metadata: the artifact without its constants
    weight_bytes: int  # the constants it carries
    scratch_bytes: int  # its DRAM intermediates


def program_memory(artifact: Artifact, program: isa.Program | None = None) -> ProgramMemory:
    """:class:`ProgramMemory` of ``artifact`` (``program``: its decoded program, if already at hand)."""
    tensors = (program or decode_program(artifact.program)).tensors
    weights = sum(t.nbytes for t in tensors if t.kind == isa.TensorKind.CONSTANT)
    return ProgramMemory(len(artifact.encode()) - weights, weights,
                         sum(t.nbytes for t in tensors if t.kind == isa.TensorKind.SCRATCH))


def model_bound(profile: Profile, io_bytes: int) -> float:
    """``max(MACs / peak, (model inputs + weights + model outputs) / bandwidth)`` over the NPU runs.

    Weights are the distinct constant tensors of the programs; ``io_bytes`` the model's own
    inputs and outputs (intermediates between partitions are not compulsory).
    """
    compute = 0.0
    weights: dict[str, int] = {}
    hw = None
    for run in profile.runs:
        hw = parse_target(run.artifact.target).hw
        compute += sum(x.macs / hw.peak_macs_per_cycle(DType.from_str(x.dtype)) for x in run.artifact.layers if x.macs)
        for t in decode_program(run.artifact.program).tensors:
            if t.kind == isa.TensorKind.CONSTANT:
                weights[f"{run.symbol}/{t.name}"] = t.nbytes
    if hw is None:
        return 0.0
    return max(compute, (io_bytes + sum(weights.values())) / hw.dram_bytes_per_cycle)


def report(profile: Profile, host_macs: int = 0, layout_transforms: int = 0, io_bytes: int = 0,
           memory: DeploymentMemory | None = None, shape: str = "") -> ModelReport:
    """Per-layer and whole-model figures of a run profiled with ``tvm_npu.profile(trace=True)``;
    ``io_bytes``: the model's own input and output bytes (for the model-level bound); ``memory``: its build's
    deployment memory (:func:`tvm_npu.report.memory.build_memory`); ``shape``: the run's input shapes, named by
    the report."""
    if any(not run.trace for run in profile.runs):
        raise ValueError("the per-layer report needs a timeline: profile the run with tvm_npu.profile(trace=True)")
    layers: list[LayerReport] = []
    groups: list[GroupReport] = []
    for run, label in zip(profile.runs, partition_labels(profile.runs), strict=True):
        mine, spans = _layers_of(run, len(groups), label)
        groups += _groups_of(run, mine, spans, len(groups))
        layers += mine
    distinct = {run.symbol: program_memory(run.artifact) for run in profile.runs}
    return ModelReport(
        weight_bytes=sum(m.weight_bytes for m in distinct.values()),
        program_bytes=sum(m.program_bytes for m in distinct.values()),
        sram_high_water=max((r.stats.sram_high_water for r in profile.runs), default=0),
        memory=memory,
        shape=shape,
        model_bound_cycles=model_bound(profile, io_bytes),
        layers=tuple(layers),
        groups=tuple(groups),
        cycles=sum(r.stats.total_cycles for r in profile.runs),
        bound_cycles=sum(x.bound_cycles for x in layers),
        dram_bytes=sum(r.stats.dma_load_bytes + r.stats.dma_store_bytes for r in profile.runs),
        compulsory_bytes=sum(x.input_bytes + x.weight_bytes + x.output_bytes for x in layers),
        npu_macs=sum(x.macs for x in layers),
        host_macs=host_macs,
        layout_transforms=layout_transforms,
    )
