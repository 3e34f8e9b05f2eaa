"""A mean over the spatial axes that drops them, in the form the pattern table runs on the NPU.

Exporters write a classifier head's global average pool as ``ReduceMean(axes=[2, 3], keepdims=0)``
on NCHW (DenseNet-style heads, Keras via tf2onnx) or ``ReduceMean(axes=[1, 2], keepdims=0)`` on
NHWC (tf2onnx without a transpose), giving ``[N, C]`` straight to a MatMul / Gemm. The NPU's
global average pool keeps the axes (``[N, C, 1, 1]`` / ``[N, 1, 1, C]``), so

    mean(x, axes, keepdims=False)  ->  reshape(mean(x, axes, keepdims=True), [N, C])

is the same values in the same order: a pool and a view (no bytes moved), one partition with the
convolution before it and the classifier after. Only 4-D tensors with static shapes and the two
spatial axes of NCHW or NHWC are rewritten; any other mean stays as it was. The 8-bit form
(``quantize(mean(dequantize(x)))``) is rewritten earlier, by :mod:`.quantized`, the same way.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from .extract import static_shape

#: The axes of a global average pool over a 4-D tensor, by layout.
SPATIAL_AXES: dict[tuple[int, int], str] = {(2, 3): "NCHW", (1, 2): "NHWC"}


def spatial_layout(mean: relax.Call) -> str | None:
    """The layout (``NCHW`` / ``NHWC``) whose H and W a ``relax.mean`` of a static 4-D tensor averages, else None."""
    shape = static_shape(mean.args[0])
    if shape is None or len(shape) != 4 or mean.attrs.axis is None:
        return None
    return SPATIAL_AXES.get(tuple(sorted(int(a) % 4 for a in mean.attrs.axis)))


def _keep_spatial_axes(func: relax.Function) -> relax.Function:
    root = is_op("relax.mean")(wildcard())

    def rewrite(orig: relax.Call, _m: dict) -> relax.Expr:
        shape = static_shape(orig)
        if orig.attrs.keepdims or shape is None or spatial_layout(orig) is None:
            return orig
        kept = relax.op.mean(orig.args[0], axis=[int(a) for a in orig.attrs.axis], keepdims=True)
        return relax.op.reshape(kept, shape)

    return rewrite_call(root, rewrite, func)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.SpatialMeanKeepdims")
def spatial_mean_keepdims(func: relax.Function, _mod: tvm.IRModule,
                          _ctx: tvm.transform.PassContext) -> relax.Function:
    """``mean(x, H and W, keepdims=False)`` of a 4-D tensor -> ``reshape(mean(..., keepdims=True))``
    (module docstring)."""
    return _keep_spatial_axes(func)
