"""ONNX ``ConvTranspose`` with ``output_shape`` or ``auto_pad``: explicit pads, as onnxruntime computes them.

TVM 0.27's importer ignores ``output_shape`` (the result then has the wrong size) and derives
``SAME_*`` pads from ``input * stride`` only. This rewrite, run before the import, replaces both by
the explicit ``pads`` and ``output_padding`` that onnxruntime uses (checked against it): per spatial
axis, with the target size ``out`` (``output_shape``, else ``input * stride`` for ``SAME_*``),

    total = stride * (input - 1) + output_padding + (kernel - 1) * dilation + 1 - out
    begin = total // 2 for SAME_UPPER, total - total // 2 otherwise; end = total - begin

and a negative ``total`` (a target larger than the layer reaches) is more ``output_padding`` instead.
"""

from __future__ import annotations

import onnx
from onnx import helper, numpy_helper, shape_inference


def _shape(model: onnx.ModelProto, name: str) -> list[int] | None:
    """The static shape of value ``name`` (a graph input or inferred), None when unknown."""
    try:
        inferred = shape_inference.infer_shapes(model)
    except (shape_inference.InferenceError, ValueError):  # the node is then left to the importer
        return None
    for info in (*inferred.graph.input, *inferred.graph.value_info):
        if info.name == name:
            dims = info.type.tensor_type.shape.dim
            return [d.dim_value for d in dims] if all(d.HasField("dim_value") for d in dims) else None
    return None


def _kernel(model: onnx.ModelProto, node: onnx.NodeProto, attrs: dict) -> list[int] | None:
    if "kernel_shape" in attrs:
        return list(attrs["kernel_shape"])
    weight = next((t for t in model.graph.initializer if t.name == node.input[1]), None)
    return None if weight is None else list(numpy_helper.to_array(weight).shape[2:])


def _explicit(node: onnx.NodeProto, in_shape: list[int], kernel: list[int], attrs: dict) -> None:
    """Set ``pads`` / ``output_padding`` on ``node`` and drop ``output_shape`` / ``auto_pad`` (module docstring)."""
    nsp = len(in_shape) - 2
    strides = list(attrs.get("strides", [1] * nsp))
    dilations = list(attrs.get("dilations", [1] * nsp))
    out_pad = list(attrs.get("output_padding", [0] * nsp))
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    target = list(attrs["output_shape"])[-nsp:] if "output_shape" in attrs else \
        [in_shape[2 + i] * strides[i] for i in range(nsp)]
    begin, end = [], []
    for i in range(nsp):
        total = strides[i] * (in_shape[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1 - target[i]
        if total < 0:
            out_pad[i] -= total
            total = 0
        b = total // 2 if auto == "SAME_UPPER" else total - total // 2
        begin.append(b)
        end.append(total - b)
    kept = [a for a in node.attribute if a.name not in ("output_shape", "auto_pad", "pads", "output_padding")]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute("pads", begin + end),
                           helper.make_attribute("output_padding", out_pad)])


def explicit_conv_transpose_pads(model: onnx.ModelProto) -> int:
    """Rewrite, in place, every main-graph ``ConvTranspose`` with ``output_shape`` or a ``SAME_*`` ``auto_pad``
    whose input shape and kernel are static; returns how many. Others are left to the importer."""
    count = 0
    for node in model.graph.node:
        if node.op_type != "ConvTranspose":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        auto = attrs.get("auto_pad", b"NOTSET")
        if "output_shape" not in attrs and auto not in (b"SAME_UPPER", b"SAME_LOWER"):
            continue
        in_shape, kernel = _shape(model, node.input[0]), _kernel(model, node, attrs)
        if in_shape is None or kernel is None:
            continue
        _explicit(node, in_shape, kernel, attrs)
        count += 1
    return count
