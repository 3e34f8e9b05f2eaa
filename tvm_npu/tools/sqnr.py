"""Signal-to-quantization-noise ratio (SQNR) of quantized ONNX models against their fp32 source, on onnxruntime.

The pieces the per-layer report (:mod:`tvm_npu.tools.sqnr_report`) and the precision search
(:mod:`tvm_npu.tools.precision_search`) share: the SQNR itself, computed in float64 over every
element of every sample (``10 log10(sum ref^2 / sum (got - ref)^2)``, so samples of small signal
weigh less, as they do in the noise a user sees); which activation tensors a QDQ model quantizes
and to how many bits; and one onnxruntime session run over many samples. This module imports
nothing of :mod:`tvm_npu.tools.quantize`, which calls the search.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

#: One input sample: an array per graph input.
Sample = dict[str, np.ndarray]


@dataclass
class Energy:
    """Signal and noise energy summed in float64 over tensors, samples and elements."""

    signal: float = 0.0
    noise: float = 0.0

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        if np.shape(ref) != np.shape(got):
            raise ValueError(f"cannot compare a tensor of shape {np.shape(got)} with one of {np.shape(ref)}")
        r = np.asarray(ref, np.float64)
        self.signal += float(np.sum(r * r))
        self.noise += float(np.sum((np.asarray(got, np.float64) - r) ** 2))

    @property
    def db(self) -> float:
        """The SQNR in dB: inf without noise, -inf without signal."""
        if self.noise == 0:
            return math.inf
        return 10 * math.log10(self.signal / self.noise) if self.signal > 0 else -math.inf

    @property
    def ratio(self) -> float:
        """noise / signal (what adds up when independent errors add)."""
        return self.noise / self.signal if self.signal > 0 else math.inf


def sqnr_db(pairs: Iterable[tuple[np.ndarray, np.ndarray]]) -> float:
    """The SQNR (dB) of (reference, quantized) tensor pairs taken together."""
    energy = Energy()
    for ref, got in pairs:
        energy.add(ref, got)
    return energy.db


class OrtModel:
    """One onnxruntime CPU session of a model, run on many samples.

    Only the basic graph optimisations, as :mod:`tvm_npu.tools.quant_error` runs QDQ models: the
    extended level fuses QDQ groups into onnxruntime's integer kernels, whose u8s8 path saturates
    on AVX2 CPUs without VNNI, which is not the model's error.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        import onnxruntime as ort  # the callers have checked it is installed (require_onnxruntime)

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.log_severity_level = 3
        self.session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        self.inputs = {i.name: i.type for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs()]

    def run(self, sample: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every graph output by name; ``sample`` holds at least the model's inputs (others are ignored)."""
        feeds = {n: np.asarray(sample[n], np.float16 if t == "tensor(float16)" else np.float32)
                 if "float" in t else np.asarray(sample[n]) for n, t in self.inputs.items()}
        return dict(zip(self.outputs, self.session.run(self.outputs, feeds), strict=True))


def output_energy(reference: Sequence[Mapping[str, np.ndarray]], model: onnx.ModelProto,
                  samples: Sequence[Sample]) -> Energy:
    """Signal and noise of every graph output of ``model`` against ``reference`` (per sample, by name)."""
    session, energy = OrtModel(model), Energy()
    for ref, sample in zip(reference, samples, strict=True):
        got = session.run(sample)
        for name, value in ref.items():
            energy.add(value, got[name])
    return energy


def _initializers(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in model.graph.initializer}


@dataclass(frozen=True)
class QuantizedTensor:
    """A float activation tensor of the source model as a QDQ model quantizes it."""

    name: str  # the fp32 tensor
    written: str  # what its producer writes in the QDQ model, the QuantizeLinear's input (mostly ``name``)
    carrier: str  # the DequantizeLinear output the rest of the graph reads in its place
    bits: int  # 8 or 16
    dtype: str  # the quantized type: int8, uint8, int16, uint16


def fp32_name(quantized: str, restored: str) -> str:
    """The fp32 name of the tensor a QuantizeLinear of ``quantized`` and a DequantizeLinear writing ``restored``
    stand for: onnxruntime renames a graph output ``y``'s producer to ``y_QuantizeLinear_Input`` so that the
    DequantizeLinear can write ``y``; every other tensor keeps its name before the QuantizeLinear."""
    return restored if quantized.endswith("_QuantizeLinear_Input") else quantized


def quantized_tensors(model: onnx.ModelProto) -> dict[str, QuantizedTensor]:
    """The activation tensors ``model`` quantizes (QuantizeLinear -> DequantizeLinear of a non-constant tensor),
    by fp32 name, in graph order. The type is the zero point's (onnxruntime always writes one)."""
    inits = _initializers(model)
    dq_of = {n.input[0]: n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    found: dict[str, QuantizedTensor] = {}
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] in inits or node.output[0] not in dq_of:
            continue
        zp = inits.get(node.input[2]) if len(node.input) > 2 else None
        dtype = numpy_helper.to_array(zp).dtype if zp is not None else np.dtype(np.uint8)
        carrier = dq_of[node.output[0]]
        name = fp32_name(node.input[0], carrier)
        found.setdefault(name, QuantizedTensor(name, node.input[0], carrier, 8 * dtype.itemsize, dtype.name))
    return found
