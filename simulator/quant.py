"""The integer quantization rules, written once and evaluated by numpy and by TE alike.

Requantisation turns an int32 accumulator into an 8-bit activation:

    y = clip(round_half_to_even(float32(acc) * multiplier) + zero_point, lo, hi)

with ``multiplier = float32(float32(s_x * s_w[c]) / s_y)`` per output channel. Every
operation is in float32, in this order: this is what onnxruntime's integer kernels
(QLinearConv, QLinearMatMul, and the QDQ fusions that produce them) compute, so a
model quantized by its quantizer gives the same integers here. ``lo``/``hi`` are the
output type's range, narrowed by a folded relu or clip (:func:`clamp_bounds`).

The same formula is written against an :class:`Arith` (a handful of primitive
operations), so the simulator's numerics (:data:`NUMPY`), the numpy references of
the tests and the templates' TE compute (``tvm_npu.core.epilogue``) cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from tvm_npu.config import DType

T = TypeVar("T")


@dataclass(frozen=True)
class Arith(Generic[T]):
    """The primitive operations the rules need, for one kind of value (arrays or TE expressions)."""

    to_f32: Any  # (x) -> x as float32
    mul: Any  # (a, b) -> a * b in the operands' float type
    round_even: Any  # (x) -> nearest integer, ties to even, still float
    add_const: Any  # (x, c: float) -> x + c
    add: Any  # (a, b) -> a + b
    clip: Any  # (x, lo: float, hi: float) -> min(max(x, lo), hi)
    cast: Any  # (x, dtype: DType) -> x converted (exact: x is an in-range integer)


def qrange(dtype: DType) -> tuple[int, int]:
    """The integer range of an 8- or 16-bit activation type."""
    if not dtype.is_quantized:
        raise ValueError(f"{dtype.np.name} is not a quantized type; accepted: int8, uint8, int16, uint16")
    info = np.iinfo(dtype.np)
    return int(info.min), int(info.max)


def requantize(acc: T, multiplier: T, zero_point: int, lo: int, hi: int, dtype: DType, ops: Arith[T]) -> T:
    """int32 accumulator -> 8-bit value (see the module docstring)."""
    scaled = ops.round_even(ops.mul(ops.to_f32(acc), multiplier))
    # rounding first, then the zero point: the sum is exact (an integer-valued float32 of at
    # most 2**24 in magnitude that matters; larger ones saturate either way)
    return ops.cast(ops.clip(ops.add_const(scaled, float(zero_point)), float(lo), float(hi)), dtype)


def rescale_add(a: T, b: T, scale_a: float, scale_b: float, offset: float, lo: int, hi: int, dtype: DType,
                ops: Arith[T]) -> T:
    """The sum of two 8-bit tensors with their own scales, requantised to a third:
    ``clip(round_half_to_even((offset + float32(a) * scale_a) + float32(b) * scale_b), lo, hi)``,
    float32 in this order (onnxruntime's QLinearAdd kernel on x86); see :func:`add_params`."""
    total = ops.add(ops.add_const(ops.mul(ops.to_f32(a), scale_a), offset), ops.mul(ops.to_f32(b), scale_b))
    return ops.cast(ops.clip(ops.round_even(total), float(lo), float(hi)), dtype)


def add_params(s_a: float, z_a: int, s_b: float, z_b: int, s_y: float, z_y: int) -> tuple[float, float, float]:
    """(scale_a, scale_b, offset) of :func:`rescale_add`: the two scale ratios and the zero points
    folded into one constant, each rounded to float32 as the kernel computes them."""
    f32 = np.float32
    ra, rb = f32(f32(s_a) / f32(s_y)), f32(f32(s_b) / f32(s_y))
    offset = f32(f32(z_y) - f32(f32(ra * f32(z_a)) + f32(rb * f32(z_b))))
    return float(ra), float(rb), float(offset)


def rescale_mul(a: T, b: T, ratio: float, zero_point: int, lo: int, hi: int, dtype: DType, ops: Arith[T]) -> T:
    """The product of two 8-bit tensors with their own scales, requantised to a third:
    ``clip(round_half_to_even(float32(a * b) * ratio + zero_point), lo, hi)`` where ``a`` and ``b`` are the
    tensors with their zero points removed (integers of at most 255 in magnitude, so the product is exact in
    float32) and ``ratio`` is :func:`mul_params`'. float32 in this order, the zero point added *before*
    rounding: onnxruntime's QLinearMul on x86 (MLAS ``qlmul.cpp``, SSE2: 16-bit products widened to int32,
    ``cvtps(product * ratio + zero_point)``, saturating packs)."""
    total = ops.add_const(ops.mul(ops.mul(ops.to_f32(a), ops.to_f32(b)), ratio), float(zero_point))
    return ops.cast(ops.clip(ops.round_even(total), float(lo), float(hi)), dtype)


def mul_params(s_a: float, s_b: float, s_y: float) -> float:
    """The ratio of :func:`rescale_mul`: ``float32(float32(s_a * s_b) / s_y)``, as the kernel computes it."""
    f32 = np.float32
    return float(f32(f32(f32(s_a) * f32(s_b)) / f32(s_y)))


def requantize_affine(x: T, multiplier: T, offset: T, zero_point: int, lo: int, hi: int, dtype: DType,
                      ops: Arith[T]) -> T:
    """:func:`requantize` with an offset added before rounding:
    ``clip(round_half_to_even(float32(x) * multiplier + offset) + zero_point, lo, hi)``, float32 in this order.
    The integer form of an 8-bit tensor (zero point removed) plus, minus or times a float constant (one
    ``multiplier`` / ``offset`` per element, broadcast)."""
    scaled = ops.round_even(ops.add(ops.mul(ops.to_f32(x), multiplier), offset))
    return ops.cast(ops.clip(ops.add_const(scaled, float(zero_point)), float(lo), float(hi)), dtype)


def multiplier(s_x: float | np.ndarray, s_w: float | np.ndarray, s_y: float | np.ndarray) -> np.ndarray:
    """``float32(float32(s_x * s_w) / s_y)``, per output channel when ``s_w`` is a vector."""
    f32 = np.float32
    return np.asarray((np.asarray(s_x, f32) * np.asarray(s_w, f32)).astype(f32) / np.asarray(s_y, f32), f32)


def average_multiplier(s_x: float, s_y: float, count: int) -> np.float32:
    """``float32(s_x / float32(s_y * float32(count)))``: the multiplier that turns a sum of ``count``
    8-bit values (zero point removed) into their average at the output scale (onnxruntime's
    QLinearGlobalAveragePool)."""
    f32 = np.float32
    return f32(f32(s_x) / f32(f32(s_y) * f32(count)))


def quantize_value(value: float, scale: float, zero_point: int, dtype: DType) -> int:
    """ONNX QuantizeLinear of one float (float32 division, ties to even, saturating)."""
    lo, hi = qrange(dtype)
    q = float(np.rint(np.float32(value) / np.float32(scale))) + zero_point
    return int(min(max(q, lo), hi))


def clamp_bounds(dtype: DType, scale: float, zero_point: int, lo: float | None, hi: float | None) -> tuple[int, int]:
    """The output clamp of a requantisation that absorbs ``clip(x, lo, hi)`` (relu: ``lo=0``).

    Quantization is monotone, so quantizing a clipped value equals clipping the quantized
    value to the quantized bounds.
    """
    qmin, qmax = qrange(dtype)
    q_lo = qmin if lo is None else max(qmin, quantize_value(lo, scale, zero_point, dtype))
    q_hi = qmax if hi is None else min(qmax, quantize_value(hi, scale, zero_point, dtype))
    return q_lo, q_hi


def _np_cast(x: np.ndarray, dtype: DType) -> np.ndarray:
    return x.astype(dtype.np)


#: The rules on numpy arrays (float32 throughout, as the formula states).
NUMPY: Arith[np.ndarray] = Arith(
    to_f32=lambda x: np.asarray(x).astype(np.float32),
    mul=lambda a, b: np.multiply(a, np.float32(b) if isinstance(b, float) else np.asarray(b, np.float32),
                                 dtype=np.float32),
    round_even=np.rint,
    add_const=lambda x, c: x + np.float32(c),
    add=np.add,
    clip=lambda x, lo, hi: np.clip(x, np.float32(lo), np.float32(hi)),
    cast=_np_cast,
)
