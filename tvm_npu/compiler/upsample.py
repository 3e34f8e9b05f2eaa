"""ONNX ``Upsample`` (opsets 7-9) by integer factors, in a form TVM imports exactly.

``Upsample`` maps output index ``i`` of an axis upsampled by ``s`` to input index ``floor(i / s)``
(onnxruntime; the operator was replaced by ``Resize`` at opset 10, but older YOLO and FPN exports still
carry it). TVM 0.27 imports the opset-7 form as a resize that rounds half to even (up to 3.6 away from
onnxruntime on a random map) and has no converter for the opset-9 form. For integer factors the map
``i // s`` is a broadcast: ``x`` reshaped with a unit axis after each upsampled axis, expanded to the
factors and reshaped back,

    [N, C, H, W] -> [N, C, H, 1, W, 1] -> Expand [N, C, H, sh, W, sw] -> [N, C, H*sh, W*sw],

exactly ``nearest``'s values (``linear`` mode interpolates and stays as it
was), which the NPU runs as a zero-stride view of ``x`` (``relay_patterns/resize.py``). Opset 7 has no
``Expand``: a ``Concat`` of copies fills each unit axis there. Anything else (non-integer or fractional scales, linear
mode, scales computed at run time) is left for the importer.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tvm_npu.compiler.node_rewrite import replace_nodes

#: The first opset with ``Expand`` (older models tile instead).
_EXPAND_OPSET = 8


def _scales(node: onnx.NodeProto, values: Mapping[str, np.ndarray]) -> list[int] | None:
    """The integer factors of an ``Upsample`` (attribute at opset 7, input at 9), None if not integers."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    mode = attrs.get("mode", b"nearest")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "nearest":
        return None
    if "scales" in attrs:
        scales = np.asarray(attrs["scales"], np.float64)
    elif len(node.input) > 1 and node.input[1] in values:
        scales = np.asarray(values[node.input[1]], np.float64).reshape(-1)
    else:
        return None
    if scales.size == 0 or np.any(scales < 1) or np.any(scales != np.round(scales)):
        return None
    return [int(s) for s in scales]


def _broadcast_nodes(node: onnx.NodeProto, shape: tuple[int, ...], scales: list[int], opset: int,
                     inits: list[onnx.TensorProto]) -> list[onnx.NodeProto]:
    """``Reshape -> Expand (or Tile) -> Reshape`` computing ``node``'s output (module docstring)."""
    x, y, tag = node.input[0], node.output[0], node.name or node.output[0]
    split = [d for n, s in zip(shape, scales, strict=True) for d in ((n, 1) if s > 1 else (n,))]
    wide = [d for n, s in zip(shape, scales, strict=True) for d in ((n, s) if s > 1 else (n,))]
    out = [n * s for n, s in zip(shape, scales, strict=True)]

    def const(name: str, values: list[int]) -> str:
        inits.append(numpy_helper.from_array(np.asarray(values, np.int64), f"{tag}/{name}_shape"))
        return f"{tag}/{name}_shape"

    nodes = [helper.make_node("Reshape", [x, const("units", split)], [f"{tag}/units"], name=f"{tag}/units")]
    if opset >= _EXPAND_OPSET:
        nodes.append(helper.make_node("Expand", [f"{tag}/units", const("wide", wide)], [f"{tag}/wide"],
                                      name=f"{tag}/wide"))
    else:  # one Concat of copies per unit axis (TVM's Tile runs on the host; a concat of views does not)
        src, axis = f"{tag}/units", 0
        for s in scales:
            axis += 1
            if s > 1:
                dst = f"{tag}/wide{axis}"
                nodes.append(helper.make_node("Concat", [src] * s, [dst], name=dst, axis=axis))
                src, axis = dst, axis + 1
        nodes[-1].output[0] = f"{tag}/wide"
    nodes.append(helper.make_node("Reshape", [f"{tag}/wide", const("out", out)], [y], name=f"{tag}/out"))
    return nodes


def upsample_as_broadcast(model: onnx.ModelProto, values: Mapping[str, np.ndarray],
                          shapes: Mapping[str, tuple[int, ...]], opset: int) -> int:
    """Replace, in place, every main-graph ``Upsample`` of integer factors whose input shape is static by
    the broadcast that computes it; returns how many."""

    def expand(node: onnx.NodeProto, inits: list[onnx.TensorProto]) -> list[onnx.NodeProto] | None:
        scales = _scales(node, values) if node.op_type == "Upsample" and node.domain in ("", "ai.onnx") else None
        shape = shapes.get(node.input[0]) if scales is not None else None
        if scales is None or shape is None or len(shape) != len(scales):
            return None
        return _broadcast_nodes(node, shape, scales, opset, inits)

    return replace_nodes(model.graph, expand)
