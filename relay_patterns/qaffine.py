"""A batch norm of a 16-bit tensor between dequantize and quantize as one integer affine step (part of the QDQ
rewrite of :mod:`.quantized`).

onnxruntime's ``quantize_static`` without pre-processing leaves ``Conv -> Q -> DQ -> BatchNormalization -> Q``:
the batch norm is a float operator between a dequantize and a quantize. Left as float, llvm and the NPU would
compute different float32 operations (the reference decomposes it into ``(x - mean) / sqrt(var + eps) * gamma +
beta`` at run time, the NPU build folds the constants into a multiply and an add), and at 16 bits a float32
rounding is within 2**-9 of a quantization step, so a few values in a thousand would land one step apart.
Written here, once for both builds, as the per-channel affine map it is:

    quantize(batch_norm(dequantize(x))) = clip(round_half_even(float32(x - z_x) * m_c + o_c) + z_y, lo, hi)

``m_c = float32(s_x * a_c / s_y)``, ``o_c = float32(b_c / s_y)`` with ``a = gamma / sqrt(var + eps)`` and
``b = beta - mean * a`` in float64 (:func:`~tvm_npu.simulator.quant.requantize_affine`, the form the NPU already
runs for a float constant operand, :mod:`.qbinary`): one rounding of a value within float32 error of the exact
one, so within a step of onnxruntime's float batch norm, and bit-exact between llvm and the NPU. An 8-bit batch
norm keeps its float path (its programs unchanged; a step there is 256 times coarser).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm_npu.simulator import quant

from . import qbinary

GenericConst = tvm.ir.expr.GenericConst
BATCH_NORM = "relax.nn.batch_norm"


def batch_norm_of(expr: relax.Expr, mut: qbinary.Rewriter) -> relax.Call | None:
    """The ``batch_norm`` call whose normalised output (tuple field 0) ``expr`` is; None otherwise."""
    if not isinstance(expr, relax.TupleGetItem) or expr.index != 0:
        return None
    bn = mut._resolve(expr.tuple_value)
    return bn if isinstance(bn, relax.Call) and isinstance(bn.op, tvm.ir.Op) and bn.op.name == BATCH_NORM else None


def _constant(expr: relax.Expr, mut: qbinary.Rewriter) -> np.ndarray | None:
    """The float32 value of a constant, or of a ``dequantize`` of one (onnxruntime's quantizer stores a batch
    norm's scale and bias quantized): DequantizeLinear's ``float32(q - z) * s``, per axis too."""
    if isinstance(expr, GenericConst):
        return np.asarray(expr.value.numpy(), np.float32)
    if not (isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.dequantize"):
        return None
    q, s, z = (mut._resolve(a) for a in expr.args)
    if not all(isinstance(v, GenericConst) for v in (q, s, z)) or len(q.ty.shape) != 1:
        return None
    diff = np.asarray(q.value.numpy(), np.int64) - np.asarray(z.value.numpy(), np.int64)
    return diff.astype(np.float32) * np.asarray(s.value.numpy(), np.float32)


def affine_batch_norm(mut: qbinary.Rewriter, bn: relax.Call, x: relax.Expr, sx: float, zx: int,
                      out: qbinary.Out) -> relax.Expr:
    """``quantize(batch_norm(dequantize(x, s_x, z_x)))`` as :func:`quant.requantize_affine` (module docstring);
    raises :class:`qbinary.Skip` for parameters that are not constants."""
    params = []
    for k, what in ((1, "gamma"), (2, "beta"), (3, "mean"), (4, "variance")):
        value = _constant(mut._resolve(bn.args[k]), mut)
        if value is None:
            raise qbinary.Skip(f"the batch norm's {what} is not a constant")
        params.append(value.astype(np.float64).reshape(-1))
    gamma, beta, mean, var = params
    a = gamma / np.sqrt(var + float(bn.attrs.epsilon))
    b = beta - mean * a
    rank = len(bn.args[0].ty.shape)
    shape = [1] * rank
    shape[int(bn.attrs.axis) % rank] = -1
    m = (np.float64(np.float32(sx)) * a / np.float64(np.float32(out.scale))).astype(np.float32).reshape(shape)
    o = (b / np.float64(np.float32(out.scale))).astype(np.float32).reshape(shape)
    shifted = mut._emit(relax.op.astype(x, "float32"))
    if zx:
        shifted = mut._emit(relax.op.subtract(shifted, relax.const(np.float32(zx))))
    return quant.requantize_affine(shifted, m, o, out.zero_point, out.lo, out.hi, out.dtype,
                                   qbinary.relax_arith(mut._emit))
