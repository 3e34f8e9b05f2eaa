"""Transposed convolutions as stride-squared ordinary convolutions whose outputs interleave.

A 2-D transposed convolution (``nn.conv2d_transpose``, ONNX ``ConvTranspose``) with strides
``(s_h, s_w)`` computes ``y[o] = sum over (i, k) with o = i * s - p + k * d of x[i] * W[k]`` per axis.
The outputs of one *phase* ``o = s * q + r`` only meet the kernel taps ``k`` with
``k * d = r + p (mod s)``, at input rows ``q + (r + p - k * d) / s``: an ordinary correlation of
``x`` with those taps (flipped, dilation ``d / gcd(d, s)``) and a padding that follows from the
offsets. So the layer is ``s_h * s_w`` ordinary ``conv2d`` (one per phase ``(r_h, r_w)``, weights
``W[:, :, taps_h, taps_w]`` transposed to OIHW, groups kept), written interleaved into the output:

    concat(z_00, z_01, ..., axis=1) -> reshape (N, s_h, s_w, C, H_q, W_q)
        -> permute_dims (N, C, H_q, s_h, W_q, s_w) -> reshape (N, C, H_q * s_h, W_q * s_w) [-> crop]

On the NPU these are views: each phase convolution stores straight into its strided places of the
output (the concat's members are slices of one DRAM buffer, which the view chain turns into the
output itself), and the tensor engine does the layer's own MACs, none on inserted zeros. A phase
without taps (kernel smaller than the stride) is the bias alone, a constant. When the output size
is not a multiple of the stride, the shorter phases compute one more row or column (the crop drops
it) so that every phase has the same shape. Padding the NPU cannot apply (beyond the window, or
negative) becomes an input crop (a strided view) or zero taps. An inference batch-norm after the layer
(torch exports one after a ConvTranspose) is folded into its weights and bias. The bias, a following
relu / clip and, in a QDQ model, the ``quantize`` after them are applied per phase (elementwise, so they commute with
the interleave): a quantized transposed convolution becomes 8-bit phase convolutions that the QDQ
rewrite (:mod:`.quantized`) turns into integer ones; it runs first for that reason.

A layer this does not cover (weights that are not constants, another layout than NCHW / IOHW, symbolic
shapes, a quantization the QDQ rewrite could not express) stays one ``conv2d_transpose`` on the host, where
its MACs are counted as the host's (``tvm_npu.compiler.driver``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_op, is_tuple_get_item, rewrite_call, wildcard
from tvm_npu.simulator import quant

from tvm_npu.config import DType

from .lifted import Lifted, with_lifted_constants

_CT = "relax.nn.conv2d_transpose"
#: A position in a phase's tap list that multiplies nothing (a zero weight widening the window).
ZERO_TAP = -1


@dataclass(frozen=True)
class AxisPhase:
    """One output phase ``r`` along one axis, as an ordinary correlation of the (cropped) input."""

    taps: tuple[int, ...]  # kernel index per correlation tap (in order), ZERO_TAP for a zero weight
    dilation: int
    pad: tuple[int, int]  # (begin, end) of the correlation
    crop: tuple[int, int]  # input rows dropped at (begin, end) first
    rows: int  # outputs of this phase inside the result

    @property
    def empty(self) -> bool:
        """No kernel tap reaches this phase: its outputs are the bias alone."""
        return not any(t != ZERO_TAP for t in self.taps)


def _widen(taps: list[int], pb: int, pe: int, dil: int) -> tuple[list[int], int, int]:
    """Zero taps so that neither pad exceeds the window, as the NPU requires: one at the end lets the
    window cover ``dil`` more rows of the leading pad, one in front more of the trailing pad."""
    limit = (len(taps) - 1) * dil
    at_end, in_front = -(-max(0, pb - limit) // dil), -(-max(0, pe - limit) // dil)
    return [ZERO_TAP] * in_front + taps + [ZERO_TAP] * at_end, pb + in_front * dil, pe + at_end * dil


def axis_phases(size: int, out: int, stride: int, pad: int, dilation: int, kernel: int) -> list[AxisPhase]:
    """The ``stride`` phases of one axis of a transposed convolution (input ``size``, output ``out``,
    leading padding ``pad``), each computing ``ceil(out / stride)`` outputs."""
    rows = -(-out // stride)
    dil = dilation // math.gcd(dilation, stride)
    phases = []
    for r in range(stride):
        ks = sorted((k for k in range(kernel) if (r + pad - k * dilation) % stride == 0), reverse=True)
        inside = len(range(r, out, stride))
        if not ks or rows == 0:
            phases.append(AxisPhase((), 1, (0, 0), (0, 0), inside))
            continue
        pb = -((r + pad - ks[0] * dilation) // stride)  # the smallest input offset, negated
        pe = rows - size - pb + (len(ks) - 1) * dil
        crop = (max(0, -pb), max(0, -pe))
        if crop[0] + crop[1] >= size:  # every tap lands outside the input: the bias alone
            phases.append(AxisPhase((), 1, (0, 0), (0, 0), inside))
            continue
        taps, pb, pe = _widen(ks, max(pb, 0), max(pe, 0), dil)
        phases.append(AxisPhase(tuple(taps), dil, (pb, pe), crop, inside))
    return phases


def own_macs(size: int, out: int, stride: int, pad: int, dilation: int, kernel: int) -> int:
    """Per axis, the (output, tap) pairs of a transposed convolution: outputs times the taps that
    land on the stride lattice. A layer's MACs are the product over its axes times ``N * C_out *
    C_in / groups``: what the phase convolutions compute when nothing is padded or widened."""
    return sum(len(range(r, out, stride)) * sum(1 for k in range(kernel) if (r + pad - k * dilation) % stride == 0)
               for r in range(stride))


def transposed_conv_macs(call: relax.Call) -> int:
    """MACs of a ``conv{1,2,3}d_transpose`` call with static shapes (:func:`own_macs` per spatial axis)."""
    x, y, w = ([int(d) for d in t.ty.shape] for t in (call.args[0], call, call.args[1]))
    a = call.attrs
    layout = str(a.data_layout)
    spatial = [i for i, c in enumerate(layout) if c not in "NC"]
    pads = [int(p) for p in a.padding]
    klay = str(a.kernel_layout)
    total = y[layout.index("N")] * y[layout.index("C")] * w[klay.index("I")] // int(a.groups)
    for j, i in enumerate(spatial):
        total *= own_macs(x[i], y[i], int(a.strides[j]), pads[j] if len(pads) > 1 else pads[0],
                          int(a.dilation[j]), w[klay.index(layout[i])])
    return total


# ---------------------------------------------------------------------------------------------- weights
def sub_weight(w: np.ndarray, groups: int, taps_h: tuple[int, ...], taps_w: tuple[int, ...],
               fill: np.ndarray | float = 0) -> np.ndarray:
    """The OIHW weight of one phase from an IOHW transposed-convolution weight: per group, input and
    output channels swapped, the phase's taps picked (:data:`ZERO_TAP`: ``fill``, the value that
    dequantizes to zero, per output channel of a group)."""
    cin, cog, kh, kw = w.shape
    wg = w.reshape(groups, cin // groups, cog, kh, kw).transpose(0, 2, 1, 3, 4)
    fills = np.broadcast_to(np.asarray(fill, w.dtype).reshape(1, -1, 1, 1, 1), (groups, cog, cin // groups, 1, 1))
    wg = np.concatenate([wg, np.broadcast_to(fills, (*wg.shape[:3], 1, kw))], axis=3)  # ZERO_TAP = -1 picks it
    wg = np.concatenate([wg, np.broadcast_to(fills, (*wg.shape[:4], 1))], axis=4)
    picked = wg[:, :, :, list(taps_h)][:, :, :, :, list(taps_w)]
    return np.ascontiguousarray(picked.reshape(groups * cog, cin // groups, len(taps_h), len(taps_w)))


@dataclass(frozen=True)
class _Layer:
    """A matched transposed convolution and what is applied per phase after it."""

    call: relax.Call
    bias: np.ndarray | None  # float per-channel bias (float layers)
    bias_expr: relax.Expr | None  # the added operand as written (quantized layers keep their DQ)
    act: relax.Call | None  # relu / clip
    quantize: relax.Call | None


def _phases(layer: _Layer) -> tuple[list[AxisPhase], list[AxisPhase]] | None:
    """Both axes' phases of an NCHW / IOHW layer with static shapes (None: left as it is)."""
    a = layer.call.attrs
    if str(a.data_layout) != "NCHW" or str(a.kernel_layout) != "IOHW" or str(a.out_layout or "NCHW") != "NCHW":
        return None
    try:
        x, y, w = ([int(d) for d in t.ty.shape] for t in (layer.call.args[0], layer.call, layer.call.args[1]))
    except (TypeError, AttributeError):
        return None
    pad = [int(p) for p in a.padding]
    return tuple(axis_phases(x[2 + i], y[2 + i], int(a.strides[i]), pad[i], int(a.dilation[i]), w[2 + i])
                 for i in range(2))


def _interleave(members: list[relax.Expr], n: int, c: int, strides: tuple[int, int], rows: tuple[int, int],
                out: tuple[int, int]) -> relax.Expr:
    """The phase outputs (row-major over ``(r_h, r_w)``, each ``(n, c, *rows)``) interleaved into the
    ``(n, c, *out)`` result (module docstring)."""
    (sh, sw), (hq, wq) = strides, rows
    if sh * sw == 1:
        y = members[0]
    else:
        cat = relax.op.concat(members, axis=1)
        grid = relax.op.reshape(cat, [n, sh, sw, c, hq, wq])
        y = relax.op.reshape(relax.op.permute_dims(grid, [0, 3, 4, 1, 5, 2]), [n, c, hq * sh, wq * sw])
    if (hq * sh, wq * sw) != out:
        y = relax.op.strided_slice(y, [2, 3], [0, 0], list(out), [1, 1])  # (steps given: a view's form)
    return y


def _act(layer: _Layer, x: relax.Expr) -> relax.Expr:
    if layer.act is None:
        return x
    return relax.Call(layer.act.op, [x, *layer.act.args[1:]], layer.act.attrs, layer.act.ty_args)


def _act_numpy(layer: _Layer, v: np.ndarray) -> np.ndarray:
    """The activation on a constant (an empty phase): relu and clip are exact in numpy."""
    if layer.act is None:
        return v
    if layer.act.op.name == "relax.nn.relu":
        return np.maximum(v, 0).astype(v.dtype)
    return np.clip(v, float(layer.act.args[1].value), float(layer.act.args[2].value)).astype(v.dtype)


# ------------------------------------------------------------------------------------------- rewriting
class _Decline(Exception):
    """The matched layer is left as it is (a form this rewrite does not cover)."""


def _crop(x: relax.Expr, shape: list[int], ph: AxisPhase, pw: AxisPhase) -> relax.Expr:
    """``x`` without the input rows / columns both phases drop (a strided view on the NPU)."""
    if not any(ph.crop + pw.crop):
        return x
    return relax.op.strided_slice(x, [2, 3], [ph.crop[0], pw.crop[0]],
                                  [shape[2] - ph.crop[1], shape[3] - pw.crop[1]], [1, 1])


def _conv(data: relax.Expr, weight: relax.Expr, ph: AxisPhase, pw: AxisPhase, groups: int) -> relax.Expr:
    return relax.op.nn.conv2d(data, weight, strides=[1, 1], padding=[ph.pad[0], pw.pad[0], ph.pad[1], pw.pad[1]],
                              dilation=[ph.dilation, pw.dilation], groups=groups, data_layout="NCHW",
                              kernel_layout="OIHW", out_layout="NCHW")


class _Rewriter:
    """Builds the phase convolutions and their interleave for one matched layer."""

    def __init__(self, layer: _Layer, lifted: Lifted) -> None:
        phases = _phases(layer)
        if phases is None:
            raise _Decline
        self.layer, self.lifted = layer, lifted
        self.ph, self.pw = phases
        a = layer.call.attrs
        self.groups = int(a.groups)
        self.x_shape = [int(d) for d in layer.call.args[0].ty.shape]
        self.out = [int(d) for d in layer.call.ty.shape]
        self.strides = (int(a.strides[0]), int(a.strides[1]))
        self.rows = (-(-self.out[2] // self.strides[0]), -(-self.out[3] // self.strides[1]))

    def build(self, phase_value: Callable[[AxisPhase, AxisPhase], relax.Expr]) -> relax.Expr:
        """``phase_value(ph, pw)`` for every phase, interleaved."""
        members = [phase_value(ph, pw) for ph in self.ph for pw in self.pw]
        n, c = self.out[:2]
        return _interleave(members, n, c, self.strides, self.rows, (self.out[2], self.out[3]))

    def has_empty(self) -> bool:
        return any(p.empty for p in (*self.ph, *self.pw))

    def phase_shape(self) -> tuple[int, ...]:
        return (self.out[0], self.out[1], *self.rows)

    def float_layer(self, w: np.ndarray) -> relax.Expr:
        """Phases of a float layer: convolution [+ bias] [-> activation] (an empty phase: a constant)."""
        layer = self.layer
        dtype = str(layer.call.ty.dtype)
        c = self.out[1]
        bias = np.zeros(c, dtype) if layer.bias is None else layer.bias.astype(dtype)

        def phase(ph: AxisPhase, pw: AxisPhase) -> relax.Expr:
            if ph.empty or pw.empty:
                value = _act_numpy(layer, np.broadcast_to(bias.reshape(1, c, 1, 1), self.phase_shape()))
                return self.lifted.add(np.ascontiguousarray(value))
            weight = self.lifted.add(sub_weight(w, self.groups, ph.taps, pw.taps).astype(w.dtype))
            y = _conv(_crop(layer.call.args[0], self.x_shape, ph, pw), weight, ph, pw, self.groups)
            if layer.bias_expr is not None:
                y = relax.op.add(y, layer.bias_expr)
            return _act(layer, y)

        return self.build(phase)

    def quantized_layer(self, dq_x: relax.Call, dq_w: relax.Call, bias_q: np.ndarray | None) -> relax.Expr:
        """Phases of ``quantize(... conv2d_transpose(dequantize(x), dequantize(W)) ...)``: 8-bit phase
        convolutions ``quantize(... conv2d(dequantize(x'), dequantize(W_phase)) ...)``, which the QDQ rewrite
        makes integer; an empty phase is the requantised bias (:func:`quant.requantize`, as there)."""
        layer, lifted = self.layer, self.lifted
        wq, sw, zw = (lifted.value(a) for a in dq_w.args)
        sx, sy = (lifted.value(e) for e in (dq_x.args[1], layer.quantize.args[1]))
        zy = lifted.value(layer.quantize.args[2])
        if wq is None or sw is None or zw is None or sx is None or sy is None or zy is None \
                or sx.size != 1 or sy.size != 1 or zy.size != 1:
            raise _Decline
        cog = wq.shape[1]
        if (sw.size > 1 and int(dq_w.attrs.axis) % 4 != 1) or sw.size not in (1, cog) or zw.size not in (1, cog):
            raise _Decline  # per-channel weights of a transposed convolution are quantized along axis 1

        def per_out(v: np.ndarray) -> np.ndarray:
            return v.reshape(-1) if v.size == 1 else np.tile(v.reshape(-1), self.groups)

        if layer.bias_expr is not None and bias_q is None and self.has_empty():
            raise _Decline  # an empty phase needs the bias's integers
        out_dt = DType.from_str(str(layer.quantize.ty.dtype))
        empty = self._requantised_bias(bias_q, np.broadcast_to(per_out(sw), (self.out[1],)), float(sx.reshape(())),
                                       float(sy.reshape(())), int(zy.reshape(())), out_dt)
        scale, zero = lifted.add(per_out(sw).astype(sw.dtype)), lifted.add(per_out(zw).astype(zw.dtype))
        q = layer.quantize

        def phase(ph: AxisPhase, pw: AxisPhase) -> relax.Expr:
            if ph.empty or pw.empty:
                return lifted.add(np.ascontiguousarray(np.broadcast_to(empty.reshape(1, -1, 1, 1),
                                                                       self.phase_shape())))
            w8 = lifted.add(sub_weight(wq, self.groups, ph.taps, pw.taps, zw.reshape(-1)).astype(wq.dtype))
            w = relax.op.dequantize(w8, scale if sw.size > 1 else dq_w.args[1],
                                    zero if zw.size > 1 else dq_w.args[2], axis=0)
            data = relax.op.dequantize(_crop(dq_x.args[0], self.x_shape, ph, pw), *dq_x.args[1:],
                                       axis=int(dq_x.attrs.axis), out_dtype=str(dq_x.attrs.out_dtype))
            y = _conv(data, w, ph, pw, self.groups)
            if layer.bias_expr is not None:
                y = relax.op.add(y, layer.bias_expr)
            return relax.Call(q.op, [_act(layer, y), *q.args[1:]], q.attrs, q.ty_args)

        return self.build(phase)

    def _requantised_bias(self, bias_q: np.ndarray | None, sw: np.ndarray, sx: float, sy: float, zy: int,
                          out_dt: DType) -> np.ndarray:
        """Per output channel, what an empty phase outputs: the int32 bias alone, requantised and clamped
        (a folded relu / clip) as the QDQ rewrite requantises an accumulator."""
        c = self.out[1]
        acc = np.zeros(c, np.int32) if bias_q is None else bias_q.astype(np.int32).reshape(-1)
        lo = hi = None
        if self.layer.act is not None:
            if self.layer.act.op.name == "relax.nn.relu":
                lo = 0.0
            else:
                lo, hi = float(self.layer.act.args[1].value), float(self.layer.act.args[2].value)
        q_lo, q_hi = quant.clamp_bounds(out_dt, sy, zy, lo, hi)
        m = quant.multiplier(sx, sw, sy).astype(np.float32)
        return np.asarray(quant.requantize(acc, m, zy, q_lo, q_hi, out_dt, quant.NUMPY))


def _dq() -> relax.dpl.DFPattern:
    return is_op("relax.dequantize")(wildcard(), wildcard(), wildcard())


class _Patterns:
    """The chains a phase takes over: ``conv2d_transpose [+ bias] [-> batch_norm (float)] [-> relu | clip]
    [-> quantize (8-bit)]``."""

    def __init__(self, quantized: bool) -> None:
        self.x, self.w = (_dq(), _dq()) if quantized else (wildcard(), wildcard())
        self.ct = is_op(_CT)(self.x, self.w)
        self.bias_value = _dq() if quantized else wildcard()
        self.biased = is_op("relax.add")(self.ct, is_op("relax.reshape")(self.bias_value, wildcard()) | wildcard())
        body = self.biased | self.ct
        self.q_act = self._activated(body)
        self.q = is_op("relax.quantize")(self.q_act | body, wildcard(), wildcard())
        # float: an inference batch-norm after it too (torch exports one after a ConvTranspose), folded
        self.bn_params = [wildcard() for _ in range(4)]
        self.bn_call = is_op("relax.nn.batch_norm")(body, *self.bn_params)
        self.bn = is_tuple_get_item(self.bn_call, 0)
        self.act = self._activated(self.bn | body)

    @staticmethod
    def _activated(body: relax.dpl.DFPattern) -> relax.dpl.DFPattern:
        return is_op("relax.nn.relu")(body) | is_op("relax.clip")(body, wildcard(), wildcard())

    def layer(self, m: dict, lifted: Lifted, quantize: bool) -> _Layer:
        """The matched layer; a float bias must be a per-channel constant (an empty phase is the bias)."""
        call = m[self.ct]
        biased = m.get(self.biased)
        act = m.get(self.q_act if quantize else self.act)
        bias = bias_expr = None
        if biased is not None:
            bias_expr = biased.args[1]
            if not quantize:
                value = lifted.value(m[self.bias_value]) if self.bias_value in m else None
                if value is None or value.size != int(call.ty.shape[1]):
                    raise _Decline
                bias = value.reshape(-1)
        return _Layer(call, bias, bias_expr, act, m[self.q] if quantize else None)


def _quantized_chain(pats: _Patterns, m: dict, lifted: Lifted) -> relax.Expr:
    layer = pats.layer(m, lifted, quantize=True)
    bias_q = None
    if pats.bias_value in m and layer.bias_expr is not None:
        dq_b = m[pats.bias_value]
        bias_q = lifted.value(dq_b.args[0])
    return _Rewriter(layer, lifted).quantized_layer(m[pats.x], m[pats.w], bias_q)


def _fold_batch_norm(w: np.ndarray, layer: _Layer, bn: relax.Call, params: list[np.ndarray | None],
                     lifted: Lifted) -> tuple[np.ndarray, _Layer]:
    """``batch_norm(conv2d_transpose(x, W) [+ b])`` with constant parameters as ``conv2d_transpose(x, W * s)
    + (b * s + beta - mean * s)``, ``s = gamma / sqrt(var + eps)`` per output channel (IOHW: axis 1, per group)."""
    a = bn.attrs
    if any(p is None for p in params) or int(a.axis) % 4 != 1:
        raise _Decline
    gamma, beta, mean, var = (p.astype(np.float64).reshape(-1) for p in params)
    scale = (gamma if a.scale else 1.0) / np.sqrt(var + float(a.epsilon))
    c = scale.size
    bias = (np.zeros(c) if layer.bias is None else layer.bias.astype(np.float64)) * scale \
        + (beta if a.center else 0.0) - mean * scale
    groups = int(layer.call.attrs.groups)
    cin, cog = w.shape[:2]
    per_group = scale.reshape(groups, 1, cog, 1, 1)
    w = (w.astype(np.float64).reshape(groups, cin // groups, cog, *w.shape[2:]) * per_group).reshape(w.shape)
    bias = bias.astype(str(layer.call.ty.dtype))
    return w.astype(str(layer.call.args[1].ty.dtype)), replace(layer, bias=bias,
                                                          bias_expr=lifted.add(bias.reshape(1, c, 1, 1)))


def _float_chain(pats: _Patterns, m: dict, lifted: Lifted) -> relax.Expr:
    layer = pats.layer(m, lifted, quantize=False)
    w = lifted.value(layer.call.args[1])
    if w is None or w.dtype.kind != "f":
        raise _Decline
    if pats.bn in m:
        w, layer = _fold_batch_norm(w, layer, m[pats.bn_call], [lifted.value(m[p]) for p in pats.bn_params], lifted)
    return _Rewriter(layer, lifted).float_layer(w)


def _rewrite(func: relax.Function, lifted: Lifted, quantized_only: bool) -> relax.Function:
    """Longest chains first: a quantized one, then float ones with an activation, a bias, bare."""
    def run(func: relax.Function, pattern: relax.dpl.DFPattern, pats: _Patterns,
            build: Callable[[_Patterns, dict, Lifted], relax.Expr]) -> relax.Function:
        def rewriter(orig: relax.Expr, m: dict) -> relax.Expr:
            try:
                return build(pats, m, lifted)
            except _Decline:
                return orig
        return rewrite_call(pattern, rewriter, func)

    qp = _Patterns(quantized=True)
    func = run(func, qp.q, qp, _quantized_chain)
    if not quantized_only:
        fp = _Patterns(quantized=False)
        for pattern in (fp.act, fp.bn, fp.biased, fp.ct):
            func = run(func, pattern, fp, _float_chain)
    return func


def _has_conv_transpose(func: relax.Function) -> bool:
    found = []
    relax.analysis.post_order_visit(func.body, lambda e: found.append(1) if isinstance(e, relax.Call)
                                    and isinstance(e.op, tvm.ir.Op) and e.op.name == _CT else None)
    return bool(found)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.ConvTransposeAsConvs")
def conv_transpose_as_convs(func: relax.Function, _mod: tvm.IRModule,
                            _ctx: tvm.transform.PassContext) -> relax.Function:
    """Every 2-D transposed convolution with constant weights (float, or 8-bit in a QDQ region) as
    interleaved phase convolutions (module docstring)."""
    if not _has_conv_transpose(func):
        return func
    return with_lifted_constants(func, lambda f, lifted: _rewrite(f, lifted, quantized_only=False))


@relax.transform.function_pass(opt_level=0, name="tvm_npu.QuantizedConvTransposeAsConvs")
def quantized_conv_transpose_as_convs(func: relax.Function, _mod: tvm.IRModule,
                                      _ctx: tvm.transform.PassContext) -> relax.Function:
    """Only the quantized ones: what the llvm reference runs so that its integers are the NPU's (a float
    transposed convolution stays TVM's own there, an independent check)."""
    if not _has_conv_transpose(func):
        return func
    return with_lifted_constants(func, lambda f, lifted: _rewrite(f, lifted, quantized_only=True))
