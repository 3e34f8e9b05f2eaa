"""8-bit sums and means: ``quantize(sum | mean(dequantize(x, s, z)))`` over any axes, with an exact sum.

Left as written (the float reduction between the NPU's dequantize and quantize), the sum of the
dequantized values rounds in an order: llvm adds in float32 one element after the other, the NPU's
vector engine sums in float64 and rounds once, onnxruntime in its own (vectorised) order, so the three
differ in the last bits and, where the quotient lies near a rounding tie, by one output step. Summed
as integers it does not round at all:

    sum(dequantize(x)) = rsum(float32(x) - z) * s,    mean(dequantize(x)) = rsum(float32(x) - z) * k,

``k = float32(float32(1 / n) * s)``: every term ``x - z`` is a small integer and their sum is exact in
float32 while ``n * 255 < 2^24``, in any order, so llvm and the NPU agree bit for bit; the one
rounding left is the multiply, and ``k`` is the constant the row program's canonical form
(:mod:`.rowwise_algebra`: ``mean = (1/n) * rsum``, constant coefficients folded in float32) makes of the
mean's ``1/n`` and the scale, so the program computes what llvm computes. Against onnxruntime's float
path the value is within its own rounding error (closer to the exact one than any float order). The
row program (:mod:`.rowwise_region`) runs it on the NPU; the quantize after it is :mod:`.qdivide`'s.
A max or min needs none of this (it does not round) and stays the float operator.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax

#: The reductions rewritten, with the word the fallback warning uses.
OPS = {"relax.sum": "sum", "relax.mean": "mean"}


def exact_terms(bits: int) -> int:
    """How many ``bits``-bit terms (at most ``2**bits - 1`` in magnitude) sum exactly in float32: ``n * span``
    must stay within the 24-bit significand."""
    return (1 << 24) // ((1 << bits) - 1)


def reduced_count(call: relax.Call) -> int | None:
    """How many elements each output of the reduction ``call`` sums (None: not static)."""
    shape = call.args[0].ty.shape
    if not isinstance(shape, relax.ShapeExpr) or not all(isinstance(d, tvm.tirx.IntImm) for d in shape.values):
        return None
    dims = [int(d) for d in shape.values]
    axes = range(len(dims)) if call.attrs.axis is None else [int(a) % len(dims) for a in call.attrs.axis]
    return math.prod(dims[a] for a in set(axes))


def integer_sum(call: relax.Call, x: relax.Expr, scale: float, zero_point: int, bits: int,
                emit: Callable[[relax.Expr], relax.Expr]) -> relax.Expr | None:
    """The float32 value of ``call`` (a sum or mean) of ``dequantize(x, scale, zero_point)`` as an exact sum of
    integers times one constant (module docstring), or None when the sum could round (too many ``bits``-bit
    terms)."""
    n = reduced_count(call)
    if n is None or n > exact_terms(bits):
        return None
    k = np.float32(scale)
    if call.op.name == "relax.mean":
        k = np.float32(np.float64(np.float32(1.0 / n)) * np.float64(k))
    terms = emit(relax.op.subtract(emit(relax.op.astype(x, "float32")), relax.const(np.float32(zero_point))))
    axes = None if call.attrs.axis is None else [int(a) for a in call.attrs.axis]
    total = emit(relax.op.sum(terms, axes, keepdims=bool(call.attrs.keepdims)))
    return relax.op.multiply(total, relax.const(k))
