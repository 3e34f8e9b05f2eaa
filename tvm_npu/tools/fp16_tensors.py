"""Activation tensors of a QDQ model left in float: the fp16 choice of the precision search.

onnxruntime's quantizer leaves a node in float when asked (``nodes_to_exclude``), but it still quantizes
that node's output wherever a quantized node reads it. The search's fp16 choice for a tensor is its
producer left in float *and* the tensor's QuantizeLinear / DequantizeLinear pair removed: the producer
computes in float and writes float, its readers read float. Compiled with ``-precision=fp16``
(:mod:`tvm_npu.relay_patterns.fp16_layers`) those layers run in fp16 on the NPU, the tensor is fp16 in
DRAM, and the integer layers around stay integer. Two forms of the same graph:

* :func:`written` -- what the user gets: the pairs removed, an ordinary (partly quantized) ONNX model;
* :func:`measured` -- what the search measures on onnxruntime: each pair replaced by a cast to float16
  and back, and the float weights of the float producers rounded to float16, so that the SQNR includes
  fp16's own storage rounding (the NPU's fp32 accumulation and fp16 epilogue rounding are not modelled:
  one more rounding of at most 2^-11 relative per layer, far below an 8- or 16-bit step).
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tvm_npu.tools.sqnr import quantized_tensors


def _pairs(model: onnx.ModelProto, tensors: Collection[str]) -> list[tuple[onnx.NodeProto, list[onnx.NodeProto]]]:
    """(QuantizeLinear, its DequantizeLinears) of each tensor of ``tensors`` (fp32 names) ``model`` quantizes."""
    found = quantized_tensors(model)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear":
            readers.setdefault(n.input[0], []).append(n)
    pairs = []
    for name in tensors:
        t = found.get(name)
        if t is None:
            continue
        q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == t.written
                 and n.output[0] in readers)
        pairs.append((q, readers[q.output[0]]))
    return pairs


def written(model: onnx.ModelProto, tensors: Collection[str]) -> onnx.ModelProto:
    """A copy of ``model`` with the QDQ pairs of ``tensors`` removed (their readers read the float tensor).
    A graph output keeps its pair (its name is the DequantizeLinear's output)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    outputs = {o.name for o in model.graph.output}
    rename: dict[str, str] = {}
    dropped: set[str] = set()  # the removed nodes' outputs
    for q, dqs in _pairs(model, tensors):
        if any(dq.output[0] in outputs for dq in dqs):
            continue
        rename.update({dq.output[0]: q.input[0] for dq in dqs})
        dropped.update(n.output[0] for n in (q, *dqs))
    nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in model.graph.node if n.output[0] not in dropped]
    for n in nodes:
        n.input[:] = [rename.get(i, i) for i in n.input]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def measured(model: onnx.ModelProto, tensors: Collection[str], float_nodes: Collection[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose QDQ pairs of ``tensors`` are casts to float16 and back, and whose float
    initializers read by the nodes ``float_nodes`` hold float16 values (module docstring)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    del model.graph.value_info[:]  # (it types the pairs' tensors as integers)
    for q, dqs in _pairs(model, tensors):
        q.op_type, q.domain = "Cast", ""
        del q.input[1:], q.attribute[:]
        q.attribute.append(helper.make_attribute("to", TensorProto.FLOAT16))
        for dq in dqs:
            dq.op_type, dq.domain = "Cast", ""
            del dq.input[1:], dq.attribute[:]
            dq.attribute.append(helper.make_attribute("to", TensorProto.FLOAT))
    read = {i for n in model.graph.node if (n.name or n.output[0]) in float_nodes for i in n.input}
    for init in model.graph.initializer:
        if init.name in read and init.data_type == TensorProto.FLOAT:
            value = numpy_helper.to_array(init).astype(np.float16).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(value, init.name))
    return model
