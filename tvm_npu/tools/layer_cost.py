"""NPU cycles of each layer of a QDQ model in each precision, by the datasheet's bound.

``cycles = max(MACs / peak MACs per cycle of the operand type, DRAM bytes / DRAM bytes per cycle)``, the
formula :func:`tvm_npu.report.layers.layer_bound` applies to compiled layers, with the rates read from
the target's :class:`~tvm_npu.config.HardwareConfig` (so the 16-bit rate is whatever the target says). It
is computed here from the ONNX graph, before anything is compiled, because the precision search weighs
thousands of assignments and the compiled report's layers carry no ONNX names to map them back: a
layer's inputs, weights and output cross DRAM once; a layer with any 16-bit activation input runs the
tensor engine at the 16-bit rate; layers without MACs (pooling, elementwise, softmax) cost their bytes.
Fusion, which keeps some tensors on chip, makes real cycles lower; the measured figures come from
compiling (``benchmarks/mixed_precision.py``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import onnx

from tvm_npu.config import DType, HardwareConfig
from tvm_npu.tools.sqnr import fp32_name

#: The precisions a layer's activations can have, and the operand type the tensor engine computes in.
PRECISIONS = {"int8": DType.INT8, "int16": DType.INT16, "fp16": DType.FP16}
_WEIGHT_BYTES = {"int8": 1, "int16": 1, "fp16": 2}  # 16x8: int16 activations keep int8 weights
_QDQ = ("QuantizeLinear", "DequantizeLinear")


@dataclass(frozen=True)
class Layer:
    """A compute node of a QDQ model, its tensors named as in the fp32 model (a DequantizeLinear output
    is named by the fp32 tensor it restores)."""

    node: str
    op: str
    macs: int
    inputs: tuple[tuple[str, int], ...]  # activation tensors and their element counts
    weight_elems: int
    outputs: tuple[tuple[str, int], ...]


def _shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    g = onnx.shape_inference.infer_shapes(model).graph
    found = {t.name: list(t.dims) for t in g.initializer}  # (a float weight has no value_info)
    return found | {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
                    for vi in (*g.input, *g.value_info, *g.output) if vi.type.tensor_type.HasField("shape")}


def _macs(node: onnx.NodeProto, shapes: Mapping[str, list[int]], out_elems: int) -> int:
    """Multiply-accumulates of a Conv, ConvTranspose, MatMul or Gemm (0 for other operators)."""
    w = shapes.get(node.input[1], []) if len(node.input) > 1 else []
    if node.op_type == "Conv" and len(w) > 1 and all(w):
        return out_elems * math.prod(w[1:])  # each output: Cin/groups x kernel
    if node.op_type == "ConvTranspose" and len(w) > 1 and all(w):
        return math.prod(shapes.get(node.input[0], [0])) * math.prod(w[1:])
    a = shapes.get(node.input[0], [])
    if node.op_type in ("MatMul", "Gemm") and a:
        trans = node.op_type == "Gemm" and any(x.name == "transA" and x.i for x in node.attribute)
        return out_elems * a[-2 if trans else -1]
    return 0


def layers(model: onnx.ModelProto) -> list[Layer]:
    """The compute nodes of a QDQ (or fp32) model in graph order, Q/DQ pairs and constant folds left out."""
    shapes = _shapes(model)
    inits = {t.name for t in model.graph.initializer}
    restored: dict[str, str] = {}  # DequantizeLinear output -> the fp32 tensor it stands for
    constant = set(inits)  # tensors computed from initializers alone (weights)
    quantized_from: dict[str, str] = {}
    renamed: dict[str, str] = {}  # a graph output's producer's tensor -> the output's name (sqnr.fp32_name)
    for n in model.graph.node:
        if n.op_type == "QuantizeLinear":
            quantized_from[n.output[0]] = n.input[0]
        if all(i in constant for i in n.input if i):
            constant.update(n.output)
        elif n.op_type == "DequantizeLinear":
            source = quantized_from.get(n.input[0], n.input[0])
            restored[n.output[0]] = renamed[source] = fp32_name(source, n.output[0])
    found = []
    for n in model.graph.node:
        if n.op_type in _QDQ or all(i in constant for i in n.input if i):
            continue
        acts = tuple((restored.get(i, i), math.prod(shapes.get(i, [0]))) for i in n.input if i and i not in constant)
        weights = sum(math.prod(shapes.get(i, [0])) for i in n.input if i in constant)
        outs = tuple((renamed.get(o, o), math.prod(shapes.get(o, [0]))) for o in n.output if o)
        found.append(Layer(n.name or n.output[0], n.op_type, _macs(n, shapes, sum(e for _, e in outs)),
                           acts, weights, outs))
    return found


def layer_cycles(hw: HardwareConfig, layer: Layer, precision: Mapping[str, str] | str,
                 float_layers: Collection[str] = ()) -> float:
    """The datasheet bound of ``layer`` with each tensor in ``precision[tensor]`` (int8 when absent), or
    everything in one precision when a string; a layer named in ``float_layers`` (left in float by the
    quantizer) computes in fp16 whatever its tensors are.

    The tensor engine runs in the widest operand type among fp16, int16 and int8. An fp16 layer reading an
    integer tensor pays a conversion pass first (measured on compiled models: the dequantize is a vector
    pass of its own, reading the 8- or 16-bit tensor and writing fp16 to DRAM, which the layer then reads;
    ``tests/tools/test_sqnr_report.py`` checks it against the simulator), while an fp16 -> integer
    boundary is the producer's requantising epilogue and costs only the narrower store."""
    def of(t: str) -> str:
        return precision if isinstance(precision, str) else precision.get(t, "int8")

    kinds = {of(t) for t, _ in layer.inputs} or {of(layer.outputs[0][0]) if layer.outputs else "int8"}
    engine = "fp16" if "fp16" in kinds or layer.node in float_layers else "int16" if "int16" in kinds else "int8"
    converted = [(t, e) for t, e in layer.inputs if engine == "fp16" and of(t) != "fp16"]
    read = {t: "fp16" for t, _ in converted}  # the layer reads the fp16 copy
    nbytes = sum(e * PRECISIONS[read.get(t, of(t))].itemsize for t, e in (*layer.inputs, *layer.outputs))
    nbytes += layer.weight_elems * _WEIGHT_BYTES[engine]
    compute = layer.macs / hw.peak_macs_per_cycle(PRECISIONS[engine]) if layer.macs else 0.0
    conversion = sum(e * (PRECISIONS[of(t)].itemsize + PRECISIONS["fp16"].itemsize) for t, e in converted)
    return max(compute, nbytes / hw.dram_bytes_per_cycle) + conversion / hw.dram_bytes_per_cycle


def model_cycles(hw: HardwareConfig, model_layers: list[Layer], precision: Mapping[str, str] | str,
                 float_layers: Collection[str] = ()) -> float:
    """The sum of the layers' bounds (see :func:`layer_cycles`)."""
    return sum(layer_cycles(hw, x, precision, float_layers) for x in model_layers)
