"""QDQ models -> integer operators (the first canonicalisation pass).

A model quantized in the QDQ format (``onnxruntime.quantization.quantize_static``,
or a QOperator model rewritten by :mod:`tvm_npu.compiler.qoperator`) imports into Relax as
fp32 compute between ``dequantize`` and ``quantize``. This pass rewrites each
quantized region into the integer form the NPU runs and llvm computes alike:

* ``quantize([clip|relu](conv2d|matmul(dequantize(x), dequantize(W)) [+ dequantize(B)]))``
  becomes ``conv2d|matmul(x, W, out_dtype=int32) + B'`` followed by a requantisation
  ``quantize(astype(acc, float32) * m, scale=1, zero_point=z_y)`` and, when the
  activation narrows the output range, an integer ``clip``. The input's zero point is
  folded into the bias (``B' = B - z_x * sum(W)``) and, where the convolution pads, into
  the padding value (an explicit ``nn.pad`` with ``pad_value = z_x``, which the pattern
  table folds back into the NPU convolution). ``m`` and the clamp follow
  :mod:`tvm_npu.simulator.quant`, the rule onnxruntime's integer kernels compute.
* ``quantize([relu|clip](op(dequantize(a), b)))`` for add, subtract, multiply, maximum, minimum of two
  8-bit tensors or of an 8-bit tensor and a constant, any broadcast (a residual add, a squeeze-and-excitation
  gate, a batch norm as Mul + Add) becomes float32 Relax arithmetic ending in ``quantize(scale=1)``:
  onnxruntime's QLinearAdd / QLinearMul, or its float path for a constant (:mod:`.qbinary`).
* ``quantize(nn.pad(dequantize(x), v))`` with the same parameters becomes the 8-bit pad by ``Q(v)``
  (:mod:`.qpad`).
* ``quantize(mean(dequantize(x)))`` over H and W (a global average pool; NCHW or NHWC, and without
  ``keepdims`` followed by a reshape that drops the axes) and
  ``quantize(avg_pool2d(dequantize(x)))`` whose divisor is the window size become a
  depthwise convolution with unit weights (exact window sums; padding reads the zero point)
  and a requantisation by ``s_x / (s_y * count)`` (onnxruntime's QLinearGlobalAveragePool).
* ``quantize(sum | mean(dequantize(x)))`` over any other axes becomes an exact sum of the integers ``x - z``
  times one constant, quantized as a lone quantize (:mod:`.qreduce`): bit-exact between llvm and the NPU.
* ``quantize(max_pool2d | reshape | ... (dequantize(x)))`` with the same scale and zero
  point on both sides becomes the operator on the 8-bit tensor itself (quantization is
  monotone, so a max commutes with it; moving data does not change values).
* ``quantize(concat(dequantize(x_i, s_i, z_i)), s_y, z_y)`` becomes an 8-bit ``concat``: an
  input already at ``(s_y, z_y)`` (and of the output's type) as it is, any other requantised
  first by a 1x1 depthwise convolution with unit weights, bias ``-z_i`` and a requantisation
  by a multiplier ``m ~ s_i / s_y`` (an 8-bit -> 8-bit elementwise pass in the form the NPU
  already runs, writing straight into its slice of the concat). onnxruntime
  (``DequantizeLinear -> QuantizeLinear``, and its ``QLinearConcat``) divides,
  ``round_half_even(float32(float32(x - z_i) * s_i) / s_y) + z_y``, where this multiplies,
  ``round_half_even(float32(x - z_i) * m) + z_y``; over the 256 values of ``x``, ``m`` is
  the float32 nearest ``s_i / s_y`` that gives onnxruntime's integers on all of them. Where
  none within two float32 steps does (2 of 200,000 random scale pairs), ``m`` is
  ``float32(s_i) / float32(s_y)`` and the two differ by one step at the values whose
  quotient lies within float32 error of a half.

A ``dequantize`` / ``quantize`` left over (around an operator with no integer form, such as the
softmax of a converter-made classifier head, ``... -> Q -> DQ -> Softmax -> Q``) becomes float32
arithmetic the NPU runs in the same partition (:class:`_LoneQdq`):

* ``dequantize(x, s, z)`` of an 8- or 16-bit tensor with one scale and zero point becomes
  ``(astype(x, float32) - z) * s``: exactly onnxruntime's DequantizeLinear (``float32(x - z) * s``;
  the subtraction of two small integers is exact in float32), and exactly TVM's legalisation.
* ``quantize(y, s, z)`` of a float32 ``y`` by any positive normal ``s`` becomes ``quantize(q, 1, z)`` with
  ``q = astype(astype(y, float64) * float64(1 / s), float32)``: the NPU has no divide, and this is
  exactly the float32 quotient ``y / s`` onnxruntime's QuantizeLinear rounds, for every ``y``
  (:mod:`.qdivide` gives the argument; one ``VSCALE`` on the NPU). A float32 multiply by ``float32(1 / s)``
  would not be: it moves rounding ties by one step for 1.6 % of the values near them.

Anything else stays as it was: fp32 between ``dequantize`` and ``quantize`` (the float
operator is offloaded like any fp32 operator; a quantize / dequantize the rules above do not
cover runs on the host). A conv2d, matmul or concat whose quantization this pass cannot express (per-axis
activation scales, weight zero points that do not fit int8, a bias quantized with
another scale) stays so too, with a :class:`HostFallbackWarning` naming it
and the reason. TVM has no pass for this (its ONNX frontend stops at Q/DQ), hence this one.

16-bit activations (int16 / uint16 with int8 weights: A16W8, TFLite's 16x8) take the same rules with an int64
accumulator (``config.ACCUMULATOR``), except where 8 bits are what makes a rule exact: a lookup table (256
entries) and :mod:`.qbinary`'s forms (a product of two 16-bit values is not exact in float32) are left to the
lone dequantize / quantize (float32 on the NPU, as onnxruntime computes them), and a batch norm between
dequantize and quantize becomes one affine integer step (:mod:`.qaffine`). Types may differ across a region
(an int8 conv requantised to int16, an int8 global average pool to int16, a concat of both).
"""

from __future__ import annotations

import warnings

import numpy as np
import tvm
from tvm import relax
from tvm_npu.simulator import quant

from tvm_npu.config import ACCUMULATOR, DType

from . import qaffine, qbinary, qdivide, qlut, qpad, qreduce
from .patterns import HostFallbackWarning
from .spatial_mean import spatial_layout

GenericConst = tvm.ir.expr.GenericConst
_Q = "relax.quantize"
_DQ = "relax.dequantize"
#: Operators that only move or select values: on equal scales they run on the 8-bit tensor.
_SAME_SCALE = ("relax.nn.max_pool2d", "relax.reshape", "relax.permute_dims", "relax.squeeze", "relax.expand_dims",
               "relax.flatten", "relax.strided_slice")
#: How far (float32 steps either side of ``s_i / s_y``) a concat input's multiplier is sought that
#: reproduces onnxruntime's DequantizeLinear -> QuantizeLinear on every 8-bit value (:func:`_ratio`).
#: Measured on 200,000 random int8 scale pairs: 45 need one step, none more; 2 match no multiplier
#: within 8 steps.
_RATIO_ULPS = 2


class _Skip(Exception):
    """This region is left as it is; ``str(e)`` is the reason (warned about when non-empty)."""


def _op(expr: relax.Expr) -> str | None:
    return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else None


def _const(expr: relax.Expr, what: str) -> np.ndarray:
    if not isinstance(expr, GenericConst):
        raise _Skip(f"the {what} is not a constant")
    return np.asarray(expr.value.numpy())


def _scalar(expr: relax.Expr, what: str) -> np.ndarray:
    arr = _const(expr, what)
    if arr.size != 1:
        raise _Skip(f"the {what} is per-axis ({arr.size} values); accepted: one value per tensor")
    return arr.reshape(())


def _dtype(expr: relax.Expr) -> DType | None:
    try:
        return DType.from_str(str(expr.ty.dtype))
    except (AttributeError, ValueError):
        return None


@relax.expr_functor.mutator
class _QdqToInteger(relax.PyExprMutator):
    def _resolve(self, expr: relax.Expr) -> relax.Expr:
        while isinstance(expr, relax.Var):
            bound = self.lookup_binding(expr)
            if bound is None:
                break
            expr = bound
        return expr

    def _emit(self, expr: relax.Expr) -> relax.Expr:
        return self.builder_.emit(expr)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if _op(call) != _Q:
            return call
        try:
            summed = self._integer_sum(call)
            return summed if summed is not None else self._rewrite(call)
        except _Skip as why:
            if str(why):
                warnings.warn(f"{why}: it runs as float32 between dequantize and quantize (the float operator on "
                              "the NPU where it can, the quantize / dequantize on the host), not as an integer "
                              "operator", HostFallbackWarning, stacklevel=2)
            return call

    # ------------------------------------------------------------------ dispatch
    def _rewrite(self, q: relax.Call) -> relax.Expr:
        try:  # an elementwise chain of one 8-bit tensor: a 256-entry table (:mod:`.qlut`)
            return qlut.lookup(q, self._resolve, self._emit)
        except qlut.NotATable:
            pass
        out_dt = _dtype(q)
        y, main, bias, lo, hi = self._parts(q)
        op = _op(main)
        if op in ("relax.nn.conv2d", "relax.matmul"):
            kind = op.rsplit(".", 1)[-1]

            def build(dt: DType, sy: float, zy: int) -> relax.Expr:
                return self._gemm(main, bias, dt, sy, zy, lo, hi)
        elif op in qbinary.OPS and main is y:
            kind = qbinary.OPS[op]

            def build(dt: DType, sy: float, zy: int) -> relax.Expr:
                return self._binary(main, dt, sy, zy, lo, hi)
        elif op == "relax.mean" and main is y:
            kind = "global average"

            def build(dt: DType, sy: float, zy: int) -> relax.Expr:
                return self._global_average(main, dt, sy, zy, lo, hi)
        elif op == "relax.nn.avg_pool2d" and main is y:
            kind = "average pool"

            def build(dt: DType, sy: float, zy: int) -> relax.Expr:
                return self._average_pool(main, dt, sy, zy, lo, hi)
        elif op == "relax.concat" and lo is None and hi is None and main is y:
            kind = "concat"

            def build(dt: DType, sy: float, zy: int) -> relax.Expr:
                return self._concat(main, dt, sy, zy)
        elif op in (*_SAME_SCALE, _DQ) and lo is None and hi is None and main is y:
            return self._same_scale(q, None if op == _DQ else main)
        elif op == "relax.nn.pad" and main is y and lo is None and hi is None and (
                padded := qpad.quantized_pad(q, main, self._resolve(main.args[0]))) is not None:
            return padded  # a float pad of an 8-bit tensor: the 8-bit pad (:mod:`.qpad`)
        elif (bn := qaffine.batch_norm_of(main, self)) is not None:
            kind = "batch norm"

            def build(dt: DType, sy: float, zy: int) -> relax.Expr:
                return self._batch_norm(bn, dt, sy, zy, lo, hi)
        else:
            raise _Skip("")
        try:
            sy, zy = float(_scalar(q.args[1], "output scale")), int(_scalar(q.args[2], "output zero point"))
            if out_dt is None or not out_dt.is_quantized:
                raise _Skip(f"output type {q.ty.dtype} is not 8- or 16-bit; accepted: int8, uint8, int16, uint16")
            return build(out_dt, sy, zy)
        except _Skip as why:  # an empty reason: not a quantized operator after all (nothing to warn about)
            raise _Skip(f"quantized {kind} {main.ty.shape}: {why}" if str(why) else "") from None

    def _parts(self, q: relax.Call) -> tuple[relax.Expr, relax.Expr, relax.Expr | None, float | None, float | None]:
        """``(y, main, bias, lo, hi)`` of ``quantize([clip|relu](y))``: ``main`` is ``y`` or, for a conv2d /
        matmul plus a bias, that operator and ``bias`` the addend; ``lo`` / ``hi`` the folded clamp."""
        y = self._resolve(q.args[0])
        lo = hi = None
        if _op(y) == "relax.clip":
            lo, hi = float(y.args[1].value), float(y.args[2].value)
            y = self._resolve(y.args[0])
        elif _op(y) == "relax.nn.relu":
            lo = 0.0
            y = self._resolve(y.args[0])
        main, bias = y, None
        if _op(y) == "relax.add":
            lhs, rhs = (self._resolve(a) for a in y.args)
            if _op(lhs) in ("relax.nn.conv2d", "relax.matmul"):
                main, bias = lhs, rhs
            elif _op(rhs) in ("relax.nn.conv2d", "relax.matmul"):
                main, bias = rhs, lhs
        return y, main, bias, lo, hi

    def _dequantized(self, expr: relax.Expr, what: str) -> tuple[relax.Expr, float, int, DType]:
        """(8-bit tensor, scale, zero point, its type) of ``dequantize(x)`` with per-tensor parameters."""
        dq = self._resolve(expr)
        if _op(dq) != _DQ:
            raise _Skip(f"the {what} is not dequantized from an 8-bit tensor")
        dt = _dtype(dq.args[0])
        if dt is None or not dt.is_quantized:
            raise _Skip(f"the {what} is {dq.args[0].ty.dtype}; accepted: int8, uint8, int16, uint16")
        scale, zero_point = _scalar(dq.args[1], f"{what} scale"), _scalar(dq.args[2], f"{what} zero point")
        return dq.args[0], float(scale), int(zero_point), dt

    def _same_scale(self, q: relax.Call, main: relax.Call | None) -> relax.Expr:
        """``quantize(op(dequantize(x)))`` with equal parameters -> ``op(x)``."""
        sy, zy = _scalar(q.args[1], "scale"), _scalar(q.args[2], "zero point")
        dq = self._resolve(main.args[0] if main is not None else q.args[0])
        if _op(dq) != _DQ or _dtype(dq.args[0]) != _dtype(q):
            raise _Skip("")
        s, z = _scalar(dq.args[1], "scale"), _scalar(dq.args[2], "zero point")
        if np.float32(s) != np.float32(sy) or int(z) != int(zy):
            raise _Skip("")
        if main is None:
            return dq.args[0]
        return relax.Call(main.op, [dq.args[0], *main.args[1:]], main.attrs, main.ty_args)

    # --------------------------------------------------------------------- concat
    def _concat(self, concat: relax.Call, out_dt: DType, sy: float, zy: int) -> relax.Expr:
        """``quantize(concat(dequantize(x_i, s_i, z_i)), s_y, z_y)`` -> ``concat(x_i')``: an input already
        at ``(s_y, z_y)`` in the output's type is ``x_i`` itself, any other is requantised by
        :meth:`_rescaled`."""
        fields = concat.args[0].fields
        if any(_op(self._resolve(f)) != _DQ for f in fields):
            raise _Skip("")  # a float member: not a quantized concat
        ints = []
        for k, field in enumerate(fields):
            x, si, zi, dt = self._dequantized(field, f"input {k}")
            same = np.float32(si) == np.float32(sy) and zi == zy and dt == out_dt
            ints.append(x if same else self._emit(self._rescaled(x, si, zi, dt, out_dt, sy, zy)))
        return relax.Call(concat.op, [relax.Tuple(ints)], concat.attrs, concat.ty_args)

    def _rescaled(self, x: relax.Expr, sx: float, zx: int, in_dt: DType, out_dt: DType, sy: float,
                  zy: int) -> relax.Expr:
        """An 8-bit tensor at ``(s_x, z_x)`` requantised to ``(s_y, z_y)``, in the form the NPU already
        runs: a 1x1 depthwise convolution with unit weights (the values as int32), ``- z_x`` as its bias
        (exact) and a requantisation ``round_half_even(float32(x - z_x) * m) + z_y``, saturated. A 4-D
        tensor is convolved as it is, any other rank as its ``(1, 1, rows, last axis)`` view. ``m``
        is :func:`_ratio`'s (where it can differ from onnxruntime: the module docstring)."""
        shape = [int(d) for d in x.ty.shape]
        data = x if len(shape) == 4 else self._emit(
            relax.op.reshape(x, [1, 1, int(np.prod(shape[:-1], dtype=np.int64)), shape[-1]]))
        c = int(data.ty.shape[1])
        acc = self._emit(self._conv(data, np.ones((c, 1, 1, 1), np.int8), zx, groups=c))
        if zx:
            acc = self._emit(relax.op.add(acc, _int_const(np.full((1, c, 1, 1), -zx, _acc_np(in_dt)))))
        m = np.full((1, c, 1, 1), _ratio(sx, zx, in_dt, out_dt, sy, zy), np.float32)
        y = self._requantise(acc, m, out_dt, sy, zy, None, None, 1)
        return y if len(shape) == 4 else relax.op.reshape(self._emit(y), shape)

    # ------------------------------------------------------------------------ add
    def _binary(self, call: relax.Call, out_dt: DType, sy: float, zy: int, lo: float | None,
                hi: float | None) -> relax.Expr:
        """``quantize(op(dequantize(a), b))`` for add, subtract, multiply, maximum, minimum, broadcasting:
        :mod:`.qbinary` (onnxruntime's QLinearAdd / QLinearMul, or its float path for a constant). A 16-bit
        operand or result is left to the lone dequantize / quantize (float32 on the NPU): onnxruntime has no
        16-bit QLinearAdd / QLinearMul and computes it so, and a product of two 16-bit values is not exact in
        float32, which the 8-bit forms rely on."""
        if not out_dt.is_8bit or any(_is_16bit_dq(self._resolve(a)) for a in call.args):
            raise _Skip("")
        out = qbinary.Out(out_dt, sy, zy, *quant.clamp_bounds(out_dt, sy, zy, lo, hi))
        try:
            return qbinary.rewrite(self, call, out, _ratio)
        except qbinary.Skip as why:
            raise _Skip(str(why)) from None

    def _batch_norm(self, bn: relax.Call, out_dt: DType, sy: float, zy: int, lo: float | None,
                    hi: float | None) -> relax.Expr:
        """``quantize(batch_norm(dequantize(x)))`` of a 16-bit ``x``: one affine step (:mod:`.qaffine`)."""
        if not _is_16bit_dq(self._resolve(bn.args[0])):
            raise _Skip("")  # an 8-bit batch norm keeps its float path
        x, sx, zx, _ = self._dequantized(bn.args[0], "input")
        out = qbinary.Out(out_dt, sy, zy, *quant.clamp_bounds(out_dt, sy, zy, lo, hi))
        try:
            return qaffine.affine_batch_norm(self, bn, x, sx, zx, out)
        except qbinary.Skip as why:
            raise _Skip(str(why)) from None

    def _integer_sum(self, q: relax.Call) -> relax.Expr | None:
        """``quantize(sum | mean(dequantize(x)))`` over any axes but a global average pool's: the sum of the
        integers ``x - z``, exact in any order, times one constant (:mod:`.qreduce`), then the quantize; None
        for anything else (a per-axis or non-constant parameter too: the float operator between the lone
        DQ and Q)."""
        reduction = self._resolve(q.args[0])
        op = _op(reduction)
        if op not in qreduce.OPS or (op == "relax.mean" and spatial_layout(reduction) is not None):
            return None
        dq = self._resolve(reduction.args[0])
        dt = _dtype(dq.args[0]) if _op(dq) == _DQ else None
        if dt is None or not dt.is_quantized or str(reduction.ty.dtype) != "float32":
            return None
        try:
            s, z = float(_scalar(dq.args[1], "input scale")), int(_scalar(dq.args[2], "input zero point"))
        except _Skip:
            return None
        value = qreduce.integer_sum(reduction, dq.args[0], s, z, 8 * dt.itemsize, self._emit)
        if value is None:
            return None
        return relax.Call(q.op, [self._emit(value), *q.args[1:]], q.attrs, q.ty_args)

    # ------------------------------------------------------------ global average
    def _global_average(self, mean: relax.Call, out_dt: DType, sy: float, zy: int, lo: float | None,
                        hi: float | None) -> relax.Expr:
        """``quantize(mean(dequantize(x)) over H, W)``: a window over the whole image
        (onnxruntime's QLinearGlobalAveragePool computes it so). Without ``keepdims`` (Keras / tf2onnx
        heads, ``[N, C]`` out) the pool keeps them and a reshape (a view) drops them."""
        layout = spatial_layout(mean)
        if layout is None:
            raise _Skip("")  # not a global average pool
        shape = [int(d) for d in mean.args[0].ty.shape]
        window = (shape[layout.index("H")], shape[layout.index("W")])
        y = self._window_average(mean.args[0], layout, window, (1, 1), (0, 0, 0, 0), out_dt, sy, zy, lo, hi)
        if mean.attrs.keepdims:
            return y
        return relax.op.reshape(self._emit(y), [int(d) for d in mean.ty.shape])

    def _average_pool(self, pool: relax.Call, out_dt: DType, sy: float, zy: int, lo: float | None,
                      hi: float | None) -> relax.Expr:
        """``quantize(avg_pool2d(dequantize(x)))``."""
        a = pool.attrs
        layout = str(a.layout)
        padding = tuple(int(p) for p in a.padding)
        padding = padding * 2 if len(padding) == 2 else padding
        if a.ceil_mode or any(int(d) != 1 for d in a.dilation) or str(a.out_layout or layout) != layout:
            raise _Skip("ceil_mode, dilation or a layout change; accepted: none of them")
        return self._window_average(pool.args[0], layout, tuple(int(k) for k in a.pool_size),
                                    tuple(int(s) for s in a.strides), padding, out_dt, sy, zy, lo, hi,
                                    count_pad=bool(a.count_include_pad))

    def _window_average(self, data: relax.Expr, layout: str, window: tuple, strides: tuple, padding: tuple,
                        out_dt: DType, sy: float, zy: int, lo: float | None, hi: float | None,
                        count_pad: bool = True) -> relax.Expr:
        """The 8-bit average over windows: every channel's window sum as a depthwise convolution with
        unit weights (padding reads the zero point, so it adds nothing once the zero point is taken
        out through the bias), and a requantisation by ``s_x / (s_y * count)``: exact sums and one
        rounding (onnxruntime's QLinearGlobalAveragePool; its float average pools agree within a
        step). Without ``count_pad`` a window's count is its positions inside the image, so at the
        borders the multiplier varies by position (a full-shape multiplier operand)."""
        x, sx, zx, dt = self._dequantized(data, "input")  # any output type: an 8 <-> 16-bit boundary too
        c = int(data.ty.shape[layout.index("C")])
        count = window[0] * window[1]
        bshape = [1, 1, 1, 1]
        bshape[layout.index("C")] = c
        acc = self._emit(self._conv(x, np.ones((c, 1, *window), np.int8), zx, layout=layout, groups=c,
                                    strides=strides, padding=padding))
        if zx:
            acc = self._emit(relax.op.add(acc, _int_const(np.full(bshape, -zx * count, _acc_np(dt)))))
        if count_pad or not any(padding):
            m = np.full(bshape, quant.average_multiplier(sx, sy, count), np.float32)
        else:
            counts = _inside_counts([int(d) for d in data.ty.shape], layout, window, strides, padding)
            m = np.broadcast_to(quant.average_multiplier(sx, sy, counts), [int(d) for d in acc.ty.shape])
        return self._requantise(acc, np.ascontiguousarray(m, np.float32), out_dt, sy, zy, lo, hi, layout.index("C"))

    # -------------------------------------------------------------- conv / matmul
    def _weights(self, expr: relax.Expr) -> tuple[np.ndarray, np.ndarray, int, bool]:
        """(integer weights as int64, per-channel scales, channel axis, transposed) of a dequantized constant."""
        w = self._resolve(expr)
        transposed = False
        if _op(w) == "relax.permute_dims":
            axes = w.attrs.axes
            if axes is not None and [int(a) for a in axes] != [1, 0]:
                raise _Skip("the weight is permuted other than a 2-D transpose")
            transposed = True
            w = self._resolve(w.args[0])
        if _op(w) != _DQ:
            raise _Skip("the weight is not dequantized from a constant")
        wq = _const(w.args[0], "weight")
        if not DType.from_str(str(wq.dtype)).is_quantized:
            raise _Skip(f"the weight is {wq.dtype}; accepted: int8, uint8")
        ws, wz = _const(w.args[1], "weight scale"), _const(w.args[2], "weight zero point")
        axis = int(w.attrs.axis) % wq.ndim
        shape = [1] * wq.ndim
        if ws.size > 1:
            shape[axis] = -1
        values = wq.astype(np.int64) - wz.astype(np.int64).reshape(shape if wz.size > 1 else ())
        if values.min(initial=0) < -128 or values.max(initial=0) > 127:
            raise _Skip("the weight zero point moves weights outside int8")
        return values, ws.astype(np.float32).reshape(-1), axis, transposed

    def _bias(self, expr: relax.Expr | None, channels: int, scale: np.ndarray) -> np.ndarray:
        """The int32 bias per channel (zeros without one); its scale must be ``s_x * s_w``."""
        if expr is None:
            return np.zeros(channels, np.int64)
        b = self._resolve(expr)
        while _op(b) in ("relax.reshape", "relax.expand_dims"):
            b = self._resolve(b.args[0])
        if _op(b) != _DQ:
            raise _Skip("the bias is not dequantized from an int32 constant")
        bq = _const(b.args[0], "bias")
        if bq.dtype != np.int32 or bq.size != channels:
            raise _Skip(f"the bias is {bq.dtype} of {bq.size} values; accepted: int32, one per output channel")
        if np.any(_const(b.args[2], "bias zero point") != 0):
            raise _Skip("the bias has a zero point")
        bs = np.broadcast_to(_const(b.args[1], "bias scale").astype(np.float32).reshape(-1), (channels,))
        if not np.array_equal(bs, np.broadcast_to(scale, (channels,))):
            raise _Skip("the bias scale is not input scale x weight scale")
        return bq.astype(np.int64).reshape(-1)

    def _gemm(self, main: relax.Call, bias: relax.Expr | None, out_dt: DType, sy: float, zy: int,
              lo: float | None, hi: float | None) -> relax.Expr:
        if isinstance(weight := self._resolve(main.args[1]), GenericConst) and str(weight.ty.dtype).startswith("float"):
            raise _Skip("")  # a layer the quantizer left in float: a float operator, on the NPU like any other
        x, sx, zx, in_dt = self._dequantized(main.args[0], "input")
        w, ws, axis, transposed = self._weights(main.args[1])
        conv = _op(main) == "relax.nn.conv2d"
        if conv:
            attrs = main.attrs
            klay, out_layout = str(attrs.kernel_layout), str(attrs.out_layout or attrs.data_layout)
            if axis != klay.index("O") and ws.size > 1:
                raise _Skip("the weight scales are not per output channel")
            w_oihw_axis = klay.index("O")
            channels = w.shape[w_oihw_axis]
            reduce = tuple(i for i in range(w.ndim) if i != w_oihw_axis)
            c_axis, rank = out_layout.index("C"), 4
        else:
            if w.ndim != 2:
                raise _Skip(f"the weight has rank {w.ndim}; accepted: a 2-D constant")
            if transposed:  # W[n, k] used as its transpose: keep the [k, n] values
                w, axis = w.T, 1 - axis
            if axis != 1 and ws.size > 1:
                raise _Skip("the weight scales are not per output column")
            channels, reduce = w.shape[1], (0,)
            rank = len(main.ty.shape)
            c_axis = rank - 1
        w_scale = np.broadcast_to(ws, (channels,))
        in_scale = (np.float32(sx) * w_scale).astype(np.float32)
        b = self._bias(bias, channels, in_scale) - zx * w.sum(axis=reduce)
        acc_np = _acc_np(in_dt)
        info = np.iinfo(acc_np)
        if b.min(initial=0) < info.min or b.max(initial=0) > info.max:
            raise _Skip(f"the folded bias does not fit the {acc_np.name} accumulator")
        m = quant.multiplier(sx, w_scale, sy)
        bshape = [1] * rank
        bshape[c_axis] = channels
        w8 = np.ascontiguousarray(w.astype(np.int8))
        if conv:
            acc = self._emit(self._conv(x, w8, zx, main.attrs))
        else:
            acc = self._emit(relax.op.matmul(x, relax.const(w8), out_dtype=acc_np.name))
        if np.any(b):
            acc = self._emit(relax.op.add(acc, _int_const(b.astype(acc_np).reshape(bshape))))
        return self._requantise(acc, m.reshape(bshape), out_dt, sy, zy, lo, hi, c_axis)

    def _requantise(self, acc: relax.Expr, m: np.ndarray, out_dt: DType, sy: float, zy: int, lo: float | None,
                    hi: float | None, c_axis: int) -> relax.Expr:
        """``quantize(astype(acc, float32) * m, scale=1, zero_point=z_y)`` [-> the clamp of a folded
        relu / clip]: :func:`quant.requantize` in Relax operators."""
        scaled = self._emit(relax.op.multiply(self._emit(relax.op.astype(acc, "float32")), relax.const(m)))
        y = relax.op.quantize(scaled, relax.const(1.0, "float32"), relax.const(zy, out_dt.np.name), axis=c_axis,
                              out_dtype=out_dt.np.name)
        q_lo, q_hi = quant.clamp_bounds(out_dt, sy, zy, lo, hi)
        if (q_lo, q_hi) != quant.qrange(out_dt):
            y = relax.op.clip(self._emit(y), q_lo, q_hi)
        return y

    def _conv(self, x: relax.Expr, w8: np.ndarray, zx: int, attrs: relax.Expr | None = None, *,
              layout: str = "NCHW", groups: int = 1, strides: tuple = (1, 1), padding: tuple = (0, 0, 0, 0),
              kernel_layout: str = "OIHW") -> relax.Expr:
        """The integer convolution (attributes from ``attrs`` of a conv2d, or given); padding reads the
        input's zero point (an explicit ``nn.pad``, folded back into the NPU convolution)."""
        dilation: tuple = (1, 1)
        if attrs is not None:
            layout, groups, kernel_layout = str(attrs.data_layout), int(attrs.groups), str(attrs.kernel_layout)
            strides, dilation = tuple(attrs.strides), tuple(attrs.dilation)
            padding = tuple(int(p) for p in attrs.padding)
        if len(padding) == 2:
            padding = padding * 2
        if zx != 0 and any(padding):
            top, left, bottom, right = padding
            width = {"N": (0, 0), "C": (0, 0), "H": (top, bottom), "W": (left, right)}
            x = self._emit(relax.op.nn.pad(x, [p for a in layout for p in width[a]], pad_value=float(zx)))
            padding = (0, 0, 0, 0)
        out_layout = str(attrs.out_layout or layout) if attrs is not None else layout
        return relax.op.nn.conv2d(x, relax.const(w8), strides=strides, padding=padding, dilation=dilation,
                                  groups=groups, data_layout=layout, kernel_layout=kernel_layout,
                                  out_layout=out_layout, out_dtype=_acc_np(_dtype(x)).name)


def _acc_np(dt: DType) -> np.dtype:
    """The accumulator of the integer operators of activation type ``dt``: int32 for 8 bits, int64 for 16."""
    return ACCUMULATOR[dt].np


def _int_const(values: np.ndarray) -> relax.Expr:
    """A constant of ``values``' own integer type (``relax.const`` alone narrows int64 to int32)."""
    return relax.const(values, values.dtype.name)


def _is_16bit_dq(expr: relax.Expr) -> bool:
    dt = _dtype(expr.args[0]) if _op(expr) == _DQ else None
    return dt is not None and dt.is_quantized and not dt.is_8bit


def _ratio(sx: float, zx: int, in_dt: DType, out_dt: DType, sy: float, zy: int) -> np.float32:
    """The float32 multiplier ``m`` nearest ``s_x / s_y`` (``float32(s_x) / float32(s_y)`` first, then
    up to :data:`_RATIO_ULPS` steps either side, nearer first) whose requantisation
    ``round_half_even(float32(x - z_x) * m) + z_y`` gives onnxruntime's ``QuantizeLinear(DequantizeLinear(x))``
    for every 8-bit value ``x``; ``float32(s_x) / float32(s_y)`` when none does."""
    lo, hi = quant.qrange(in_dt)
    diff = np.arange(lo, hi + 1, dtype=np.int32) - np.int32(zx)
    q_lo, q_hi = quant.qrange(out_dt)
    # quant.quantize_value over every value at once (65536 of them for a 16-bit input)
    quotient = (diff.astype(np.float32) * np.float32(sx)) / np.float32(sy)
    want = np.clip(np.rint(quotient).astype(np.float64) + zy, q_lo, q_hi).astype(out_dt.np)
    first = np.float32(quant.multiplier(sx, 1.0, sy))
    below = above = first
    candidates = [first]
    for _ in range(_RATIO_ULPS):
        above, below = np.nextafter(above, np.float32(np.inf)), np.nextafter(below, np.float32(0))
        candidates += [above, below]
    for m in candidates:
        if np.array_equal(quant.requantize(diff, m, zy, q_lo, q_hi, out_dt, quant.NUMPY), want):
            return m
    return first


def _inside_counts(shape: list[int], layout: str, window: tuple, strides: tuple, padding: tuple) -> np.ndarray:
    """Per output position (broadcastable to the output), how many window positions lie inside the image."""
    per_axis = []
    for i, axis in enumerate("HW"):
        size, k, s, lo, hi = shape[layout.index(axis)], window[i], strides[i], padding[i], padding[i + 2]
        starts = np.arange((size + lo + hi - k) // s + 1) * s - lo
        per_axis.append(np.minimum(starts + k, size) - np.maximum(starts, 0))
    counts = np.outer(per_axis[0], per_axis[1])
    return counts.reshape([counts.shape[0] if a == "H" else counts.shape[1] if a == "W" else 1 for a in layout])


@relax.expr_functor.mutator
class _LoneQdq(relax.PyExprMutator):
    """The ``dequantize`` / ``quantize`` calls :class:`_QdqToInteger` left as float32 arithmetic (the module
    docstring); run on what is still used after it."""

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        try:
            if _op(call) == _DQ:
                return self._dequantize(call)
            if _op(call) == _Q:
                return self._quantize(call)
        except _Skip:
            pass  # a per-axis or non-constant parameter, another type: left to the host
        return call

    def _dequantize(self, dq: relax.Call) -> relax.Expr:
        x = dq.args[0]
        dt = _dtype(x)
        if isinstance(x, GenericConst) or dt is None or not dt.is_quantized or str(dq.ty.dtype) != "float32":
            return dq  # a constant (a weight left in float), another type, a float16 result: unchanged
        s, z = np.float32(_scalar(dq.args[1], "scale")), np.float32(_scalar(dq.args[2], "zero point"))
        shifted = self.builder_.emit(relax.op.subtract(self.builder_.emit(relax.op.astype(x, "float32")),
                                                       relax.const(z)))
        return relax.op.multiply(shifted, relax.const(s))

    def _quantize(self, q: relax.Call) -> relax.Expr:
        out_dt = _dtype(q)
        s = np.float32(_scalar(q.args[1], "scale"))
        if out_dt is None or not out_dt.is_quantized or str(q.args[0].ty.dtype) != "float32" or s == 1:
            return q
        quotient = qdivide.quotient(q.args[0], float(s), self.builder_.emit)
        if quotient is None:
            return q  # not a positive normal scale: the pattern table says why it stays
        return relax.op.quantize(self.builder_.emit(quotient), relax.const(1.0, "float32"), q.args[2],
                                 axis=int(q.attrs.axis), out_dtype=out_dt.np.name)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.QdqToInteger")
def qdq_to_integer(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """Rewrite quantized conv2d / matmul / data-movement regions of a QDQ model into integer operators,
    then the quantize / dequantize left over into float32 arithmetic where that is exact."""
    integer = relax.analysis.remove_all_unused(_QdqToInteger().visit_expr(func))
    return _LoneQdq().visit_expr(integer)
