"""Per-layer SQNR of a quantized model against its fp32 source, beside each layer's cycles in each precision.

For every activation tensor the QDQ model quantizes (``T -> QuantizeLinear -> DequantizeLinear``) and
the fp32 model also computes, on onnxruntime, over the given samples (float64 sums, :mod:`tvm_npu.tools.sqnr`):

* **SQNR**: the quantized model's ``T`` (the DequantizeLinear output the next layer reads) against the
  fp32 model's: the error accumulated up to and including this layer;
* **alone**: the error this layer adds by itself: its QDQ subgraph (the QuantizeLinear/DequantizeLinear
  of its activation inputs, its quantized weights, the layer, its output's QuantizeLinear/DequantizeLinear),
  cut out with ``onnx.utils.Extractor`` and fed the fp32 model's input tensors, so its inputs carry only
  their own quantization at this layer's input parameters, against the fp32 ``T``;
* the cycles of the layer writing ``T`` with its tensors in int8, 16-bit (A16W8) and fp16, by the
  datasheet's bound (:mod:`tvm_npu.tools.layer_cost`: computed from the graph, not compiled).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from matplotlib.figure import Figure

from tvm_npu.config import HardwareConfig, parse_target
from tvm_npu.report.text import columns
from tvm_npu.tools.layer_cost import PRECISIONS, Layer, layer_cycles, layers
from tvm_npu.tools.quant_error import with_outputs
from tvm_npu.tools.sqnr import Energy, OrtModel, QuantizedTensor, Sample, quantized_tensors


@dataclass(frozen=True)
class LayerSQNR:
    """One quantized activation tensor."""

    tensor: str
    op: str  # the layer writing it in the quantized model ("input" for a graph input)
    bits: int
    sqnr_db: float  # accumulated: the quantized model's tensor against the fp32 model's
    alone_db: float  # the layer alone on the fp32 model's inputs (nan: its inputs are not fp32 tensors)
    cycles: dict[str, float] = field(default_factory=dict)  # precision -> datasheet bound; {} for an input


def _alone_model(extractor: onnx.utils.Extractor, quantized: onnx.ModelProto, t: QuantizedTensor,
                 available: set[str]) -> tuple[onnx.ModelProto, dict[str, str]] | None:
    """The QDQ subgraph from the fp32 tensors feeding the layer writing ``t`` to its carrier, and which fp32
    tensor feeds each of its inputs; None when one of them is not a tensor of the fp32 model."""
    nodes = {o: n for n in quantized.graph.node for o in n.output}
    consts = {t.name for t in quantized.graph.initializer}
    feeds: dict[str, str] = {}
    for i in nodes[t.written].input:
        dq = nodes.get(i)
        source = dq.input[0] if dq is not None and dq.op_type == "DequantizeLinear" else None
        q = nodes.get(source) if source else None
        if q is not None and q.op_type == "QuantizeLinear" and q.input[0] not in consts:
            feeds[q.input[0]] = q.input[0]
        elif i and i not in consts and not (dq is not None and dq.op_type == "DequantizeLinear"):
            feeds[i] = i
    if not feeds or not set(feeds.values()) <= available:
        return None
    try:
        return extractor.extract_model(list(feeds), [t.carrier]), feeds
    except Exception:  # a cut Extractor cannot type: the row shows no figure rather than failing the report
        return None


def _reference_values(reference: onnx.ModelProto, names: set[str],
                      samples: Sequence[Sample]) -> list[dict[str, np.ndarray]]:
    """Per sample, the tensors ``names`` of the fp32 model that shape inference types (inputs: the sample's)."""
    inputs = {i.name for i in reference.graph.input}
    g = onnx.shape_inference.infer_shapes(reference).graph
    typed = {vi.name for vi in (*g.value_info, *g.output) if vi.type.tensor_type.elem_type}
    session = OrtModel(with_outputs(reference, sorted(names & typed - inputs)))
    return [{**session.run(s), **{n: s[n] for n in inputs & names if n in s}} for s in samples]


def _row(t: QuantizedTensor, layer: Layer | None, alone: tuple[onnx.ModelProto, dict[str, str]] | None,
         expected: Sequence[dict[str, np.ndarray]], got: Sequence[dict[str, np.ndarray]],
         hw: HardwareConfig) -> LayerSQNR:
    total, own = Energy(), Energy()
    runner = None if alone is None or not set(alone[1].values()) <= set(expected[0]) else OrtModel(alone[0])
    for ref, out in zip(expected, got, strict=True):
        total.add(ref[t.name], out[t.carrier])
        if runner is not None:
            own.add(ref[t.name], runner.run({k: ref[v] for k, v in alone[1].items()})[t.carrier])
    cycles = {} if layer is None else {p: layer_cycles(hw, layer, p) for p in PRECISIONS}
    alone_db = total.db if layer is None else own.db if runner is not None else math.nan  # an input: its own Q
    return LayerSQNR(t.name, layer.op if layer else "input", t.bits, total.db, alone_db, cycles)


def layer_sqnr(reference: onnx.ModelProto, quantized: onnx.ModelProto, samples: Sequence[Sample], *,
               target: str = "npu") -> tuple[list[LayerSQNR], list[str]]:
    """(one row per quantized activation tensor in graph order, quantized tensors the fp32 model lacks)."""
    hw = parse_target(target).hw
    tensors = quantized_tensors(quantized)
    ref_names = {i.name for i in reference.graph.input} | {o for n in reference.graph.node for o in n.output}
    kept = [t for t in tensors.values() if t.name in ref_names]
    if not kept:
        raise ValueError("no activation tensor the quantized model quantizes is a tensor of the fp32 model: compare "
                         "a QDQ model made from it by onnxruntime's quantizer (tvm-npu quantize), which keeps names")
    producers: dict[str, Layer] = {o: x for x in layers(quantized) for o, _ in x.outputs}
    extractor = onnx.utils.Extractor(onnx.shape_inference.infer_shapes(quantized))  # it types cuts by value_info
    alone = {t.name: _alone_model(extractor, quantized, t, ref_names) for t in kept if t.name in producers}
    needed = {t.name for t in kept} | {v for a in alone.values() if a for v in a[1].values()}
    expected = _reference_values(reference, needed, samples)
    session = OrtModel(with_outputs(quantized, [t.carrier for t in kept]))
    got = [session.run(s) for s in samples]
    rows = [_row(t, producers.get(t.name), alone.get(t.name), expected, got, hw) for t in kept]
    return rows, [t for t in tensors if t not in ref_names]


def _db(x: float) -> str:
    return "inf" if x == math.inf else "-" if math.isnan(x) else f"{x:.1f}"


def sqnr_table(rows: Sequence[LayerSQNR]) -> str:
    """The rows as aligned text, one line per tensor."""
    head = ("tensor", "op", "bits", "SQNR dB", "alone dB", *(f"{p} cycles" for p in PRECISIONS))
    body = [(r.tensor if len(r.tensor) <= 40 else f"...{r.tensor[-37:]}", r.op, str(r.bits), _db(r.sqnr_db),
             _db(r.alone_db), *(f"{r.cycles[p]:,.0f}" if r.cycles else "-" for p in PRECISIONS)) for r in rows]
    return "\n".join(columns(head, body))


def plot_sqnr(rows: Sequence[LayerSQNR], path: str | Path, title: str) -> None:
    """Write a PNG: per layer, the accumulated and the layer-alone SQNR (top) and its cycles in each precision
    (bottom), layers in graph order."""
    x = np.arange(len(rows))
    fig = Figure(figsize=(max(8.0, 0.22 * len(rows) + 3), 7), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    clip = [min(r.alone_db, 120.0) for r in rows]  # an exact layer (inf) drawn at the top of the axis
    top.bar(x, clip, color="tab:orange", alpha=0.6, label="this layer alone (fp32 inputs)")
    top.plot(x, [min(r.sqnr_db, 120.0) for r in rows], "o-", color="tab:blue", ms=3, label="accumulated")
    top.set_ylabel("SQNR against fp32 (dB)")
    top.set_title(title)
    top.legend(loc="lower left")
    for p in PRECISIONS:
        bottom.plot(x, [r.cycles.get(p, np.nan) for r in rows], ".-", label=p)
    bottom.set_yscale("log")
    bottom.set_ylabel("cycles (datasheet bound)")
    bottom.legend(loc="upper right")
    bottom.set_xticks(x, [f"{r.tensor[:18]} ({r.bits})" for r in rows], rotation=90, fontsize=6)
    fig.savefig(str(path), dpi=120)
