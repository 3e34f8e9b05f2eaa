"""ONNX QuantizeLinear's float32 quotient ``y / s``, exactly, without a divide (issue 24 item 3).

QuantizeLinear rounds ``float32(y / s)``: the correctly rounded float32 quotient. The NPU has no divide,
and a float32 multiply by ``float32(1 / s)`` misses that quotient in the last bit for some ``y``, which
moves a rounding tie of the integer by one step (measured over 2,000 random scales in ``[1e-4, 1]``: 8 of
10,000,000 random values, 1.6 % of the float32 values within 8 units in the last place of a tie).

The vector engine's ``VSCALE`` evaluates ``src * scale + shift`` in float64 and rounds once to float32,
with a float64 ``scale``. With ``scale = r = float64(1 / s)`` (``shift`` 0) it gives
``float32(float64(y * r))`` -- exactly ``float32(y / s)`` for every float32 ``y`` and positive normal
``s``: ``r`` and the float64 product each err by at most 2^-53 relatively, so ``float64(y * r)`` is within
about 2^-52 of ``y / s``; a float32 rounding boundary (the midpoint ``m`` of two float32 values, an odd
25-bit significand) is never nearer ``y / s`` than about 2^-49 relatively (``y - m * s`` is a nonzero
multiple of the product of the two last-place units, as ``m * s`` has more significant bits than a float32
``y``), so both round to the same float32. Overflow gives infinity both ways; quotients below 2^-126 round
to the integer 0 either way. ``tests/relay_patterns/test_lone_quantize.py`` checks it on random values and
on every float32 near the ties.

In Relax the same arithmetic is ``astype(astype(y, float64) * r, float32)``, which llvm computes for the
reference (IEEE double multiply, one rounding to float) and the extraction reads as one ``SCALE`` step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax

GenericConst = tvm.ir.expr.GenericConst


def reciprocal(scale: float) -> float | None:
    """``float64(1 / s)`` of a float32 scale, or None when ``s`` is not a positive normal float32 (a zero,
    negative, infinite or subnormal scale has no reciprocal the argument above covers)."""
    s = np.float32(scale)
    if not (np.isfinite(s) and s >= np.finfo(np.float32).tiny):
        return None
    return 1.0 / float(s)


def quotient(y: relax.Expr, scale: float, emit: Callable[[relax.Expr], relax.Expr]) -> relax.Expr | None:
    """``float32(y / s)`` of a float32 ``y`` as ``astype(astype(y, float64) * float64(1 / s), float32)``; None
    when :func:`reciprocal` has none."""
    r = reciprocal(scale)
    if r is None:
        return None
    wide = emit(relax.op.astype(y, "float64"))
    return relax.op.astype(emit(relax.op.multiply(wide, relax.const(r, "float64"))), "float32")


def quotient_of(call: relax.Expr, resolve: Callable[[relax.Expr], relax.Expr]) -> tuple[relax.Expr, float] | None:
    """``(y, r)`` when ``call`` is the form :func:`quotient` writes; None otherwise."""
    if not _is(call, "relax.astype") or str(call.attrs.dtype) != "float32":
        return None
    mul = resolve(call.args[0])
    if not _is(mul, "relax.multiply") or not isinstance(mul.args[1], GenericConst):
        return None
    r = np.asarray(mul.args[1].value.numpy())
    if r.dtype != np.float64 or r.size != 1:
        return None
    wide = resolve(mul.args[0])
    if not _is(wide, "relax.astype") or str(wide.attrs.dtype) != "float64" or str(wide.args[0].ty.dtype) != "float32":
        return None
    return wide.args[0], float(r.reshape(()))


def _is(expr: relax.Expr, op: str) -> bool:
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == op
