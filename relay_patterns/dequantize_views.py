"""A lone dequantize of a transposed 8-bit tensor -> the transpose of the dequantized tensor; a lone quantize of
a transposed float tensor -> the transpose of the quantized one.

The QDQ rewrite (:mod:`.quantized`) keeps a ``Transpose`` between same-scale ``DequantizeLinear`` /
``QuantizeLinear`` on the 8-bit tensor and leaves the ``dequantize`` after it in float form,
``(astype(permute_dims(x)) - z) * s``, when a float operator reads it (YOLOv8's DFL: 8-bit box logits,
transposed, dequantized, then a softmax). On the NPU the transpose is a view, so that dequantize pass reads
one byte at a time through the transposing strides (3.7x its DMA bound on the DFL head). A dequantize with
one scale and zero point is elementwise of one value, so it commutes with moving the values:
``dequantize(permute_dims(x)) == permute_dims(dequantize(x))`` element for element, bit for bit. Written the
second way, the dequantize reads its 8-bit tensor in order (or runs in the epilogue of the operator that
produces it), and the transpose becomes a view of the float tensor, which the float reader (the softmax's
row-wise operator) reads through strides as it does in a float32 model. The same holds for a quantize with
one scale and zero point after a transpose (the DFL softmax's inverse transpose, :mod:`.transformer`): moved
before it, the quantize reads the softmax's result as that operator writes it (in order, where it wrote
through the inverse transpose's strides before), and the transpose is a view of the 8-bit result. On the
DFL head of the corpus's YOLOv8 the two take the int8 cycles from 113,216 to 98,960. TVM has no pass that
moves a dequantize or quantize across a transpose, hence this one.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

from .extract import const_array

_EIGHT_OR_SIXTEEN_BIT = frozenset({"int8", "uint8", "int16", "uint16"})


def _scalar(expr: relax.Expr) -> bool:
    return const_array(expr).size == 1


def _hoisted(func: relax.Function) -> relax.Function:
    """``(astype(permute_dims(x), float32) - z) * s`` with one ``z`` and ``s`` -> ``permute_dims((astype(x, float32)
    - z) * s)`` (the same axes); per-axis constants, which would have to be permuted too, are left as they are."""
    x = wildcard()
    perm = is_op("relax.permute_dims")(x)
    cast = is_op("relax.astype")(perm)
    zero, scale = is_const(), is_const()
    root = is_op("relax.multiply")(is_op("relax.subtract")(cast, zero), scale)

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        if str(m[x].ty.dtype) not in _EIGHT_OR_SIXTEEN_BIT or str(m[cast].ty.dtype) != "float32":
            return orig
        if not (_scalar(m[zero]) and _scalar(m[scale])):
            return orig
        dq = relax.op.multiply(relax.op.subtract(relax.op.astype(m[x], "float32"), m[zero]), m[scale])
        return relax.op.permute_dims(dq, m[perm].attrs.axes)

    return rewrite_call(root, rewrite, func)


def _sunk(func: relax.Function) -> relax.Function:
    """``quantize(astype(astype(permute_dims(y), float64) * c, float32), 1, z)`` (a lone quantize as :mod:`.quantized`
    writes it) with one ``z`` -> ``permute_dims`` of the same quantize of ``y``: the quantize then follows the float
    operator that computes ``y`` (its epilogue), and the transpose is a view of the 8-bit result."""
    y = wildcard()
    perm = is_op("relax.permute_dims")(y)
    wide = is_op("relax.astype")(perm)
    multiplier = is_const()
    quotient = is_op("relax.astype")(is_op("relax.multiply")(wide, multiplier))
    scale, zero = is_const(), is_const()
    root = is_op("relax.quantize")(quotient, scale, zero)

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        if str(m[y].ty.dtype) != "float32" or str(m[wide].ty.dtype) != "float64":
            return orig
        if not (_scalar(m[zero]) and _scalar(m[scale])):
            return orig
        q = relax.op.astype(relax.op.multiply(relax.op.astype(m[y], "float64"), m[multiplier]), "float32")
        attrs = orig.attrs
        return relax.op.permute_dims(relax.op.quantize(q, m[scale], m[zero], int(attrs.axis), str(attrs.out_dtype)),
                                     m[perm].attrs.axes)

    return rewrite_call(root, rewrite, func)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.DequantizeViews")
def dequantize_views(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """Lone dequantizes moved ahead of the transposes of their 8-bit tensors, lone quantizes after those of their
    float ones (see the module docstring)."""
    return _sunk(_hoisted(func))
