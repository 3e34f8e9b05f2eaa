"""ONNX ``LSTM``, ``GRU`` and ``RNN`` unrolled into standard ONNX operators, shaped for the NPU.

TVM 0.27's ONNX importer has no converter for the recurrent operators. Once the input shapes are
bound (:func:`tvm_npu.compiler.onnx_import.bind_input_shapes`) the sequence length and the batch are
static, so a layer is a fixed graph of matmuls and elementwise operators:

* the input projection of every time step and both directions is ONE ``MatMul``
  (``[T*B, I] x [I, D*G*H]``) plus the bias ``Wb + Rb`` (the tensor engine's best case: a tall matmul);
* each step reads its rows and its direction's columns of the projection (a ``Slice``: a strided view
  inside an NPU partition), adds the recurrent ``MatMul`` (``[B, H] x [H, G*H]``, its epilogue's add)
  and applies the gate functions to slices of the sum (gates in the spec's order: ``iofc`` for LSTM,
  ``zrh`` for GRU, so LSTM's ``i, o, f`` and GRU's ``z, r``, which share the activation ``f``, are one
  contiguous slice and one activation);
* the hidden states of all steps are ONE ``Concat`` (time-major, directions inside), reshaped to
  ``Y``'s ``[T, D, B, H]`` (transposed for ``layout=1``); ``Y_h`` / ``Y_c`` concatenate the last states.

Every equation is the ONNX specification's, term by term, in its order. Two terms are left out where
they are exactly zero: the recurrent matmul of a zero initial state (absent, or a constant of zeros as
torch writes it) and the peephole terms of a zero ``P``. ``input_forget=1`` couples the gates as
onnxruntime does (``f = 1 - i``). What cannot be unrolled is a one-line :class:`RecurrentImportError`
naming the node and what is accepted: a ``sequence_lens`` that is not a constant equal to the full
length, weights that are not constants, an activation that is no ONNX operator (``Affine``,
``ScaledTanh``), dynamic shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tvm_npu.compiler.node_rewrite import replace_nodes

#: The recurrent operators this module unrolls, with their number of gates.
GATES: dict[str, int] = {"LSTM": 4, "GRU": 3, "RNN": 1}
#: The gate functions of one direction by default (f, g, h for LSTM; f, g for GRU; f for RNN).
_DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}

#: The spec's activation functions that are ONNX operators: lower-case name -> (operator, default alpha,
#: default beta); None where the operator takes no such attribute. ``activation_alpha`` / ``_beta`` are
#: consumed in order by the activations that take one (onnxruntime's reading of the spec).
_ACTIVATIONS: dict[str, tuple[str, float | None, float | None]] = {
    "relu": ("Relu", None, None), "tanh": ("Tanh", None, None), "sigmoid": ("Sigmoid", None, None),
    "leakyrelu": ("LeakyRelu", 0.01, None), "thresholdedrelu": ("ThresholdedRelu", 1.0, None),
    "hardsigmoid": ("HardSigmoid", 0.2, 0.5), "elu": ("Elu", 1.0, None),
    "softsign": ("Softsign", None, None), "softplus": ("Softplus", None, None),
}


class RecurrentImportError(ValueError):
    """A recurrent node the import cannot unroll; one line naming the node and what is accepted."""


@dataclass(frozen=True)
class Activation:
    """One gate function as an ONNX operator with its attributes."""

    op: str
    attrs: tuple[tuple[str, float], ...] = ()


@dataclass
class _Direction:
    """One direction's constants, in the spec's layouts: W ``[G*H, I]``, R ``[G*H, H]``, biases
    ``[G*H]`` (zeros when ``B`` is absent), peepholes ``[3*H]`` (None when absent or zero)."""

    reverse: bool
    w: np.ndarray
    r: np.ndarray
    wb: np.ndarray
    rb: np.ndarray
    p: np.ndarray | None
    acts: list[Activation]


@dataclass
class _Layer:
    """A recurrent node read: static sizes, attributes and per-direction constants."""

    node: onnx.NodeProto
    op: str
    steps: int
    batch: int
    hidden: int
    layout: int
    clip: float | None
    linear_before_reset: bool
    input_forget: bool
    dirs: list[_Direction] = field(default_factory=list)


def _error(node: onnx.NodeProto, what: str) -> RecurrentImportError:
    return RecurrentImportError(f"{node.op_type} node {node.name or next(iter(node.output), '?')!r}: {what}")


def _attr(node: onnx.NodeProto, name: str, default: object) -> object:
    value = next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)
    return value.decode() if isinstance(value, bytes) else value


def _input(node: onnx.NodeProto, i: int) -> str:
    return node.input[i] if len(node.input) > i else ""


def _activations(node: onnx.NodeProto, directions: int) -> list[list[Activation]]:
    """Per direction the gate functions (f, g[, h]) with their alpha / beta, defaults where not given."""
    count = len(_DEFAULT_ACTIVATIONS[node.op_type])
    names = [n.decode() if isinstance(n, bytes) else n for n in _attr(node, "activations", [])]
    names = names or list(_DEFAULT_ACTIVATIONS[node.op_type]) * directions
    if len(names) != count * directions:
        raise _error(node, f"{len(names)} activations given, {count} per direction expected "
                           f"({count * directions} for {directions} direction(s))")
    alphas, betas = list(_attr(node, "activation_alpha", [])), list(_attr(node, "activation_beta", []))
    acts: list[Activation] = []
    for name in names:
        if name.lower() not in _ACTIVATIONS:
            raise _error(node, f"activation {name!r} is not supported; accepted: "
                               f"{', '.join(op for op, _, _ in _ACTIVATIONS.values())}")
        op, alpha, beta = _ACTIVATIONS[name.lower()]
        attrs = []
        if alpha is not None:
            attrs.append(("alpha", float(alphas.pop(0)) if alphas else alpha))
        if beta is not None:
            attrs.append(("beta", float(betas.pop(0)) if betas else beta))
        acts.append(Activation(op, tuple(attrs)))
    return [acts[d * count:(d + 1) * count] for d in range(directions)]


def _constant(node: onnx.NodeProto, i: int, what: str, values: dict[str, np.ndarray]) -> np.ndarray | None:
    """The constant value of input ``i`` (None when absent); a value computed at run time is an error: the
    weights are folded into the unrolled steps' matmuls."""
    name = _input(node, i)
    if not name:
        return None
    if name not in values:
        raise _error(node, f"{what} {name!r} is not a constant; accepted: {what} as an initializer or Constant")
    return values[name]


def _check_sequence_lens(node: onnx.NodeProto, steps: int, batch: int, values: dict[str, np.ndarray]) -> None:
    """``sequence_lens`` absent or a constant of the full length for every batch entry."""
    name = _input(node, 4)
    if name and (name not in values or values[name].size != batch or np.any(values[name] != steps)):
        raise _error(node, f"sequence_lens {name!r} must be a constant equal to the sequence length {steps} "
                           f"for every one of the {batch} batch entries (or absent); shorter sequences are "
                           f"not supported")


def _read_layer(node: onnx.NodeProto, values: dict[str, np.ndarray],
               shapes: dict[str, tuple[int, ...]]) -> _Layer:
    """The static description of one recurrent node (a :class:`RecurrentImportError` when it has none)."""
    x = node.input[0]
    if len(shapes.get(x, ())) != 3:
        raise _error(node, f"input {x!r} has no static 3-D shape; bind the input shapes "
                           f"(shapes= / --input-shape) so the sequence can be unrolled")
    layout = int(_attr(node, "layout", 0))
    if layout not in (0, 1):
        raise _error(node, f"layout={layout}; accepted: 0 ([seq, batch, input]) or 1 ([batch, seq, input])")
    steps, batch = (shapes[x][0], shapes[x][1]) if layout == 0 else (shapes[x][1], shapes[x][0])
    direction = str(_attr(node, "direction", "forward"))
    if direction not in ("forward", "reverse", "bidirectional"):
        raise _error(node, f"direction {direction!r}; accepted: forward, reverse, bidirectional")
    w, r = _constant(node, 1, "W", values), _constant(node, 2, "R", values)
    hidden, gates = int(_attr(node, "hidden_size", r.shape[-1])), GATES[node.op_type]
    ndir = 2 if direction == "bidirectional" else 1
    bias = _constant(node, 3, "B", values)
    peep = _constant(node, 7, "P", values) if node.op_type == "LSTM" else None
    expect = {"W": (w, (ndir, gates * hidden, shapes[x][2])), "R": (r, (ndir, gates * hidden, hidden)),
              "B": (bias, (ndir, 2 * gates * hidden)), "P": (peep, (ndir, 3 * hidden))}
    for what, (value, shape) in expect.items():
        if value is not None and value.shape != shape:
            raise _error(node, f"{what} has shape {value.shape}; accepted: {shape} ({ndir} direction(s), "
                               f"{gates} gate(s), hidden_size {hidden}, input size {shapes[x][2]})")
    _check_sequence_lens(node, steps, batch, values)
    clip = _attr(node, "clip", None)
    layer = _Layer(node, node.op_type, steps, batch, hidden, layout, None if clip is None else float(clip),
                   bool(_attr(node, "linear_before_reset", 0)), bool(_attr(node, "input_forget", 0)))
    zeros = np.zeros(gates * hidden, w.dtype)
    for d, acts in enumerate(_activations(node, ndir)):
        p = None if peep is None or not np.any(peep[d]) else peep[d]
        layer.dirs.append(_Direction(direction == "reverse" or d == 1, w[d], r[d],
                                     zeros if bias is None else bias[d, :gates * hidden],
                                     zeros if bias is None else bias[d, gates * hidden:], p, acts))
    return layer


class _Builder:
    """The nodes and initializers replacing one recurrent node, named after it, written for the model's
    opset (``Slice`` and ``Clip`` took attributes before opsets 10 and 11)."""

    def __init__(self, prefix: str, opset: int, dtype: np.dtype) -> None:
        self.prefix, self.opset, self.dtype = prefix, opset, dtype
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def _name(self, kind: str) -> str:
        return f"{self.prefix}__{kind}{len(self.nodes) + len(self.inits)}"

    def const(self, value: np.ndarray | float, dtype: np.dtype | type | None = None) -> str:
        name = self._name("const")
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value, dtype=dtype or self.dtype), name))
        return name

    def op(self, op: str, inputs: list[str], out: str | None = None, **attrs: object) -> str:
        out = out or self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{out}__node", **attrs))
        return out

    def slice(self, x: str, starts: list[int], ends: list[int], axes: list[int]) -> str:
        if self.opset < 10:
            return self.op("Slice", [x], starts=starts, ends=ends, axes=axes)
        ints = [self.const(np.array(v), np.int64) for v in (starts, ends, axes)]
        return self.op("Slice", [x, *ints])

    def cols(self, x: str, begin: int, end: int) -> str:
        """Columns ``begin:end`` of a 2-D value (one gate or a run of gates)."""
        return self.slice(x, [begin], [end], [1])

    def reshape(self, x: str, shape: list[int], out: str | None = None) -> str:
        return self.op("Reshape", [x, self.const(np.array(shape), np.int64)], out)

    def gate(self, x: str, act: Activation, clip: float | None) -> str:
        """``act(clip(x))``: the spec clips the input of the gate functions when ``clip`` is given."""
        if clip is not None:
            if self.opset < 11:
                x = self.op("Clip", [x], min=-clip, max=clip)
            else:
                x = self.op("Clip", [x, self.const(-clip), self.const(clip)])
        return self.op(act.op, [x], **dict(act.attrs))


def _recurrent(b: _Builder, x_t: str, h: str | None, r: np.ndarray) -> str:
    """``H_{t-1} R^T + x_t`` (``x_t`` already holds ``X_t W^T`` and the biases); ``x_t`` alone for a zero
    state, whose product is exactly zero."""
    if h is None:
        return x_t
    return b.op("Add", [b.op("MatMul", [h, b.const(r.T)]), x_t])


def _peephole(b: _Builder, pre: str, p: np.ndarray | None, c: str | None) -> str:
    """``pre + P (.) C`` (``pre`` when there is no peephole or the cell state is zero)."""
    return pre if p is None or c is None else b.op("Add", [pre, b.op("Mul", [b.const(p), c])])


def _lstm_step(b: _Builder, layer: _Layer, d: _Direction, x_t: str, h: str | None,
               c: str | None) -> tuple[str, str]:
    """One LSTM step (gates ``iofc``): ``C = f (.) C_{t-1} + i (.) g(c)``, ``H = o (.) h(C)``."""
    n, (fa, ga, ha), clip = layer.hidden, d.acts, layer.clip
    pre = _recurrent(b, x_t, h, d.r)
    o: str | None = None
    if d.p is None:  # i, o[, f] share f and are contiguous: one activation over them
        gates = b.gate(b.cols(pre, 0, (2 if layer.input_forget else 3) * n), fa, clip)
        i, o = b.cols(gates, 0, n), b.cols(gates, n, 2 * n)
        f = None if layer.input_forget else b.cols(gates, 2 * n, 3 * n)
    else:
        i = b.gate(_peephole(b, b.cols(pre, 0, n), d.p[:n], c), fa, clip)
        f = None if layer.input_forget else \
            b.gate(_peephole(b, b.cols(pre, 2 * n, 3 * n), d.p[2 * n:], c), fa, clip)
    cell = b.op("Mul", [i, b.gate(b.cols(pre, 3 * n, 4 * n), ga, clip)])
    if c is not None:
        if f is None:  # input_forget: the forget gate is coupled to the input gate
            f = b.op("Sub", [b.const(1.0), i])
        cell = b.op("Add", [b.op("Mul", [f, c]), cell])
    if o is None:
        o = b.gate(_peephole(b, b.cols(pre, n, 2 * n), d.p[n:2 * n], cell), fa, clip)
    return b.op("Mul", [o, b.gate(cell, ha, None)]), cell


def _gru_step(b: _Builder, layer: _Layer, d: _Direction, x_t: str, h: str | None) -> str:
    """One GRU step (gates ``zrh``): ``H = (1 - z) (.) g(h~) + z (.) H_{t-1}``, the reset gate applied
    before (``linear_before_reset=0``) or after (``=1``) the recurrent product of ``h~``."""
    n, (fa, ga), clip = layer.hidden, d.acts, layer.clip
    x_h = b.cols(x_t, 2 * n, 3 * n)
    rec = None if h is None or not layer.linear_before_reset else b.op("MatMul", [h, b.const(d.r.T)])
    if rec is not None:  # one recurrent product of all three gates
        zr_pre = b.op("Add", [b.cols(rec, 0, 2 * n), b.cols(x_t, 0, 2 * n)])
    else:
        zr_pre = _recurrent(b, b.cols(x_t, 0, 2 * n), h, d.r[:2 * n])
    zr = b.gate(zr_pre, fa, clip)
    z, r = b.cols(zr, 0, n), b.cols(zr, n, 2 * n)
    rb_h = d.rb[2 * n:]
    if layer.linear_before_reset:
        r_h = b.const(rb_h) if rec is None else b.cols(rec, 2 * n, 3 * n)
        if rec is not None and np.any(rb_h):
            r_h = b.op("Add", [r_h, b.const(rb_h)])
        h_pre = x_h if rec is None and not np.any(rb_h) else b.op("Add", [x_h, b.op("Mul", [r, r_h])])
    else:
        h_pre = x_h if h is None else b.op("Add", [x_h, b.op("MatMul", [b.op("Mul", [r, h]),
                                                                       b.const(d.r[2 * n:].T)])])
    new = b.op("Mul", [b.op("Sub", [b.const(1.0), z]), b.gate(h_pre, ga, clip)])
    return new if h is None else b.op("Add", [new, b.op("Mul", [z, h])])


def _projection_bias(layer: _Layer, d: _Direction) -> np.ndarray:
    """The biases added once to the input projection: ``Wb + Rb``, except GRU's ``Rbh`` with
    ``linear_before_reset=1``, which the reset gate multiplies."""
    bias = d.wb + d.rb
    if layer.op == "GRU" and layer.linear_before_reset:
        bias[2 * layer.hidden:] = d.wb[2 * layer.hidden:]
    return bias


def _projection(b: _Builder, layer: _Layer, x: str) -> str:
    """``X W^T + Wb + Rb`` of every time step and direction: one ``[T*B, I] x [I, D*G*H]`` matmul, rows
    time-major (``t * B + b``)."""
    seq = x if layer.layout == 0 else b.op("Transpose", [x], perm=[1, 0, 2])
    rows = b.reshape(seq, [layer.steps * layer.batch, -1])
    out = b.op("MatMul", [rows, b.const(np.concatenate([d.w for d in layer.dirs]).T)])
    bias = np.concatenate([_projection_bias(layer, d) for d in layer.dirs])
    return b.op("Add", [out, b.const(bias)]) if np.any(bias) else out


def _initial(b: _Builder, layer: _Layer, i: int, d: int, values: dict[str, np.ndarray]) -> str | None:
    """Direction ``d``'s initial state ``[B, H]`` from input ``i`` (``initial_h`` / ``initial_c``); None
    when it is absent or a constant of zeros (the state's products are then exactly zero)."""
    name = _input(layer.node, i)
    if not name:
        return None
    axis = 0 if layer.layout == 0 else 1
    if name in values:
        state = np.take(values[name], d, axis=axis)
        return b.const(state) if np.any(state) else None
    return b.reshape(b.slice(name, [d], [d + 1], [axis]), [layer.batch, layer.hidden])


def _unroll_direction(b: _Builder, layer: _Layer, k: int, proj: str,
                      values: dict[str, np.ndarray]) -> tuple[list[str], str, str | None]:
    """Direction ``k``'s hidden state at every time step (in time order) and its last ``H`` and ``C``."""
    d, rows, width = layer.dirs[k], layer.batch, GATES[layer.op] * layer.hidden
    h, c = _initial(b, layer, 5, k, values), _initial(b, layer, 6, k, values)
    states: list[str] = [""] * layer.steps
    for t in (reversed(range(layer.steps)) if d.reverse else range(layer.steps)):
        x_t = b.slice(proj, [t * rows, k * width], [(t + 1) * rows, (k + 1) * width], [0, 1])
        if layer.op == "LSTM":
            h, c = _lstm_step(b, layer, d, x_t, h, c)
        elif layer.op == "GRU":
            h = _gru_step(b, layer, d, x_t, h)
        else:
            h = b.gate(_recurrent(b, x_t, h, d.r), d.acts[0], layer.clip)
        states[t] = h
    return states, h, c


def _stacked(b: _Builder, layer: _Layer, pieces: list[str], shape: list[int], perm: list[int],
             out: str) -> None:
    """``pieces`` (each ``[B, H]``) as one concat along the rows, reshaped to ``shape`` (layout 0) and
    transposed by ``perm`` for layout 1, written to ``out``."""
    rows = pieces[0] if len(pieces) == 1 else b.op("Concat", pieces, axis=0)
    if layer.layout == 0:
        b.reshape(rows, shape, out)
    else:
        b.op("Transpose", [b.reshape(rows, shape)], out, perm=perm)


def _emit(b: _Builder, layer: _Layer, values: dict[str, np.ndarray], used: set[str]) -> None:
    """The whole unrolled layer, writing those of the node's outputs ``Y``, ``Y_h`` and ``Y_c`` that are
    ``used`` (read by a node or a graph output)."""
    proj = _projection(b, layer, layer.node.input[0])
    runs = [_unroll_direction(b, layer, k, proj, values) for k in range(len(layer.dirs))]
    ndir, rows, n = len(layer.dirs), layer.batch, layer.hidden
    y, y_h, y_c = (name if name in used else "" for name in (_output(layer.node, i) for i in range(3)))
    if y:  # time-major, the directions of a step side by side: Y[t, d] is one block of B*H
        pieces = [run[0][t] for t in range(layer.steps) for run in runs]
        _stacked(b, layer, pieces, [layer.steps, ndir, rows, n], [2, 0, 1, 3], y)
    for name, last in ((y_h, [run[1] for run in runs]), (y_c, [run[2] for run in runs])):
        if name:
            _stacked(b, layer, last, [ndir, rows, n], [1, 0, 2], name)


def _output(node: onnx.NodeProto, i: int) -> str:
    return node.output[i] if len(node.output) > i else ""


def unroll_recurrent(model: onnx.ModelProto, values: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]],
                     opset: int, used: set[str]) -> int:
    """Replace every main-graph ``LSTM`` / ``GRU`` / ``RNN`` node of ``model`` by its unrolled form, in
    place (``values``: the graph's constants, ``shapes``: its static shapes, ``used``: the values some node
    or graph output reads); returns how many."""
    seen: list[onnx.NodeProto] = []  # the layers unrolled so far (an unnamed one is named by its count)

    def expand(node: onnx.NodeProto, inits: list[onnx.TensorProto]) -> list[onnx.NodeProto] | None:
        if node.op_type not in GATES or node.domain not in ("", "ai.onnx"):
            return None
        layer = _read_layer(node, values, shapes)
        b = _Builder(node.name or node.output[0] or f"{node.op_type.lower()}{len(seen)}", opset,
                     layer.dirs[0].w.dtype)
        seen.append(node)
        _emit(b, layer, values, used)
        inits.extend(b.inits)
        return b.nodes

    return replace_nodes(model.graph, expand)
