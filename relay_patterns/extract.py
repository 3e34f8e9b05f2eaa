"""Turn a matched Relax region into the typed :mod:`~tvm_npu.core.ops` spec.

One walker serves two callers so that they can never disagree:

* the pattern check functions (:func:`extract_from_context`), which build the
  spec to ask the planner whether the operator fits the NPU at all, and
* the codegen (:func:`extract_op`), which builds the spec it lowers from the
  composite function ``FuseOpsByPattern`` produced.

The walker starts at the region's result and follows the chain of elementwise
steps down to the main operator (conv2d, matmul, a pooling op), or, when the
chain ends at a tensor from outside the region, treats the last step as an
elementwise operator of its own. Anything the NPU cannot run raises
``ValueError`` with the reason, which the check functions turn into "stays on
the host".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import tvm
from tvm import relax
from tvm.relax.transform import PatternCheckContext
from tvm_npu.simulator import quant

from tvm_npu.config import DType
from tvm_npu.core.epilogue import BY_RELAX_OP, check_dtype, result_dtype
from tvm_npu.core.ops import (
    Broadcast,
    Conv2dSpec,
    ElementwiseSpec,
    EpiKind,
    Epilogue,
    MatmulSpec,
    OpSpec,
    PoolKind,
    PoolSpec,
    ResizeSpec,
    RowKind,
    RowwiseSpec,
    TensorRef,
    View,
)

from .qdivide import quotient_of
from .qlut import table_of
from .resize_taps import COORDINATES, linear_taps
from .symbolic import probe_dim

GenericConst = tvm.ir.expr.GenericConst

_SPATIAL_LAYOUTS = ("NCHW", "NHWC")
#: Non-channel axis letters of an elementwise tensor, by rank (the channel letter is inserted).
_OTHER_AXES = {1: "", 2: "N", 3: "NW", 4: "NHW"}


@dataclass(frozen=True)
class ExtractedOp:
    """A spec plus the constant tensors it names (already in the layout the spec states)."""

    spec: OpSpec
    constants: dict[str, np.ndarray]


@dataclass
class _Step:
    """One elementwise step of the chain, before its operand is turned into a TensorRef."""

    kind: EpiKind
    operand: relax.Expr | None = None
    lo: float = 0.0
    hi: float = 0.0
    ints: tuple[int, ...] = ()
    dtype: DType | None = None
    floats: tuple[float, ...] = ()


class _Region:
    """The matched chain: values bound inside it, DRAM names of what comes from outside."""

    def __init__(self, bindings: Mapping[relax.Var, relax.Expr], name_of: Callable[[relax.Var], str],
                 const_prefix: str) -> None:
        self._bindings = bindings
        self._name_of = name_of
        self._prefix = const_prefix
        self.constants: dict[str, np.ndarray] = {}

    def call(self, expr: relax.Expr) -> relax.Call | None:
        """The call ``expr`` stands for when it is computed inside the region, else None."""
        while isinstance(expr, relax.Var) and expr in self._bindings:
            expr = self._bindings[expr]
        if isinstance(expr, relax.Call):
            return expr
        if isinstance(expr, relax.Var | GenericConst):
            return None
        raise ValueError(f"unsupported expression in a matched region: {type(expr).__name__}")

    def resolve(self, expr: relax.Expr) -> relax.Expr:
        """The call bound to ``expr`` in the region, or ``expr`` itself."""
        call = self.call(expr)
        return expr if call is None else call

    def add_const(self, array: np.ndarray, layout: str = "") -> TensorRef:
        name = f"{self._prefix}_{len(self.constants)}"
        self.constants[name] = np.ascontiguousarray(array)
        return TensorRef(name, tuple(int(d) for d in array.shape), _dtype(array.dtype), layout)

    def ref(self, expr: relax.Expr, layout: str = "") -> TensorRef:
        """A DRAM tensor for an operand from outside the region (a constant becomes a named constant)."""
        if isinstance(expr, GenericConst):
            return self.add_const(const_array(expr), layout)
        if not isinstance(expr, relax.Var) or self.call(expr) is not None:
            raise ValueError(f"operand {expr} is not a tensor from outside the matched region")
        shape, dtype = tensor_type(expr)
        return TensorRef(self._name_of(expr), shape, dtype, layout)


def const_array(expr: relax.Expr) -> np.ndarray:
    """A read-only numpy view of a Relax constant's data (zero-copy through DLPack: a model's
    weights are not duplicated while they are planned and compiled)."""
    arr = np.from_dlpack(expr.value)
    arr.flags.writeable = False
    return arr


def _dtype(name: object) -> DType:
    return DType.from_str(str(name))


def static_shape(expr: relax.Expr) -> tuple[int, ...] | None:
    """The static shape of a tensor expression; None for a non-tensor or a symbolic shape.

    The rewrites of the canonicalisation passes use it to skip what they cannot prove static.
    """
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    try:
        return tuple(int(d) for d in ty.shape)
    except (TypeError, ValueError):
        return None


def tensor_type(expr: relax.Expr) -> tuple[tuple[int, ...], DType]:
    """Static shape and dtype of a tensor expression; ``ValueError`` for dynamic or non-tensor values."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType):
        raise ValueError(f"{expr} is not a tensor (type {ty})")
    if ty.shape is None or not isinstance(ty.shape, relax.ShapeExpr):
        raise ValueError(f"{expr} has an unknown shape; the NPU needs static shapes")
    dims = []
    for d in ty.shape.values:
        probed = None if isinstance(d, tvm.tirx.IntImm) else probe_dim(d)  # symbolic: its probe size, if probing
        if probed is None and not isinstance(d, tvm.tirx.IntImm):
            raise ValueError(f"{expr} has a symbolic shape {ty.shape}; the NPU needs static shapes")
        dims.append(int(d) if probed is None else probed)
    return tuple(dims), _dtype(ty.dtype)


def _ints(values: Sequence[object]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _scalar(expr: relax.Expr) -> float:
    """A clip bound (clip takes its bounds as FloatImm / IntImm arguments)."""
    if isinstance(expr, tvm.tirx.FloatImm | tvm.tirx.IntImm):
        return float(expr.value)
    raise ValueError(f"clip bound {expr} is not a constant")


def _exponent(expr: relax.Expr) -> float:
    """The exponent of ``power(x, p)``: one finite constant (a tensor exponent runs on the host)."""
    if isinstance(expr, GenericConst) and const_array(expr).size == 1:
        p = float(const_array(expr).reshape(()))
        if math.isfinite(p):
            return p
    raise ValueError(f"power with exponent {expr}; accepted: one finite constant scalar")


def _padding4(pad: Sequence[int]) -> tuple[int, int, int, int]:
    """Relax padding (1, 2 or 4 values) as (top, left, bottom, right)."""
    p = _ints(pad)
    if len(p) == 1:
        return (p[0],) * 4
    if len(p) == 2:
        return (p[0], p[1], p[0], p[1])
    if len(p) == 4:
        return (p[0], p[1], p[2], p[3])
    raise ValueError(f"padding {p} must have 1, 2 or 4 values")


def _spatial_layout(layout: object, out_layout: object, what: str) -> tuple[str, str]:
    """(input layout, output layout); they may differ (a folded layout transform)."""
    src = str(layout)
    dst = str(out_layout) if out_layout else src
    for lay in (src, dst):
        if lay not in _SPATIAL_LAYOUTS:
            raise ValueError(f"{what} layout {lay} is not supported; accepted: NCHW, NHWC")
    return src, dst


# ---- main operators -------------------------------------------------------------------------


def _conv2d(call: relax.Call, region: _Region, out_name: str) -> Conv2dSpec:
    attrs = call.attrs
    layout, out_layout = _spatial_layout(attrs.data_layout, attrs.out_layout, "conv2d")
    if layout != out_layout and int(attrs.groups) != 1:
        raise ValueError("a grouped conv2d that changes layout is not supported")
    data, weight = call.args
    padding, pad_value = _padding4(attrs.padding), 0
    pad = region.call(data)
    if pad is not None:
        data, padding, value = _fold_pad(pad, layout, padding)
        pad_value = int(value)
    kernel_layout = str(attrs.kernel_layout)
    if sorted(kernel_layout) != sorted("OIHW"):
        raise ValueError(f"conv2d kernel layout {kernel_layout} is not a permutation of OIHW")
    if isinstance(weight, GenericConst):
        w = const_array(weight)
        if w.ndim != 4:
            raise ValueError(f"conv2d weight has rank {w.ndim}, expected 4")
        wref = region.add_const(w.transpose([kernel_layout.index(a) for a in "OIHW"]), "OIHW")
    elif kernel_layout == "OIHW":
        wref = region.ref(weight, "OIHW")
    else:
        raise ValueError(f"conv2d with a non-constant weight needs kernel layout OIHW, not {kernel_layout}")
    dref = region.ref(data, layout)
    if len(dref.shape) != 4:
        raise ValueError(f"conv2d data has rank {len(dref.shape)}, expected 4")
    shape, dtype = tensor_type(call)
    return Conv2dSpec(
        "conv2d",
        TensorRef(out_name, shape, dtype, out_layout),
        data=dref,
        weight=wref,
        strides=_ints(attrs.strides),
        dilation=_ints(attrs.dilation),
        padding=padding,
        groups=int(attrs.groups),
        pad_value=pad_value,
    )


def _fold_pad(pad: relax.Call, layout: str, padding: tuple[int, int, int, int], integer: bool = True,
              what: str = "conv2d") -> tuple[relax.Expr, tuple, float]:
    """(data, padding, pad value) of ``conv2d(nn.pad(data))`` or ``max_pool2d(nn.pad(data))``: a constant pad
    of H and W joins the operator's own padding (an 8-bit input pads with its zero point); ``integer``: the
    value must be an integer (a convolution's padding value, a pool's of an integer type)."""
    if pad.op.name != "relax.nn.pad" or str(pad.attrs.pad_mode) != "constant":
        raise ValueError(f"{what} input {pad.op.name} cannot be folded into the {what}")
    width = _ints(pad.attrs.pad_width)
    per_axis = dict(zip(layout, zip(width[0::2], width[1::2], strict=True), strict=True))
    if per_axis["N"] != (0, 0) or per_axis["C"] != (0, 0):
        raise ValueError(f"a pad of the batch or channel axis does not fold into {what}")
    value = float(pad.attrs.pad_value)
    if not math.isfinite(value) or (integer and value != int(value)):
        raise ValueError(f"pad value {value} is not {'an integer' if integer else 'finite'}")
    top, left, bottom, right = padding
    (pt, pb), (pl, pr) = per_axis["H"], per_axis["W"]
    return pad.args[0], (top + pt, left + pl, bottom + pb, right + pr), value


def _matmul(call: relax.Call, region: _Region, out_name: str) -> MatmulSpec:
    a_expr, b_expr = call.args
    transpose_b = False
    inner = region.call(b_expr)
    if inner is not None:
        src = inner.args[0]
        if inner.op.name != "relax.permute_dims" or region.call(src) is not None:
            raise ValueError(f"matmul's second operand {inner.op.name} cannot be folded into the matmul")
        rank = len(tensor_type(src)[0])
        axes = inner.attrs.axes
        swap = (*range(rank - 2), rank - 1, rank - 2)
        if (axes is not None and _ints(axes) != swap) or (axes is None and rank != 2):
            raise ValueError("only a transpose of the last two axes folds into matmul as transpose_b")
        b_expr, transpose_b = src, True  # the B tile is loaded [n, k] and read transposed
    a, b = region.ref(a_expr), region.ref(b_expr)
    if len(a.shape) not in (2, 3, 4) or len(b.shape) not in (2, 3, 4):
        raise ValueError(f"matmul of ranks {len(a.shape)} x {len(b.shape)}; accepted: 2-D or batched 3-D / 4-D "
                         "(batch, heads)")
    if len(b.shape) > 2 and a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"matmul batch dims do not match: {a.shape} x {b.shape}")
    shape, dtype = tensor_type(call)
    return MatmulSpec("matmul", TensorRef(out_name, shape, dtype), a=a, b=b, transpose_b=transpose_b)


def _pool2d(call: relax.Call, region: _Region, out_name: str) -> PoolSpec:
    attrs = call.attrs
    kind = PoolKind.MAX if call.op.name == "relax.nn.max_pool2d" else PoolKind.AVG
    layout, out_layout = _spatial_layout(attrs.layout, attrs.out_layout, call.op.name)
    if attrs.ceil_mode:
        raise ValueError("pooling with ceil_mode=True is not supported")
    if _ints(attrs.dilation) != (1, 1):
        raise ValueError(f"pooling with dilation {_ints(attrs.dilation)} is not supported")
    shape, dtype = tensor_type(call)
    data, padding, pad_value = call.args[0], _padding4(attrs.padding), None
    pad = region.call(data)
    if pad is not None:  # max_pool2d_pad: the pool's own padding (ignored by the max) cannot join the pad's
        if kind != PoolKind.MAX or any(padding):
            raise ValueError("a pad folds only into a max pool without padding of its own")
        data, padding, pad_value = _fold_pad(pad, layout, padding, integer=not dtype.is_float, what="max pool")
    return PoolSpec(
        call.op.name.rsplit(".", 1)[-1],
        TensorRef(out_name, shape, dtype, out_layout),
        data=region.ref(data, layout),
        kind=kind,
        kernel=_ints(attrs.pool_size),
        strides=_ints(attrs.strides),
        padding=padding,
        count_include_pad=kind == PoolKind.AVG and bool(attrs.count_include_pad),
        pad_value=pad_value,
    )


def _global_avg(call: relax.Call, region: _Region, out_name: str, layout: str,
                out_layout: str | None = None) -> PoolSpec:
    data = region.ref(call.args[0], layout)
    if len(data.shape) != 4:
        raise ValueError(f"global average pool of a rank-{len(data.shape)} tensor; expected 4")
    shape, dtype = tensor_type(call)
    return PoolSpec(
        call.op.name.rsplit(".", 1)[-1],
        TensorRef(out_name, shape, dtype, out_layout or layout),
        data=data,
        kind=PoolKind.AVG,
        kernel=(data.dim("H"), data.dim("W")),
    )


def _adaptive_avg_pool2d(call: relax.Call, region: _Region, out_name: str) -> PoolSpec:
    attrs = call.attrs
    layout, out_layout = _spatial_layout(attrs.layout, attrs.out_layout, "adaptive_avg_pool2d")
    if attrs.output_size is None or _ints(attrs.output_size) not in ((1,), (1, 1)):
        raise ValueError(f"adaptive_avg_pool2d to {attrs.output_size}; only a 1x1 output (global pool) is supported")
    return _global_avg(call, region, out_name, layout, out_layout)


def _mean(call: relax.Call, region: _Region, out_name: str) -> PoolSpec:
    rank = len(tensor_type(call.args[0])[0])
    axes = call.attrs.axis
    if rank != 4 or axes is None or not call.attrs.keepdims:
        raise ValueError("mean is supported only over the two spatial axes of a 4-D tensor with keepdims=True")
    spatial = sorted(int(a) % rank for a in axes)
    layouts = {(2, 3): "NCHW", (1, 2): "NHWC"}
    if tuple(spatial) not in layouts:
        raise ValueError(f"mean over axes {spatial} is not a global average pool")
    return _global_avg(call, region, out_name, layouts[tuple(spatial)])


def _rowwise_data(call: relax.Call, region: _Region, axes: Sequence[int]) -> TensorRef:
    """The input of a softmax / layer norm, which the NPU normalises along the last axis only (float32)."""
    data = region.ref(call.args[0])
    rank = len(data.shape)
    if tuple(sorted(int(a) % rank for a in axes)) != (rank - 1,):
        raise ValueError(f"{call.op.name} over axes {list(axes)} of a rank-{rank} tensor; the NPU normalises "
                         "along the last axis only")
    if data.dtype != DType.FP32:
        raise ValueError(f"{call.op.name} on {data.dtype.np.name} is not supported; accepted: float32")
    if data.shape[-1] < 2:
        raise ValueError(f"{call.op.name} over rows of one element stays on the host (its reductions are trivial)")
    return data


def _softmax(call: relax.Call, region: _Region, out_name: str) -> RowwiseSpec:
    data = _rowwise_data(call, region, [int(call.attrs.axis)])
    return RowwiseSpec("softmax", TensorRef(out_name, data.shape, data.dtype), data=data, kind=RowKind.SOFTMAX)


def _layer_norm(call: relax.Call, region: _Region, out_name: str) -> RowwiseSpec:
    attrs = call.attrs
    data = _rowwise_data(call, region, _ints(attrs.axes))
    params = []
    for expr, used in ((call.args[1], attrs.scale), (call.args[2], attrs.center)):
        ref = region.ref(expr) if used else None
        if ref is not None and ref.shape != (data.shape[-1],):
            raise ValueError(f"layer_norm parameter of shape {ref.shape}; expected ({data.shape[-1]},)")
        params.append(ref)
    return RowwiseSpec("layer_norm", TensorRef(out_name, data.shape, data.dtype), data=data,
                       kind=RowKind.LAYER_NORM, gamma=params[0], beta=params[1], eps=float(attrs.epsilon))


def _resize2d(call: relax.Call, region: _Region, out_name: str) -> ResizeSpec:
    """A linear float32 NCHW resize (``npu.canonicalize.resize`` leaves one here when this operator beats the
    matrix products): its taps per output row and column, fixed now."""
    a = call.attrs
    coord = str(a.coordinate_transformation_mode)
    shape, dtype = tensor_type(call)
    if str(a.method) != "linear" or str(a.layout) != "NCHW" or dtype != DType.FP32 or coord not in COORDINATES:
        raise ValueError(f"a {a.method} {dtype.np.name} {a.layout} resize ({coord}) is not the resize operator's; "
                         f"it takes linear float32 NCHW with {', '.join(COORDINATES)}")
    data = region.ref(call.args[0], "NCHW")
    return ResizeSpec("resize", TensorRef(out_name, shape, dtype, "NCHW"), data=data,
                      rows=linear_taps(coord, data.shape[2], shape[2]),
                      cols=linear_taps(coord, data.shape[3], shape[3]))


_MAIN_OPS: dict[str, Callable[[relax.Call, _Region, str], OpSpec]] = {
    "relax.image.resize2d": _resize2d,
    "relax.nn.softmax": _softmax,
    "relax.nn.layer_norm": _layer_norm,
    "relax.nn.conv2d": _conv2d,
    "relax.matmul": _matmul,
    "relax.nn.max_pool2d": _pool2d,
    "relax.nn.avg_pool2d": _pool2d,
    "relax.nn.adaptive_avg_pool2d": _adaptive_avg_pool2d,
    "relax.mean": _mean,
}


# ---- the elementwise chain --------------------------------------------------------------------


def _broadcast_axis(const_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> int | None:
    """The one axis a constant varies along when broadcast to ``out_shape`` (None: a scalar).

    Raises ``ValueError`` when it varies along several axes or does not broadcast.
    """
    if len(const_shape) > len(out_shape):
        raise ValueError(f"constant of shape {const_shape} does not broadcast to {out_shape}")
    padded = (1,) * (len(out_shape) - len(const_shape)) + const_shape
    varying = [i for i, d in enumerate(padded) if d != 1]
    if not varying:
        return None
    if len(varying) == 1 and padded[varying[0]] == out_shape[varying[0]]:
        return varying[0]
    raise ValueError(f"constant of shape {const_shape} broadcasts along more than one axis of {out_shape}")


def _materialised(const_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> bool:
    """A constant that broadcasts along several axes (Swin's relative position bias and attention mask
    over the windows): stored broadcast to the output's shape and added as a full operand."""
    try:
        return np.broadcast_shapes(const_shape, out_shape) == out_shape and len(
            [d for d in const_shape if d != 1]) > 1
    except ValueError:
        return False


def _elementwise_axis(steps: Sequence[_Step], out_shape: tuple[int, ...]) -> int:
    """The channel axis of a standalone elementwise op: where its broadcast constant varies."""
    axes = set()
    for step in steps:
        if isinstance(step.operand, GenericConst) and step.kind != EpiKind.LUT:  # a table runs along no axis
            shape = tuple(const_array(step.operand).shape)
            if shape != out_shape and not _materialised(shape, out_shape):
                axes.add(_broadcast_axis(shape, out_shape))
        elif step.operand is not None and step.kind in _CHANNEL_TENSOR_KINDS:
            shape = tensor_type(step.operand)[0]
            if shape != out_shape:
                axes.add(_tensor_axis(shape, out_shape))
    axes.discard(None)
    if len(axes) > 1:
        raise ValueError(f"constants broadcast along different axes {sorted(axes)}")
    return axes.pop() if axes else min(1, len(out_shape) - 1)


def _channel_layout(rank: int, axis: int) -> str:
    """A layout string with 'C' at ``axis`` (``"NCHW"``, ``"NHWC"``, ``"NC"`` ...)."""
    if rank not in _OTHER_AXES:
        raise ValueError(f"elementwise op on a rank-{rank} tensor; accepted ranks: 1-4")
    other = _OTHER_AXES[rank]
    return other[:axis] + "C" + other[axis:]


def _epilogue(step: _Step, out: TensorRef, axis: int, region: _Region) -> Epilogue:
    """Turn a step's operand into a DRAM tensor: per-channel vector or a tensor of the output's shape."""
    if step.operand is None:
        return Epilogue(step.kind, lo=step.lo, hi=step.hi, dtype=step.dtype, floats=step.floats)
    if step.kind == EpiKind.LUT:  # the whole table, read at the value
        return Epilogue(step.kind, region.add_const(const_array(step.operand)), Broadcast.TABLE, dtype=step.dtype)
    if step.kind == EpiKind.REQUANT:
        arr = const_array(step.operand)
        if tuple(arr.shape) == out.shape:  # one multiplier per output element (an average's border counts)
            return Epilogue(step.kind, region.add_const(arr, out.layout), ints=step.ints, dtype=step.dtype)
        if _broadcast_axis(tuple(arr.shape), out.shape) not in (None, axis):
            raise ValueError(f"requantisation multipliers of shape {arr.shape} are not per channel")
        vec = np.broadcast_to(arr.reshape(-1), (out.shape[axis],)).astype(np.float32)
        return Epilogue(step.kind, region.add_const(vec), Broadcast.CHANNEL, ints=step.ints, dtype=step.dtype)
    if isinstance(step.operand, GenericConst):
        arr, params = const_array(step.operand), {"ints": step.ints, "dtype": step.dtype, "floats": step.floats}
        try:
            const_axis = _broadcast_axis(tuple(arr.shape), out.shape)
        except ValueError:
            const_axis = -1
        if const_axis is None:
            vec = np.full(out.shape[axis], arr.reshape(()), dtype=arr.dtype)
        elif const_axis == axis:
            vec = arr.reshape(-1)
        elif tuple(arr.shape) == out.shape:
            return Epilogue(step.kind, region.add_const(arr, out.layout), **params)
        elif _materialised(tuple(arr.shape), out.shape):
            full = np.ascontiguousarray(np.broadcast_to(arr, out.shape))
            return Epilogue(step.kind, region.add_const(full, out.layout), **params)
        else:
            raise ValueError(f"constant of shape {arr.shape} does not broadcast along the channel axis {axis} "
                             f"of the output {out.shape}")
        kind = EpiKind.BIAS if step.kind == EpiKind.ADD else step.kind
        return Epilogue(kind, region.add_const(vec), Broadcast.CHANNEL, **params)
    ref = region.ref(step.operand, out.layout)
    if ref.shape != out.shape and step.kind in _CHANNEL_TENSOR_KINDS and _tensor_axis(ref.shape, out.shape) == axis:
        # one value per channel computed on the NPU (a squeeze-and-excitation scale): read as a vector
        chan = out.shape[axis]
        vec = TensorRef(f"{ref.name}_chan", (chan,), ref.dtype, view=View(ref.name, 0, (((chan, 1),),)))
        return Epilogue(EpiKind.BIAS if step.kind == EpiKind.ADD else step.kind, vec, Broadcast.CHANNEL,
                        ints=step.ints, dtype=step.dtype, floats=step.floats)
    if ref.shape != out.shape:
        raise ValueError(f"non-constant operand of shape {ref.shape} must have the output's shape {out.shape} "
                         f"or one value per channel")
    return Epilogue(step.kind, ref, ints=step.ints, dtype=step.dtype, floats=step.floats)


#: Steps whose operand may be a per-channel tensor computed in the partition (not only a constant): a
#: squeeze-and-excitation scale, an 8-bit ``[N, C, 1, 1]`` addend (QADD), the other side of an 8-bit
#: maximum / minimum / difference (:mod:`.qbinary`).
_CHANNEL_TENSOR_KINDS = frozenset({EpiKind.MUL, EpiKind.ADD, EpiKind.QADD, EpiKind.QMUL, EpiKind.MAX, EpiKind.MIN,
                                   EpiKind.SUB})


def _tensor_axis(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> int | None:
    """The axis a non-constant operand of ``shape`` varies along when it is one value per channel
    of ``out_shape`` (same rank, a single non-unit axis of the output's extent), else None."""
    varying = [i for i, d in enumerate(shape) if d != 1]
    if len(shape) != len(out_shape) or len(varying) != 1 or shape[varying[0]] != out_shape[varying[0]]:
        return None
    return varying[0]


def _walk_chain(root: relax.Call, region: _Region) -> tuple[relax.Call | None, relax.Expr | None, list[_Step]]:
    """Follow elementwise steps from the root down; returns (main op or None, elementwise data, steps)."""
    steps: list[_Step] = []
    call = root
    while True:
        op = call.op.name
        kind = BY_RELAX_OP.get(op)
        if op == "relax.quantize" and (qmul := _qmul_step(call, region)) is not None:
            steps.append(qmul[0])
            return None, qmul[1], steps[::-1]
        if op == "relax.quantize" and _is_rescaled_add(call, region):
            step, data = _qadd_step(call, region)
            steps.append(step)
            return None, data, steps[::-1]
        if op == "relax.quantize" and (requant := _requant_step(call, region)) is not None:
            step, call = requant
            steps.append(step)
        elif (looked := table_of(call, region.resolve)) is not None:  # an 8-bit table (.qlut)
            x, table = looked
            steps.append(_Step(EpiKind.LUT, call.args[0], dtype=_dtype(table.dtype)))
            if region.call(x) is None:
                return None, x, steps[::-1]
            call = region.call(x)
        elif (unary := _unary_steps(call, op, kind, region)) is not None:
            new, x = unary
            steps += new
            inner = region.call(x)
            if inner is None:
                return None, x, steps[::-1]
            call = inner
        elif kind is not None:
            lhs, rhs = call.args
            lhs_call, rhs_call = region.call(lhs), region.call(rhs)
            if lhs_call is not None and rhs_call is not None:
                raise ValueError(f"{op} of two values computed in the same region is not an epilogue")
            if lhs_call is None and rhs_call is None:
                data, operand = _elementwise_operands(op, lhs, rhs)
                steps.append(_Step(kind, operand))
                return None, data, steps[::-1]
            if lhs_call is None and op == "relax.subtract":
                raise ValueError("x - op(...) is not an epilogue (only op(...) - x is)")
            steps.append(_Step(kind, lhs if lhs_call is None else rhs))
            call = lhs_call if lhs_call is not None else rhs_call
        elif op in _MAIN_OPS:
            return call, None, steps[::-1]
        else:
            raise ValueError(f"operator {op} is not supported by the NPU")


def _unary_steps(call: relax.Call, op: str, kind: EpiKind | None,
                 region: _Region) -> tuple[list[_Step], relax.Expr] | None:
    """The steps of a call that reads one value of the chain (a float quantize, a cast, a hard activation,
    a unary operator, a constant-first subtract or divide), in the walker's (reversed) order, and that
    value; None for any other call (a binary operator, a main operator)."""
    if op == "relax.quantize":
        return _float_quantize_steps(call), call.args[0]
    if (quotient := quotient_of(call, region.resolve)) is not None:  # a quantize's exact y / s (.qdivide)
        y, r = quotient
        return [_Step(EpiKind.SCALE, floats=(r, 0.0))], y
    if op == "relax.astype":
        if not _dtype(call.attrs.dtype).is_float:
            raise ValueError(f"astype to {call.attrs.dtype} truncates; the NPU's cast rounds (accepted: to a "
                             "float type)")
        return [_Step(EpiKind.CAST, dtype=_dtype(call.attrs.dtype))], call.args[0]
    if (hard := _hard_activation(call, region)) is not None:
        step, x = hard
        return [step], x
    if op == "relax.sqrt":  # VPOW by 0.5: float64 power rounded once, the correctly rounded root llvm computes
        return [_Step(EpiKind.POW, floats=(0.5,))], call.args[0]
    if kind is not None and not kind.binary:
        lo, hi = (_scalar(call.args[1]), _scalar(call.args[2])) if kind == EpiKind.CLIP else (0.0, 0.0)
        floats = (_exponent(call.args[1]),) if kind == EpiKind.POW else ()
        return [_Step(kind, lo=lo, hi=hi, floats=floats)], call.args[0]
    if (reverse := _constant_first(op, call)) is not None:
        return reverse, call.args[1]  # c - x, c / x: steps on x (:func:`_constant_first`)
    return None


def _constant_first(op: str, call: relax.Call) -> list[_Step] | None:
    """``c - x`` and ``c / x`` with a float constant ``c`` (any shape that broadcasts: a scalar, one value per
    channel, ...) as steps on ``x``, in the walker's (reversed) order; None for any other call.

    ``c - x`` is ``(-1) * x + c``: the negation is exact and IEEE defines ``c - x`` as ``c + (-x)``, so the
    result is bit for bit the same. ``c / x`` is ``c * (1 / x)``: ``VRECIP`` rounds ``1 / x`` once, so the
    product is within two roundings of the quotient (exact for ``c = 1``). ``c + x``, ``c * x``, ``max(c, x)``
    and ``min(c, x)`` commute and need nothing of this (:func:`_elementwise_operands`)."""
    if op not in ("relax.subtract", "relax.divide") or len(call.args) != 2:
        return None
    c, x = call.args
    if not isinstance(c, GenericConst) or isinstance(x, GenericConst) or not str(c.ty.dtype).startswith("float"):
        return None
    if op == "relax.subtract":
        minus_one = relax.const(np.array(-1, dtype=str(c.ty.dtype)))
        return [_Step(EpiKind.ADD, c), _Step(EpiKind.MUL, minus_one)]
    return [_Step(EpiKind.MUL, c), _Step(EpiKind.RECIP)]


def _hard_sigmoid_of(call: relax.Call | None, region: _Region) -> tuple[float, float, relax.Expr] | None:
    """(alpha, beta, x) when ``call`` is ``clip(x * alpha + beta, 0, 1)`` computed in the region with
    scalar constants (the canonical hard sigmoid, :mod:`.canonicalize`), else None."""
    if call is None or call.op.name != "relax.clip" or (_scalar(call.args[1]), _scalar(call.args[2])) != (0.0, 1.0):
        return None
    add = region.call(call.args[0])
    if add is None or add.op.name != "relax.add" or not isinstance(add.args[1], GenericConst):
        return None
    mul = region.call(add.args[0])
    if mul is None or mul.op.name != "relax.multiply" or not isinstance(mul.args[1], GenericConst):
        return None
    alpha, beta = const_array(mul.args[1]), const_array(add.args[1])
    if alpha.size != 1 or beta.size != 1:
        return None
    return float(alpha.reshape(())), float(beta.reshape(())), mul.args[0]


def _hard_activation(call: relax.Call, region: _Region) -> tuple[_Step, relax.Expr] | None:
    """A hard sigmoid, or a hard swish ``x * hard_sigmoid(x)``, as one step and its input ``x``."""
    if call.op.name == "relax.multiply":
        x, h = call.args
        hard = _hard_sigmoid_of(region.call(h), region)
        if hard is None or not hard[2].same_as(x):
            return None
        return _Step(EpiKind.HSWISH, floats=hard[:2]), x
    hard = _hard_sigmoid_of(call, region)
    return None if hard is None else (_Step(EpiKind.HSIGMOID, floats=hard[:2]), hard[2])


def _requant_step(call: relax.Call, region: _Region) -> tuple[_Step, relax.Call] | None:
    """``quantize(astype(acc, float32) * m, scale=1, zero_point)`` with ``acc`` an integer computed in the
    region (the requantisation form of :mod:`.quantized`) -> the REQUANT step and the call computing
    ``acc``; None for any other quantize."""
    dtype, zero_point = _unit_quantize(call)
    mul = region.call(call.args[0])
    if mul is None or mul.op.name != "relax.multiply" or not isinstance(mul.args[1], GenericConst):
        return None
    cast = region.call(mul.args[0])
    if cast is None or cast.op.name != "relax.astype" or str(cast.attrs.dtype) != "float32":
        return None
    inner = region.call(cast.args[0])
    if inner is None or tensor_type(cast.args[0])[1] not in (DType.INT32, DType.INT64):
        return None
    lo, hi = quant.qrange(dtype)
    return _Step(EpiKind.REQUANT, mul.args[1], ints=(zero_point, lo, hi), dtype=dtype), inner


def _float_quantize_steps(call: relax.Call) -> list[_Step]:
    """``quantize(y, scale=1, zero_point)`` of a float32 ``y`` (a quantize whose scale :mod:`.quantized`
    folded into a multiply) -> ``clip(round_half_even(y) + zero_point)`` as two steps: a cast to int32
    (rounds half to even, saturates) and a requantisation by 1 (adds the zero point exactly, clamps),
    which is what llvm computes for the same quantize; in the walker's (reversed) order."""
    dtype, zero_point = _unit_quantize(call)
    if tensor_type(call.args[0])[1] != DType.FP32:
        raise ValueError(f"quantize of {call.args[0].ty.dtype}; accepted: float32")
    lo, hi = quant.qrange(dtype)
    unit = relax.const(np.float32(1.0))
    return [_Step(EpiKind.REQUANT, unit, ints=(zero_point, lo, hi), dtype=dtype),
            _Step(EpiKind.CAST, dtype=DType.INT32)]


def _unit_quantize(call: relax.Call) -> tuple[DType, int]:
    """(type, zero point) of ``quantize(x, scale=1, zero_point)``, the last op of the integer forms."""
    _, scale, zero_point = call.args
    if not isinstance(scale, GenericConst) or const_array(scale).size != 1:
        raise ValueError("quantize with a per-axis or non-constant scale; accepted: one constant scale of 1")
    if float(const_array(scale).reshape(())) != 1.0:
        raise ValueError(f"quantize by scale {np.float32(const_array(scale).reshape(()))!s}: the NPU multiplies by "
                         "1 / scale, and the integer rewrite turns a quantize by a positive normal float32 scale into "
                         "that exact multiply (relay_patterns/qdivide.py) and a quantize by 1; accepted: scale 1")
    dtype = _dtype(call.ty.dtype)
    if not dtype.is_quantized or not isinstance(zero_point, GenericConst) or const_array(zero_point).size != 1:
        raise ValueError(f"requantisation to {dtype.np.name}; accepted: int8, uint8, int16, uint16 with one zero "
                         "point")
    return dtype, int(const_array(zero_point))


def _is_rescaled_add(call: relax.Call, region: _Region) -> bool:
    inner = region.call(call.args[0])
    return inner is not None and inner.op.name == "relax.add"


def _scaled(expr: relax.Expr, region: _Region) -> tuple[relax.Expr, float]:
    """(x, scale) of ``astype(x, float32) * scale`` with x from outside the region."""
    mul = region.call(expr)
    if mul is None or mul.op.name != "relax.multiply" or not isinstance(mul.args[1], GenericConst):
        raise ValueError("a rescaled add needs astype(x) * scale terms")
    cast = region.call(mul.args[0])
    if cast is None or cast.op.name != "relax.astype" or region.call(cast.args[0]) is not None:
        raise ValueError("a rescaled add scales an 8-bit tensor from outside the region")
    return cast.args[0], float(const_array(mul.args[1]))


def _qadd_step(call: relax.Call, region: _Region) -> tuple[_Step, relax.Expr]:
    """``quantize((astype(a) * ra + offset) + astype(b) * rb, 1, 0)`` (:mod:`.quantized`) ->
    the QADD step with ``b`` as its operand, and ``a``."""
    dtype, zero_point = _unit_quantize(call)
    total = region.call(call.args[0])
    partial = region.call(total.args[0])
    if partial is None or partial.op.name != "relax.add" or zero_point != 0:
        raise ValueError("quantize of a sum that is not a rescaled add")
    term, offset = partial.args
    if isinstance(term, GenericConst):
        term, offset = offset, term
    if not isinstance(offset, GenericConst):
        raise ValueError("a rescaled add needs one constant offset")
    a, scale_a = _scaled(term, region)
    b, scale_b = _scaled(total.args[1], region)
    lo, hi = quant.qrange(dtype)
    floats = (scale_a, scale_b, float(const_array(offset)))
    return _Step(EpiKind.QADD, b, ints=(lo, hi), dtype=dtype, floats=floats), a


def _shifted_8bit(expr: relax.Expr, region: _Region) -> tuple[relax.Expr, int] | None:
    """(x, z) of ``astype(x, float32) - z`` (or ``astype(x, float32)``, z = 0) with an 8-bit x from outside the
    region; None for anything else."""
    call = region.call(expr)
    z = 0.0
    if call is not None and call.op.name == "relax.subtract" and isinstance(call.args[1], GenericConst):
        z = float(const_array(call.args[1]))
        call = region.call(call.args[0])
    if call is None or call.op.name != "relax.astype" or str(call.attrs.dtype) != "float32" or not z.is_integer():
        return None
    x = call.args[0]
    if region.call(x) is not None or not _dtype(x.ty.dtype).is_quantized:
        return None
    return x, int(z)


def _integer_constant(expr: relax.Expr, dtype: DType) -> tuple[relax.Expr, int] | None:
    """(``c + z`` as a constant of 8-bit ``dtype``, ``z``) for a float32 constant ``c`` of integers spanning at
    most the type's range (a constant factor ``b - z_b`` of a product, folded): ``c`` is ``(c + z) - z``
    exactly; None for any other expression."""
    if not isinstance(expr, GenericConst):
        return None
    arr = const_array(expr)
    lo, hi = quant.qrange(dtype)
    if arr.dtype != np.float32 or arr.size == 0 or not np.all(arr == np.rint(arr)) or arr.max() - arr.min() > hi - lo:
        return None
    z = int(lo - arr.min()) if arr.min() < lo else int(hi - arr.max()) if arr.max() > hi else 0
    return relax.const((arr + z).astype(dtype.np)), z


def _qmul_step(call: relax.Call, region: _Region) -> tuple[_Step, relax.Expr] | None:
    """``quantize((astype(a) - z_a) * (astype(b) - z_b) * ratio + z_y, 1, 0)`` (:mod:`.qbinary`, QLinearMul) ->
    the QMUL step with ``b`` as its operand, and ``a``; None for any other quantize."""
    total = region.call(call.args[0])
    if total is None or total.op.name != "relax.add" or not isinstance(total.args[1], GenericConst):
        return None
    scaled = region.call(total.args[0])
    if scaled is None or scaled.op.name != "relax.multiply" or not isinstance(scaled.args[1], GenericConst):
        return None
    product = region.call(scaled.args[0])
    sides = [] if product is None or product.op.name != "relax.multiply" else [
        _shifted_8bit(arg, region) for arg in product.args]
    if len(sides) == 2 and sides[0] is not None and sides[1] is None:  # a constant second factor
        sides[1] = _integer_constant(product.args[1], _dtype(sides[0][0].ty.dtype))
    zero_y = float(const_array(total.args[1]))
    if len(sides) != 2 or None in sides or not zero_y.is_integer() or _unit_quantize(call)[1] != 0:
        return None
    (a, zero_a), (b, zero_b) = sides
    dtype = _unit_quantize(call)[0]
    lo, hi = quant.qrange(dtype)
    ints = (zero_a, zero_b, int(zero_y), lo, hi)
    return _Step(EpiKind.QMUL, b, ints=ints, dtype=dtype, floats=(float(const_array(scaled.args[1])),)), a


#: Steps whose output clamp (their last two ints) absorbs an integer clip right after them.
_CLAMPED = (EpiKind.REQUANT, EpiKind.QADD, EpiKind.QMUL)


def _merge_clamps(steps: list[_Step]) -> list[_Step]:
    """An integer clip right after a requantisation narrows its output clamp (one instruction)."""
    out: list[_Step] = []
    for step in steps:
        prev = out[-1] if out else None
        if step.kind == EpiKind.CLIP and prev is not None and prev.kind in _CLAMPED:
            *head, lo, hi = prev.ints
            if step.lo != int(step.lo) or step.hi != int(step.hi):
                raise ValueError(f"clip bounds {step.lo}, {step.hi} of an 8-bit value are not integers")
            lo, hi = max(lo, int(step.lo)), min(hi, int(step.hi))
            if lo > hi:
                raise ValueError("the clip leaves an empty range")
            prev.ints = (*head, lo, hi)
            continue
        out.append(step)
    return out


_COMMUTATIVE = ("relax.multiply", "relax.add", "relax.maximum", "relax.minimum")


def _elementwise_operands(op: str, lhs: relax.Expr, rhs: relax.Expr) -> tuple[relax.Expr, relax.Expr]:
    """(data, operand) of a standalone binary op; the constant, if any, is the operand."""
    if isinstance(lhs, GenericConst) and isinstance(rhs, GenericConst):
        raise ValueError(f"{op} of two constants should have been folded")
    if isinstance(lhs, GenericConst):
        if op == "relax.subtract":
            raise ValueError("constant - tensor is not supported (only tensor - constant)")
        return rhs, lhs
    if op in _COMMUTATIVE and isinstance(lhs, relax.Var) and isinstance(rhs, relax.Var) and \
            math.prod(tensor_type(lhs)[0]) < math.prod(tensor_type(rhs)[0]):
        return rhs, lhs  # scale * x: the broadcast operand (a per-channel tensor) is the operand
    return lhs, rhs


def check_padding(spec: OpSpec) -> None:
    """The NPU pads inside a tile: padding may not exceed the (dilated) window it pads."""
    if isinstance(spec, Conv2dSpec):
        limits = [(k - 1) * d for k, d in zip(spec.kernel, spec.dilation, strict=True)]
    elif isinstance(spec, PoolSpec):
        limits = [k - 1 for k in spec.kernel]
    else:
        return
    top, left, bottom, right = spec.padding
    if max(top, bottom) > limits[0] or max(left, right) > limits[1]:
        raise ValueError(f"{spec.name} padding {spec.padding} is wider than its window allows "
                         f"(at most {limits[0]} rows, {limits[1]} columns); it stays on the host")


def _check_dtypes(spec: OpSpec, acc: DType) -> None:
    """What the NPU computes in: float32 or float16 (with a float32 accumulator for conv2d /
    matmul, cast to float16 by the epilogue); 8-bit conv2d / matmul (int8 or uint8 activations,
    int8 weights) with an int32 accumulator, 16-bit ones (int16 or uint16 activations, int8 weights)
    with an int64 accumulator, requantised to 8 or 16 bits or not; 8- and 16-bit max pooling;
    8-bit rescaled adds; 8-bit data cast to float32 (a dequantization).
    ``acc`` is the main operator's result type (the epilogue may change it)."""
    if isinstance(spec, Conv2dSpec | MatmulSpec):
        data, weight = (spec.data, spec.weight) if isinstance(spec, Conv2dSpec) else (spec.a, spec.b)
        ok = (data.dtype, weight.dtype, acc) in ((DType.FP32, DType.FP32, DType.FP32),
                                                  (DType.FP16, DType.FP16, DType.FP32),
                                                  (DType.INT8, DType.INT8, DType.INT32),
                                                  (DType.UINT8, DType.INT8, DType.INT32),
                                                  (DType.INT16, DType.INT8, DType.INT64),
                                                  (DType.UINT16, DType.INT8, DType.INT64))
        if not ok:
            raise ValueError(f"{spec.name} with {data.dtype.np.name} x {weight.dtype.np.name} operands and "
                             f"{acc.np.name} result is not supported; accepted: float32 x float32 -> float32, "
                             "float16 x float16 -> float32, int8/uint8 x int8 -> int32, "
                             "int16/uint16 x int8 -> int64")
        if isinstance(spec, Conv2dSpec) and spec.pad_value and not data.dtype.is_quantized:
            raise ValueError(f"conv2d padding with {spec.pad_value} is supported for 8-bit inputs only")
    elif isinstance(spec, PoolSpec) and spec.kind == PoolKind.MAX and spec.data.dtype.is_quantized:
        if acc != spec.data.dtype:
            raise ValueError("max pooling must keep its input type")
    elif isinstance(spec, ElementwiseSpec) and spec.data.dtype.is_quantized and spec.epilogue \
            and spec.epilogue[0].kind in (EpiKind.QADD, EpiKind.QMUL, EpiKind.CAST, EpiKind.LUT):
        pass  # an 8-bit residual add, a dequantization or a table (check_dtype below checks operand / types)
    elif not spec.data.dtype.is_float or acc != spec.data.dtype:
        raise ValueError(f"{spec.name} on {spec.data.dtype.np.name} is not supported; accepted: float32, float16 "
                         "(and int8/uint8 for max pooling)")
    value = acc
    for step in spec.epilogue:
        check_dtype(step, value)
        value = result_dtype(step, value)
    if value != spec.out.dtype:
        raise ValueError(f"the epilogue leaves {value.np.name}, the output is {spec.out.dtype.np.name}")


def _extract(root: relax.Expr, region: _Region, out_name: str) -> ExtractedOp:
    call = region.call(root)
    if call is None:
        raise ValueError("the matched region computes nothing")
    out_shape, out_dtype = tensor_type(root)
    main, data, steps = _walk_chain(call, region)
    if main is None:
        axis = _elementwise_axis(steps, out_shape)
        layout = _channel_layout(len(out_shape), axis)
        dref = region.ref(data, layout)
        if dref.shape != out_shape:
            raise ValueError(f"elementwise input {dref.shape} is broadcast to {out_shape}")
        name = call.op.name.rsplit(".", 1)[-1]
        spec: OpSpec = ElementwiseSpec(name, TensorRef(out_name, out_shape, dref.dtype, layout), data=dref)
    else:
        spec = _MAIN_OPS[main.op.name](main, region, out_name)
        if spec.out.shape != out_shape:
            raise ValueError(f"the epilogue changes the output from {spec.out.shape} to {out_shape}")
        axis = len(out_shape) - 1 if isinstance(spec, MatmulSpec | RowwiseSpec) else spec.out.layout.index("C")
    acc = spec.out.dtype
    spec = replace(spec, out=replace(spec.out, dtype=out_dtype))
    spec = spec.with_epilogue(*(_epilogue(s, spec.out, axis, region) for s in _merge_clamps(steps)))
    _check_dtypes(spec, acc)
    check_padding(spec)
    return ExtractedOp(spec, region.constants)


def _function_bindings(func: relax.Function) -> dict[relax.Var, relax.Expr]:
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        raise ValueError("a composite function's body must be a SeqExpr")
    return {b.var: b.value for block in body.blocks for b in block.bindings if isinstance(b, relax.VarBinding)}


def extract_op(func: relax.Function, arg_names: Sequence[str], out_name: str, const_prefix: str) -> ExtractedOp:
    """The spec of a composite function made by ``FuseOpsByPattern`` from an ``npu.*`` pattern.

    ``arg_names[i]`` is the DRAM name of parameter ``i``, ``out_name`` that of the result;
    constants bound in the function are returned as ``{const_prefix}_{k}``.
    """
    if len(arg_names) != len(func.params):
        raise ValueError(f"{len(arg_names)} argument names for a function of {len(func.params)} parameters")
    names = dict(zip(func.params, arg_names, strict=True))

    def name_of(var: relax.Var) -> str:
        if var not in names:
            raise ValueError(f"{var.name} is neither a parameter nor bound in the composite function")
        return names[var]

    region = _Region(_function_bindings(func), name_of, const_prefix)
    return _extract(func.body.body, region, out_name)


def extract_from_context(ctx: PatternCheckContext, const_prefix: str = "const") -> ExtractedOp:
    """The spec a pattern match would become (tensors named after their Relax variables)."""
    root = ctx.matched_expr
    bound = ctx.value_to_bound_var.get(root)
    out_name = bound.name if bound is not None else "out"
    region = _Region(dict(ctx.matched_bindings.items()), lambda var: var.name, const_prefix)
    return _extract(root, region, out_name)
