"""A float ONNX model re-written in the int8 form the TFLite converter + tf2onnx ``--tflite`` produce (issue 24).

:func:`tflite_form` turns a float model (an exporter-style corpus model, :mod:`tvm_npu.testing.corpus`) into
the QDQ graph a full-int8 TFLite conversion of the same network exports to, with ranges from seeded
calibration inputs run through the float model on onnxruntime. What makes it the TFLite form rather than
``quantize_static``'s:

* the graph input is NHWC float, quantized (``QuantizeLinear``) and transposed to NCHW as int8 (where
  tf2onnx leaves the layout change), the output dequantized back to float;
* weights int8 symmetric per output channel (zero point 0), biases int32 at ``s_x * s_w`` through their own
  ``DequantizeLinear``; a ``MatMul`` followed by the add of a constant vector is one fully connected layer
  (its bias int32 too); the constant operands of elementwise ``Add`` / ``Mul`` / ``Sub`` / ``Div`` are int8
  per tensor;
* activations int8 asymmetric from their calibrated min / max (TFLite's zero-point nudge); ``Relu`` and
  ``Clip(0, 6)`` after a conv, matmul, add or mul are fused into it (no tensor between them);
* TFLite's fixed output quantizations: ``Sigmoid`` (LOGISTIC) and ``Softmax`` 1/256 with zero point -128,
  ``Tanh`` 1/128 with 0; ``MaxPool``, ``AveragePool``, ``Pad``, ``Resize`` keep their input's quantization, and the data
  movements (``Transpose``, ``Reshape``, ``Flatten``, ``Squeeze``, ``Split``, ``Slice``) run on the int8
  tensor between its ``QuantizeLinear`` and ``DequantizeLinear``;
* ``HardSwish`` (HARD_SWISH) and the ``Erf`` form of GELU (GELU) are one quantized operator each: no
  quantization inside them; everything else (swish as LOGISTIC + MUL, batch norms as MUL + ADD, layer
  norm's reductions and arithmetic) is quantized operator by operator, as TFLite's int8 graphs are.

Written here rather than taken from TensorFlow: the tests build models with ``onnx.helper`` only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INT8_MIN, INT8_MAX = -128, 127
CALIBRATION_SAMPLES = 8

#: Operators whose output quantization TFLite fixes, whatever the range.
FIXED_OUTPUT: dict[str, tuple[float, int]] = {"Sigmoid": (1 / 256, -128), "Softmax": (1 / 256, -128),
                                              "Tanh": (1 / 128, 0)}
#: Operators whose output keeps the input's quantization and that read the dequantized input (TFLite's int8
#: AVERAGE_POOL_2D requires equal input and output quantization).
KEEPS_QUANT = {"MaxPool", "AveragePool", "Pad", "Resize"}
#: Data movements tf2onnx leaves on the int8 tensor itself (between a QuantizeLinear and its DequantizeLinear).
INT8_MOVES = {"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Split", "Slice"}
#: Operators TFLite fuses a following ReLU / ReLU6 into.
FUSES_ACTIVATION = {"Conv", "Add", "Sub", "Mul", "MatMul", "Gemm"}
ELEMENTWISE_BINARY = {"Add", "Sub", "Mul", "Div"}


@dataclass(frozen=True)
class Quant:
    """A per-tensor quantization (int8; int16 in TFLite's 16x8 form)."""

    scale: float
    zero_point: int


def tflite_activation_quant(lo: float, hi: float) -> Quant:
    """TFLite's asymmetric int8 parameters for the range [lo, hi]: widened to hold 0, the zero point
    from the minimum, rounded half away from zero (``std::round``) and clamped."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = np.float32((hi - lo) / (INT8_MAX - INT8_MIN)) if hi > lo else np.float32(1.0)
    zp = INT8_MIN - lo / float(scale)
    zp = int(np.clip(np.sign(zp) * np.floor(abs(zp) + 0.5), INT8_MIN, INT8_MAX))
    return Quant(float(scale), zp)


def symmetric_per_channel(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(int8 values, float32 scales): TFLite's weight quantization, symmetric per channel along ``axis``
    into [-127, 127] (an all-zero channel gets scale 1)."""
    other = tuple(i for i in range(w.ndim) if i != axis)
    scale = (np.abs(w).max(axis=other) / INT8_MAX).astype(np.float32)
    scale = np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    return np.clip(np.round(w / scale.reshape(shape)), -INT8_MAX, INT8_MAX).astype(np.int8), scale


def calibration_ranges(model: onnx.ModelProto, samples: int = CALIBRATION_SAMPLES, seed: int = 1
                       ) -> dict[str, tuple[float, float]]:
    """(min, max) of every float value of ``model`` over ``samples`` seeded standard-normal inputs."""
    from tvm_npu.testing.layerwise import ort_run
    from tvm_npu.tools.quant_error import with_outputs

    inits = {t.name for t in model.graph.initializer}
    names = [o for n in model.graph.node for o in n.output if o and o not in inits]
    probe = with_outputs(model, names)
    outs = [o.name for o in probe.graph.output]
    vi = model.graph.input[0]
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    seen: dict[str, list[np.ndarray]] = {vi.name: []}
    for _ in range(samples):
        x = rng.standard_normal(shape).astype(np.float32)
        seen[vi.name].append(x)
        for name, v in zip(outs, ort_run(probe, {vi.name: x}, "basic"), strict=True):
            if np.issubdtype(v.dtype, np.floating):
                seen.setdefault(name, []).append(v)
    return {k: (float(min(np.min(v) for v in vs)), float(max(np.max(v) for v in vs))) for k, vs in seen.items()}


def _consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for t in n.input:
            readers.setdefault(t, []).append(n)
    return readers


def _gelu_inside(graph: onnx.GraphProto, consts: set[str]) -> set[str]:
    """Values inside a GELU (``x * 0.5 * (1 + erf(x / sqrt 2))`` in any arrangement): every elementwise value
    from the ``Erf``'s argument on whose non-constant inputs are ``x`` or values already inside, but the last
    (the GELU's output)."""
    producer = {o: n for n in graph.node for o in n.output}
    readers = _consumers(graph)
    inside: set[str] = set()
    for erf in (n for n in graph.node if n.op_type == "Erf"):
        arg = producer.get(erf.input[0])
        if arg is None or arg.op_type not in ("Div", "Mul"):
            continue
        x = next(t for t in arg.input if t not in consts)
        region, last = {arg.output[0], erf.output[0]}, erf.output[0]
        while len(readers.get(last, [])) == 1:
            nxt = readers[last][0]
            if nxt.op_type not in ELEMENTWISE_BINARY or any(t not in consts | region | {x} for t in nxt.input):
                break
            region.add(nxt.output[0])
            last = nxt.output[0]
        inside |= region - {last}
    return inside


def _fused_into_producer(node: onnx.NodeProto, producer: dict[str, onnx.NodeProto],
                         readers: dict[str, list[onnx.NodeProto]], consts: dict[str, np.ndarray]) -> bool:
    """``node`` is a ReLU / ReLU6 TFLite fuses into the operator computing its input (read by it alone)."""
    if node.op_type == "Clip":
        bounds = [float(consts[t]) if t in consts else None for t in node.input[1:3]]
        if bounds != [0.0, 6.0]:
            return False
    elif node.op_type != "Relu":
        return False
    src = producer.get(node.input[0])
    return src is not None and src.op_type in FUSES_ACTIVATION and len(readers[node.input[0]]) == 1


class _Writer:
    """Emits the QDQ graph node by node: each int8 tensor with its quantization, one shared DQ per tensor."""

    def __init__(self, consts: dict[str, np.ndarray]) -> None:
        self.consts = consts
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.quant: dict[str, Quant] = {}  # int8 tensor name -> its quantization
        self.int8_of: dict[str, str] = {}  # float value name of the source model -> its int8 tensor
        self.bias_scales: dict[str, np.ndarray] = {}  # fully connected MatMul output -> s_x * s_w
        self.graph_input: onnx.ValueInfoProto | None = None
        self._dq: dict[str, str] = {}
        self._n = 0

    def name(self, what: str) -> str:
        self._n += 1
        return f"{what}__{self._n}"

    def init(self, what: str, value: np.ndarray) -> str:
        name = self.name(what)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def qparams(self, q: Quant) -> list[str]:
        return [self.init("scale", np.array(q.scale, np.float32)), self.init("zero_point", np.array(q.zero_point,
                                                                                                   np.int8))]

    def quantize(self, value: str, q: Quant, int8: str) -> str:
        self.nodes.append(helper.make_node("QuantizeLinear", [value, *self.qparams(q)], [int8], name=int8))
        self.quant[int8] = q
        return int8

    def read(self, value: str) -> str:
        """The float a reader of the source model's ``value`` uses: the shared DQ of its int8 tensor, or the
        value itself when it is not quantized (inside a fused operator)."""
        int8 = self.int8_of.get(value)
        if int8 is None:
            return value
        if int8 not in self._dq:
            out = self.name(f"{int8}_dequant")
            self.nodes.append(helper.make_node("DequantizeLinear", [int8, *self.qparams(self.quant[int8])], [out],
                                               name=out))
            self._dq[int8] = out
        return self._dq[int8]

    def weight(self, w: np.ndarray, axis: int) -> tuple[str, np.ndarray]:
        wq, scale = symmetric_per_channel(w, axis)
        out = self.name("weight_dequant")
        inputs = [self.init("weight", wq), self.init("scale", scale), self.init("zero_point",
                                                                                np.zeros(scale.shape, np.int8))]
        self.nodes.append(helper.make_node("DequantizeLinear", inputs, [out], name=out, axis=axis))
        return out, scale

    def bias(self, b: np.ndarray, scale: np.ndarray) -> str:
        """An int32 bias at ``s_x * s_w`` through its own DequantizeLinear (one channel axis)."""
        scale = np.broadcast_to(scale, b.shape).astype(np.float32)
        out = self.name("bias_dequant")
        inputs = [self.init("bias", np.round(b / scale).astype(np.int32)), self.init("scale", scale.ravel()),
                  self.init("zero_point", np.zeros(b.size, np.int32))]
        self.nodes.append(helper.make_node("DequantizeLinear", inputs, [out], name=out, axis=0))
        return out

    def constant(self, c: np.ndarray) -> str:
        """A constant operand of an elementwise operator: int8 per tensor through a DequantizeLinear."""
        q = tflite_activation_quant(float(c.min()), float(c.max()))
        values = np.clip(np.rint(c / np.float32(q.scale)) + q.zero_point, INT8_MIN, INT8_MAX).astype(np.int8)
        out = self.name("const_dequant")
        self.nodes.append(helper.make_node("DequantizeLinear", [self.init("const", values), *self.qparams(q)], [out],
                                           name=out))
        return out


def _gemm_inputs(w: _Writer, node: onnx.NodeProto) -> list[str]:
    """The inputs of a Conv / Gemm / MatMul with an initializer weight: int8 per-channel weights, int32 bias."""
    data = w.read(node.input[0])
    sx = np.float32(w.quant[w.int8_of[node.input[0]]].scale)
    if node.op_type == "Conv":
        axis = 0
    elif node.op_type == "Gemm":
        axis = 0 if any(a.name == "transB" and a.i for a in node.attribute) else 1
    else:
        axis = 1
    wd, ws = w.weight(w.consts[node.input[1]], axis)
    inputs = [data, wd]
    if node.op_type == "MatMul":
        w.bias_scales[node.output[0]] = (sx * ws).astype(np.float32)  # for the Add of its bias
    elif len(node.input) > 2:
        inputs.append(w.bias(w.consts[node.input[2]], (sx * ws).astype(np.float32)))
    return inputs


def _inputs(w: _Writer, node: onnx.NodeProto, gelu: set[str], bias_of: dict[str, str]) -> list[str]:
    """``node``'s inputs in the QDQ graph."""
    if node.op_type in ("Conv", "Gemm", "MatMul") and len(node.input) > 1 and node.input[1] in w.consts:
        return _gemm_inputs(w, node)
    if node.op_type in INT8_MOVES:
        return [w.int8_of.get(t, t) for t in node.input]
    out = []
    for t in node.input:
        if t in w.consts and node.op_type in ELEMENTWISE_BINARY and node.output[0] not in gelu \
                and np.issubdtype(w.consts[t].dtype, np.floating):
            matmul = next((m for m in node.input if bias_of.get(m) == t), None)
            out.append(w.bias(w.consts[t], w.bias_scales[matmul]) if matmul else w.constant(w.consts[t]))
        else:
            out.append(w.read(t))
    return out


def _output_quant(node: onnx.NodeProto, w: _Writer, ranges: dict[str, tuple[float, float]]) -> list[Quant]:
    if node.op_type in FIXED_OUTPUT:
        return [Quant(*FIXED_OUTPUT[node.op_type])]
    if node.op_type in KEEPS_QUANT | INT8_MOVES:
        return [w.quant[w.int8_of[node.input[0]]]] * len(node.output)
    return [tflite_activation_quant(*ranges[o]) for o in node.output]


def _fc_biases(graph: onnx.GraphProto, consts: dict[str, np.ndarray],
               readers: dict[str, list[onnx.NodeProto]]) -> dict[str, str]:
    """MatMul output -> the constant vector added to it right after (one fully connected layer in TFLite)."""
    out = {}
    for n in graph.node:
        if n.op_type != "MatMul" or n.input[1] not in consts or len(readers.get(n.output[0], [])) != 1:
            continue
        add = readers[n.output[0]][0]
        other = [t for t in add.input if t != n.output[0]]
        if add.op_type == "Add" and len(other) == 1 and other[0] in consts and consts[other[0]].ndim == 1:
            out[n.output[0]] = other[0]
    return out


def tflite_form(model: onnx.ModelProto, samples: int = CALIBRATION_SAMPLES, seed: int = 1) -> onnx.ModelProto:
    """``model`` (float, one NCHW image input) as the TFLite converter + tf2onnx would export its full-int8
    conversion: float NHWC input and float output, the form described in this module's docstring."""
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    graph = model.graph
    ranges = calibration_ranges(model, samples, seed)
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    readers = _consumers(graph)
    gelu = _gelu_inside(graph, set(consts))
    fused = {n.input[0] for n in graph.node if _fused_into_producer(n, producer, readers, consts)}
    fc_bias = _fc_biases(graph, consts, readers)
    fused |= set(fc_bias)
    w = _Writer(consts)
    x = graph.input[0]
    _input(w, x, ranges[x.name])
    for node in graph.node:
        _emit(w, node, _inputs(w, node, gelu, fc_bias), ranges, skip=fused | gelu)
    return _close(w, model)


def _input(w: _Writer, x: onnx.ValueInfoProto, rng: tuple[float, float]) -> None:
    """The NHWC float input, quantized, then transposed to NCHW on the int8 tensor (tf2onnx's layout change)."""
    n, c, h, wd = (d.dim_value for d in x.type.tensor_type.shape.dim)
    w.graph_input = helper.make_tensor_value_info(x.name, TensorProto.FLOAT, [n, h, wd, c])
    q = w.quantize(x.name, tflite_activation_quant(*rng), w.name("input_quant"))
    t = w.name("input_nchw")
    w.nodes.append(helper.make_node("Transpose", [q], [t], name=t, perm=[0, 3, 1, 2]))
    w.quant[t] = w.quant[q]
    w.int8_of[x.name] = t


def _emit(w: _Writer, node: onnx.NodeProto, inputs: list[str], ranges: dict[str, tuple[float, float]],
          skip: set[str]) -> None:
    """``node`` on its QDQ inputs; each output quantized unless inside a fused operator."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type in INT8_MOVES:
        outs = [w.name(f"{o}_int8") for o in node.output]
        w.nodes.append(helper.make_node(node.op_type, inputs, outs, name=outs[0], **attrs))
        for o, t in zip(node.output, outs, strict=True):
            w.quant[t] = w.quant[inputs[0]]
            w.int8_of[o] = t
        return
    w.nodes.append(helper.make_node(node.op_type, inputs, list(node.output), name=node.name or node.output[0],
                                    **attrs))
    for o, q in zip(node.output, _output_quant(node, w, ranges), strict=True):
        if o not in skip:
            # the float value is renamed so that readers find the int8 tensor under its own name
            float_name = w.name(f"{o}_float")
            w.nodes[-1].output[list(w.nodes[-1].output).index(o)] = float_name
            w.int8_of[o] = w.quantize(float_name, q, w.name(f"{o}_quant"))


def _close(w: _Writer, model: onnx.ModelProto) -> onnx.ModelProto:
    """The graph with the dequantized output under the source model's output name."""
    out = model.graph.output[0].name
    int8 = w.int8_of[out]
    w.nodes.append(helper.make_node("DequantizeLinear", [int8, *w.qparams(w.quant[int8])], [out],
                                    name=w.name("output")))
    assert w.graph_input is not None
    used = {t for n in w.nodes for t in n.input}
    kept = [t for t in model.graph.initializer if t.name in used]  # shapes, axes, pads, bounds, GELU's constants
    graph = helper.make_graph(w.nodes, f"{model.graph.name}_tflite", [w.graph_input],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], kept + w.inits)
    qdq = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tf2onnx")
    qdq.ir_version = 8
    qdq = onnx.shape_inference.infer_shapes(qdq, strict_mode=True)
    onnx.checker.check_model(qdq, full_check=True)
    return qdq


def float_nodes(model: onnx.ModelProto) -> Iterable[str]:
    """The operator types of ``model`` outside its Q / DQ nodes (for tests of the form)."""
    return (n.op_type for n in model.graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear"))
