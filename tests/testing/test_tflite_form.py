"""The corpus in the TFLite converter + tf2onnx form (``tvm_npu.testing.tflite_form``): the quantization rules
that make it that form rather than ``quantize_static``'s, and that it still computes the float model."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest

from tvm_npu.testing.corpus import CORPUS
from tvm_npu.testing.layerwise import ort_run
from tvm_npu.testing.tflite_form import Quant, symmetric_per_channel, tflite_activation_quant, tflite_form


@functools.cache
def converted(name: str) -> onnx.ModelProto:
    return tflite_form(CORPUS[name]())


class Graph:
    """Lookups over one QDQ graph."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.nodes = list(model.graph.node)
        self.inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
        self.producer = {o: n for n in self.nodes for o in n.output}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for n in self.nodes:
            for t in n.input:
                self.readers.setdefault(t, []).append(n)

    def of(self, op: str) -> list[onnx.NodeProto]:
        return [n for n in self.nodes if n.op_type == op]

    def quant(self, q: onnx.NodeProto) -> Quant:
        return Quant(float(self.inits[q.input[1]]), int(self.inits[q.input[2]]))

    def source_quant(self, node: onnx.NodeProto) -> Quant:
        """The quantization of the int8 tensor ``node`` dequantizes and reads (through int8 data movements)."""
        q = self.producer[self.dequantized(node.input[0]).input[0]]
        while q.op_type != "QuantizeLinear":
            q = self.producer[q.input[0]]
        return self.quant(q)

    def quantize_after(self, node: onnx.NodeProto) -> onnx.NodeProto:
        """The QuantizeLinear that reads ``node``'s (only) output."""
        (reader,) = self.readers[node.output[0]]
        assert reader.op_type == "QuantizeLinear", (node.op_type, reader.op_type)
        return reader

    def dequantized(self, value: str) -> onnx.NodeProto:
        node = self.producer[value]
        assert node.op_type == "DequantizeLinear", (value, node.op_type)
        return node


def test_quantization_rules() -> None:
    """TFLite's activation parameters (the zero point from the minimum, half away from zero) and its
    symmetric per-channel weights."""
    assert tflite_activation_quant(0.0, 6.0) == Quant(float(np.float32(6 / 255)), -128)
    q = tflite_activation_quant(-1.0, 1.0)
    assert q.zero_point == -1 and q.scale == pytest.approx(2 / 255)
    assert tflite_activation_quant(0.0, 0.0) == Quant(1.0, -128)
    w = np.array([[1.0, -2.0], [0.0, 0.0], [0.5, 0.25]], np.float32)
    wq, scale = symmetric_per_channel(w, axis=0)
    assert wq.tolist() == [[64, -127], [0, 0], [127, 64]] and scale[1] == 1.0


def test_input_is_nhwc_float_transposed_as_int8() -> None:
    model = converted("densenet")
    g = Graph(model)
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 64, 64, 3] and model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    (q,) = g.readers["x"]
    assert q.op_type == "QuantizeLinear"
    (t,) = g.readers[q.output[0]]
    assert t.op_type == "Transpose" and list(t.attribute[0].ints) == [0, 3, 1, 2]
    out = model.graph.output[0]
    assert out.type.tensor_type.elem_type == onnx.TensorProto.FLOAT and g.producer[out.name].op_type == \
        "DequantizeLinear"


@pytest.mark.parametrize("name", ["mobilenet_v3", "vit_encoder"])
def test_weights_per_channel_and_biases_int32_at_sx_times_sw(name: str) -> None:
    g = Graph(converted(name))
    gemms = [n for n in g.nodes if n.op_type in ("Conv", "Gemm", "MatMul") and n.input[1] in
             {o for d in g.of("DequantizeLinear") if d.input[0] in g.inits for o in d.output}]
    assert gemms
    for node in gemms:
        wdq = g.dequantized(node.input[1])
        assert g.inits[wdq.input[0]].dtype == np.int8 and not g.inits[wdq.input[2]].any()
        assert np.abs(g.inits[wdq.input[0]]).max() == 127  # symmetric: each channel's extreme is +-127
        sx = np.float32(g.inits[g.dequantized(node.input[0]).input[1]])
        bias = node.input[2] if len(node.input) > 2 else None
        if bias is None:  # a fully connected MatMul: its bias is the next Add's int32 operand
            (add,) = g.readers[node.output[0]]
            bias = next(t for t in add.input if t != node.output[0])
        bdq = g.dequantized(bias)
        assert g.inits[bdq.input[0]].dtype == np.int32
        np.testing.assert_array_equal(g.inits[bdq.input[1]], (sx * g.inits[wdq.input[1]]).astype(np.float32))


def test_fixed_output_quantizations_and_single_operators() -> None:
    """LOGISTIC / SOFTMAX at 1/256 with -128; HARD_SWISH and GELU one quantized operator each."""
    for name, op in (("efficientnet", "Sigmoid"), ("yolov8", "Softmax"), ("vit_encoder", "Softmax")):
        g = Graph(converted(name))
        assert {g.quant(g.quantize_after(n)) for n in g.of(op)} == {Quant(1 / 256, -128)}, name
    g = Graph(converted("mobilenet_v3"))
    for hs in g.of("HardSwish"):
        g.quantize_after(hs)
        assert g.producer[hs.input[0]].op_type == "DequantizeLinear"
    g = Graph(converted("vit_encoder"))
    for erf in g.of("Erf"):  # no quantization from the GELU's input to its output
        arg = g.producer[erf.input[0]]
        assert g.producer[arg.input[0]].op_type == "DequantizeLinear"
        chain, node = [], erf
        while g.readers[node.output[0]][0].op_type != "QuantizeLinear":
            node = g.readers[node.output[0]][0]
            chain.append(node.op_type)
        assert chain == ["Add", "Mul", "Mul"]


def test_fused_activations_and_kept_quantizations() -> None:
    """ReLU after a conv or an add has no tensor of its own; MaxPool, Pad and Resize keep their input's
    quantization; Split and Reshape run on the int8 tensor."""
    g = Graph(converted("resnet_v2"))
    for relu in g.of("Relu"):
        assert g.producer[relu.input[0]].op_type in ("Conv", "Add")
    for n in g.of("MaxPool") + g.of("Pad"):
        assert g.quant(g.quantize_after(n)) == g.source_quant(n)
    g = Graph(converted("yolov8"))
    for n in g.of("Resize"):
        assert g.quant(g.quantize_after(n)) == g.source_quant(n)
    for n in g.of("Split") + g.of("Reshape"):
        assert g.producer[n.input[0]].op_type in ("QuantizeLinear", "Reshape", "Transpose", "Split")


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_the_form_computes_the_float_model(name: str) -> None:
    """On onnxruntime, the TFLite form of each model follows its float model to within the quantization
    error (measured: 0.6 % to 7 % of the output's range; a wrong conversion is far off)."""
    model = CORPUS[name]()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (want,) = ort_run(model, {"x": x}, "basic")
    (got,) = ort_run(converted(name), {"x": np.ascontiguousarray(x.transpose(0, 2, 3, 1))}, "basic")
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 0.12 * np.abs(want).max(), name
