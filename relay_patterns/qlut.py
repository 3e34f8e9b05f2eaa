"""8-bit lookup tables: any elementwise float chain of one 8-bit variable between a ``dequantize`` and a
``quantize`` becomes a 256-entry table (part of the QDQ rewrite of :mod:`.quantized`).

A QDQ model computes an activation (HardSwish, HardSigmoid, Sigmoid, Tanh, swish, GELU, Mish, LeakyRelu,
Exp, Clip, Softplus, any composition, ``x * f(x)``) as ``quantize(f(dequantize(x)))``. Its result depends
on the 8-bit ``x`` alone, so it has at most 256 values: they are computed here at compile time, over every
input, by an interpreter of the Relax expression (not a list of exporter patterns), and the chain becomes
``take(table, astype(x, int32) - qmin)``, an ordinary Relax expression that llvm computes and that the NPU
runs as one ``VLUT`` pass (fused into the epilogue of the producing operator after its requantisation,
or standalone). The llvm reference and the NPU therefore agree bit for bit by construction.

The table follows onnxruntime's float QDQ path: ``DequantizeLinear`` is ``float32(x - z) * s``;
each float operator is evaluated in float32 (``+ - * /``, min, max, clip, relu, abs, negation exactly
in IEEE float32; the transcendental ones -- exp, log, sqrt, erf, tanh, sigmoid, power -- in float64 and
rounded once to float32, the correctly rounded value onnxruntime's vectorised approximations are
within a few units in the last place of); ``QuantizeLinear`` is ``round_half_even(float32(y / s)) + z``,
saturated (a NaN quantizes to the zero point). An element differs from onnxruntime only where a
transcendental result within those few units lands on a rounding tie of the quotient: one step,
rarely (``tests/e2e/test_int8_lookup_tables.py`` measures it).

Variables: the leaves of the chain are ``dequantize`` calls of one 8-bit tensor with one per-tensor scale
and zero point each; a leaf's tensor that is itself a table of another tensor (onnxruntime's
``quantize_static`` puts Q/DQ around each operator: swish is ``DQ(x) * DQ(Q(sigmoid(DQ(x))))``) is read
through that table, so the composition is one table of the first tensor. Constants must have one value
(per-channel constants make a function of the channel too: those chains are left as they are).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tvm
from scipy import special
from tvm import relax

from tvm_npu.config import DType

GenericConst = tvm.ir.expr.GenericConst
_F32 = np.float32
_ENTRIES = 256


def _f64(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """A transcendental function evaluated in float64 and rounded once to float32."""
    return lambda x: fn(x.astype(np.float64)).astype(_F32)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(_F32)


def _gelu(x: np.ndarray) -> np.ndarray:
    """ONNX Gelu (erf form) as onnxruntime's kernel writes it: ``0.5 * x * (1 + erf(x * sqrt(1/2)))``."""
    erf = special.erf((x * _F32(np.sqrt(0.5))).astype(np.float64)).astype(_F32)
    return _F32(0.5) * x * (_F32(1.0) + erf)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    inner = _F32(np.sqrt(2.0 / np.pi)) * (x + _F32(0.044715) * x * x * x)
    return _F32(0.5) * x * (_F32(1.0) + np.tanh(inner.astype(np.float64)).astype(_F32))


#: Unary float operators: numpy on a float32 array, float32 result.
_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relax.nn.relu": lambda x: np.maximum(x, _F32(0)),
    "relax.negative": np.negative,
    "relax.abs": np.abs,
    "relax.sign": np.sign,
    "relax.square": lambda x: x * x,
    "relax.floor": np.floor,
    "relax.ceil": np.ceil,
    "relax.round": np.rint,
    "relax.exp": _f64(np.exp),
    "relax.log": _f64(np.log),
    "relax.sqrt": _f64(np.sqrt),
    "relax.rsqrt": _f64(lambda x: 1.0 / np.sqrt(x)),
    "relax.erf": _f64(special.erf),
    "relax.tanh": _f64(np.tanh),
    "relax.sigmoid": _sigmoid,
    "relax.nn.silu": lambda x: x * _sigmoid(x),  # x * sigmoid(x): two float32 operators (the canonical swish)
    "relax.nn.gelu": _gelu,
    "relax.nn.gelu_tanh": _gelu_tanh,
    "relax.nn.softplus": _f64(lambda x: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0)),
}

#: Binary float operators (IEEE float32 arithmetic; power in float64, rounded once).
_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "relax.add": np.add,
    "relax.subtract": np.subtract,
    "relax.multiply": np.multiply,
    "relax.divide": np.divide,
    "relax.maximum": np.maximum,
    "relax.minimum": np.minimum,
    "relax.power": lambda a, b: np.power(a.astype(np.float64), b.astype(np.float64)).astype(_F32),
}


class NotATable(Exception):
    """The expression is not an elementwise chain of one 8-bit variable; ``str(e)`` says what is not."""


def _op(expr: relax.Expr) -> str | None:
    return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else None


def _dtype(expr: relax.Expr) -> DType | None:
    try:
        return DType.from_str(str(expr.ty.dtype))
    except (AttributeError, ValueError):
        return None


def _scalar(expr: relax.Expr, what: str) -> np.ndarray:
    if not isinstance(expr, GenericConst):
        raise NotATable(f"the {what} is not a constant")
    arr = np.asarray(expr.value.numpy())
    if arr.size != 1:
        raise NotATable(f"the {what} has {arr.size} values; accepted: one")
    return arr.reshape(())


def qmin(dtype: DType) -> int:
    """The least value of an 8-bit type: table entry ``k`` is the result for input ``qmin + k``."""
    return int(np.iinfo(dtype.np).min)


def table_of(call: relax.Expr, resolve: Callable[[relax.Expr], relax.Expr]) -> tuple[relax.Expr, np.ndarray] | None:
    """(x, table) when ``call`` is the lookup form this module writes, ``take(table, astype(x, int32) - qmin)``
    with a 256-entry constant table; None otherwise."""
    if _op(call) != "relax.take" or not isinstance(call.args[0], GenericConst):
        return None
    table = np.asarray(call.args[0].value.numpy())
    index = resolve(call.args[1])
    if table.shape != (_ENTRIES,) or _op(index) != "relax.subtract" or not isinstance(index.args[1], GenericConst):
        return None
    cast = resolve(index.args[0])
    if _op(cast) != "relax.astype" or str(cast.attrs.dtype) != "int32":
        return None
    x = cast.args[0]
    dt = _dtype(x)
    if dt is None or not dt.is_8bit or int(np.asarray(index.args[1].value.numpy())) != qmin(dt):
        return None
    return x, table


class _Chain:
    """Evaluates a float expression of one 8-bit variable on all 256 of its values."""

    def __init__(self, resolve: Callable[[relax.Expr], relax.Expr]) -> None:
        self.resolve = resolve
        self.var: relax.Expr | None = None  # the 8-bit tensor every leaf reads (through tables)
        self.var_dtype: DType | None = None
        self.ops = 0  # float operators evaluated (0: a dequantize quantized again)
        self.memo: dict[int, np.ndarray] = {}

    def codes(self, x8: relax.Expr) -> np.ndarray:
        """The 8-bit values of ``x8`` for each value of the variable (through the tables of this module)."""
        looked = table_of(self.resolve(x8), self.resolve)
        if looked is not None:
            inner, table = looked
            return table[self.codes(inner) - qmin(_dtype(inner))].astype(np.int64)  # int64: no 8-bit wrap below
        if self.var is None:
            self.var, self.var_dtype = x8, _dtype(x8)
        elif not self.var.same_as(x8):
            raise NotATable("the chain reads two tensors")
        lo = qmin(self.var_dtype)
        return np.arange(lo, lo + _ENTRIES, dtype=np.int64)

    def leaf(self, dq: relax.Call) -> np.ndarray:
        """``dequantize(x8, s, z)``: onnxruntime's DequantizeLinear, ``float32(x - z) * s``."""
        dt = _dtype(dq.args[0])
        if dt is None or not dt.is_8bit or str(dq.ty.dtype) != "float32":
            raise NotATable(f"a dequantize of {dq.args[0].ty.dtype} to {dq.ty.dtype}; accepted: int8/uint8 to float32")
        scale = _F32(_scalar(dq.args[1], "dequantize scale"))
        zero = int(_scalar(dq.args[2], "dequantize zero point"))
        return (self.codes(dq.args[0]) - zero).astype(_F32) * scale

    def value(self, expr: relax.Expr) -> np.ndarray:
        """Float32 values of ``expr`` over the variable (shape (256,)), or a one-value constant (shape ())."""
        if isinstance(expr, GenericConst):
            if not str(expr.ty.dtype).startswith("float"):
                raise NotATable(f"a {expr.ty.dtype} constant in a float chain")
            return _scalar(expr, "constant").astype(_F32)
        call = self.resolve(expr)
        key = call.__chandle__()
        if key not in self.memo:
            self.memo[key] = self._evaluate(call)
        return self.memo[key]

    def _evaluate(self, call: relax.Expr) -> np.ndarray:
        op = _op(call)
        if op == "relax.dequantize":
            return self.leaf(call)
        if op is None or str(call.ty.dtype) != "float32":
            raise NotATable(f"{op or type(call).__name__} is not a float32 operator")
        with np.errstate(all="ignore"):
            if op in _UNARY:
                x = self.value(call.args[0])
                self.ops += 1
                return _UNARY[op](x).astype(_F32)
            if op in _BINARY:
                a, b = (self.value(arg) for arg in call.args)
                self.ops += 1
                return _BINARY[op](a, b).astype(_F32)
            if op == "relax.clip":
                lo, hi = (_F32(float(arg.value)) for arg in call.args[1:])
                self.ops += 1
                return np.minimum(np.maximum(self.value(call.args[0]), lo), hi)
            if op == "relax.nn.leakyrelu":
                x = self.value(call.args[0])
                self.ops += 1
                return np.where(x >= 0, x, x * _F32(call.attrs.alpha)).astype(_F32)
            if op == "relax.astype":
                return self.value(call.args[0])  # float32 to float32
        raise NotATable(f"{op} is not an elementwise operator of one value")


def quantize_table(y: np.ndarray, scale: float, zero_point: int, dtype: DType) -> np.ndarray:
    """ONNX QuantizeLinear of float32 values: ``round_half_even(float32(y / s)) + z``, saturated (NaN -> z)."""
    info = np.iinfo(dtype.np)
    with np.errstate(all="ignore"):
        q = np.rint(np.divide(y.astype(_F32), _F32(scale), dtype=_F32)).astype(np.float64) + zero_point
    q[np.isnan(q)] = zero_point
    return np.clip(q, info.min, info.max).astype(dtype.np)


def lookup(q: relax.Call, resolve: Callable[[relax.Expr], relax.Expr],
           emit: Callable[[relax.Expr], relax.Expr]) -> relax.Expr:
    """``quantize(f(dequantize(x)))`` -> ``take(table, astype(x, int32) - qmin)``; :class:`NotATable` when
    ``q`` is not such a chain (a per-axis quantize, two variables, a non-elementwise operator, no operator at
    all between a dequantize and a quantize of equal parameters)."""
    out_dt = _dtype(q)
    if out_dt is None or not out_dt.is_8bit:  # 16 bits: a 65536-entry table is not the NPU's; float on the NPU
        raise NotATable(f"a quantize to {q.ty.dtype}; accepted: int8, uint8")
    scale, zero = float(_scalar(q.args[1], "quantize scale")), int(_scalar(q.args[2], "quantize zero point"))
    chain = _Chain(resolve)
    y = chain.value(q.args[0])
    if chain.var is None or y.shape != (_ENTRIES,):
        raise NotATable("the chain reads no 8-bit tensor")
    if chain.ops == 0 and chain.var_dtype == out_dt and _same_parameters(resolve(q.args[0]), scale, zero):
        raise NotATable("a dequantize quantized again with its own parameters is the tensor itself")
    if [int(d) for d in chain.var.ty.shape] != [int(d) for d in q.ty.shape]:
        raise NotATable("the chain broadcasts its variable")
    table = quantize_table(y, scale, zero, out_dt)
    shifted = emit(relax.op.astype(chain.var, "int32"))
    index = emit(relax.op.subtract(shifted, relax.const(np.int32(qmin(chain.var_dtype)))))
    return relax.op.take(relax.const(table), index, axis=0, mode="clip")  # every index is in range: no clamp


def _same_parameters(dq: relax.Expr, scale: float, zero: int) -> bool:
    return (_op(dq) == "relax.dequantize" and _F32(_scalar(dq.args[1], "scale")) == _F32(scale)
            and int(_scalar(dq.args[2], "zero point")) == zero)
