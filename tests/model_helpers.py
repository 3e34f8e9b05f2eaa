"""Model checks only the tests use: the light models' stored reference outputs, MAC counts of an ONNX
graph, and the activation statistics behind the bundled models' scale check (tests/e2e/test_zoo.py).

With standard-normal inputs every activation of every bundled exporter-style model, at full size and at
the tiny sizes the tests use, has a scale (RMS, the std where the mean is near 0) within [0.1, 10];
:func:`scale_outliers` says which tensors the check leaves out and why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from tvm_npu.models.light import light_model_path

FLOAT = TensorProto.FLOAT


def reference_output(name: str) -> np.ndarray:
    """The expected output stored beside a light model."""
    path = light_model_path(name).with_name(f"light_{name}_output_0.pb")
    return numpy_helper.to_array(onnx.load_tensor(str(path)))


def count_macs(model: onnx.ModelProto) -> dict[str, int]:
    """Multiply-accumulates per operator type (Conv, MatMul, Gemm), from inferred static shapes."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)  # through Shape ops
    g = inferred.graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in (*g.input, *g.value_info, *g.output)}
    shapes.update({t.name: list(t.dims) for t in g.initializer})
    macs: dict[str, int] = {}
    for node in g.node:
        if node.op_type not in ("Conv", "MatMul", "Gemm"):
            continue
        out = shapes[node.output[0]]
        if node.op_type == "Conv":
            per_output = int(np.prod(shapes[node.input[1]][1:]))  # (in_c / groups) * kh * kw
        elif node.op_type == "MatMul":
            per_output = shapes[node.input[0]][-1]
        else:
            trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
            per_output = shapes[node.input[0]][0 if trans_a else 1]
        macs[node.op_type] = macs.get(node.op_type, 0) + int(np.prod(out)) * per_output
    return macs


@dataclass(frozen=True)
class ActivationStat:
    """One float tensor computed from the model's inputs: its producer and its statistics."""

    name: str
    op: str
    shape: tuple[int, ...]
    mean: float
    std: float
    exempt: str = ""  # why the scale check leaves it out (see scale_outliers), or ""

    @property
    def rms(self) -> float:
        """Root mean square: the tensor's scale, whether it lies in the spread or the mean."""
        return math.hypot(self.mean, self.std)


#: Operators that only relabel their input's elements: the output is exempt when the input is.
_VIEWS = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze")


def _is_additive_mask(values: np.ndarray) -> bool:
    return values.dtype.kind == "f" and bool(np.all((values == 0) | (values <= -100))) and bool(np.any(values))


def activation_stats(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[ActivationStat]:
    """Run ``model`` in onnxruntime with every intermediate exposed; the statistics of each
    activation, in graph order. Activations are the float tensors that depend on a graph
    input through float tensors: weights, tables and masks computed from constants (or only
    from run-time shapes, like the expanded class token) are not activations."""
    import onnxruntime as ort  # the quantize/test extra

    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    graph = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*graph.input, *graph.value_info, *graph.output)}
    types.update({t.name: t.data_type for t in graph.initializer})
    exposed = onnx.ModelProto.FromString(inferred.SerializeToString())
    listed = {o.name for o in exposed.graph.output}
    floats = [o for n in graph.node for o in n.output if types.get(o) == FLOAT]
    value_infos = {v.name: v for v in graph.value_info}
    exposed.graph.output.extend(value_infos[o] for o in floats if o not in listed)
    session = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = dict(zip(names, session.run(names, dict(feeds)), strict=True))
    values.update({t.name: numpy_helper.to_array(t) for t in graph.initializer})
    values.update(feeds)
    live = {i.name for i in graph.input if types.get(i.name) == FLOAT}
    centred = {(n.input[0], n.input[1]) for n in graph.node if n.op_type == "Sub"}
    exempt_of: dict[str, str] = {}
    stats = []
    for node in graph.node:
        if not any(i in live for i in node.input if types.get(i) == FLOAT):
            continue
        exempt = ""
        if node.op_type == "Softmax":
            exempt = "probabilities"
        elif any(i in values and _is_additive_mask(np.asarray(values[i])) for i in node.input):
            exempt = "masked scores"
        elif node.op_type == "ReduceMean" and (node.input[0], node.output[0]) in centred:
            exempt = "row mean subtracted by a decomposed LayerNorm"
        if node.op_type in _VIEWS:
            exempt = exempt_of.get(node.input[0], exempt)
        for o in node.output:
            if types.get(o) != FLOAT:
                continue
            live.add(o)
            exempt_of[o] = exempt
            a = np.asarray(values[o], np.float64)
            stats.append(ActivationStat(o, node.op_type, a.shape, float(a.mean()), float(a.std()), exempt))
    return stats


def scale_outliers(stats: Sequence[ActivationStat], low: float = 0.1, high: float = 10.0) -> list[ActivationStat]:
    """Activations whose scale (RMS) is outside [low, high].

    The scale, not the std alone, because some tensors carry their size in the mean: a
    squeeze-and-excitation gate sits near 0.8 with a small spread, a LayerNorm variance
    near 1. Three kinds say nothing about vanishing or exploding and are left out:
    ``Softmax`` outputs (probabilities, about 1/row length by construction), scores with
    an additive attention mask (their -100 or -10000 entries are meant to be huge) and the
    row means a decomposed LayerNorm subtracts (near 0 by design).
    """
    return [s for s in stats if not s.exempt and not low <= s.rms <= high]
