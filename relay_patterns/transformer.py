"""Transformer operators as exporters spell them, brought to the one Relax op each that the
pattern table matches (``relax.nn.layer_norm``, ``relax.nn.gelu``, ``relax.nn.gelu_tanh``).

ONNX exporters before opset 17 have no ``LayerNormalization``, and no exporter has a GELU
operator, so a model arrives with them decomposed:

* layer norm: recognised by its algebra, not its node sequence: every row program
  (:mod:`.rowwise_region`) whose canonical form is that of ``(x - mean) / sqrt(var + eps) [* gamma]
  [+ beta]`` over the last axis (torch's, tf2onnx's ``x * (r * g) + (b - mean * (r * g))``, ...);
* GELU, erf form: ``x * (erf(x / sqrt(2)) + 1) * 0.5`` (or ``x * 0.5 * (...)``,
  ``x * (1/sqrt(2))``);
* GELU, tanh form: ``x * (tanh(sqrt(2/pi) * (x + 0.044715 * x^3)) + 1) * 0.5``
  (``x^3`` as ``pow(x, 3)`` or ``x * x * x``).

Each is rewritten only when every constant has the value the formula needs; anything else
is left as it is (a row program of other algebra still becomes one row-wise NPU operator at
partitioning). A ``group_norm`` and a ``layer_norm`` over several axes become row reductions over a
view of the data (:func:`_norm_over_rows`), for the same row-program recogniser. Attention idioms are
brought to the form the matmul folds: K^T of split heads (a transpose that moves the
innermost axis) and a fused q/k/v projection
split by ``take`` (one projection each, so every head split is a view); a constant added on a
reshaped view of the scores (Swin's window mask) is added on the scores themselves. A softmax over
another axis than the last is moved onto the last one between two transposes (views in a partition).
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import DFPattern, is_const, is_op, rewrite_call, wildcard

from .extract import static_shape
from .rowwise_region import find_row_programs, layer_norm_of, recognise
from .rowwise_views import rows_last

_GELU_TANH_K = math.sqrt(2.0 / math.pi)


def _scalar(expr: relax.Expr) -> float | None:
    """The value of a one-element float constant (None for anything else)."""
    if not isinstance(expr, tvm.ir.expr.GenericConst) or not str(expr.ty.dtype).startswith("float"):
        return None
    arr = np.asarray(expr.value.numpy())
    return float(arr.reshape(())) if arr.size == 1 else None


def _near(value: float | None, want: float, rtol: float = 1e-6) -> bool:
    """``value`` equals ``want`` up to float32 rounding of the exporter's constant."""
    return value is not None and abs(value - want) <= rtol * abs(want) + 1e-12


def _layer_norm(func: relax.Function) -> relax.Function:
    """Every row program (:mod:`.rowwise_region`) whose canonical form is a layer norm's over the last axis
    -> ``nn.layer_norm``: torch's ``(x - mean) / sqrt(var + eps) * g + b``, tf2onnx's ``x * (r * g) + (b - mean
    * (r * g))``, ``rsqrt`` or ``1 / sqrt``, ``pow(d, 2)`` or ``d * d`` alike (its bindings, now unused, go with
    dead-code elimination)."""
    norms = {}
    for out, sub in find_row_programs(func):
        prog = recognise(out, sub)
        found = layer_norm_of(prog)
        if found is not None:
            eps, gamma, beta = found
            norms[out] = relax.BlockBuilder().normalize(relax.op.nn.layer_norm(
                prog.data, relax.const(gamma), relax.const(beta), axes=[-1], epsilon=eps))
    if not norms:
        return func
    blocks = []
    for block in func.body.blocks:
        bindings = [relax.VarBinding(b.var, norms[b.var]) if b.var in norms else b for b in block.bindings]
        blocks.append(type(block)(bindings))
    body = relax.SeqExpr(blocks, func.body.body)
    return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span)


def _norm_over_rows(func: relax.Function) -> relax.Function:
    """``group_norm`` (ONNX GroupNormalization) and a ``layer_norm`` over several trailing axes -> their
    elementwise operators and row reductions over a reshape of the data that makes the normalised elements
    rows (a group's channels and positions, or the trailing axes), the affine after the reshape back:
    the form :mod:`.rowwise_region` makes one row-wise operator. The last axis alone stays a
    ``layer_norm`` (the pattern table's)."""
    x, g, b = wildcard(), wildcard(), wildcard()
    root = is_op("relax.nn.group_norm")(x, g, b) | is_op("relax.nn.layer_norm")(x, g, b)

    def rewrite(orig: relax.Expr, m: dict) -> relax.Expr:
        shape, call = static_shape(m[x]), m[root]
        if shape is None or str(m[x].ty.dtype) != "float32":
            return orig
        attrs, rank = call.attrs, len(shape)
        axes = sorted(int(a) % rank for a in attrs.axes)
        if call.op.name == "relax.nn.layer_norm":
            if len(axes) < 2 or axes != list(range(axes[0], rank)):
                return orig
            view, affine = (*shape[: axes[0]], math.prod(shape[axes[0] :])), shape[axes[0] :]
        else:
            groups = int(attrs.num_groups)
            if int(attrs.channel_axis) % rank != 1 or axes != list(range(2, rank)) or shape[1] % groups:
                return orig
            view, affine = (shape[0], groups, math.prod(shape[1:]) // groups), (shape[1],) + (1,) * (rank - 2)
        rows = relax.op.reshape(m[x], view)
        d = relax.op.subtract(rows, relax.op.mean(rows, axis=[-1], keepdims=True))
        var = relax.op.mean(relax.op.multiply(d, d), axis=[-1], keepdims=True)
        eps = relax.const(np.float32(attrs.epsilon))
        y = relax.op.reshape(relax.op.multiply(d, relax.op.rsqrt(relax.op.add(var, eps))), shape)
        if attrs.scale:
            y = relax.op.multiply(y, relax.op.reshape(m[g], affine))
        if attrs.center:
            y = relax.op.add(y, relax.op.reshape(m[b], affine))
        return y

    return rewrite_call(root, rewrite, func)


def _half_of(inner: DFPattern, x: DFPattern, half: DFPattern) -> DFPattern:
    """``x * inner * 0.5`` in the orders exporters write it."""
    return (is_op("relax.multiply")(is_op("relax.multiply")(x, inner), half)
            | is_op("relax.multiply")(is_op("relax.multiply")(x, half), inner)
            | is_op("relax.multiply")(x, is_op("relax.multiply")(inner, half)))


def _gelu_erf(func: relax.Function) -> relax.Function:
    x, c, one, half = wildcard(), is_const(), is_const(), is_const()
    scaled = is_op("relax.divide")(x, c) | is_op("relax.multiply")(x, c)
    inner = is_op("relax.add")(is_op("relax.erf")(scaled), one)

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        want = math.sqrt(2.0) if m[scaled].op.name == "relax.divide" else 1.0 / math.sqrt(2.0)
        if not (_near(_scalar(m[c]), want) and _scalar(m[one]) == 1.0 and _scalar(m[half]) == 0.5):
            return orig
        if static_shape(orig) != static_shape(m[x]):
            return orig
        return relax.op.nn.gelu(m[x])

    return rewrite_call(_half_of(inner, x, half), rewrite, func)


def _gelu_tanh(func: relax.Function) -> relax.Function:
    x, three, c, k, one, half = wildcard(), is_const(), is_const(), is_const(), is_const(), is_const()
    cube = is_op("relax.power")(x, three) | is_op("relax.multiply")(is_op("relax.multiply")(x, x), x)
    poly = is_op("relax.add")(x, is_op("relax.multiply")(cube, c))
    inner = is_op("relax.add")(is_op("relax.tanh")(is_op("relax.multiply")(poly, k)), one)

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        if m[cube].op.name == "relax.power" and _scalar(m[three]) != 3.0:
            return orig
        ok = (_near(_scalar(m[c]), 0.044715) and _near(_scalar(m[k]), _GELU_TANH_K) and _scalar(m[one]) == 1.0
              and _scalar(m[half]) == 0.5 and static_shape(orig) == static_shape(m[x]))
        return relax.op.nn.gelu_tanh(m[x]) if ok else orig

    return rewrite_call(_half_of(inner, x, half), rewrite, func)


def _key_transpose(func: relax.Function) -> relax.Function:
    """``matmul(q, permute_dims(k, P))`` where P moves k's innermost axis to the reduction axis
    (K^T of attention: ``(b, s, h, d) -> (b, h, d, s)``) -> ``matmul(q, permute_dims(permute_dims(k, Q),
    swap))``: Q keeps the innermost axis (a strided view, no data moved) and the swap of the last two
    axes folds into the matmul (its B tile is read transposed)."""
    a, x = wildcard(), wildcard()
    perm = is_op("relax.permute_dims")(x)
    root = is_op("relax.matmul")(a, perm)

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        shape = static_shape(m[x])
        axes = m[perm].attrs.axes
        if shape is None or axes is None or len(shape) < 3:
            return orig
        rank = len(shape)
        p = [int(v) % rank for v in axes]
        if p[-2] != rank - 1 or p[-1] == rank - 1:
            return orig
        q = [*p[:-2], p[-1], p[-2]]
        swap = [*range(rank - 2), rank - 1, rank - 2]
        heads = m[x] if q == list(range(rank)) else relax.op.permute_dims(m[x], q)
        return relax.op.matmul(m[a], relax.op.permute_dims(heads, swap), out_dtype=orig.attrs.out_dtype)

    return rewrite_call(root, rewrite, func)


def _explicit_axes(func: relax.Function) -> relax.Function:
    """``permute_dims(x)`` (no axes: reverse them all) -> the same with its axes spelled out, so the pattern
    table sees a 2-D transpose as the swap of the last two axes."""
    x = wildcard()
    root = is_op("relax.permute_dims")(x)

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        shape = static_shape(m[x])
        if m[root].attrs.axes is not None or shape is None:  # orig may be the var bound to the call
            return orig
        return relax.op.permute_dims(m[x], list(range(len(shape)))[::-1])

    return rewrite_call(root, rewrite, func)


def _split_fused_projection(func: relax.Function) -> relax.Function:
    """timm's fused q/k/v projection, ``take(permute_dims(reshape(x @ W + b, (.., 3, heads, d)), P), i)``,
    -> the i-th projection on its own, ``permute_dims(reshape(x @ W_i + b_i, (.., heads, d)), P')``:
    the same multiply-accumulates, and the head split that remains is a strided view (the ``take`` of a
    slice is no NPU operator)."""
    x, w, b = wildcard(), is_const(), is_const()
    proj = is_op("relax.matmul")(x, w)
    biased = is_op("relax.add")(proj, b) | is_op("relax.add")(b, proj)
    shaped = is_op("relax.reshape")(biased | proj, wildcard())
    perm = is_op("relax.permute_dims")(shaped)
    index = is_const()
    root = is_op("relax.take")(perm, index)

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        y, split = m[proj], m[shaped]
        y_shape, split_shape = static_shape(y), static_shape(split)
        weight = np.asarray(m[w].value.numpy())
        idx = np.asarray(m[index].value.numpy())
        axes = m[perm].attrs.axes
        if y_shape is None or split_shape is None or axes is None or idx.size != 1 or weight.ndim != 2:
            return orig
        lead = len(y_shape) - 1
        if split_shape[:lead] != y_shape[:lead] or len(split_shape) != lead + 3:
            return orig  # only (.., parts, heads, d) splits of the last axis
        parts, heads, d = split_shape[lead:]
        p = [int(a) % len(split_shape) for a in axes]
        axis = int(orig.attrs.axis) % len(p)
        i = int(idx.reshape(()))
        if p[axis] != lead or not 0 <= i < parts:
            return orig  # the take does not pick one of the parts
        cols = slice(i * heads * d, (i + 1) * heads * d)
        out = relax.op.matmul(m[x], relax.const(np.ascontiguousarray(weight[:, cols])))
        if b in m:
            bias = np.asarray(m[b].value.numpy())
            if bias.shape[-1:] != (parts * heads * d,) or bias.size != parts * heads * d:
                return orig
            out = relax.op.add(out, relax.const(np.ascontiguousarray(bias.reshape(-1)[cols])))
        out = relax.op.reshape(out, (*y_shape[:lead], heads, d))
        kept = [a - (a > lead) for a in p if a != lead]  # the remaining axes, renumbered
        return relax.op.permute_dims(out, kept)

    return rewrite_call(root, rewrite, func)


def _reshaped_add(func: relax.Function) -> relax.Function:
    """``reshape(reshape(x, S) + c, shape(x))`` with a constant ``c`` (Swin's shifted-window mask, added
    per window on a 5-D view of the scores) -> ``x + c'``, ``c'`` broadcast to S and reshaped back:
    the same sums, on the scores' own shape, where the add is an epilogue step."""
    x, c = wildcard(), is_const()
    inner = is_op("relax.reshape")(x, wildcard())
    added = is_op("relax.add")(inner, c) | is_op("relax.add")(c, inner)
    root = is_op("relax.reshape")(added, wildcard())

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        shape, mid = static_shape(m[x]), static_shape(m[inner])
        if shape is None or mid is None or static_shape(orig) != shape or static_shape(m[added]) != mid:
            return orig
        arr = np.asarray(m[c].value.numpy())
        try:
            full = np.broadcast_to(arr, mid)
        except ValueError:
            return orig
        return relax.op.add(m[x], relax.const(np.ascontiguousarray(full).reshape(shape)))

    return rewrite_call(root, rewrite, func)


def _softmax_last_axis(func: relax.Function) -> relax.Function:
    """``softmax(x, axis=k)`` over another axis than the last (YOLOv8's DFL over axis 1, a softmax over the
    channels of a conv output) -> ``permute_dims(softmax(permute_dims(x, p), axis=-1), p^-1)``, ``p`` moving
    axis ``k`` to the end: the NPU's row-wise operator normalises the last axis, and inside a partition the
    transposes are views (its input is read, its result written, through strides). Only where the NPU
    takes the softmax (float32, static shape, rows of at least two elements), so that no transpose is left
    on the host around a softmax that stays there."""
    x = wildcard()
    root = is_op("relax.nn.softmax")(x)

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        shape = static_shape(m[x])
        if shape is None or str(m[x].ty.dtype) != "float32":
            return orig
        rank = len(shape)
        axis = int(m[root].attrs.axis) % rank
        if axis == rank - 1 or shape[axis] < 2:
            return orig
        perm = [a for a in range(rank) if a != axis] + [axis]
        inverse = [perm.index(a) for a in range(rank)]
        rows = relax.op.nn.softmax(relax.op.permute_dims(m[x], perm), axis=-1)
        return relax.op.permute_dims(rows, inverse)

    return rewrite_call(root, rewrite, func)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.TransformerOps")
def transformer_ops(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """Decomposed layer norms and GELUs -> ``layer_norm`` / ``gelu`` / ``gelu_tanh``; group norms and layer norms
    over several axes -> row reductions over a view (:func:`_norm_over_rows`); a row program over leading axes
    -> the same over a transposing view (:func:`~.rowwise_views.rows_last`); attention's K^T
    in the form the matmul folds (module docstring). The scores' ``/ sqrt(d)`` becomes a multiply, an
    epilogue step, in :func:`~relay_patterns.canonicalize.reciprocal_divide` like any division by a constant."""
    func = _norm_over_rows(_layer_norm(rows_last(func)))
    func = _reshaped_add(_split_fused_projection(_gelu_tanh(_gelu_erf(func))))
    return _softmax_last_axis(_key_transpose(_explicit_axes(func)))
