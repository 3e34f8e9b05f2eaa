"""ONNX ``Resize`` / ``Upsample`` (Relax ``image.resize2d``) in forms the NPU already runs.

A resize picks, along H and along W separately, source positions for every output index: the
coordinate transformation (``half_pixel``, ``pytorch_half_pixel``, ``align_corners``, ``asymmetric``,
``tf_half_pixel_for_nn``) maps output index ``o`` to a source coordinate, which ``nearest`` rounds
(``rounding_method``, ONNX's ``nearest_mode``) and ``linear`` interpolates between its two
neighbours, indices clamped to the axis. Computed here in float32 exactly as TVM's ``resize2d`` does
(the scale is ``in / out``): the NPU reads the rows llvm reads, with the weights llvm uses. Two NPU forms:

* **a view** (:func:`upsample_factor`): a nearest resize whose index map is ``o // f`` for an integer
  ``f`` on both axes is ``reshape (N, C, H, 1, W, 1) -> broadcast_to (N, C, H, fh, W, fw) -> reshape
  (N, C, H fh, W fw)``: no data moves, its readers load every source row ``fh`` times through a
  zero stride (``views.broadcast``; the DMA repeats whole rows). Which modes give ``o // f`` is
  decided on the index map itself, not on the names: for every integer ``f`` that is ``half_pixel``
  / ``pytorch_half_pixel`` rounding to nearest (either preference: the offsets stay inside
  ``(-1/2, 1/2)``), ``asymmetric`` and ``tf_half_pixel_for_nn`` with ``floor``; for ``f = 2`` also
  ``asymmetric`` with ``round_prefer_floor`` (the tie at 1/2 goes down). ``ceil``, ``half_pixel``
  with ``floor``, ``round_prefer_ceil`` on ``asymmetric`` and ``align_corners`` (except at sizes
  where its ratio happens to give ``o // f``) pick other rows. On 8 bits the same view between a
  dequantize and a quantize of equal parameters is taken on the 8-bit tensor (nearest moves values
  unchanged).
* **the resize operator** (``tir_schedules/resize.py``): a float32 NCHW ``linear`` resize is left as
  ``resize2d`` for the ``npu.resize`` pattern when the cost model puts it below the matrix products
  (:func:`operator_wins`): bands of rows on the vector engine, W pass then H pass as TVM does, every output
  llvm's bit for bit, about its DRAM bound.
* **two matrix products** (:func:`interpolation_matrix`): any other float32 ``linear`` or ``nearest``
  resize, integer or not, is ``y = A_h x A_w^T`` per image and channel, ``A`` the ``out x in``
  interpolation weights (two per row for linear, one for nearest): along W one ``(N*C*H, W) x (W, W')``
  matmul, then along H a 1x1 convolution with weights ``A_h`` over the ``(1, H, N*C, W')`` transposing
  view (rows of ``W'`` contiguous elements). Every output is the same weighted sum as TVM's, so within fp32
  rounding of llvm and onnxruntime. The products also multiply the zero weights: ``H*W'*(W + H')``
  MACs per channel instead of ``4 * H' * W'`` (fine at the map sizes of FPN necks, not for huge
  factors).

Cubic and ``tf_crop_and_resize`` resizes, symbolic shapes and other layouts stay on the host, with
the reason :func:`host_reason` gives (``tvm-npu inspect`` prints it). A linear resize of a dequantized
8-bit tensor (a QDQ model's bilinear resize) never takes the matrix form: its float sums, in the products'
order rather than llvm's, could round to another 8-bit step after the quantize, and 8-bit results must be
llvm's bit for bit (a nearest selection is exact: one weight of 1 per row); the resize operator's sums are
llvm's, so it runs there when a band fits, else on the host.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard
from tvm.sym.analyzer import Analyzer
from tvm_npu.tir_schedules import tile_search

from tvm_npu.config import DType, NpuTarget
from tvm_npu.core.ops import Conv2dSpec, MatmulSpec, OpSpec, ResizeSpec, TensorRef

from .extract import static_shape
from .lifted import Lifted, with_lifted_constants
from .resize_taps import COORDINATES, linear_taps, source_coordinates
from .symbolic import probe_dim

METHODS = ("nearest_neighbor", "linear")
_FLOOR_EPSILON = np.float32(1e-5)  # TVM's floor / ceil rounding nudge


def nearest_index(coord: str, rounding: str, n_in: int, n_out: int) -> np.ndarray:
    """The source index a nearest resize reads for every output index (clamped to the axis)."""
    rounding = rounding or ("round" if coord == "align_corners" else "floor")
    if coord == "asymmetric" and rounding == "floor" and n_out % n_in == 0:
        return np.arange(n_out) // (n_out // n_in)  # TVM divides integers here
    x = source_coordinates(coord, n_in, n_out)
    index = {"round": lambda: np.round(x),  # half to even, as TVM's round on llvm
             "round_prefer_floor": lambda: np.ceil(x - np.float32(0.5)),
             "round_prefer_ceil": lambda: np.floor(x + np.float32(0.5)),
             "floor": lambda: np.floor(x + _FLOOR_EPSILON), "ceil": lambda: np.ceil(x - _FLOOR_EPSILON)}
    if rounding not in index:
        raise ValueError(f"nearest rounding {rounding!r}; accepted: {', '.join(index)}")
    return np.clip(index[rounding]().astype(np.int64), 0, n_in - 1)


def interpolation_matrix(method: str, coord: str, rounding: str, n_in: int, n_out: int) -> np.ndarray:
    """``A`` (``n_out x n_in``, float32) with ``y = A @ x`` the resize of ``x`` along one axis."""
    a = np.zeros((n_out, n_in), np.float32)
    rows = np.arange(n_out)
    if method == "nearest_neighbor":
        a[rows, nearest_index(coord, rounding, n_in, n_out)] = 1
        return a
    lo, hi, w0, w1 = (np.array(v) for v in zip(*linear_taps(coord, n_in, n_out), strict=True))
    np.add.at(a, (rows, lo), w0.astype(np.float32))
    np.add.at(a, (rows, hi), w1.astype(np.float32))
    return a


def upsample_factor(coord: str, rounding: str, n_in: int, n_out: int) -> int | None:
    """``f`` when a nearest resize reads source index ``o // f`` for every output ``o`` (an integer
    upsampling: a broadcast view), else None."""
    if n_out % n_in:
        return None
    f = n_out // n_in
    return f if np.array_equal(nearest_index(coord, rounding, n_in, n_out), np.arange(n_out) // f) else None


def host_reason(call: relax.Call) -> str | None:
    """Why ``resize2d`` ``call`` has no NPU form (None: the rewrite takes it)."""
    a = call.attrs
    shape, out = static_shape(call.args[0]), static_shape(call)
    method, coord, layout = str(a.method), str(a.coordinate_transformation_mode), str(a.layout)
    if (shape is None or out is None) and layout in ("NCHW", "NHWC") and _symbolic_factors(call) is not None:
        return None
    if shape is None or out is None or layout not in ("NCHW", "NHWC"):
        return ("a resize needs static shapes (or, symbolic, an integer nearest upsampling 'asymmetric' / 'floor') "
                "and layout NCHW or NHWC")
    if method not in METHODS:
        return f"{method} resize; the NPU takes {' and '.join(METHODS)}"
    if coord not in COORDINATES:
        return f"coordinate transformation {coord}; the NPU takes {', '.join(COORDINATES)}"
    if coord == "align_corners" and min(_spatial(out, layout)) == 1:
        return "align_corners onto one row or column"
    if _view_factors(call) is not None:
        return None
    if str(call.ty.dtype) != "float32" or layout != "NCHW":
        return (f"only a nearest integer upsampling (index o // f) runs on the NPU in {call.ty.dtype} "
                f"{layout}; interpolation needs float32 NCHW")
    return None


def _spatial(shape: tuple[int, ...], layout: str) -> tuple[int, int]:
    return shape[layout.index("H")], shape[layout.index("W")]


def _view_factors(call: relax.Call) -> tuple[int, int] | None:
    """(fh, fw) of a nearest resize that is a broadcast view, else None."""
    a = call.attrs
    layout = str(a.layout)
    if str(a.method) != "nearest_neighbor" or str(a.coordinate_transformation_mode) not in COORDINATES:
        return None
    if static_shape(call.args[0]) is None or static_shape(call) is None:
        return _symbolic_factors(call)
    (h, w), (ho, wo) = _spatial(static_shape(call.args[0]), layout), _spatial(static_shape(call), layout)
    fh = upsample_factor(str(a.coordinate_transformation_mode), str(a.rounding_method), h, ho)
    fw = upsample_factor(str(a.coordinate_transformation_mode), str(a.rounding_method), w, wo)
    return None if fh is None or fw is None else (fh, fw)


def _symbolic_factors(call: relax.Call) -> tuple[int, int] | None:
    """(fh, fw) of a nearest resize with symbolic sizes (a model built for every input size) that is a broadcast
    view at every size: ``asymmetric`` / ``floor`` (index ``o * in // out``, TVM's integer division), each
    output size provably ``f`` times the input's for an integer ``f`` (read at the probe size)."""
    a = call.attrs
    if (str(a.method), str(a.coordinate_transformation_mode), str(a.rounding_method)) != \
            ("nearest_neighbor", "asymmetric", "floor"):
        return None
    layout = str(a.layout)
    dims, out = call.args[0].ty.shape, call.ty.shape
    if not isinstance(dims, relax.ShapeExpr) or not isinstance(out, relax.ShapeExpr):
        return None
    analyzer = Analyzer()
    factors = []
    for axis in (layout.index("H"), layout.index("W")):
        n, m = probe_dim(dims.values[axis]), probe_dim(out.values[axis])
        if n is None or m is None or m % n or not analyzer.can_prove_equal(out.values[axis],
                                                                          dims.values[axis] * (m // n)):
            return None
        factors.append(m // n)
    return factors[0], factors[1]


def nearest_view(x: relax.Expr, layout: str, fh: int, fw: int) -> relax.Expr:
    """``x`` upsampled by ``fh`` x ``fw`` (nearest) as ``reshape -> broadcast_to -> reshape`` (symbolic sizes as
    expressions)."""
    shape = static_shape(x) or list(x.ty.shape.values)
    hi, wi = layout.index("H"), layout.index("W")
    split, spread, out = [], [], []
    for d, n in enumerate(shape):
        f = {hi: fh, wi: fw}.get(d)
        split += [n] if f is None else [n, 1]
        spread += [n] if f is None else [n, f]
        out.append(n if f is None else n * f)
    return relax.op.reshape(relax.op.broadcast_to(relax.op.reshape(x, split), spread), out)


def separable(x: relax.Expr, a_h: np.ndarray, a_w: np.ndarray) -> relax.Expr:
    """``A_h x A_w^T`` of every (image, channel) of NCHW ``x``: a matmul along W, a 1x1 convolution along H."""
    n, c, h, w = static_shape(x)
    wo = a_w.shape[0]
    # every row of every map at once: one (N*C*H, W) x (W, W') product, large tiles (not N*C small ones)
    rows = relax.op.matmul(relax.op.reshape(x, (n * c * h, w)), relax.const(np.ascontiguousarray(a_w.T)))
    by_h = relax.op.permute_dims(relax.op.reshape(rows, (1, n * c, h, wo)), [0, 2, 1, 3])  # (1, H, N*C, W')
    mixed = relax.op.nn.conv2d(by_h, relax.const(a_h.reshape(*a_h.shape, 1, 1)))  # (1, H', N*C, W')
    return relax.op.reshape(relax.op.permute_dims(mixed, [0, 2, 1, 3]), (n, c, a_h.shape[0], wo))


def _cycles(specs: list[OpSpec], target: NpuTarget) -> float:
    """The cost model's cycles of ``specs`` one after another, each at its chosen tile (inf: one does not fit)."""
    hw, opts = target.hw, target.options
    if not all(tile_search.fits(s, hw, opts) for s in specs):
        return math.inf
    return sum(tile_search.estimate(s, tile_search.choose(s, hw, opts), hw).cycles for s in specs)


def operator_wins(call: relax.Call, target: NpuTarget) -> bool:
    """Whether a linear ``call`` runs as the resize operator (``tir_schedules/resize.py``) rather than as the
    two matrix products of :func:`separable`, by the cost model's estimate of each on ``target`` (the products
    as plain operators: their transposing view and the intermediate's residency are left out, which favours
    them a little)."""
    a = call.attrs
    if str(a.method) != "linear" or str(a.layout) != "NCHW" or str(call.ty.dtype) != "float32":
        return False
    (n, c, h, w), (_, _, ho, wo) = static_shape(call.args[0]), static_shape(call)
    coord, f32 = str(a.coordinate_transformation_mode), DType.FP32
    operator = ResizeSpec("resize", TensorRef("y", (n, c, ho, wo), f32, "NCHW"),
                          data=TensorRef("x", (n, c, h, w), f32, "NCHW"),
                          rows=linear_taps(coord, h, ho), cols=linear_taps(coord, w, wo))
    along_w = MatmulSpec("matmul", TensorRef("t", (n * c * h, wo), f32), a=TensorRef("x", (n * c * h, w), f32),
                         b=TensorRef("aw", (w, wo), f32))
    along_h = Conv2dSpec("conv2d", TensorRef("y", (1, ho, n * c, wo), f32, "NCHW"),
                         data=TensorRef("t", (1, h, n * c, wo), f32, "NCHW"),
                         weight=TensorRef("ah", (ho, h, 1, 1), f32))
    mine = _cycles([operator], target)
    return mine < math.inf and mine <= _cycles([along_w, along_h], target)


def _rewrite(call: relax.Call, target: NpuTarget) -> relax.Expr:
    """The NPU form of float ``resize2d`` ``call`` (module docstring), or ``call`` itself (on the host, or
    left for the resize operator)."""
    if host_reason(call) is not None:
        return call
    layout = str(call.attrs.layout)
    factors = _view_factors(call)
    if factors is not None:
        return nearest_view(call.args[0], layout, *factors)
    if operator_wins(call, target):
        return call
    a = call.attrs
    (h, w), (ho, wo) = _spatial(static_shape(call.args[0]), layout), _spatial(static_shape(call), layout)
    method, coord, rounding = str(a.method), str(a.coordinate_transformation_mode), str(a.rounding_method)
    return separable(call.args[0], interpolation_matrix(method, coord, rounding, h, ho),
                     interpolation_matrix(method, coord, rounding, w, wo))


def _same_parameters(q: relax.Call, dq: relax.Call, lifted: Lifted) -> bool:
    """Whether quantize ``q`` undoes dequantize ``dq`` exactly (one scale, one zero point, one type)."""
    values = [lifted.value(e) for e in (q.args[1], dq.args[1], q.args[2], dq.args[2])]
    if any(v is None or v.size != 1 for v in values):
        return False
    sq, sd, zq, zd = (v.reshape(()) for v in values)
    return (np.float32(sq) == np.float32(sd) and int(zq) == int(zd)
            and str(q.ty.dtype) == str(dq.args[0].ty.dtype))


def _resize_forms(func: relax.Function, lifted: Lifted, target: NpuTarget) -> relax.Function:
    """The 8-bit views first (``quantize(resize(dequantize(x)))`` of equal parameters), then every float
    resize but the linear ones of dequantized tensors (module docstring)."""
    data = wildcard()
    dq = is_op("relax.dequantize")(data, wildcard(), wildcard())
    resize = is_op("relax.image.resize2d")(dq, wildcard())
    quantized = is_op("relax.quantize")(resize, wildcard(), wildcard())

    def rewrite_quantized(orig: relax.Call, m: dict) -> relax.Expr:
        factors = _view_factors(m[resize]) if host_reason(m[resize]) is None else None
        if factors is None or not _same_parameters(orig, m[dq], lifted):
            return orig
        return nearest_view(m[data], str(m[resize].attrs.layout), *factors)

    func = rewrite_call(quantized, rewrite_quantized, func)
    # interpolations of dequantized 8-bit tensors: left for the resize operator or llvm (module docstring)
    of_8bit: list[relax.Call] = []

    def note(orig: relax.Call, _m: dict) -> relax.Expr:
        if str(orig.attrs.method) != "nearest_neighbor":  # a selection's sums are exact: one weight of 1
            of_8bit.append(orig)
        return orig

    func = rewrite_call(is_op("relax.image.resize2d")(dq, wildcard()), note, func)

    def rewrite(orig: relax.Call, _m: dict) -> relax.Expr:
        return orig if any(orig.same_as(c) for c in of_8bit) else _rewrite(orig, target)

    return rewrite_call(is_op("relax.image.resize2d")(wildcard(), wildcard()), rewrite, func)


def resize_forms(target: NpuTarget) -> tvm.transform.Pass:
    """``resize2d`` -> a broadcast view (nearest integer upsampling, also on 8 bits between an equal-scale
    dequantize / quantize), the resize operator (linear, when it wins on ``target``) or two constant matrix
    products (module docstring)."""

    @relax.transform.function_pass(opt_level=0, name="tvm_npu.ResizeForms")
    def forms(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
        return with_lifted_constants(func, lambda f, lifted: _resize_forms(f, lifted, target))

    return forms

