"""ONNX models with one recurrent layer (``LSTM`` / ``GRU`` / ``RNN``) and a CRNN as torch's exporter writes
it, built with ``onnx.helper`` for the recurrent import tests (``tests/`` is on ``sys.path``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


@dataclass(frozen=True)
class Layer:
    """One recurrent node's configuration (defaults: the ONNX defaults, a bias, outputs Y, Y_h, Y_c)."""

    op: str = "LSTM"
    direction: str = "forward"
    steps: int = 3
    batch: int = 2
    inputs: int = 4
    hidden: int = 5
    layout: int = 0
    initial: bool = False  # initial_h (and initial_c) as graph inputs
    bias: bool = True
    peepholes: bool = False
    clip: float | None = None
    activations: tuple[str, ...] = ()
    alpha: tuple[float, ...] = ()
    beta: tuple[float, ...] = ()
    linear_before_reset: int = 0
    input_forget: int = 0
    outputs: tuple[str, ...] = ("Y", "Y_h", "Y_c")
    sequence_lens: tuple[int, ...] | None = None
    opset: int = 14
    seed: int = 0

    @property
    def dirs(self) -> int:
        return 2 if self.direction == "bidirectional" else 1


def _inputs(c: Layer) -> tuple[list[str], list[onnx.ValueInfoProto], list[onnx.TensorProto]]:
    """The node's inputs, the graph inputs and the initializers (W, R, B, P scaled for unit-range states)."""
    rng, g, d, h = np.random.default_rng(c.seed), GATES[c.op], c.dirs, c.hidden

    def init(name: str, shape: tuple[int, ...], scale: float) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [init("W", (d, g * h, c.inputs), 1 / np.sqrt(c.inputs)), init("R", (d, g * h, h), 1 / np.sqrt(h))]
    x_shape = [c.steps, c.batch, c.inputs] if c.layout == 0 else [c.batch, c.steps, c.inputs]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    names = ["X", "W", "R", "B" if c.bias else "", "lens" if c.sequence_lens is not None else ""]
    if c.bias:
        inits.append(init("B", (d, 2 * g * h), 0.5))
    if c.sequence_lens is not None:
        inits.append(numpy_helper.from_array(np.array(c.sequence_lens, np.int32), "lens"))
    state = [d, c.batch, h] if c.layout == 0 else [c.batch, d, h]
    for name in (["h0", "c0"] if c.op == "LSTM" else ["h0"]) if c.initial else []:
        names.append(name)
        graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, state))
    if c.peepholes:
        names += [""] * (7 - len(names)) + ["P"]
        inits.append(init("P", (d, 3 * h), 0.5))
    while names[-1] == "":
        names.pop()
    return names, graph_inputs, inits


def layer_model(c: Layer) -> onnx.ModelProto:
    """A graph of the one recurrent node, its used outputs the graph outputs (checked by onnx)."""
    names, graph_inputs, inits = _inputs(c)
    attrs: dict[str, object] = {"hidden_size": c.hidden, "direction": c.direction}
    if c.layout:
        attrs["layout"] = c.layout
    for key, value in (("clip", c.clip), ("activations", list(c.activations)), ("activation_alpha", list(c.alpha)),
                       ("activation_beta", list(c.beta))):
        if value:
            attrs[key] = value
    if c.op == "GRU":
        attrs["linear_before_reset"] = c.linear_before_reset
    if c.op == "LSTM" and c.input_forget:
        attrs["input_forget"] = c.input_forget
    outputs = [n if n in c.outputs else "" for n in ("Y", "Y_h", "Y_c")[:3 if c.op == "LSTM" else 2]]
    node = helper.make_node(c.op, names, outputs, name=f"{c.op.lower()}_0", **attrs)
    d, t, b, h = c.dirs, c.steps, c.batch, c.hidden
    shapes = {"Y": [t, d, b, h] if c.layout == 0 else [b, t, d, h],
              "Y_h": [d, b, h] if c.layout == 0 else [b, d, h]}
    shapes["Y_c"] = shapes["Y_h"]
    graph_outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n]) for n in outputs if n]
    model = helper.make_model(helper.make_graph([node], "recurrent", graph_inputs, graph_outputs, inits),
                              opset_imports=[helper.make_opsetid("", c.opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


def feeds(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    """Seeded standard-normal values for every graph input."""
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def onnxruntime_outputs(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, values)


def expected(c: Layer, values: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs of the layer. onnxruntime runs only ``layout=0``: a ``layout=1`` layer is
    computed as its ``layout=0`` twin on transposed inputs, the results transposed back."""
    if c.layout == 0:
        return onnxruntime_outputs(layer_model(c), values)
    twin = {k: v.transpose(1, 0, 2) for k, v in values.items()}
    outs = onnxruntime_outputs(layer_model(replace(c, layout=0)), twin)
    names = [n for n in ("Y", "Y_h", "Y_c") if n in c.outputs and (c.op == "LSTM" or n != "Y_c")]
    return [o.transpose(2, 0, 1, 3) if n == "Y" else o.transpose(1, 0, 2) for n, o in zip(names, outs, strict=True)]


def crnn(width: int = 32, hidden: int = 16, classes: int = 11, seed: int = 0) -> onnx.ModelProto:
    """A captcha CRNN as ``torch.onnx.export`` writes it: conv features of a 1 x 32 x ``width`` image
    (three conv + relu + pool stages, H pooled to 1) -> Squeeze -> Transpose to ``[T, N, C]`` -> a
    bidirectional ``LSTM`` with ``B`` and ``initial_h`` / ``initial_c`` zeros made from the input's batch
    (``Shape -> Gather -> Unsqueeze -> Concat -> ConstantOfShape``), ``Y`` -> Transpose (0, 2, 1, 3) ->
    Reshape ``[T, N, 2H]`` -> the classifier (MatMul + Add). Sequence length ``width / 4``."""
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op: str, inputs: list[str], out: str, **attrs: object) -> str:
        nodes.append(helper.make_node(op, inputs, [out], name=f"/{out}", **attrs))
        return out

    x, cin = "image", 1
    for i, (cout, pool) in enumerate([(16, [2, 2]), (32, [2, 2]), (32, [8, 1])]):
        w = const(f"conv{i}.weight", (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(9 * cin)).astype(np.float32))
        b = const(f"conv{i}.bias", (rng.standard_normal(cout) * 0.1).astype(np.float32))
        x = node("Conv", [x, w, b], f"conv{i}", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        x = node("MaxPool", [node("Relu", [x], f"relu{i}")], f"pool{i}", kernel_shape=pool, strides=pool)
        cin = cout
    x = node("Squeeze", [x, const("axes2", np.array([2], np.int64))], "squeeze")  # [N, C, T]
    x = node("Transpose", [x], "seq", perm=[2, 0, 1])  # [T, N, C]
    batch = node("Gather", [node("Shape", [x], "shape"), const("one", np.array(1, np.int64))], "batch", axis=0)
    dims = node("Concat", [const("two", np.array([2], np.int64)),
                           node("Unsqueeze", [batch, const("axes0", np.array([0], np.int64))], "batch1"),
                           const("hid", np.array([hidden], np.int64))], "state_shape", axis=0)
    zeros = helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0])
    h0 = node("ConstantOfShape", [dims], "h0", value=zeros)
    c0 = node("ConstantOfShape", [dims], "c0", value=zeros)
    g = 4 * hidden
    w = const("lstm.W", (rng.standard_normal((2, g, cin)) / np.sqrt(cin)).astype(np.float32))
    r = const("lstm.R", (rng.standard_normal((2, g, hidden)) / np.sqrt(hidden)).astype(np.float32))
    b = const("lstm.B", (rng.standard_normal((2, 2 * g)) * 0.1).astype(np.float32))
    nodes.append(helper.make_node("LSTM", [x, w, r, b, "", h0, c0], ["lstm_y", "lstm_h", "lstm_c"], name="/rnn/LSTM",
                                  hidden_size=hidden, direction="bidirectional"))
    y = node("Transpose", ["lstm_y"], "y_t", perm=[0, 2, 1, 3])
    y = node("Reshape", [y, const("flat", np.array([0, 0, -1], np.int64))], "features")
    fc_w = const("fc.weight", (rng.standard_normal((2 * hidden, classes)) / np.sqrt(2 * hidden)).astype(np.float32))
    y = node("MatMul", [y, fc_w], "logits_mm")
    node("Add", [y, const("fc.bias", (rng.standard_normal(classes) * 0.1).astype(np.float32))], "logits")
    steps = width // 4
    graph = helper.make_graph(nodes, "crnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                                            [1, 1, 32, width])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [steps, 1, classes])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(model, full_check=True)
    return model
