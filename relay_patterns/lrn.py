"""Local response normalisation (ONNX ``LRN``) in the form the pattern table runs on the NPU.

TVM's ONNX importer writes ``LRN(size, alpha, beta, bias)`` over ``x`` of shape (N, C, spatial...) as

    x / (bias + alpha * avg_pool3d(expand_dims(x * x, 1), (size, 1, 1), pad (f, 0, 0, b, 0, 0)))[squeezed] ** beta

(the average over a channel window of ``size``, zero-padded and divided by ``size``, is ONNX's
``alpha / size * sum``). A 3-D pool over a unit channel axis is a 2-D pool whose rows are the
channels: with ``xr = reshape(x, (N, 1, C, prod(spatial)))`` the window is ``(size, 1)`` and the
padding ``(f, 0, b, 0)`` on an ordinary NCHW ``avg_pool2d``, and the reshapes are views on the NPU.
The division by a power becomes a multiplication by the negative power (one ``VPOW`` step, within
one rounding of the quotient), so the rewritten form

    reshape(xr * (avg_pool2d(xr * xr) * alpha + bias) ** -beta, x.shape)

is an elementwise square, a pool whose epilogue is scale, bias, power and the multiply by ``xr``,
and two views: one NPU partition, no host operator.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from .extract import static_shape
from .lifted import Lifted, with_lifted_constants


def _scalar(expr: relax.Expr, lifted: Lifted) -> float | None:
    """The value of a one-element float constant, else None."""
    v = lifted.value(expr)
    return float(v.reshape(())) if v is not None and v.size == 1 and v.dtype.kind == "f" else None


def _channel_window(pool: relax.Call) -> tuple[int, int, int] | None:
    """(size, pad before, pad after) of an ``avg_pool3d`` that averages a zero-padded window along D
    only (the importer's LRN pool), else None."""
    a = pool.attrs
    kernel, strides = [int(v) for v in a.pool_size], [int(v) for v in a.strides]
    dilation, pad = [int(v) for v in a.dilation], [int(v) for v in a.padding]
    if (kernel[1:] != [1, 1] or strides != [1, 1, 1] or dilation != [1, 1, 1] or len(pad) != 6
            or pad[1:3] != [0, 0] or pad[4:] != [0, 0] or not bool(a.count_include_pad) or bool(a.ceil_mode)
            or str(a.layout) != "NCDHW" or str(a.out_layout) != "NCDHW"):
        return None
    return kernel[0], pad[0], pad[3]


def _lrn_to_pool(func: relax.Function, lifted: Lifted) -> relax.Function:
    x, alpha, bias, beta = wildcard(), wildcard(), wildcard(), wildcard()  # constants: lifted to vars
    expand = is_op("relax.expand_dims")(is_op("relax.multiply")(x, x))
    window = is_op("relax.nn.avg_pool3d")(expand)
    squeezed = is_op("relax.squeeze")(window)
    base = is_op("relax.add")(is_op("relax.multiply")(squeezed, alpha), bias)
    root = is_op("relax.divide")(x, is_op("relax.power")(base, beta))

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        shape, win = static_shape(m[x]), _channel_window(m[window])
        a, b, p = (_scalar(m[k], lifted) for k in (alpha, bias, beta))
        if (shape is None or len(shape) < 3 or win is None or None in (a, b, p) or not math.isfinite(p)
                or [int(v) for v in m[expand].attrs.axis] != [1] or [int(v) for v in m[squeezed].attrs.axis] != [1]
                or static_shape(orig) != shape or str(orig.ty.dtype) not in ("float32", "float16")):
            return orig
        size, before, after = win
        dtype = str(orig.ty.dtype)
        n, c = shape[:2]
        xr = relax.op.reshape(m[x], (n, 1, c, math.prod(shape[2:])))
        avg = relax.op.nn.avg_pool2d(relax.op.multiply(xr, xr), pool_size=(size, 1), strides=(1, 1),
                                     padding=(before, 0, after, 0), count_include_pad=True, layout="NCHW")
        t = relax.op.add(relax.op.multiply(avg, relax.const(a, dtype)), relax.const(b, dtype))
        scaled = relax.op.multiply(relax.op.power(t, relax.const(-p, dtype)), xr)
        return relax.op.reshape(scaled, shape)

    return rewrite_call(root, rewrite, func)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.LrnToPool")
def lrn_to_pool(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """The importer's LRN (``avg_pool3d`` over a channel window, ``power``, ``divide``) as a 2-D pool over a
    (channels x positions) view with a scale / bias / power / multiply epilogue (module docstring)."""
    return with_lifted_constants(func, _lrn_to_pool)
