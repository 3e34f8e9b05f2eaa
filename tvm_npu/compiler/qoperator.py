"""ONNX models in QOperator format rewritten into QDQ format, before the Relax import.

TVM 0.27's ONNX frontend imports ``QuantizeLinear``, ``DequantizeLinear`` and ``MatMulInteger``
but not the QOperator ops (``QLinearConv``, ``QLinearMatMul``, ``ConvInteger`` and the
com.microsoft ``QGemm`` / ``QLinear*`` ops). The compiler recognises quantized operators in QDQ
form (``DequantizeLinear -> float op -> QuantizeLinear``), so :func:`to_qdq` rewrites every
QOperator node into that form. It writes what onnxruntime's own quantizer writes in QDQ format
(an int32 bias as ``DequantizeLinear(B, x_scale * w_scale, 0)``), which onnxruntime fuses back
into its QOperator kernels: the rewritten model computes the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import onnx
from onnx import AttributeProto, NodeProto, TensorProto, helper, numpy_helper, version_converter

from tvm_npu.models.onnx_file import array
from tvm_npu.models.registry import opset as model_opset

_MS = "com.microsoft"
#: DequantizeLinear takes per-axis scales from this opset on.
_PER_AXIS_OPSET = 13
#: float32 holds every integer up to this magnitude exactly.
_FLOAT32_EXACT = 2**24
#: Largest |x - x_zero_point| of an 8-bit tensor and a zero point of its type.
_INT8_SPAN = 255
#: com.microsoft quantized ops outside the ``QLinear*`` / ``QOrdered*`` families without a
#: DequantizeLinear -> float op -> QuantizeLinear equivalent: refused with the list of what is
#: accepted rather than left to the importer's bare "not supported".
_UNSUPPORTED_MS = frozenset(
    {
        "DequantizeBFP",
        "DequantizeWithOrder",
        "DynamicQuantizeLSTM",
        "DynamicQuantizeMatMul",
        "GatherBlockQuantized",
        "MatMulBnb4",
        "MatMulFpQ4",
        "MatMulIntegerToFloat",
        "MatMulNBits",
        "MulInteger",
        "QAttention",
        "QEmbedLayerNormalization",
        "QMoE",
        "QuantizeBFP",
        "QuantizeWithOrder",
        "ReduceSumInteger",
    }
)

Rewrite = Callable[["_Rewriter", NodeProto], None]


def has_qoperator_nodes(model: onnx.ModelProto) -> bool:
    """Whether the main graph holds a QOperator node (one :func:`to_qdq` rewrites or refuses)."""
    return any(_is_qoperator(node) for node in model.graph.node)


def to_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every QOperator node replaced by its QDQ form: a new model, or ``model`` itself
    when it has no QOperator node. A QOperator node without a QDQ form is a one-line ``ValueError``."""
    if not has_qoperator_nodes(model):
        return model
    for node in model.graph.node:
        if _is_qoperator(node) and _key(node) not in _REWRITES:
            raise _refuse(node, "it has no QDQ equivalent here")
    opset = model_opset(model)
    if opset < _PER_AXIS_OPSET:
        try:
            model = version_converter.convert_version(model, _PER_AXIS_OPSET)
        except Exception as e:  # the converter raises RuntimeError and others, often over several lines
            detail = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ValueError(
                f"cannot upgrade the ONNX model from opset {opset} to {_PER_AXIS_OPSET} "
                f"(per-channel DequantizeLinear needs it): {detail}"
            ) from None
    rewriter = _Rewriter(model.graph)
    for node in model.graph.node:
        rewrite = _REWRITES.get(_key(node))
        if rewrite is None:
            rewriter.nodes.append(node)
        else:
            rewrite(rewriter, node)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(rewriter.nodes)
    out.graph.initializer.extend(rewriter.initializers)
    return out


def _key(node: NodeProto) -> tuple[str, str]:
    return ("" if node.domain == "ai.onnx" else node.domain, node.op_type)


def _is_qoperator(node: NodeProto) -> bool:
    domain, op = _key(node)
    if (domain, op) in _REWRITES:
        return True
    return domain == _MS and (op.startswith(("QLinear", "QOrdered")) or op in _UNSUPPORTED_MS)


def _refuse(node: NodeProto, reason: str) -> ValueError:
    """The one-line error (the CLI shows it as is) for a QOperator node that cannot be rewritten."""
    accepted = ", ".join(sorted({op for _, op in _REWRITES}))
    return ValueError(
        f"cannot rewrite {node.op_type} node {node.name!r} into QDQ form: {reason} (accepted QOperator ops: {accepted})"
    )


def _base(node: NodeProto) -> str:
    """The prefix of the names of everything a node's rewrite writes."""
    return node.name or node.output[0]


def _inputs(node: NodeProto, n: int) -> list[str]:
    """The node's inputs padded with "" (absent) to at least ``n``."""
    return [*node.input, *[""] * (n - len(node.input))]


def _attributes(node: NodeProto) -> list[AttributeProto]:
    """The node's attributes for its float op: all but ``channels_last``, which must be 0 (NCHW)."""
    if any(a.name == "channels_last" and a.i for a in node.attribute):
        raise _refuse(node, "channels_last=1 (NHWC) has no float ONNX operator")
    return [a for a in node.attribute if a.name != "channels_last"]


class _Rewriter:
    """One rewrite: constant and type lookup, the names in use, and the nodes and initializers written."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self._tensors: dict[str, TensorProto] = {t.name: t for t in graph.initializer}
        for node in graph.node:
            if _key(node) == ("", "Constant") and node.attribute and node.attribute[0].name == "value":
                self._tensors[node.output[0]] = node.attribute[0].t
        self._types = {v.name: v.type.tensor_type for v in (*graph.input, *graph.value_info, *graph.output)}
        self._values: dict[str, np.ndarray] = {}
        self._shared: dict[tuple[str, tuple[int, ...], bytes], str] = {}
        self._used = {*self._tensors, *self._types}
        self._used.update(name for n in graph.node for name in (n.name, *n.input, *n.output))
        self.nodes: list[NodeProto] = []
        self.initializers: list[TensorProto] = []

    # ---- what the model states ----------------------------------------------------------------

    def value(self, name: str) -> np.ndarray | None:
        """The value of a constant tensor (initializer or Constant node), None for others."""
        if name not in self._tensors:
            return None
        if name not in self._values:
            self._values[name] = array(self._tensors[name])  # a lean model's weight: from its file
        return self._values[name]

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The static shape of a tensor, when the model states it."""
        if name in self._tensors:
            return tuple(self._tensors[name].dims)
        t = self._types.get(name)
        if t is None or not t.HasField("shape") or not all(d.HasField("dim_value") for d in t.shape.dim):
            return None
        return tuple(d.dim_value for d in t.shape.dim)

    def size(self, name: str) -> int | None:
        shape = self.shape(name)
        return None if shape is None else math.prod(shape)

    def elem_type(self, name: str) -> int | None:
        if name in self._tensors:
            return self._tensors[name].data_type
        t = self._types.get(name)
        return t.elem_type if t is not None and t.elem_type else None

    # ---- writing ------------------------------------------------------------------------------

    def fresh(self, name: str) -> str:
        """``name``, or ``name_<k>`` when the model already uses it."""
        out, k = name, 0
        while out in self._used:
            k += 1
            out = f"{name}_{k}"
        self._used.add(out)
        return out

    def constant(self, name: str, array: np.ndarray) -> str:
        """An initializer holding ``array``; equal constants of the rewrite share one."""
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._shared:
            tensor = numpy_helper.from_array(array, self.fresh(name))
            self.initializers.append(tensor)
            self._tensors[tensor.name] = tensor
            self._shared[key] = tensor.name
        return self._shared[key]

    def emit(
        self,
        node: NodeProto,
        op_type: str,
        inputs: Sequence[str],
        output: str | None = None,
        attributes: Iterable[AttributeProto] = (),
        role: str = "",
        replaces: bool = False,
    ) -> str:
        """A node of ``node``'s rewrite, returning its output. The float op that ``replaces`` the node
        keeps its name; others are named ``<node>/<op_type>[_<role>]``. Outputs are ``<node>/<role or
        op_type>`` unless given."""
        base = _base(node)
        suffix = f"_{role}" if role else ""
        name = node.name if replaces else self.fresh(f"{base}/{op_type}{suffix}")
        output = output or self.fresh(f"{base}/{role or op_type}")
        new = helper.make_node(op_type, list(inputs), [output], name=name)
        new.attribute.extend(attributes)
        self.nodes.append(new)
        return output

    def dequantize(
        self, node: NodeProto, role: str, x: str, scale: str, zero_point: str, axis: int | None = None
    ) -> str:
        """``DequantizeLinear(x)``; given ``axis``, per-channel along it when the scale or the zero point
        is (the other one is then broadcast: DequantizeLinear needs equal shapes)."""
        attributes = []
        if axis is not None:
            sizes = [self.size(t) for t in (scale, zero_point) if t]
            known = [s for s in sizes if s is not None]
            if max(known, default=1) > 1:
                x_shape = self.shape(x)
                n = x_shape[axis] if x_shape else max(known)
                scale = self._per_channel(node, scale, n)
                zero_point = zero_point and self._per_channel(node, zero_point, n)
                attributes.append(helper.make_attribute("axis", axis))
            elif len(known) < len(sizes):  # shapes unknown: the axis is right either way
                attributes.append(helper.make_attribute("axis", axis))
        inputs = [x, scale, *([zero_point] if zero_point else [])]
        return self.emit(node, "DequantizeLinear", inputs, attributes=attributes, role=role)

    def _per_channel(self, node: NodeProto, name: str, n: int) -> str:
        """``name`` as the 1-D tensor of ``n`` values that per-axis DequantizeLinear takes."""
        shape = self.shape(name)
        if shape is None or shape == (n,):
            return name
        value = self.value(name)
        if value is None or value.size not in (1, n):
            raise _refuse(
                node, f"quantization parameter {name!r} of shape {list(shape)} is neither per-tensor nor {n} channels"
            )
        return self.constant(f"{name}_per_channel", np.broadcast_to(value.reshape(-1), (n,)).copy())

    def bias(self, node: NodeProto, bias: str, x_scale: str, w_scale: str, axis: int) -> str:
        """``DequantizeLinear`` of an int32 bias with zero point 0 and scale ``x_scale * w_scale`` (per
        channel, multiplied in float32 as onnxruntime does): the form onnxruntime's quantizer writes."""
        xs, ws = self.value(x_scale), self.value(w_scale)
        if xs is None or ws is None:
            raise _refuse(node, "an int32 bias needs constant input and weight scales")
        scale = xs.astype(np.float32).reshape(()) * ws.astype(np.float32).reshape(-1)
        if scale.size == 1:
            scale = scale.reshape(())
        base = _base(node)
        inputs = [
            bias,
            self.constant(f"{base}/bias_scale", scale),
            self.constant(f"{base}/bias_zero_point", np.zeros(scale.shape, np.int32)),
        ]
        attributes = [helper.make_attribute("axis", axis)] if scale.ndim else []
        return self.emit(node, "DequantizeLinear", inputs, attributes=attributes, role="bias")

    def quantize(self, node: NodeProto, y: str, scale: str, zero_point: str, like: Sequence[str] = ()) -> None:
        """``QuantizeLinear(y)`` into the node's output. A missing zero point is 0 of the type of the
        first of ``like`` whose type the model states (QuantizeLinear alone would make it uint8)."""
        if not zero_point:
            elem = next((e for e in map(self.elem_type, like) if e is not None), None)
            if elem is None:
                raise _refuse(node, "its output zero point is absent and the model does not state its type")
            zero = np.zeros((), helper.tensor_dtype_to_np_dtype(elem))
            zero_point = self.constant(f"{_base(node)}/zero_point", zero)
        self.emit(node, "QuantizeLinear", [y, scale, zero_point], output=node.output[0])


# ---- the rewrites -------------------------------------------------------------------------------


def _qlinear_conv(rw: _Rewriter, node: NodeProto) -> None:
    """DQ(x), DQ(w) (per output channel: axis 0), DQ(int32 B) -> Conv -> Q."""
    x, xs, xz, w, ws, wz, ys, yz, b = _inputs(node, 9)
    attributes = _attributes(node)
    inputs = [rw.dequantize(node, "x", x, xs, xz), rw.dequantize(node, "w", w, ws, wz, axis=0)]
    if b:
        inputs.append(rw.bias(node, b, xs, ws, axis=0))
    rw.quantize(node, rw.emit(node, "Conv", inputs, attributes=attributes, replaces=True), ys, yz)


def _qlinear_matmul(rw: _Rewriter, node: NodeProto) -> None:
    """DQ(a), DQ(b) (per column: the last axis of b) -> MatMul -> Q."""
    a, as_, az, b, bs, bz, ys, yz = _inputs(node, 8)
    if any((rw.size(t) or 1) > 1 for t in (as_, az)):
        raise _refuse(node, "per-row scales of input a are not supported (onnxruntime refuses them too)")
    b_shape = rw.shape(b)
    inputs = [
        rw.dequantize(node, "a", a, as_, az),
        rw.dequantize(node, "b", b, bs, bz, axis=len(b_shape) - 1 if b_shape else -1),
    ]
    rw.quantize(node, rw.emit(node, "MatMul", inputs, replaces=True), ys, yz)


def _qgemm(rw: _Rewriter, node: NodeProto) -> None:
    """DQ(A), DQ(B) (per column of the product), DQ(int32 C) -> Gemm (-> Q when y_scale is given,
    else the float result is the output, as in onnxruntime)."""
    a, as_, az, b, bs, bz, c, ys, yz = _inputs(node, 9)
    attrs = {attr.name: helper.get_attribute_value(attr) for attr in node.attribute}
    if attrs.get("alpha", 1.0) != 1.0:
        raise _refuse(node, f"alpha={attrs['alpha']:g} (only alpha=1 has a QDQ form here)")
    if bool(ys) != bool(yz):
        raise _refuse(node, "y_scale and y_zero_point must be given together")
    inputs = [
        rw.dequantize(node, "a", a, as_, az),
        rw.dequantize(node, "b", b, bs, bz, axis=0 if attrs.get("transB", 0) else 1),
    ]
    if c:
        c_shape = rw.shape(c)
        inputs.append(rw.bias(node, c, as_, bs, axis=len(c_shape) - 1 if c_shape else 0))
    y = rw.emit(node, "Gemm", inputs, output=None if ys else node.output[0], attributes=node.attribute, replaces=True)
    if ys:
        rw.quantize(node, y, ys, yz)


def _conv_integer(rw: _Rewriter, node: NodeProto) -> None:
    """DQ(x, scale 1), DQ(w, scale 1) -> Conv -> Cast(int32).

    TVM 0.27 does not import ConvInteger and ONNX Conv has no integer types, so the convolution runs
    in floating point on the exact integers x - x_zero_point and w - w_zero_point. A floating-point
    sum of integers is exact, in any order, while every partial sum stays within 2**24 (float32) or
    2**53 (float64). |partial sum| <= 255 * sum_k |w_k - w_zero_point| per output channel, so with
    constant weights keeping that within 2**24 the Conv is float32 (the NPU runs it); otherwise both
    operands are cast to float64 (exact for any realistic kernel; it stays on the host).
    """
    x, w, xz, wz = _inputs(node, 4)
    one = rw.constant(f"{_base(node)}/one", np.ones((), np.float32))
    operands = [rw.dequantize(node, "x", x, one, xz), rw.dequantize(node, "w", w, one, wz, axis=0)]
    if not _exact_in_float32(rw, w, wz):
        double = [helper.make_attribute("to", TensorProto.DOUBLE)]
        operands = [
            rw.emit(node, "Cast", [t], attributes=double, role=f"{r}_float64")
            for r, t in zip("xw", operands, strict=True)
        ]
    y = rw.emit(node, "Conv", operands, attributes=node.attribute, replaces=True)
    rw.emit(node, "Cast", [y], output=node.output[0], attributes=[helper.make_attribute("to", TensorProto.INT32)])


def _exact_in_float32(rw: _Rewriter, w: str, w_zero_point: str) -> bool:
    """Whether constant weights bound every partial sum of the convolution within float32's exact integers."""
    weights = rw.value(w)
    zero = rw.value(w_zero_point) if w_zero_point else np.zeros((), np.int64)
    if weights is None or zero is None:
        return False
    centred = weights.astype(np.int64).reshape(len(weights), -1) - zero.astype(np.int64).reshape(-1, 1)
    return int(np.abs(centred).sum(axis=1).max(initial=0)) * _INT8_SPAN <= _FLOAT32_EXACT


def _elementwise(float_op: str, first: int, output: int) -> Rewrite:
    """The rewrite of a com.microsoft QLinear op computing ``float_op``: DQ of each quantized operand
    (at ``first``, ``first + 3``, ..., each followed by its scale and zero point) -> float_op -> Q with
    the scale and zero point at ``output``. Attributes carry over (LeakyRelu's alpha, pooling's)."""

    def rewrite(rw: _Rewriter, node: NodeProto) -> None:
        inputs = _inputs(node, max(len(node.input), output + 2))
        attributes = _attributes(node)
        operands = range(first, output if output > first else len(inputs), 3)
        roles = ["x"] if len(operands) == 1 else [f"x{k}" for k in range(len(operands))]
        floats = [
            rw.dequantize(node, r, inputs[i], inputs[i + 1], inputs[i + 2])
            for r, i in zip(roles, operands, strict=True)
        ]
        like = [inputs[i + 2] for i in operands if inputs[i + 2]] + [inputs[first]]
        y = rw.emit(node, float_op, floats, attributes=attributes, replaces=True)
        rw.quantize(node, y, inputs[output], inputs[output + 1], like)

    return rewrite


_REWRITES: dict[tuple[str, str], Rewrite] = {
    ("", "QLinearConv"): _qlinear_conv,
    (_MS, "QLinearConv"): _qlinear_conv,
    ("", "QLinearMatMul"): _qlinear_matmul,
    ("", "ConvInteger"): _conv_integer,
    (_MS, "QGemm"): _qgemm,
    (_MS, "QLinearAdd"): _elementwise("Add", 0, 6),
    (_MS, "QLinearMul"): _elementwise("Mul", 0, 6),
    (_MS, "QLinearSigmoid"): _elementwise("Sigmoid", 0, 3),
    (_MS, "QLinearLeakyRelu"): _elementwise("LeakyRelu", 0, 3),
    (_MS, "QLinearGlobalAveragePool"): _elementwise("GlobalAveragePool", 0, 3),
    (_MS, "QLinearAveragePool"): _elementwise("AveragePool", 0, 3),
    (_MS, "QLinearConcat"): _elementwise("Concat", 2, 0),
}
