"""8-bit binary elementwise operators with broadcasting (part of the QDQ rewrite of :mod:`.quantized`).

``quantize(op(dequantize(a), b))`` for ``op`` in add, subtract, multiply, maximum, minimum, where ``b`` is a
second 8-bit tensor (``dequantize`` with per-tensor parameters; a constant one too), or a float constant (an
initializer, or a ``dequantize`` of a constant with per-axis parameters), broadcasting either way (a scalar,
one value per channel, a ``[N, C, 1, 1]`` gate, a full tensor), becomes float32 Relax arithmetic ending in
``quantize(v, 1, z)``: element for element the integer rule of the reference below, computed by the NPU's
vector steps (a product of two 8-bit tensors as one ``QMUL`` step, ``VQMUL``; a sum as one ``QADD`` step;
otherwise a cast of the 8-bit tensor, float32 ``+ * max min`` with broadcast operands, a quantize by 1)
and by llvm alike, so the two agree bit for bit. The chain runs in the epilogue of the operator producing the
full-shape tensor where the plan can fuse it, as one vector pass otherwise.

What each form reproduces (onnxruntime, CPU, default level: it fuses ``DQ -> Add|Mul -> Q`` of two
dequantized inputs into QLinearAdd / QLinearMul and runs every other such region as the float QDQ graph):

* **add** of two 8-bit tensors: QLinearAdd, :func:`~tvm_npu.simulator.quant.rescale_add` (the full-shape
  tensor's term first: onnxruntime's broadcast loop swaps the operands when the first is one value per
  span, and the x86 kernel adds the scalar operand's term last; a first addend that varies along the last
  axis keeps its place, read through a broadcasting view);
* **multiply** of two 8-bit tensors: QLinearMul, :func:`~tvm_npu.simulator.quant.rescale_mul` (commutes);
* **subtract** of two 8-bit tensors: the float path ``round((DQ(a) - DQ(b)) / s_y)`` as the rescaled add with
  ``b``'s scale negated: one rounding of the same sum, so within the QLinearAdd-vs-float difference (one
  step, where the float32 sums land within float error of a half);
* **maximum / minimum** of two 8-bit tensors: quantization is monotone, so ``Q(max(DQ(a), DQ(b)))`` is
  ``max(Q(DQ(a)), Q(DQ(b)))``; each side is requantised by the multiplier of :func:`.quantized._ratio`
  (onnxruntime's integers for all 256 values) and the maximum taken before the one rounding
  (``round(max(u, v)) == max(round(u), round(v))``);
* **a float constant** ``c``: the float path ``round(float32(DQ(x) op c) / s_y)``. Add, subtract and
  multiply are :func:`~tvm_npu.simulator.quant.requantize_affine` with one multiplier and offset per value of
  ``c``, searched (:func:`_affine_constants`) among the float32 neighbours of ``s_x / s_y`` and ``c / s_y``
  (times ``c`` for a product) for the pair that gives the float path's integer for all 256 inputs;
  maximum / minimum are the requantised ``x`` against the integer ``Q(c) - z_y`` (monotone, exact).

The chain's data is the full-shape operand; an 8-bit tensor that broadcasts along more than one axis (or is
the first addend and varies along the last axis, whose term onnxruntime's general loop adds first, or the
minuend, or broadcasts together with the other) is read through ``broadcast_to``, a view with zero strides
inside a partition (no copy); one that varies along a single axis is a per-channel epilogue operand.

Not rewritten (:class:`Skip` with the reason; the region stays float between dequantize and quantize):
operands of different 8-bit types, an 8-bit tensor with per-axis parameters, a constant of another type
than float32.

A per-channel ``Mul`` + ``Add`` after a convolution is *not* folded into the convolution's requantisation:
in a QDQ graph each of them reads the previous operator's *quantized* result, and folding would skip that
rounding (``round(round(acc * m) * c')`` is not ``round(acc * m * c')``), so the result would differ; they
run as the operators above, fused into the convolution's epilogue when the plan allows.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import tvm
from tvm import relax
from tvm_npu.simulator import quant

from tvm_npu.config import DType

GenericConst = tvm.ir.expr.GenericConst
_F32 = np.float32
_DQ = "relax.dequantize"
#: Relax operator -> the ONNX operator it imports from (for reasons).
OPS = {"relax.add": "add", "relax.subtract": "sub", "relax.multiply": "mul", "relax.maximum": "max",
       "relax.minimum": "min"}
#: float32 steps either side of the first guess tried by the constant search (:func:`_affine_constants`).
_SEARCH_ULPS = 2
#: Distinct constant values searched one by one; a larger full-size constant keeps the nearest guesses.
_SEARCH_VALUES = 4096


class Skip(Exception):
    """The region is left as it is; ``str(e)`` is the reason (empty: not an 8-bit binary operator)."""


#: ``(s_x, z_x, in type, out type, s_y, z_y) -> m``: an exact requantisation multiplier (``quantized._ratio``).
Ratio = Callable[[float, int, DType, DType, float, int], float]


class Rewriter(Protocol):
    """What the QDQ rewrite lends this module: binding lookup and emission."""

    def _resolve(self, expr: relax.Expr) -> relax.Expr: ...

    def _emit(self, expr: relax.Expr) -> relax.Expr: ...


@dataclass(frozen=True)
class Q8:
    """An 8-bit operand: the tensor (or constant), its per-tensor parameters, its values when constant."""

    x: relax.Expr
    scale: float
    zero_point: int
    dtype: DType
    shape: tuple[int, ...]
    values: np.ndarray | None


@dataclass(frozen=True)
class Out:
    """The quantize's result: type, scale, zero point and the clamp of a folded relu / clip."""

    dtype: DType
    scale: float
    zero_point: int
    lo: int
    hi: int


def _shape(expr: relax.Expr) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in expr.ty.shape)
    except (AttributeError, TypeError, ValueError):
        raise Skip("an operand or the result has no static shape; accepted: static shapes") from None


def _dtype(expr: relax.Expr) -> DType | None:
    try:
        return DType.from_str(str(expr.ty.dtype))
    except (AttributeError, ValueError):
        return None


def _const(expr: relax.Expr) -> np.ndarray | None:
    return np.asarray(expr.value.numpy()) if isinstance(expr, GenericConst) else None


def _operand(mut: Rewriter, expr: relax.Expr) -> Q8 | np.ndarray:
    """An 8-bit operand (per-tensor ``dequantize``) or a float32 constant (an initializer, or the exact
    DequantizeLinear ``float32(q - z) * s`` of a constant with per-axis parameters)."""
    e = mut._resolve(expr)
    if (c := _const(e)) is not None:
        if c.dtype != np.float32:
            raise Skip(f"a {c.dtype} constant operand; accepted: float32")
        return c
    if not (isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == _DQ):
        raise Skip("")  # a float value: not an 8-bit operator
    dt = _dtype(e.args[0])
    scale, zero_point = _const(e.args[1]), _const(e.args[2])
    if dt is None or not dt.is_quantized or scale is None or zero_point is None:
        raise Skip("an operand is not dequantized from an 8-bit tensor with constant parameters")
    values = _const(e.args[0])
    if scale.size == 1 and zero_point.size == 1:
        return Q8(e.args[0], float(scale.reshape(())), int(zero_point.reshape(())), dt, _shape(e.args[0]), values)
    if values is None:
        raise Skip("an 8-bit tensor operand has per-axis parameters; accepted: one scale and zero point")
    axis = int(e.attrs.axis) % values.ndim
    shape = [1] * values.ndim
    shape[axis] = -1
    diff = values.astype(np.int32) - zero_point.astype(np.int32).reshape(shape)
    return (diff.astype(_F32) * scale.astype(_F32).reshape(shape)).astype(_F32)


def rewrite(mut: Rewriter, call: relax.Call, out: Out, ratio: Ratio) -> relax.Expr:
    """The integer form of ``quantize(call)`` (module docstring); raises :class:`Skip`. ``ratio`` is the
    QDQ rewrite's exact requantisation multiplier (``quantized._ratio``)."""

    def ratio_of(x: Q8, o: Out) -> float:
        return float(ratio(x.scale, x.zero_point, x.dtype, o.dtype, o.scale, o.zero_point))

    op = OPS[call.op.name]
    lhs, rhs = (_operand(mut, a) for a in call.args)
    if not isinstance(lhs, Q8) and not isinstance(rhs, Q8):
        raise Skip("")  # two constants: folded elsewhere
    for side in (lhs, rhs):
        if isinstance(side, Q8) and side.dtype != out.dtype:
            raise Skip(f"{side.dtype.np.name} operand, {out.dtype.np.name} result; accepted: one 8-bit type")
    arith = relax_arith(mut._emit)
    full = _shape(call)
    if isinstance(lhs, Q8) and isinstance(rhs, Q8):
        return _two_tensors(mut, arith, op, lhs, rhs, full, out, ratio_of)
    x, c, const_first = (lhs, rhs, False) if isinstance(lhs, Q8) else (rhs, lhs, True)
    x = _expanded(mut, x, full)
    c = np.broadcast_to(c, np.broadcast_shapes(c.shape, full))
    d = _shifted(mut, x)
    if op in ("max", "min"):
        k = (_quantized(c, out) - out.zero_point).astype(_F32)
        return _extremum(mut, arith, op, d, x, k, out, ratio_of)
    m, o = _affine_constants(x, c, out, op, const_first)
    return quant.requantize_affine(d, _squeeze(m), None if o is None else _squeeze(o), out.zero_point, out.lo,
                                   out.hi, out.dtype, arith)


def _two_tensors(mut: Rewriter, arith: quant.Arith, op: str, a: Q8, b: Q8, full: tuple[int, ...], out: Out,
                 ratio_of: Callable[[Q8, Out], float]) -> relax.Expr:
    """Both operands 8-bit: the full-shape one is the chain's data, the other its (broadcast) operand."""
    if a.shape != full and (b.shape != full or op == "sub" or (op == "add" and _varies_innermost(a.shape, full))):
        a = _expanded(mut, a, full)  # the first operand is the chain's data: read through a broadcasting view
    b = b if _per_channel(b.shape, full) else _expanded(mut, b, full)
    data, other = (a, b) if a.shape == full else (b, a)
    if op in ("add", "sub"):  # the full tensor's term first: onnxruntime's loop swaps a broadcast first addend
        sign = -1.0 if op == "sub" else 1.0
        r_data, r_other, offset = quant.add_params(data.scale, data.zero_point, sign * other.scale, other.zero_point,
                                                   out.scale, out.zero_point)
        term = _term(arith, other, r_other)
        return quant.rescale_add(data.x, term, r_data, 1.0, offset, out.lo, out.hi, out.dtype, _one_scaled(arith))
    if op == "mul":
        ratio = quant.mul_params(a.scale, b.scale, out.scale)
        return quant.rescale_mul(_shifted(mut, data), _shifted(mut, other), ratio, out.zero_point, out.lo, out.hi,
                                 out.dtype, arith)
    operand = _scaled(mut, _shifted(mut, other), ratio_of(other, out))
    return _extremum(mut, arith, op, _shifted(mut, data), data, operand, out, ratio_of)


def _per_channel(shape: tuple[int, ...], full: tuple[int, ...]) -> bool:
    """Whether an operand of ``shape`` is the full tensor or one value per position along a single axis of
    ``full`` (an epilogue operand as it is: a per-channel vector, the extraction's channel axis)."""
    varying = [i for i, d in enumerate(shape) if d != 1]
    return shape == full or (len(shape) == len(full) and len(varying) == 1 and shape[varying[0]] == full[varying[0]])


def _expanded(mut: Rewriter, x: Q8, full: tuple[int, ...]) -> Q8:
    """``x`` broadcast to ``full`` (``broadcast_to``: a view with zero strides in a partition, no copy); a
    constant as it is (the extraction materialises constants)."""
    if x.values is not None or x.shape == full:
        return x
    return replace(x, x=mut._emit(relax.op.broadcast_to(x.x, full)), shape=full)


def _one_scaled(arith: quant.Arith) -> quant.Arith:
    """``arith`` whose multiply by 1.0 is the operand itself (the rescaled add's second term is given
    already scaled, as a constant or a computed tensor)."""
    return replace(arith, mul=lambda a, b: a if isinstance(b, float) and b == 1.0 else arith.mul(a, b))


def _term(arith: quant.Arith, b: Q8, scale: float) -> relax.Expr:
    """``float32(b) * scale``: a constant folded here (the same float32 product), else the Relax product."""
    if b.values is not None:
        return relax.const(_squeeze(b.values.astype(_F32) * _F32(scale)))
    return arith.mul(arith.to_f32(b.x), scale)


def _shifted(mut: Rewriter, x: Q8) -> relax.Expr:
    """``float32(x) - z`` (exact: small integers), a constant folded here."""
    if x.values is not None:
        return relax.const(_squeeze((x.values.astype(np.int32) - x.zero_point).astype(_F32)))
    f = mut._emit(relax.op.astype(x.x, "float32"))
    return mut._emit(relax.op.subtract(f, relax.const(_F32(x.zero_point)))) if x.zero_point else f


def _scaled(mut: Rewriter, value: relax.Expr, m: float) -> relax.Expr:
    if isinstance(value, GenericConst):
        return relax.const((_const(value) * _F32(m)).astype(_F32))
    return value if m == 1.0 else mut._emit(relax.op.multiply(value, relax.const(_F32(m))))


def _extremum(mut: Rewriter, arith: quant.Arith, op: str, d: relax.Expr, x: Q8, operand: relax.Expr | np.ndarray,
              out: Out, ratio_of: Callable[[Q8, Out], float]) -> relax.Expr:
    """``quantize(max|min(float32(x - z_x) * m, operand), 1, z_y)``: ``x`` requantised to the output (exact
    multiplier) against an operand on the same scale before the one rounding."""
    v = _scaled(mut, d, ratio_of(x, out))
    if isinstance(operand, np.ndarray):
        operand = relax.const(_squeeze(operand.astype(_F32)))
    fn = relax.op.maximum if op == "max" else relax.op.minimum
    return quant.requantize_affine(mut._emit(fn(v, operand)), 1.0, None, out.zero_point, out.lo, out.hi, out.dtype,
                                   _one_scaled(arith))


def _quantized(c: np.ndarray, out: Out) -> np.ndarray:
    """ONNX QuantizeLinear of a float32 array (division, ties to even, saturating)."""
    lo, hi = quant.qrange(out.dtype)
    return np.clip(np.rint(c.astype(_F32) / _F32(out.scale)) + out.zero_point, lo, hi)


def _squeeze(arr: np.ndarray) -> np.ndarray:
    """A broadcast constant reduced to the values it has: the leading unit axes kept (ranks must match),
    every axis along which it does not vary collapsed to 1, contiguous."""
    arr = np.asarray(arr)
    for axis in range(arr.ndim):
        if arr.shape[axis] > 1 and np.all(arr == arr.take([0], axis=axis)):
            arr = arr.take([0], axis=axis)
    return np.ascontiguousarray(arr)


def _varies_innermost(shape: tuple[int, ...], full: tuple[int, ...]) -> bool:
    return len(shape) > 0 and shape[-1] != 1 and shape[-1] == full[-1]


def float_path(x: np.ndarray, sx: float, zx: int, c: np.ndarray, op: str, const_first: bool, out: Out) -> np.ndarray:
    """onnxruntime's float QDQ path for an 8-bit ``x`` and a float32 constant ``c`` (broadcast):
    ``QuantizeLinear(DequantizeLinear(x) op c)`` in float32, clamped as ``out`` says."""
    y = ((x.astype(np.int32) - zx).astype(_F32) * _F32(sx)).astype(_F32)
    a, b = (c.astype(_F32), y) if const_first else (y, c.astype(_F32))
    r = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[op](a, b)
    return np.clip(_quantized(r.astype(_F32), out), out.lo, out.hi).astype(out.dtype.np)


def _affine_constants(x: Q8, c: np.ndarray, out: Out, op: str, const_first: bool
                      ) -> tuple[np.ndarray, np.ndarray | None]:
    """Per element of ``c``: the multiplier and offset (None for a product) of
    :func:`~tvm_npu.simulator.quant.requantize_affine` that give :func:`float_path`'s integer for every
    8-bit value of ``x``: the float32 guesses ``s_x / s_y`` (times ``c``, or negated for ``c - x``) and
    ``+-c / s_y`` first, then up to :data:`_SEARCH_ULPS` steps either side, nearer first; where no pair
    gives all 256, the pair that gives the most. Such a value is one whose float path lands on rounding
    ties for many inputs, broken either way by float32 error (``x * c`` with ``s_x * c / s_y`` a half
    integer): the elements that differ are those ties, one step apart (``test_qbinary_rules.py``; measured
    on random constants: none). A constant with more than :data:`_SEARCH_VALUES` values keeps the guesses."""
    values, inverse = np.unique(c, return_inverse=True)
    sx, sy = _F32(x.scale), _F32(out.scale)
    if op == "mul":
        m0, o0 = ((sx * values.astype(_F32)).astype(_F32) / sy).astype(_F32), None
    else:  # x + c, x - c = x + (-c) and c - x = -(x - c), each exactly so in IEEE arithmetic
        m0 = np.full(values.shape, _F32(-1.0 if const_first and op == "sub" else 1.0) * (sx / sy), _F32)
        o0 = (_F32(-1.0 if op == "sub" and not const_first else 1.0) * (values.astype(_F32) / sy)).astype(_F32)
    m, o = m0.copy(), None if o0 is None else o0.copy()
    if values.size <= _SEARCH_VALUES:
        lo, hi = quant.qrange(x.dtype)
        q = np.arange(lo, hi + 1, dtype=np.int32)[:, None]
        want = float_path(q, sx, x.zero_point, values[None, :], op, const_first, out)
        best = np.full(values.shape, -1)
        steps = range(-_SEARCH_ULPS, _SEARCH_ULPS + 1)
        pairs = sorted(itertools.product(steps, steps if o0 is not None else [0]), key=lambda p: abs(p[0]) + abs(p[1]))
        for i, j in pairs:
            mi, oj = _ulps(m0, i), None if o0 is None else _ulps(o0, j)
            got = quant.requantize_affine(q - x.zero_point, mi[None, :], None if oj is None else oj[None, :],
                                          out.zero_point, out.lo, out.hi, out.dtype, NUMPY_AFFINE)
            hits = np.sum(got == want, axis=0)
            better = hits > best
            m[better] = mi[better]
            if o is not None:
                o[better] = oj[better]
            best = np.maximum(best, hits)
            if np.all(best == q.size):
                break
    shape = c.shape
    return m[inverse].reshape(shape), None if o is None else o[inverse].reshape(shape)


def _ulps(x: np.ndarray, k: int) -> np.ndarray:
    """``x`` moved ``k`` float32 steps (up for k > 0)."""
    toward = _F32(np.inf) if k > 0 else _F32(-np.inf)
    for _ in range(abs(k)):
        x = np.nextafter(x, toward).astype(_F32)
    return x


#: :data:`~tvm_npu.simulator.quant.NUMPY`, with an absent (None) offset adding nothing.
NUMPY_AFFINE: quant.Arith = replace(quant.NUMPY, add=lambda a, b: a if b is None else np.add(a, b))


@dataclass(frozen=True)
class _Rounded:
    """A float32 value the rule rounds: the zero point and clamp it collects become one ``quantize(v, 1, z)``
    (which rounds half to even, adds the zero point and saturates) and a ``clip``."""

    value: relax.Expr
    zero_point: float = 0.0
    lo: float | None = None
    hi: float | None = None


def relax_arith(emit: Callable[[relax.Expr], relax.Expr]) -> quant.Arith:
    """The quantization rules (:mod:`~tvm_npu.simulator.quant`) written as Relax operators: a rule evaluated
    with this builds the graph llvm and the NPU compute, operation for operation in the rule's float32 order.
    Operands are Relax expressions, Python floats or numpy constants; an absent offset (None) adds nothing."""

    def const(b: object) -> relax.Expr:
        return relax.const(np.asarray(b, _F32)) if isinstance(b, float | np.ndarray | np.floating) else b

    def to_f32(x: relax.Expr) -> relax.Expr:
        return x if str(x.ty.dtype) == "float32" else emit(relax.op.astype(x, "float32"))

    def add_const(x: relax.Expr | _Rounded, c: float) -> relax.Expr | _Rounded:
        if isinstance(x, _Rounded):
            return replace(x, zero_point=x.zero_point + c)
        return emit(relax.op.add(x, relax.const(_F32(c))))

    def cast(r: _Rounded, dtype: DType) -> relax.Expr:
        y = relax.op.quantize(r.value, relax.const(1.0, "float32"), relax.const(int(r.zero_point), dtype.np.name),
                              axis=len(r.value.ty.shape) - 1, out_dtype=dtype.np.name)
        qlo, qhi = quant.qrange(dtype)
        if (r.lo, r.hi) == (qlo, qhi):
            return y
        return relax.op.clip(emit(y), int(r.lo), int(r.hi))

    return quant.Arith(
        to_f32=to_f32,
        mul=lambda a, b: emit(relax.op.multiply(a, const(b))),
        round_even=lambda x: _Rounded(x),
        add_const=add_const,
        add=lambda a, b: a if b is None else emit(relax.op.add(a, const(b))),
        clip=lambda r, lo, hi: replace(r, lo=lo, hi=hi),
        cast=cast,
    )
