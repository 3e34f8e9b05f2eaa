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

from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.relax.dpl import is_const, is_op, is_tuple_get_item, rewrite_call, wildcard

from tvm_npu.config import NpuTarget

from .broadcast_operands import broadcast_operands
from .conv_transpose import conv_transpose_as_convs
from .dequantize_views import dequantize_views
from .extract import const_array, static_shape
from .lifted import Lifted, with_lifted_constants
from .log_softmax import log_softmax_rows
from .lrn import lrn_to_pool
from .pads import pads_as_operators
from .pool_chains import pool_chains
from .quantized import qdq_to_integer
from .resize import resize_forms
from .spatial_mean import spatial_mean_keepdims
from .split import split_to_slices
from .transformer import transformer_ops


def _const_np(expr: relax.Expr) -> np.ndarray:
    """A read-only view of a constant's data (no copy of a model's weights while they are folded)."""
    return const_array(expr)


def _folded(value: np.ndarray) -> relax.Expr:
    """A folded value (an array, or a view such as the transpose of another constant) as a Relax constant,
    written once into TVM's memory, or sharing it when TVM can take it as it is (C-contiguous, 64-byte
    aligned): a folded weight is never a numpy copy and then a TVM copy."""
    if value.flags.c_contiguous and value.ctypes.data % 64 == 0:
        try:  # (a versioned capsule also carries a read-only view of another constant)
            return relax.const(tvm.runtime.from_dlpack(value.__dlpack__(max_version=(1, 0))))
        except (BufferError, TypeError, ValueError, RuntimeError):  # a dtype or layout DLPack cannot carry
            pass
    try:
        out = tvm.runtime.empty(value.shape, str(value.dtype))
        np.copyto(np.from_dlpack(out), value)
    except (BufferError, TypeError, ValueError, RuntimeError):
        return relax.const(np.ascontiguousarray(value))
    return relax.const(out)


def _fold_bn_into_conv(func: relax.Function, lifted: Lifted) -> relax.Function:
    data, weight = wildcard(), wildcard()  # constants are lifted to vars: ``lifted`` says which
    conv = is_op("relax.nn.conv2d")(data, weight)
    gamma, beta, mean, var = wildcard(), wildcard(), wildcard(), wildcard()
    bn = is_op("relax.nn.batch_norm")(conv, gamma, beta, mean, var)
    root = is_tuple_get_item(bn, 0)

    def rewriter(_orig: relax.Expr, m: dict) -> relax.Expr:
        conv_call, bn_call = m[conv], m[bn]
        cattrs, battrs = conv_call.attrs, bn_call.attrs
        out_layout = str(cattrs.out_layout or cattrs.data_layout)
        channel_axis = out_layout.index("C")
        if int(battrs.axis) % len(out_layout) != channel_axis or str(cattrs.out_dtype or "") not in ("", "float32"):
            return _orig
        values = [lifted.value(m[p]) for p in (weight, gamma, beta, mean, var)]
        if any(v is None for v in values):
            return _orig
        w0, gamma_, beta_, mean_, var_ = values
        w = w0.astype(np.float64)
        if w.dtype.kind != "f" or w0.dtype.kind != "f":
            return _orig
        g = gamma_.astype(np.float64) if battrs.scale else 1.0
        b = beta_.astype(np.float64) if battrs.center else 0.0
        mu = mean_.astype(np.float64)
        v = var_.astype(np.float64)
        s = g / np.sqrt(v + float(battrs.epsilon))
        o_axis = str(cattrs.kernel_layout).index("O")
        bshape = [1] * w.ndim
        bshape[o_axis] = -1
        dtype = w0.dtype
        new_w = lifted.add((w * s.reshape(bshape)).astype(dtype))
        bias_shape = [1] * len(out_layout)
        bias_shape[channel_axis] = -1
        bias = lifted.add((b - mu * s).reshape(bias_shape).astype(dtype))
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
            src_shape = static_shape(src)
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
        out_shape = static_shape(call)
        if out_shape is None:
            return call
        binary = _REDUCE_OF_STACK[call.op.name]
        fields = [self._unbroadcast(f, out_shape, i == 0) for i, f in enumerate(items.fields)]
        acc = fields[0]
        for f in fields[1:]:
            acc = self.builder_.normalize(binary(acc, f))
        return acc


def _scalar_const(expr: relax.Expr) -> float | None:
    """The value of a one-element float constant (None for anything else)."""
    if not isinstance(expr, tvm.ir.expr.GenericConst) or not str(expr.ty.dtype).startswith("float"):
        return None
    arr = _const_np(expr)
    return float(arr.reshape(())) if arr.size == 1 else None


def _keeps_shape(call: relax.Call, x: relax.Expr) -> bool:
    """Whether ``call`` (elementwise on ``x`` and a scalar) has ``x``'s static shape and dtype."""
    shape = static_shape(x)
    return shape is not None and static_shape(call) == shape and str(call.ty.dtype) == str(x.ty.dtype)


def _hard_sigmoid(x: relax.Expr, alpha: float, beta: float) -> relax.Expr:
    """The one form of a hard sigmoid the pattern table matches: ``clip(x * alpha + beta, 0, 1)``."""
    dtype = str(x.ty.dtype)
    return relax.op.clip(relax.op.add(relax.op.multiply(x, relax.const(alpha, dtype)), relax.const(beta, dtype)),
                         0.0, 1.0)


def _max_min_to_clip(func: relax.Function) -> relax.Function:
    """``minimum(maximum(x, lo), hi)`` (and the other nesting) with scalar constants -> ``clip``: a ``Clip``
    with min/max inputs (ReLU6), which :mod:`tvm_npu.compiler.onnx_import` imports as ``Max`` / ``Min``."""
    x, lo, hi = wildcard(), is_const(), is_const()
    inner_max = is_op("relax.maximum")(x, lo)
    outer_min = is_op("relax.minimum")(inner_max, hi)
    inner_min = is_op("relax.minimum")(x, hi)
    outer_max = is_op("relax.maximum")(inner_min, lo)

    def to_clip(orig: relax.Call, m: dict) -> relax.Expr:
        a, b = _scalar_const(m[lo]), _scalar_const(m[hi])
        if a is None or b is None or a > b or not _keeps_shape(orig, m[x]):
            return orig
        return relax.op.clip(m[x], a, b)

    return rewrite_call(outer_min | outer_max, to_clip, func)


def _relu_min_to_clip(func: relax.Function) -> relax.Function:
    """``minimum(relu(x), hi)`` (tf2onnx's ReLU6: Relu then Min) -> ``clip(x, 0, hi)``."""
    rx6, cap = wildcard(), is_const()

    def relu_min_to_clip(orig: relax.Call, m: dict) -> relax.Expr:
        b = _scalar_const(m[cap])
        if b is None or b < 0.0 or not _keeps_shape(orig, m[rx6]):
            return orig
        return relax.op.clip(m[rx6], 0.0, b)

    return rewrite_call(is_op("relax.minimum")(is_op("relax.nn.relu")(rx6), cap), relu_min_to_clip, func)


def _swish_to_silu(func: relax.Function) -> relax.Function:
    """``x * sigmoid(x)`` in either order -> ``nn.silu`` (swish)."""
    sig_x = wildcard()
    sig = is_op("relax.sigmoid")(sig_x)
    swish = is_op("relax.multiply")(sig_x, sig) | is_op("relax.multiply")(sig, sig_x)
    return rewrite_call(swish, lambda _orig, m: relax.op.nn.silu(m[sig_x]), func)


def _scaled_clip_to_hard_sigmoid(func: relax.Function) -> relax.Function:
    """``clip(c * x + b, 0, 1)`` (ONNX ``HardSigmoid``, the scale on either side) -> ``clip(x * c + b, 0, 1)``."""
    hx, scale, shift = wildcard(), is_const(), is_const()
    scaled = is_op("relax.multiply")(scale, hx) | is_op("relax.multiply")(hx, scale)
    hsig = is_op("relax.clip")(is_op("relax.add")(scaled, shift), wildcard(), wildcard())

    def to_hard_sigmoid(orig: relax.Call, m: dict) -> relax.Expr:
        a, b = _scalar_const(m[scale]), _scalar_const(m[shift])
        if a is None or b is None or (float(orig.args[1].value), float(orig.args[2].value)) != (0.0, 1.0) \
                or not _keeps_shape(orig, m[hx]):
            return orig
        return _hard_sigmoid(m[hx], a, b)

    return rewrite_call(hsig, to_hard_sigmoid, func)


def _divided_clip_to_hard_sigmoid(func: relax.Function) -> relax.Function:
    """``clip(x + b, 0, h) / h`` (or ``* (1/h)``) -> ``clip(x * (1/h) + b/h, 0, 1)``: ONNX ``HardSwish``
    as imported is ``x * clip(x + 3, 0, 6) / 6``."""
    rx, shift6, div = wildcard(), is_const(), is_const()
    relu6 = is_op("relax.clip")(is_op("relax.add")(rx, shift6), wildcard(), wildcard())
    scaled6 = is_op("relax.divide")(relu6, div) | is_op("relax.multiply")(relu6, div)

    def to_hard_sigmoid6(orig: relax.Call, m: dict) -> relax.Expr:
        clip = m[relu6]
        b, d = _scalar_const(m[shift6]), _scalar_const(m[div])
        h = float(clip.args[2].value)
        if b is None or d is None or float(clip.args[1].value) != 0.0 or not _keeps_shape(orig, m[rx]):
            return orig
        scale_ = 1.0 / d if orig.op.name == "relax.divide" else d
        if h <= 0.0 or abs(h * scale_ - 1.0) > 1e-6:  # only clip(., 0, h) / h is a hard sigmoid
            return orig
        return _hard_sigmoid(m[rx], scale_, b * scale_)

    return rewrite_call(scaled6, to_hard_sigmoid6, func)


def _input_first_hard_swish(func: relax.Function) -> relax.Function:
    """``hard_sigmoid(x) * x`` -> ``x * hard_sigmoid(x)``: hard swish with the input first, on the hard
    sigmoid's one form (:func:`_hard_sigmoid`)."""
    sx = wildcard()
    canonical = is_op("relax.clip")(is_op("relax.add")(is_op("relax.multiply")(sx, is_const()), is_const()),
                                    wildcard(), wildcard())
    swapped = is_op("relax.multiply")(canonical, sx)
    return rewrite_call(swapped, lambda _orig, m: relax.op.multiply(m[sx], m[canonical]), func)


#: The rewrites of :func:`_canonical_activations`, in the order they run: a later one matches what an
#: earlier one leaves (a ReLU6 clip inside a hard sigmoid, the hard sigmoid of a hard swish).
_ACTIVATION_REWRITES: tuple[Callable[[relax.Function], relax.Function], ...] = (
    _max_min_to_clip, _relu_min_to_clip, _swish_to_silu, _scaled_clip_to_hard_sigmoid,
    _divided_clip_to_hard_sigmoid, _input_first_hard_swish)


def _canonical_activations(func: relax.Function) -> relax.Function:
    """Bring the activations exporters and the ONNX importer spell in several ops to one form each
    (ReLU6 -> ``clip``, swish -> ``nn.silu``, hard sigmoid -> ``clip(x * a + b, 0, 1)``, hard swish ->
    ``x`` times that): the forms the pattern table matches, each a single epilogue step
    (:data:`_ACTIVATION_REWRITES`)."""
    for rewrite in _ACTIVATION_REWRITES:
        func = rewrite(func)
    return func


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
    return with_lifted_constants(func, _fold_bn_into_conv)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.SimplifyReduceOfStack")
def simplify_reduce_of_stack(func: relax.Function, _mod: tvm.IRModule,
                             _ctx: tvm.transform.PassContext) -> relax.Function:
    """Rewrite the ONNX importer's ``Sum`` / ``Max`` / ``Min`` lowering into chains of binary ops."""
    return _ReduceOfStack().visit_expr(func)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.CanonicalActivations")
def canonical_activations(func: relax.Function, _mod: tvm.IRModule,
                          _ctx: tvm.transform.PassContext) -> relax.Function:
    """ReLU6 from max/min, swish, hard sigmoid and hard swish in the one form each the pattern
    table matches as a single epilogue step (:func:`_canonical_activations`)."""
    return _canonical_activations(func)


def _reciprocal_divide(func: relax.Function) -> relax.Function:
    x, c = wildcard(), is_const()

    def to_multiply(orig: relax.Call, m: dict) -> relax.Expr:
        divisor = m[c].value.numpy()
        if divisor.dtype.kind != "f" or not np.all(np.isfinite(divisor)) or np.any(divisor == 0):
            return orig
        return relax.op.multiply(m[x], relax.const((1.0 / divisor).astype(divisor.dtype)))

    return rewrite_call(is_op("relax.divide")(x, c), to_multiply, func)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.NegativeAsProduct")
def negative_as_product(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """``-x`` -> ``x * (-1)`` for a float ``x``: the same value bit for bit (a sign flip, ``-0.0`` included), as
    the elementwise product with a scalar the NPU runs (alone, or as a producer's epilogue step); an integer
    negation stays as it is."""
    x = wildcard()

    def to_product(orig: relax.Call, m: dict) -> relax.Expr:
        dtype = str(orig.ty.dtype)
        if not dtype.startswith("float"):
            return orig
        return relax.op.multiply(m[x], relax.const(-1.0, dtype))

    return rewrite_call(is_op("relax.negative")(x), to_product, func)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.ReciprocalDivide")
def reciprocal_divide(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """``x / c`` for a float constant ``c`` becomes ``x * (1 / c)`` (within one rounding of the quotient),
    an epilogue step: a batch-norm that follows no conv (DenseNet's pre-activation ones) is decomposed
    into ``(x - mean) / sqrt(var + eps) * gamma + beta`` and would otherwise leave its division on the host."""
    return _reciprocal_divide(func)


def _permutation(call: relax.Call) -> list[int] | None:
    """The axes of a ``layout_transform`` that only permutes axes (None: it splits, fuses or pads)."""
    index_map, pad = call.attrs.index_map, call.attrs.pad_value
    initial, final = list(index_map.initial_indices), list(index_map.final_indices)
    if pad is not None or len(initial) != len(final) or not all(isinstance(f, tvm.tirx.Var) for f in final):
        return None
    axes = [next((i for i, v in enumerate(initial) if v.same_as(f)), -1) for f in final]
    return axes if sorted(axes) == list(range(len(initial))) else None


#: Rows of a large matrix transposed at a time (see :func:`_transpose`).
_TRANSPOSE_ROWS = 256


def _transpose(x: np.ndarray, axes: list[int]) -> np.ndarray:
    """``np.transpose``, copied. A large matrix (a dense layer's weights) is copied in bands of rows:
    numpy's element-by-element strided copy misses the cache on every store and takes about twice
    as long (1.8 s against 0.8 s for 4096 x 9216 float32). Written into TVM's memory (:func:`_tvm_empty`)."""
    out = _tvm_empty(tuple(x.shape[a] for a in axes), x.dtype)
    if x.ndim != 2 or axes != [1, 0] or x.size < _TRANSPOSE_ROWS * _TRANSPOSE_ROWS:
        np.copyto(out, np.transpose(x, axes))
        return out
    for i in range(0, x.shape[0], _TRANSPOSE_ROWS):
        out[:, i:i + _TRANSPOSE_ROWS] = x[i:i + _TRANSPOSE_ROWS].T
    return out


def _tvm_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A new array in TVM's own (64-byte aligned) memory: the Relax constant of a value folded into it takes
    that memory as it is (:func:`_folded`), so a folded weight exists once."""
    return np.from_dlpack(tvm.runtime.empty(shape, str(dtype)))


def _movement(call: relax.Call, x: np.ndarray, out: tuple[int, ...]) -> np.ndarray | None:
    """Data movement of one constant: the result has exactly ``x``'s values, rearranged."""
    name = call.op.name
    if name in ("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.flatten"):
        return x.reshape(out)
    if name == "relax.permute_dims":
        axes = call.attrs.axes
        return _transpose(x, list(reversed(range(x.ndim))) if axes is None else [int(a) for a in axes])
    if name == "relax.broadcast_to":
        return np.broadcast_to(x, out)
    if name == "relax.layout_transform":
        axes = _permutation(call)
        return None if axes is None else np.transpose(x, axes)
    return None


#: Float arithmetic whose numpy result is bit-identical to TVM's llvm kernel (one correctly
#: rounded IEEE operation per element, in the operands' own dtype).
_FLOAT_BINARY = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
                 "relax.divide": np.divide, "relax.maximum": np.maximum, "relax.minimum": np.minimum}
_FLOAT_UNARY = {"relax.sqrt": np.sqrt, "relax.negative": np.negative}


def _evaluate(call: relax.Call, args: list[np.ndarray]) -> np.ndarray | None:
    """``call`` on constant operands with numpy, or None where numpy might not match TVM exactly
    (TVM's own FoldConstant then folds it)."""
    out = static_shape(call)
    dtype = getattr(call.ty, "dtype", None)
    if out is None or dtype is None:
        return None
    name = call.op.name
    if len(args) == 1 and name not in _FLOAT_UNARY and name != "relax.astype":
        res = _movement(call, args[0], out)
    elif name == "relax.astype":
        res = args[0].astype(str(dtype)) if args[0].dtype.kind == "f" and str(dtype).startswith("float") else None
    elif name == "relax.concat" and call.attrs.axis is not None:
        res = np.concatenate(args, axis=int(call.attrs.axis))
    elif args and all(a.dtype.kind == "f" and a.dtype == args[0].dtype for a in args):
        fn = _FLOAT_BINARY.get(name) if len(args) == 2 else _FLOAT_UNARY.get(name) if len(args) == 1 else None
        with np.errstate(all="ignore"):  # inf / nan as the llvm kernel computes them
            res = None if fn is None else fn(*args)
    else:
        res = None
    if res is None or res.shape != out or str(res.dtype) != str(dtype):
        return None
    return res  # (may be a view of an operand: _folded writes it into TVM's memory once)


@relax.expr_functor.mutator
class _NumpyFold(relax.PyExprMutator):
    """Folds calls on constants with numpy (:func:`_evaluate`) and puts the constants into their uses."""

    def _const(self, var: relax.Var) -> relax.Expr:
        bound = self.lookup_binding(var)
        return bound if isinstance(bound, GenericConst) else var

    def visit_var_(self, var: relax.Var) -> relax.Expr:
        return self._const(super().visit_var_(var))

    def visit_dataflow_var_(self, var: relax.DataflowVar) -> relax.Expr:
        return self._const(super().visit_dataflow_var_(var))

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op):
            return call
        operands = call.args[:1] if call.op.name in _SHAPE_OPERAND else call.args
        if call.op.name == "relax.concat" and len(call.args) == 1 and isinstance(call.args[0], relax.Tuple):
            operands = list(call.args[0].fields)
        if not operands or not all(isinstance(a, GenericConst) for a in operands):
            return call
        value = _evaluate(call, [_const_np(a) for a in operands])
        return call if value is None else _folded(value)


#: Operators whose second argument is their target shape (a ``ShapeExpr``, read from the call's type).
_SHAPE_OPERAND = ("relax.reshape", "relax.broadcast_to")


def _has_constant_call(func: relax.Function) -> bool:
    """Whether a call on constants only is left (for TVM's FoldConstant to build and run)."""
    found = False

    def visit(e: relax.Expr) -> None:
        nonlocal found
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.args:
            leaves = [f for a in e.args for f in (a.fields if isinstance(a, relax.Tuple) else [a])]
            found = found or (any(isinstance(a, GenericConst) for a in leaves)
                              and not any(isinstance(a, relax.Var | relax.Call) for a in leaves))

    relax.analysis.post_order_visit(func.body, visit)
    return found


@tvm.transform.module_pass(opt_level=0, name="tvm_npu.FoldConstants")
def fold_constants(mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Constant folding, mostly in numpy. TVM's ``FoldConstant`` compiles and runs every foldable
    call with llvm (seconds per model, most of the build's clean-up time); the data movement and
    float arithmetic that bias, batch-norm and layout conversion leave on constants is folded here
    with the same results, and TVM's pass runs afterwards only if a call on constants is left."""
    folded = {gv: relax.analysis.remove_all_unused(_NumpyFold().visit_expr(func))
              for gv, func in mod.functions.items()
              if isinstance(func, relax.Function) and not (func.attrs and "Codegen" in func.attrs)}
    changed = {gv: func for gv, func in folded.items() if not func.same_as(mod[gv])}
    if changed:
        mod = mod.clone()  # a pass leaves its input as it was
        for gv, func in changed.items():
            mod[gv] = func
    if any(isinstance(f, relax.Function) and _has_constant_call(f) for _, f in mod.functions.items()):
        mod = relax.transform.FoldConstant()(mod)
    return mod


def named(name: str, inner: tvm.transform.Pass) -> tvm.transform.Pass:
    """``inner`` under a stable name: ``tvm.transform.PassContext(disabled_pass=[name])`` skips it
    (TVM's ``Sequential`` checks every pass it runs against the current context)."""
    return tvm.transform.Sequential([inner], name=name)


#: The named rewrites of canonicalisation, in their first order (a name that runs twice is disabled twice).
CANONICALIZE_REWRITES: dict[str, str] = {
    "npu.canonicalize.reduce-of-stack": "the importer's Sum / Max / Min of a stack -> chains of binary ops",
    "npu.canonicalize.activations": "exporter forms of ReLU6, swish, hard sigmoid / swish -> one form each",
    "npu.canonicalize.pad": "the importer's constant Pad (a call_tir of topi's pad) -> nn.pad, folded into its reader",
    "npu.canonicalize.split": "each output of a split -> the strided slice it is (a view on the NPU)",
    "npu.canonicalize.resize": "resize2d -> a broadcast view (nearest integer upsampling), the resize operator "
                               "(linear, when cheaper) or two matrix products",
    "npu.canonicalize.conv-transpose": "conv2d_transpose -> interleaved phase convolutions (stride-squared)",
    "npu.canonicalize.qdq": "QDQ regions -> integer operators",
    "npu.canonicalize.fold-constants": "constant folding",
    "npu.canonicalize.dropout": "dropout removed (inference)",
    "npu.canonicalize.batch-norm": "inference batch-norm folded into the preceding conv2d",
    "npu.canonicalize.decompose": "TVM's DecomposeOpsForInference (other batch-norms as elementwise ops)",
    "npu.canonicalize.log-softmax": "log_softmax and log(softmax) -> max, subtract, exp, sum, log (a row program)",
    "npu.canonicalize.transformer-ops": "decomposed layer norms and GELUs -> one op each",
    "npu.canonicalize.dequantize-views": "lone dequantize / quantize moved across transposes (read in order)",
    "npu.canonicalize.lrn": "the importer's LRN (avg_pool3d, power, divide) -> an NPU pool and epilogue",
    "npu.canonicalize.spatial-mean": "a mean over H, W without keepdims -> a global average pool and a reshape",
    "npu.canonicalize.pool-chains": "max pools of one map with a smaller sibling read its result (SPP -> SPPF)",
    "npu.canonicalize.negative": "-x -> x * (-1) for a float x (bit for bit the same)",
    "npu.canonicalize.reciprocal-divide": "x / c -> x * (1 / c) for a float constant c",
    "npu.canonicalize.broadcast-operands": "a float elementwise outer product reads its data through broadcast_to",
    "npu.canonicalize.bindings": "TVM's CanonicalizeBindings and DeadCodeElimination",
}


def canonicalize_passes(target: NpuTarget | None = None) -> list[tvm.transform.Pass]:
    """The Relax clean-up that runs before partitioning, in order (QDQ first: constant folding
    would turn the 8-bit weights into fp32 ones). Every rewrite has a name of
    :data:`CANONICALIZE_REWRITES` that ``PassContext(disabled_pass=[...])`` turns it off with.
    ``target`` (default: the default target) decides by cost which form a linear resize takes."""
    return [
        named("npu.canonicalize.reduce-of-stack", simplify_reduce_of_stack),  # first: a quantized residual Sum
        # is an add for the QDQ rewrite
        named("npu.canonicalize.activations", canonical_activations),  # a Clip with min/max inputs is a clip for
        # the QDQ rewrite too
        named("npu.canonicalize.pad", pads_as_operators),  # before QDQ: a float pad on an 8-bit path
        named("npu.canonicalize.split", split_to_slices),  # before QDQ: an 8-bit slice is same-scale
        # before QDQ: it takes the 8-bit nearest form itself
        named("npu.canonicalize.resize", resize_forms(target or NpuTarget())),
        named("npu.canonicalize.conv-transpose", conv_transpose_as_convs),  # before QDQ: makes 8-bit phase convs
        named("npu.canonicalize.qdq", qdq_to_integer),
        named("npu.canonicalize.fold-constants", fold_constants),
        named("npu.canonicalize.dropout", remove_dropout),
        named("npu.canonicalize.batch-norm", fold_batch_norm),
        named("npu.canonicalize.decompose", relax.transform.DecomposeOpsForInference()),
        named("npu.canonicalize.reduce-of-stack", simplify_reduce_of_stack),
        named("npu.canonicalize.activations", canonical_activations),
        named("npu.canonicalize.log-softmax", log_softmax_rows),  # before transformer-ops: rows_last moves its axis
        named("npu.canonicalize.transformer-ops", transformer_ops),  # exporters' decomposed layer norms and
        # GELUs -> one op each
        named("npu.canonicalize.dequantize-views", dequantize_views),  # after QDQ (it writes the lone quantizes)
        # and transformer-ops (a softmax's transposes)
        named("npu.canonicalize.lrn", lrn_to_pool),  # the importer's LRN (avg_pool3d, power, divide) -> pool
        # over a view + epilogue
        named("npu.canonicalize.spatial-mean", spatial_mean_keepdims),  # after QDQ (which does the 8-bit form)
        named("npu.canonicalize.fold-constants", fold_constants),
        named("npu.canonicalize.pool-chains", pool_chains),  # after QDQ: 8-bit pools chain the same way
        named("npu.canonicalize.negative", negative_as_product),
        named("npu.canonicalize.reciprocal-divide", reciprocal_divide),  # after folding: a batch-norm's divisor
        # is then one constant
        named("npu.canonicalize.broadcast-operands", broadcast_operands),  # after transformer-ops (whole norms)
        named("npu.canonicalize.bindings", tvm.transform.Sequential([
            relax.transform.CanonicalizeBindings(), relax.transform.DeadCodeElimination()])),
    ]
