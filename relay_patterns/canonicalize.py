"""Relax rewrites that put a model into the form the pattern table matches.

* ``FoldBatchNorm``: ``batch_norm(conv2d(x, W))`` with constant parameters becomes
  ``conv2d(x, W * s) + (beta - mean * s)`` with ``s = gamma / sqrt(var + eps)``, so
  batch-norm costs nothing on the NPU (it is a bias in the conv epilogue).
* ``RemoveDropout``: inference dropout is the identity.
* ``QdqToInteger`` (:mod:`.quantized`): quantized regions of a QDQ model become integer
  operators.
* ``SimplifyReduceOfStack``: the ONNX importer turns ``Sum(a, b, ...)`` (and ``Max``,
  ``Min``) into ``sum(stack(broadcast_to(a), broadcast_to(b)), axis=0)`` (``max``,
  ``min``); this becomes a chain of ``add`` (``maximum``, ``minimum``), with the
  broadcasts dropped where the binary op broadcasts by itself, which the epilogue
  patterns can take (and which TVM's ``ConvertLayout`` can convert: it fails on the
  stacked form).

TVM has no pass for either (``DecomposeOpsForInference`` turns batch-norm into
five elementwise ops and keeps them), hence these two.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, is_tuple_get_item, rewrite_call, wildcard

from .quantized import qdq_to_integer


def _const_np(expr: relax.Expr) -> np.ndarray:
    return np.asarray(expr.value.numpy())


def _static_shape(expr: relax.Expr) -> tuple[int, ...] | None:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    try:
        return tuple(int(d) for d in ty.shape)
    except (TypeError, ValueError):
        return None


def _fold_bn_into_conv(func: relax.Function) -> relax.Function:
    data, weight = wildcard(), is_const()
    conv = is_op("relax.nn.conv2d")(data, weight)
    gamma, beta, mean, var = is_const(), is_const(), is_const(), is_const()
    bn = is_op("relax.nn.batch_norm")(conv, gamma, beta, mean, var)
    root = is_tuple_get_item(bn, 0)

    def rewriter(_orig: relax.Expr, m: dict) -> relax.Expr:
        conv_call, bn_call = m[conv], m[bn]
        cattrs, battrs = conv_call.attrs, bn_call.attrs
        out_layout = str(cattrs.out_layout or cattrs.data_layout)
        channel_axis = out_layout.index("C")
        if int(battrs.axis) % len(out_layout) != channel_axis or str(cattrs.out_dtype or "") not in ("", "float32"):
            return _orig
        w = _const_np(m[weight]).astype(np.float64)
        if w.dtype.kind != "f":
            return _orig
        g = _const_np(m[gamma]).astype(np.float64) if battrs.scale else 1.0
        b = _const_np(m[beta]).astype(np.float64) if battrs.center else 0.0
        mu = _const_np(m[mean]).astype(np.float64)
        v = _const_np(m[var]).astype(np.float64)
        s = g / np.sqrt(v + float(battrs.epsilon))
        o_axis = str(cattrs.kernel_layout).index("O")
        bshape = [1] * w.ndim
        bshape[o_axis] = -1
        dtype = _const_np(m[weight]).dtype
        new_w = relax.const((w * s.reshape(bshape)).astype(dtype))
        bias_shape = [1] * len(out_layout)
        bias_shape[channel_axis] = -1
        bias = relax.const((b - mu * s).reshape(bias_shape).astype(dtype))
        new_conv = relax.op.nn.conv2d(
            m[data],
            new_w,
            strides=cattrs.strides,
            padding=cattrs.padding,
            dilation=cattrs.dilation,
            groups=int(cattrs.groups),
            data_layout=str(cattrs.data_layout),
            kernel_layout=str(cattrs.kernel_layout),
            out_layout=str(cattrs.out_layout),
            out_dtype=str(cattrs.out_dtype) if cattrs.out_dtype else None,
        )
        return relax.op.add(new_conv, bias)

    return rewrite_call(root, rewriter, func)


#: Reduction over a stack -> the binary op that folds it.
_REDUCE_OF_STACK = {"relax.sum": relax.op.add, "relax.max": relax.op.maximum, "relax.min": relax.op.minimum}


def _broadcasts_to(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """Whether numpy broadcasting takes ``shape`` to ``out`` (without growing ``out``)."""
    if len(shape) > len(out):
        return False
    return all(a in (1, b) for a, b in zip(reversed(shape), reversed(out), strict=False))


@relax.expr_functor.mutator
class _ReduceOfStack(relax.PyExprMutator):
    """``sum(stack(xs), axis=0)`` -> ``xs[0] + xs[1] + ...`` (max / min alike); the first term
    keeps the output's shape, later ones drop a ``broadcast_to`` the binary op does itself."""

    def _resolve(self, expr: relax.Expr) -> relax.Expr:
        if isinstance(expr, relax.Var):
            bound = self.lookup_binding(expr)
            if bound is not None:
                return bound
        return expr

    def _unbroadcast(self, expr: relax.Expr, shape: tuple[int, ...], first: bool) -> relax.Expr:
        val = self._resolve(expr)
        if isinstance(val, relax.Call) and val.op == tvm.ir.Op.get("relax.broadcast_to"):
            src = val.args[0]
            src_shape = _static_shape(src)
            if src_shape == shape or (not first and src_shape is not None and _broadcasts_to(src_shape, shape)):
                return src
        return expr

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in _REDUCE_OF_STACK or call.attrs.keepdims:
            return call
        axes = call.attrs.axis
        if axes is None or [int(a) for a in axes] != [0]:
            return call
        stacked = self._resolve(call.args[0])
        if not (isinstance(stacked, relax.Call) and stacked.op == tvm.ir.Op.get("relax.stack")):
            return call
        if int(stacked.attrs.axis) != 0:
            return call
        items = self._resolve(stacked.args[0])
        if not isinstance(items, relax.Tuple) or len(items.fields) < 2:
            return call
        out_shape = _static_shape(call)
        if out_shape is None:
            return call
        binary = _REDUCE_OF_STACK[call.op.name]
        fields = [self._unbroadcast(f, out_shape, i == 0) for i, f in enumerate(items.fields)]
        acc = fields[0]
        for f in fields[1:]:
            acc = self.builder_.normalize(binary(acc, f))
        return acc


def _drop_dropout(func: relax.Function) -> relax.Function:
    x = wildcard()
    root = is_tuple_get_item(is_op("relax.nn.dropout")(x), 0)
    return rewrite_call(root, lambda _orig, m: m[x], func)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.RemoveDropout")
def remove_dropout(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """Inference: dropout is the identity (and its tuple result confuses layout conversion)."""
    return _drop_dropout(func)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.FoldBatchNorm")
def fold_batch_norm(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """Fold inference batch-norm into the preceding conv2d's weights and a bias add."""
    return _fold_bn_into_conv(func)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.SimplifyReduceOfStack")
def simplify_reduce_of_stack(func: relax.Function, _mod: tvm.IRModule,
                             _ctx: tvm.transform.PassContext) -> relax.Function:
    """Rewrite the ONNX importer's ``Sum`` / ``Max`` / ``Min`` lowering into chains of binary ops."""
    return _ReduceOfStack().visit_expr(func)


def canonicalize_passes() -> list[tvm.transform.Pass]:
    """The Relax clean-up that runs before partitioning, in order (QDQ first: constant folding
    would turn the 8-bit weights into fp32 ones)."""
    return [
        simplify_reduce_of_stack,  # first: a quantized residual Sum is an add for the QDQ rewrite
        qdq_to_integer,
        relax.transform.FoldConstant(),
        remove_dropout,
        fold_batch_norm,
        relax.transform.DecomposeOpsForInference(),
        simplify_reduce_of_stack,
        relax.transform.FoldConstant(),
        relax.transform.CanonicalizeBindings(),
        relax.transform.DeadCodeElimination(),
    ]
