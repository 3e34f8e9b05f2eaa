"""Layer-by-layer error of a quantized (QDQ int8) or fp16 ONNX model against its fp32 reference.

When a quantized model loses accuracy, the question is where: this finds, for every
fp32 tensor of the reference, the tensor of the other model that carries the same
value, makes all of them graph outputs of both models, runs both on the same inputs
and reports per tensor the absolute error, the SNR, the cosine similarity and, for
QDQ tensors, the error in quantization steps.

Matching relies on names, which both usual converters keep: onnxruntime's
``quantize_static`` turns an fp32 tensor ``T`` into ``T -> QuantizeLinear ->
DequantizeLinear``, so the DequantizeLinear's output carries ``T`` as the rest of the
graph sees it; ``onnxconverter_common``'s fp16 conversion keeps ``T`` itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import tvm
from onnx import numpy_helper
from tvm import relax

from tvm_npu.compiler.driver import build, build_reference
from tvm_npu.compiler.onnx_import import bind_input_shapes
from tvm_npu.config import parse_target
from tvm_npu.models.inputs import graph_inputs
from tvm_npu.tools.bench import to_numpy
from tvm_npu.tools.quantize import Sample, require_onnxruntime

ENGINES = ("npu", "onnxruntime")
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}


@dataclass(frozen=True)
class TensorMatch:
    """A reference tensor and the tensor of the compared model that carries its value."""

    name: str  # in the fp32 reference
    op: str  # op type of the reference node that produced it
    carrier: str  # in the compared model
    scale: float | None  # quantization step of the carrier when a DequantizeLinear produced it


@dataclass(frozen=True)
class LayerError:
    """The error of one tensor of the compared model against the reference."""

    name: str
    op: str
    shape: tuple[int, ...]
    max_abs: float
    mean_abs: float
    snr_db: float  # 10 log10(sum ref^2 / sum err^2); inf when the tensors are equal
    cosine: float
    steps: float | None  # max_abs / quantization step, for QDQ tensors
    output: bool  # a graph output of the reference


def _typed(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Every tensor of ``model`` whose type onnx shape inference knows, by name."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    return {vi.name: vi for vi in (*g.input, *g.value_info, *g.output) if vi.type.tensor_type.elem_type}


def _scalar(tensor: onnx.TensorProto | None) -> float | None:
    """The value of a one-element initializer (a per-tensor scale), else None."""
    a = None if tensor is None else numpy_helper.to_array(tensor)
    return float(a.reshape(-1)[0]) if a is not None and a.size == 1 else None


def match_tensors(quantized: onnx.ModelProto, reference: onnx.ModelProto) -> tuple[list[TensorMatch], list[str]]:
    """(matches in the reference's graph order, reference tensors without a counterpart).

    Candidates are the float outputs of the reference's compute nodes: those that depend
    on a graph input (constant subgraphs make weights, not layers). The counterpart of
    ``T`` is the output of the DequantizeLinear fed by the QuantizeLinear of ``T``, else
    ``T`` itself; a node of the compared model must produce it, with a type shape
    inference knows (it becomes a graph output there).
    """
    ref_types, q_types = _typed(reference), _typed(quantized)
    inits = {t.name: t for t in quantized.graph.initializer}
    quantized_as: dict[str, str] = {}  # QuantizeLinear input -> its output
    dequantized_as: dict[str, str] = {}  # DequantizeLinear input -> its output
    dq_scale: dict[str, str] = {}  # DequantizeLinear output -> its scale tensor
    produced: set[str] = set()  # value_info may list tensors the quantizer removed
    for node in quantized.graph.node:
        produced.update(node.output)
        if node.op_type == "QuantizeLinear":
            quantized_as[node.input[0]] = node.output[0]
        elif node.op_type == "DequantizeLinear":
            dequantized_as[node.input[0]] = node.output[0]
            dq_scale[node.output[0]] = node.input[1]
    matches, skipped = [], []
    live = set(graph_inputs(reference))  # tensors that depend on a graph input
    for node in reference.graph.node:
        if not live.intersection(node.input):
            continue
        live.update(node.output)
        for name in node.output:
            if not name or ref_types.get(name, onnx.ValueInfoProto()).type.tensor_type.elem_type not in FLOAT_TYPES:
                continue
            carrier = dequantized_as.get(quantized_as.get(name, ""), name)
            if carrier not in produced or carrier not in q_types:
                skipped.append(name)
                continue
            scale = _scalar(inits.get(dq_scale[carrier])) if carrier in dq_scale else None
            matches.append(TensorMatch(name, node.op_type, carrier, scale))
    return matches, skipped


def with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph outputs also include ``names`` (types from shape inference)."""
    typed = _typed(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    present = {o.name for o in out.graph.output}
    out.graph.output.extend(typed[n] for n in dict.fromkeys(names) if n not in present)
    return out


def _feeds(model: onnx.ModelProto, sample: Mapping[str, np.ndarray]) -> Sample:
    """``sample`` in the input dtypes of ``model`` (an fp16 model takes float16)."""
    return {n: np.asarray(sample[n]).astype(spec.dtype) for n, spec in graph_inputs(model).items()}


def _run_onnxruntime(model: onnx.ModelProto, sample: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``model`` as written, on onnxruntime's CPU provider.

    Only the basic graph optimisations: the extended level fuses DequantizeLinear -> Conv ->
    QuantizeLinear into onnxruntime's own integer kernels, whose u8s8 path saturates on
    AVX2 CPUs without VNNI (tens of quantization steps off), which is not the model's error.
    """
    ort = require_onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.log_severity_level = 3  # errors only: not its notes on unused initializers
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, session.run(names, _feeds(model, sample)), strict=True))


def _run_tvm(executable: relax.VMExecutable, model: onnx.ModelProto,
             sample: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    vm = relax.VirtualMachine(executable, tvm.cpu())
    args = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in _feeds(model, sample).values()]
    return dict(zip([o.name for o in model.graph.output], to_numpy(vm["main"](*args)), strict=True))


def reference_engine() -> str:
    """What runs the fp32 reference: onnxruntime's CPU provider, or llvm when onnxruntime is missing."""
    try:
        require_onnxruntime()
    except ImportError:
        return "llvm"
    return "onnxruntime (CPU)"


def _reference_outputs(model: onnx.ModelProto, sample: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    if reference_engine() == "llvm":
        return _run_tvm(build_reference(model), model, sample)
    return _run_onnxruntime(model, sample)


def layer_error(match: TensorMatch, got: np.ndarray, ref: np.ndarray, output: bool = False) -> LayerError:
    """The figures of one tensor (computed in float64)."""
    if got.shape != ref.shape:
        raise ValueError(f"tensor {match.name!r} has shape {ref.shape} in the reference but {got.shape} as "
                         f"{match.carrier!r} in the compared model")
    r, g = ref.astype(np.float64), got.astype(np.float64)
    err = g - r
    signal, noise = float(np.sum(r * r)), float(np.sum(err * err))
    snr = math.inf if noise == 0 else 10 * math.log10(signal / noise) if signal > 0 else -math.inf
    norms = float(np.linalg.norm(r) * np.linalg.norm(g))
    cosine = float(np.sum(r * g)) / norms if norms > 0 else 1.0 if noise == 0 else 0.0
    max_abs = float(np.max(np.abs(err), initial=0.0))
    return LayerError(
        name=match.name, op=match.op, shape=tuple(ref.shape), max_abs=max_abs,
        mean_abs=float(np.mean(np.abs(err))) if err.size else 0.0, snr_db=snr, cosine=cosine,
        steps=max_abs / match.scale if match.scale else None, output=output)


def layer_errors(quantized: onnx.ModelProto, reference: onnx.ModelProto, matches: Sequence[TensorMatch],
                 sample: Mapping[str, np.ndarray], *, target: str = "npu", engine: str = "npu") -> list[LayerError]:
    """Run both models with ``matches`` as extra outputs on ``sample``; one row per match.

    ``engine`` runs the compared model: ``npu`` (tvm_npu.build for ``target``, simulated)
    or ``onnxruntime`` (quantization error alone, without the compiler's). The sample's shapes bind the
    models' symbolic input dimensions.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    q_inputs, r_inputs = list(graph_inputs(quantized)), list(graph_inputs(reference))
    if q_inputs != r_inputs:
        raise ValueError(f"the models take different inputs: {q_inputs} against the reference's {r_inputs}")
    shapes = {n: np.shape(a) for n, a in sample.items()}
    quantized, reference = bind_input_shapes(quantized, shapes), bind_input_shapes(reference, shapes)
    ref_model = with_outputs(reference, [m.name for m in matches])
    q_model = with_outputs(quantized, [m.carrier for m in matches])
    if engine == "npu":
        got = _run_tvm(build(q_model, str(parse_target(target))), q_model, sample)
    else:
        got = _run_onnxruntime(q_model, sample)
    ref = _reference_outputs(ref_model, sample)
    outputs = {o.name for o in reference.graph.output}
    return [layer_error(m, got[m.carrier], ref[m.name], m.name in outputs) for m in matches]


def compare_models(quantized: onnx.ModelProto, reference: onnx.ModelProto, inputs: Mapping[str, np.ndarray], *,
                   target: str = "npu", engine: str = "npu") -> list[LayerError]:
    """Per-tensor error of ``quantized`` against ``reference`` on ``inputs``, in graph order.

    Reference tensors without a counterpart are left out (see :func:`match_tensors`).
    """
    matches, _ = match_tensors(quantized, reference)
    return layer_errors(quantized, reference, matches, inputs, target=target, engine=engine)


def _figure(x: float, fmt: str) -> str:
    return "inf" if x == math.inf else "-inf" if x == -math.inf else format(x, fmt)


def table(rows: Sequence[LayerError]) -> str:
    """The rows as aligned text, one line per tensor."""
    head = ("tensor", "op", "shape", "max|err|", "mean|err|", "SNR dB", "cosine", "steps")
    lines = [head]
    for r in rows:
        name = r.name if len(r.name) <= 40 else f"...{r.name[-37:]}"
        lines.append((name + (" (output)" if r.output else ""), r.op, "x".join(map(str, r.shape)) or "scalar",
                      f"{r.max_abs:.3g}", f"{r.mean_abs:.3g}", _figure(r.snr_db, ".1f"), f"{r.cosine:.5f}",
                      "-" if r.steps is None else f"{r.steps:.2f}"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = []
    for line in lines:
        cells = zip(line, widths, strict=True)
        text.append("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(cells)).rstrip())
    return "\n".join(text)
