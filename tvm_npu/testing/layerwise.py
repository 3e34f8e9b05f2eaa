"""Per-layer numerics of a quantized model against onnxruntime: every quantized layer compiled alone for the
NPU and fed onnxruntime's own input tensors for it, judged against onnxruntime's output of that layer at its
two optimisation levels (the float path of ORT_ENABLE_BASIC and the integer kernels of the default level).

The project's numerics standard (>= 99.9% of elements identical, none more than one quantization step
apart) is :data:`IDENTICAL` / :data:`MAX_STEPS`. Needs onnxruntime (``pip install "tvm-npu[test]"``).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from tvm_npu.tools.quant_error import with_outputs

IDENTICAL = 0.999  # the per-layer standard: share of elements identical ...
MAX_STEPS = 1  # ... and no element further apart than this many quantization steps

LEVELS = ("basic", "default")


MOVES = {"Transpose", "Pad", "Squeeze", "Reshape", "DequantizeLinear", "QuantizeLinear", "Clip", "Relu"}


def steps(got: np.ndarray, ref: np.ndarray) -> tuple[float, int]:
    """(share of elements identical, largest difference in quantization steps) of two 8-bit tensors."""
    if got.shape != ref.shape:
        raise ValueError(f"shapes differ: {got.shape} against {ref.shape}")
    d = np.abs(got.astype(np.int64) - ref.astype(np.int64))
    return float((d == 0).mean()), int(d.max(initial=0))


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], level: str) -> list[np.ndarray]:
    """onnxruntime on the CPU at ``basic`` (ORT_ENABLE_BASIC) or ``default`` (ORT_ENABLE_ALL)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if level == "basic":
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def ort_kernels(model: onnx.ModelProto) -> dict[str, int]:
    """The operators onnxruntime's default level runs ``model`` with (its optimized graph): which layers it
    runs in integer kernels (QLinearConv, QLinearAdd, ...) and which in float (Conv, FusedConv)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="vela_compare.") as tmp:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        counts = Counter(n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node)
    return dict(counts.most_common())


@dataclass(frozen=True)
class Layer:
    """A quantized layer: the nodes from 8-bit tensors (``inputs``) to one QuantizeLinear's ``output``."""

    output: str
    inputs: tuple[str, ...]
    op: str  # its main operator (Conv, Add, MatMul, ...)


def quantized_layers(model: onnx.ModelProto) -> list[Layer]:
    """Every QuantizeLinear output of ``model`` with the 8-bit tensors (QuantizeLinear outputs or 8-bit graph
    inputs) its computation starts from, in graph order. The quantize of a float graph input (a
    ``quantize_static`` model's own input) starts from no 8-bit tensor: it is not a layer."""
    inits = {t.name for t in model.graph.initializer}
    eight_bit = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16, onnx.TensorProto.UINT16)
    graph_inputs = {i.name for i in model.graph.input if i.type.tensor_type.elem_type in eight_bit} - inits
    producer = {o: n for n in model.graph.node for o in n.output}
    quantized = {n.output[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    layers = []
    for q in model.graph.node:
        if q.op_type != "QuantizeLinear":
            continue
        inputs, ops, seen, stack = set(), [], set(), [q.input[0]]
        while stack:
            t = stack.pop()
            if not t or t in inits or t in seen:
                continue
            seen.add(t)
            if t in quantized or t in graph_inputs:
                inputs.add(t)
            elif t in producer:
                ops.append(producer[t].op_type)
                stack.extend(producer[t].input)
        main = [o for o in ops if o not in MOVES]
        if inputs:
            layers.append(Layer(q.output[0], tuple(sorted(inputs)), main[0] if main else ops[0] if ops else "Q"))
    return layers


def quant_params(model: onnx.ModelProto) -> dict[str, tuple[str, str]]:
    """(scale, zero point) initializer names of every 8-bit tensor: its QuantizeLinear's, or for a graph
    input the DequantizeLinear's that reads it (through the data movement before it: MobileNetV2's input
    is transposed to NCHW first)."""
    params = {n.output[0]: (n.input[1], n.input[2]) for n in model.graph.node if n.op_type == "QuantizeLinear"}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for t in n.input:
            readers.setdefault(t, []).append(n)
    for vi in model.graph.input:
        frontier = [vi.name]
        while frontier and vi.name not in params:
            node = next((n for n in readers.get(frontier.pop(), []) if n.op_type in MOVES), None)
            if node is not None and node.op_type == "DequantizeLinear":
                params[vi.name] = (node.input[1], node.input[2])
            elif node is not None:
                frontier.append(node.output[0])
    return params


def deployed_form(layer_model: onnx.ModelProto, params: dict[str, tuple[str, str]],
                  constants: dict[str, onnx.TensorProto]) -> onnx.ModelProto:
    """A layer between float tensors: float input -> QuantizeLinear -> the layer -> DequantizeLinear ->
    float output, the form in which onnxruntime's default level runs it in its integer kernels
    (QLinearConv, QLinearAdd, ...).

    With int8 graph inputs and outputs, or with every 8-bit tensor a graph output, it keeps the float path
    of ORT_ENABLE_BASIC (on x86 it rewrites int8 Q/DQ pairs inside the graph to uint8 before fusing). The
    float input is the dequantized int8 tensor (quantized back exactly) and the output is quantized back
    by :func:`requantize`.
    """
    out = onnx.ModelProto()
    out.CopyFrom(layer_model)
    have = {t.name for t in out.graph.initializer}
    needed = {q for vi in out.graph.input for q in params[vi.name]} | set(params[out.graph.output[0].name])
    out.graph.initializer.extend(constants[q] for q in sorted(needed - have))
    head, inputs = [], []
    for vi in out.graph.input:
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        inputs.append(onnx.helper.make_tensor_value_info(f"{vi.name}:float", onnx.TensorProto.FLOAT, dims))
        head.append(onnx.helper.make_node("QuantizeLinear", [f"{vi.name}:float", *params[vi.name]], [vi.name]))
    result = out.graph.output[0].name
    nodes = [*head, *out.graph.node,
             onnx.helper.make_node("DequantizeLinear", [result, *params[result]], [f"{result}:float"])]
    del out.graph.input[:], out.graph.node[:], out.graph.output[:]
    out.graph.input.extend(inputs)
    out.graph.node.extend(nodes)
    out.graph.output.append(onnx.helper.make_tensor_value_info(f"{result}:float", onnx.TensorProto.FLOAT, None))
    return out


def dequantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    return ((x.astype(np.float32) - zero_point.astype(np.float32)) * scale).astype(np.float32)


def requantize(y: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The 8-bit tensor a dequantized one came from (exact: y is (q - zp) * scale in float32)."""
    info = np.iinfo(dtype)
    q = np.rint(y / scale) + zero_point.astype(np.float32)
    return np.clip(q, info.min, info.max).astype(dtype)


def layer_check(model: onnx.ModelProto, input_name: str, x: np.ndarray, target: str) -> dict[str, Any]:
    """Every quantized layer compiled alone and fed onnxruntime's input tensors for it (from its float path,
    ORT_ENABLE_BASIC, over the whole network), against onnxruntime's output of that layer at both levels."""
    import tvm_npu
    from tvm_npu.tools.bench import profile_model

    layers = quantized_layers(model)
    tensors = sorted({t for layer in layers for t in (layer.output, *layer.inputs)} - {input_name})
    probe = with_outputs(model, tensors)
    names = [o.name for o in probe.graph.output]
    ref = dict(zip(names, ort_run(probe, {input_name: x}, "basic"), strict=True))
    ref[input_name] = x
    params = quant_params(model)
    constants = {t.name: t for t in model.graph.initializer}
    value = {name: onnx.numpy_helper.to_array(t) for name, t in constants.items()}
    extractor = onnx.utils.Extractor(model)
    rows = []
    for n, layer in enumerate(layers):
        sub = extractor.extract_model(list(layer.inputs), [layer.output])
        feeds = [ref[t] for t in layer.inputs]
        scale, zero_point = (value[q] for q in params[layer.output])
        deployed = deployed_form(sub, params, constants)
        floats = {f"{t}:float": dequantize(a, *(value[q] for q in params[t]))
                  for t, a in zip(layer.inputs, feeds, strict=True)}
        default = requantize(ort_run(deployed, floats, "default")[0], scale, zero_point, ref[layer.output].dtype)
        ex, info = tvm_npu.build_with_info(sub, target)
        got = profile_model(ex, feeds)[0][0]
        row: dict[str, Any] = {"layer": layer.output, "op": layer.op, "host_ops": sum(info.host_ops.values()),
                               "basic": steps(got, ref[layer.output]), "default": steps(got, default),
                               "ort_default_vs_basic": steps(default, ref[layer.output])}
        rows.append(row)
        print(f"  layer {n + 1}/{len(layers)} {layer.op:18s} " + "  ".join(
            f"{k} {row[k][0]:.4%} max {row[k][1]}" for k in (*LEVELS, "ort_default_vs_basic")), flush=True)
    summary = {}
    for key in (*LEVELS, "ort_default_vs_basic"):
        worst = min(rows, key=lambda r: r[key][0])
        summary[key] = {"min_identical": worst[key][0], "min_identical_layer": worst["layer"],
                        "max_steps": max(r[key][1] for r in rows),
                        "layers_meeting": sum(r[key][0] >= IDENTICAL and r[key][1] <= MAX_STEPS for r in rows)}
    hosted = [r["op"] for r in rows if r["host_ops"]]
    return {"layers": len(rows), "summary": summary, "layers_with_host_ops": hosted, "rows": rows}


def logits_of(model: onnx.ModelProto) -> str | None:
    """The 8-bit tensor the classifier's Softmax dequantizes, if there is one."""
    producer = {o: n for n in model.graph.node for o in n.output}
    for n in model.graph.node:
        if n.op_type == "Softmax" and n.input[0] in producer and producer[n.input[0]].op_type == "DequantizeLinear":
            return producer[n.input[0]].input[0]
    return None


def end_to_end_check(model: onnx.ModelProto, input_name: str, x: np.ndarray, target: str) -> dict[str, Any]:
    """The whole network (and its logits, as an extra output) on the NPU against onnxruntime's levels."""
    import tvm_npu
    from tvm_npu.tools.bench import profile_model

    logits = logits_of(model)
    probe = with_outputs(model, [logits] if logits else [])
    names = ["output", "logits"][:len(probe.graph.output)]
    ref = {level: ort_run(probe, {input_name: x}, level) for level in LEVELS}
    got = profile_model(tvm_npu.build(probe, target), [x])[0]
    out: dict[str, Any] = {}
    for k, name in enumerate(names):
        out[name] = {f"npu_vs_{level}": steps(got[k], ref[level][k]) for level in LEVELS}
        out[name]["ort_default_vs_basic"] = steps(ref["default"][k], ref["basic"][k])
    return out
