"""ONNX ``LpNormalization`` (p = 1 or 2, any axis) as the reductions and elementwise operators it computes.

TVM 0.27's ONNX importer has no converter for it. onnxruntime (``lp_norm.cc``) computes, per slice along
``axis``, the norm ``n = sum(|x|)`` (p = 1) or ``n = sqrt(sum(x * x))`` (p = 2) in the input's type, with no
epsilon, and writes ``x / n``, or zeros where ``n == 0``. Written in standard operators:

    p = 1:  Abs -> ReduceSum(axis, keepdims) -> Max(., t) -> Div(x, .)
    p = 2:  Mul(x, x) -> ReduceSum(axis, keepdims) -> Sqrt -> Max(., t) -> Div(x, .)

with ``t`` the least positive normal value of the type (float32: 2^-126, whose reciprocal is finite, as the
NPU divides by multiplying with one): a non-zero p = 2 norm is at least ``sqrt(2^-149)``, far above ``t``, so
``max(n, t) = n`` and the result is ``x / n`` as onnxruntime's; the zero norm of an all-zero slice gives
``0 / t = 0``, onnxruntime's zeros. The differences are subnormal: a p = 2 slice whose squares all underflow
(every ``|x| < 2.6e-23`` in float32) but that is not zero, where onnxruntime writes zeros and this form
``x / t``, and a p = 1 slice whose ``sum(|x|)`` is subnormal (below ``t``). The result is one row program
(:mod:`relay_patterns.rowwise_region`): a reduction over one axis with ``keepdims``, moved to the end by a
transposing view when it is not the last.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tvm_npu.compiler.node_rewrite import replace_nodes

#: The first opset whose ``ReduceSum`` takes its axes as an input.
_AXES_INPUT_OPSET = 13
_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)


class LpNormImportError(ValueError):
    """An ``LpNormalization`` the import cannot write in standard operators (the message says which and why)."""


def _spec(node: onnx.NodeProto) -> tuple[int, int]:
    """(p, axis) of ``node`` (ONNX defaults: p = 2, axis = -1); only p = 1 and 2 are defined."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    p, axis = int(attrs.get("p", 2)), int(attrs.get("axis", -1))
    if p not in (1, 2):
        raise LpNormImportError(f"LpNormalization node {node.name or node.output[0]!r} has p={p}; accepted: p=1 or "
                                "p=2 (the ONNX operator's only values)")
    return p, axis


def _nodes(node: onnx.NodeProto, elem_type: int, opset: int,
           inits: list[onnx.TensorProto]) -> list[onnx.NodeProto]:
    """The standard operators computing ``node`` (module docstring)."""
    p, axis = _spec(node)
    x, y, tag = node.input[0], node.output[0], node.name or node.output[0]
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    tiny = f"{tag}/least_normal"
    inits.append(numpy_helper.from_array(np.array(np.finfo(dtype).tiny, dtype), tiny))
    nodes: list[onnx.NodeProto] = []

    def make(op: str, inputs: list[str], out: str, **attrs: object) -> str:
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    mag = make("Abs", [x], f"{tag}/abs") if p == 1 else make("Mul", [x, x], f"{tag}/square")
    if opset >= _AXES_INPUT_OPSET:
        axes = f"{tag}/axes"
        inits.append(numpy_helper.from_array(np.array([axis], np.int64), axes))
        norm = make("ReduceSum", [mag, axes], f"{tag}/sum", keepdims=1)
    else:
        norm = make("ReduceSum", [mag], f"{tag}/sum", axes=[axis], keepdims=1)
    if p == 2:
        norm = make("Sqrt", [norm], f"{tag}/norm")
    make("Max", [norm, tiny], f"{tag}/nonzero")
    nodes.append(helper.make_node("Div", [x, f"{tag}/nonzero"], [y], name=f"{tag}/div"))
    return nodes


def lp_norms_as_reductions(model: onnx.ModelProto, elem_types: Mapping[str, int], opset: int) -> int:
    """Replace, in place, every main-graph float ``LpNormalization`` of ``model`` (``elem_types``: the element
    type of each value) by the operators computing it; returns how many."""

    def expand(node: onnx.NodeProto, inits: list[onnx.TensorProto]) -> list[onnx.NodeProto] | None:
        if node.op_type != "LpNormalization" or node.domain not in ("", "ai.onnx"):
            return None
        elem = elem_types.get(node.input[0]) if node.input else None
        if elem not in _FLOAT_TYPES:
            raise LpNormImportError(f"LpNormalization node {node.name or node.output[0]!r} reads a tensor of "
                                    f"unknown or non-float type; accepted: float16, float32, float64")
        return _nodes(node, elem, opset, inits)

    return replace_nodes(model.graph, expand)
