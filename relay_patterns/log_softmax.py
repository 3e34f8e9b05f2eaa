"""Log-softmax as the row program it is: ``nn.log_softmax`` and ``log(softmax(x))`` in primitive operators.

ONNX ``LogSoftmax`` arrives as ``relax.nn.log_softmax(x, axis)`` and a ``Log`` of a ``Softmax`` as
``log(nn.softmax(x, axis))``. Neither is an elementwise operator or a row reduction, so the row-program
recogniser (:mod:`.rowwise_region`) would not see them; written out in primitives they are:

    m = max(x, axis, keepdims),  d = x - m,  s = sum(exp(d), axis, keepdims),
    log_softmax(x) = d - log(s),   log(softmax(x)) = log(exp(d) / s)

whose canonical forms are equal (:func:`~.rowwise_algebra.log`), and equal to the forms exporters write
out themselves (``x - max - log(sum(exp(x - max)))``): every form becomes the same program, ``VRMAX``,
``VSUB``, ``VEXP``, ``VRSUM``, ``VLOG``, ``VSUB``. An axis other than the last is then moved to the end by
:func:`~.rowwise_views.rows_last` (views inside a partition). Only float32 with a static shape and at
least two elements along the axis is rewritten (what the NPU's row-wise operator takes); anything else
keeps TVM's own operator.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from .extract import static_shape


def _axis(x: relax.Expr, axis: int) -> int | None:
    """``axis`` normalised, when the NPU can take a row program along it (float32, static, >= 2 long)."""
    shape = static_shape(x)
    if shape is None or str(x.ty.dtype) != "float32" or not shape:
        return None
    axis = int(axis) % len(shape)
    return axis if shape[axis] >= 2 else None


def _shifted(x: relax.Expr, axis: int) -> tuple[relax.Expr, relax.Expr, relax.Expr]:
    """``d = x - max(x)``, ``e = exp(d)`` and ``s = sum(e)`` over ``axis`` (kept as one)."""
    d = relax.op.subtract(x, relax.op.max(x, [axis], keepdims=True))
    e = relax.op.exp(d)
    return d, e, relax.op.sum(e, [axis], keepdims=True)


def log_softmax_as_primitives(func: relax.Function) -> relax.Function:
    """``nn.log_softmax(x, axis)`` -> ``d - log(s)``; ``log(nn.softmax(x, axis))`` -> ``log(exp(d) / s)``
    (module docstring), where the NPU can run the result."""
    x, y = wildcard(), wildcard()
    log_softmax = is_op("relax.nn.log_softmax")(x)
    softmax = is_op("relax.nn.softmax")(y)
    log_of_softmax = is_op("relax.log")(softmax)

    def rewrite(orig: relax.Call, m: dict) -> relax.Expr:
        if log_softmax in m:
            axis = _axis(m[x], m[log_softmax].attrs.axis)
            if axis is None:
                return orig
            d, _, s = _shifted(m[x], axis)
            return relax.op.subtract(d, relax.op.log(s))
        axis = _axis(m[y], m[softmax].attrs.axis)
        if axis is None:
            return orig
        _, e, s = _shifted(m[y], axis)
        return relax.op.log(relax.op.divide(e, s))

    return rewrite_call(log_softmax | log_of_softmax, rewrite, func)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.LogSoftmaxRows")
def log_softmax_rows(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """:func:`log_softmax_as_primitives` as a pass (before the row-program rewrites of canonicalisation)."""
    return log_softmax_as_primitives(func)
