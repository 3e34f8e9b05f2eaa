"""Weights handed to TVM once: an ONNX model whose large initializers are external data, imported into Relax.

A model loaded by :func:`tvm_npu.models.onnx_file.load_lean` (and an external-data model a user loaded with
``onnx.load(path, load_external_data=False)``) keeps its weights in files. TVM's ONNX importer would read
each one through ``onnx.numpy_helper.to_array`` (the file's bytes, then a numpy array) and copy that into a
``tvm.runtime.Tensor``: three transient copies of the largest weight, and it refuses the absolute locations
the lean loader writes. :func:`import_onnx` runs TVM's importer with one change: an external tensor is read
from its file straight into the memory of the ``tvm.runtime.Tensor`` that becomes its Relax constant (a
writable DLPack view of it), so each weight exists once. Everything else (converters, the constants'
places in the module) is TVM's own, so the Relax module is the one ``from_onnx`` gives for the same model
with its weights inline. A model without external data goes through ``from_onnx`` itself.

One more change for the same reason: TVM imports a ``Gemm`` with ``transB=1`` as ``permute_dims`` of its
weight, which constant folding then copies into a transposed constant while the original is alive (a
VGG-19's classifier is 86% of its weights: the compile peaked there). A ``transB`` weight held only by
that ``Gemm`` is instead read from its file already transposed (:func:`pretranspose_gemm_weights`), in
row blocks, and the ``Gemm`` takes it with ``transB=0``: the Relax module after folding is the same.
"""

from __future__ import annotations

import numpy as np
import onnx
import tvm
from tvm.relax.frontend.onnx import from_onnx
from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

from tvm_npu.models.onnx_file import is_external, is_plain, read_into, read_transposed_into
from tvm_npu.models.registry import opset


def has_external_data(model: onnx.ModelProto) -> bool:
    """Whether any main-graph initializer of ``model`` is stored in a file."""
    return any(is_external(t) for t in model.graph.initializer)


#: The external-data key marking a 2-D weight to be read transposed (its ``dims`` are already swapped).
TRANSPOSED = "tvm_npu_transposed"


def tensor_from_file(tensor: onnx.TensorProto) -> tvm.runtime.Tensor:
    """The value of an external ``tensor`` of a plain element type as a TVM tensor, read from its file into
    the tensor's own memory (no numpy or bytes copy on the way; transposed if :data:`TRANSPOSED` says so)."""
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    out = tvm.runtime.empty(tuple(int(d) for d in tensor.dims), str(np.dtype(dtype)))
    if any(e.key == TRANSPOSED for e in tensor.external_data):
        read_transposed_into(tensor, np.from_dlpack(out))
    else:
        read_into(tensor, np.from_dlpack(out))
    return out


def pretranspose_gemm_weights(model: onnx.ModelProto) -> int:
    """Each ``Gemm`` with ``transB=1`` whose ``B`` is an external 2-D initializer of a plain type that nothing
    else uses (no other node, not a graph input or output) takes ``B`` read transposed, with ``transB=0``
    (module docstring); in place, returns how many."""
    graph = model.graph
    uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    io = {v.name for v in (*graph.input, *graph.output)}
    weights = {t.name: t for t in graph.initializer}
    count = 0
    for node in graph.node:
        trans_b = next((a for a in node.attribute if a.name == "transB"), None)
        if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx") or trans_b is None or trans_b.i != 1 \
                or len(node.input) < 2:
            continue
        b = weights.get(node.input[1])
        if b is None or uses.get(b.name) != 1 or b.name in io or len(b.dims) != 2 or not is_external(b) \
                or not is_plain(b) or any(e.key == TRANSPOSED for e in b.external_data):
            continue
        b.dims[:] = [b.dims[1], b.dims[0]]
        b.external_data.add(key=TRANSPOSED, value="1")
        trans_b.i = 0
        count += 1
    return count


class _ExternalDataImporter(ONNXGraphImporter):
    """TVM's importer, reading external initializers by :func:`tensor_from_file`."""

    def _parse_array(self, tensor_proto: onnx.TensorProto) -> tvm.runtime.Tensor:
        if is_external(tensor_proto) and is_plain(tensor_proto):
            return tensor_from_file(tensor_proto)
        return super()._parse_array(tensor_proto)


def import_onnx(model: onnx.ModelProto) -> tvm.IRModule:
    """``model`` as a Relax module with its initializers as constants (TVM's ``from_onnx`` with
    ``keep_params_in_input=False``), external ones read once (:class:`_ExternalDataImporter`)."""
    if not has_external_data(model):
        return from_onnx(model, keep_params_in_input=False)
    if model.ir_version < 3:
        raise ValueError(f"ONNX IR version {model.ir_version} is not supported (TVM's importer takes 3 and later)")
    lean = onnx.ModelProto()
    lean.CopyFrom(model)  # its large weights are references: a small copy, and ``model`` stays as it was
    pretranspose_gemm_weights(lean)
    importer = _ExternalDataImporter(None, "float32", keep_params_in_input=False, sanitize=True)
    return importer.from_onnx(lean.graph, opset(lean))
