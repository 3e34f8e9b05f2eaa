"""A float constant ``Pad`` on an 8-bit path, as an 8-bit pad (part of the QDQ rewrite of :mod:`.quantized`).

Converters pad an 8-bit tensor in float: ``DequantizeLinear -> Pad(0) -> QuantizeLinear`` with the same scale
and zero point on both sides (tf2onnx's form of Keras ``ZeroPadding2D``, before a stem max pool whose input
may be negative, where the ONNX-level fold cannot prove a ``-inf`` pad equivalent). ``quantize(nn.pad(
dequantize(x, s, z), value), s, z)`` is exactly ``nn.pad(x, quantize(value))``: inside, ``Q(DQ(x)) == x``
for equal parameters (``float32(x - z) * s / s`` rounds back to ``x - z``), and every border element is the
quantized pad value (``z`` for a zero pad). The 8-bit pad is then folded by the pattern table into the
padding of the convolution or max pool that reads it (which reads the value), as a float one is.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm_npu.simulator import quant

from tvm_npu.config import DType

GenericConst = tvm.ir.expr.GenericConst


def _scalar(expr: relax.Expr) -> float | None:
    if not isinstance(expr, GenericConst):
        return None
    arr = np.asarray(expr.value.numpy())
    return float(arr.reshape(())) if arr.size == 1 else None


def quantized_pad(q: relax.Call, pad: relax.Call, dq: relax.Expr) -> relax.Expr | None:
    """``nn.pad(x, quantize(value))`` for ``q = quantize(pad(dq), s, z)`` and ``dq = dequantize(x, s, z)`` with one
    8-bit type and equal per-tensor parameters; None for any other form (left as it is)."""
    if str(pad.attrs.pad_mode) != "constant" or not isinstance(dq, relax.Call) or dq.op.name != "relax.dequantize":
        return None
    try:
        dtype = DType.from_str(str(q.ty.dtype))
    except ValueError:
        return None
    if not dtype.is_quantized or str(dq.args[0].ty.dtype) != dtype.np.name:
        return None
    sy, zy, sx, zx = (_scalar(a) for a in (*q.args[1:], *dq.args[1:]))
    if None in (sy, zy, sx, zx) or np.float32(sx) != np.float32(sy) or zx != zy:
        return None
    value = quant.quantize_value(float(pad.attrs.pad_value), sy, int(zy), dtype)
    return relax.op.nn.pad(dq.args[0], [int(w) for w in pad.attrs.pad_width], pad_mode="constant",
                           pad_value=float(value))
