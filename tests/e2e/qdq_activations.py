"""Small QDQ models of 8-bit activations, in the two forms quantizers write them (``onnx.helper`` only).

* ``quantize_static`` (onnxruntime): a Q -> DQ pair after every operator, so swish is
  ``DQ(x) * DQ(Q(Sigmoid(DQ(x))))`` and HardSwish's decomposition has a pair after each step;
* ``tflite`` (the TFLite converter's int8 activation exported by tf2onnx ``--tflite``): one DQ before and
  one Q after a float chain (HardSwish as ``x * Relu6(x + 3) / 6``, HardSigmoid + Mul, Sigmoid + Mul).

Activation bodies are written once, as calls on a :class:`QdqNet`, whose ``boundary`` inserts a Q -> DQ
pair only in the ``quantize_static`` form. :func:`mobilenet_v3_block` is the conv -> hard-swish ->
depthwise -> squeeze-and-excitation gate -> conv block of MobileNetV3 in the ``quantize_static`` form.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STYLES = ("quantize_static", "tflite")
SHAPE = [1, 8, 8, 8]


class QdqNet:
    """A QDQ graph under construction: float input ``x``, float output ``y`` (a DQ of the last Q)."""

    def __init__(self, style: str, seed: int = 0) -> None:
        self.style = style
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.n}"

    def const(self, value: object, dtype: str = "float32") -> str:
        name = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs: object) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def qdq(self, x: str, scale: float, zero_point: int) -> str:
        """``DQ(Q(x))`` with one scale and zero point (int8)."""
        s, z = self.const(scale), self.const(zero_point, "int8")
        return self.node("DequantizeLinear", [self.node("QuantizeLinear", [x, s, z]), s, z])

    def boundary(self, x: str, scale: float, zero_point: int = 0) -> str:
        """A Q -> DQ pair in the ``quantize_static`` form (after every operator); nothing in the ``tflite`` one."""
        return self.qdq(x, scale, zero_point) if self.style == "quantize_static" else x

    def conv(self, x: str, cin: int, cout: int, k: int = 1, group: int = 1, s_x: float = 0.05) -> str:
        """A conv with int8 per-channel weights and an int32 bias, each through its DequantizeLinear."""
        w = self.rng.standard_normal((cout, cin // group, k, k)) / np.sqrt(cin // group * k * k)
        s_w = (np.abs(w).reshape(cout, -1).max(axis=1) / 127).astype(np.float32)
        wq = np.clip(np.rint(w / s_w.reshape(-1, 1, 1, 1)), -127, 127)
        s_b = (np.float32(s_x) * s_w).astype(np.float32)
        bq = np.rint(self.rng.standard_normal(cout) * 0.1 / s_b)
        wf = self.node("DequantizeLinear", [self.const(wq, "int8"), self.const(s_w),
                                            self.const(np.zeros(cout), "int8")], axis=0)
        bf = self.node("DequantizeLinear", [self.const(bq, "int32"), self.const(s_b),
                                            self.const(np.zeros(cout), "int32")], axis=0)
        return self.node("Conv", [x, wf, bf], pads=[k // 2] * 4, group=group)

    def model(self, y: str, shape: list[int], out_shape: list[int] | None = None, opset: int = 17) -> onnx.ModelProto:
        self.nodes[-1].output[0] = "y"
        graph = helper.make_graph(self.nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape or shape)],
                                  self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        onnx.checker.check_model(model)
        del y
        return model


# ------------------------------------------------------------------------ activation bodies
def hard_swish(net: QdqNet, x: str) -> str:
    """``x * Relu6(x + 3) / 6`` (TFLite's hard_swish as tf2onnx decomposes it)."""
    shifted = net.boundary(net.node("Add", [x, net.const(3.0)]), 0.07, -43)
    relu6 = net.boundary(net.node("Clip", [shifted, net.const(0.0), net.const(6.0)]), 6 / 255, -128)
    return net.node("Div", [net.boundary(net.node("Mul", [x, relu6]), 0.2, -100), net.const(6.0)])


def hard_sigmoid_mul(net: QdqNet, x: str) -> str:
    """HardSigmoid + Mul (Keras' hard_swish as the converter writes it)."""
    gate = net.boundary(net.node("HardSigmoid", [x], alpha=1 / 6, beta=0.5), 1 / 255, -128)
    return net.node("Mul", [x, gate])


def swish(net: QdqNet, x: str) -> str:
    """Sigmoid + Mul (swish / SiLU)."""
    return net.node("Mul", [x, net.boundary(net.node("Sigmoid", [x]), 1 / 255, -128)])


def gelu_erf(net: QdqNet, x: str) -> str:
    """``x * 0.5 * (1 + erf(x / sqrt(2)))`` (GELU via Erf, as exporters decompose it)."""
    erf = net.boundary(net.node("Erf", [net.node("Div", [x, net.const(np.sqrt(2.0))])]), 2 / 255, 0)
    half = net.node("Mul", [x, net.const(0.5)])
    return net.node("Mul", [half, net.node("Add", [erf, net.const(1.0)])])


def mish(net: QdqNet, x: str) -> str:
    """``x * tanh(softplus(x))``."""
    return net.node("Mul", [x, net.node("Tanh", [net.node("Softplus", [x])])])


def single(op: str, **attrs: object) -> Callable[[QdqNet, str], str]:
    def body(net: QdqNet, x: str) -> str:
        return net.node(op, [x], **attrs)

    body.__name__ = op.lower()
    return body


def clip_exp(net: QdqNet, x: str) -> str:
    """``exp(clip(x, -4, 1))``: a composition of two operators."""
    return net.node("Exp", [net.node("Clip", [x, net.const(-4.0), net.const(1.0)])])


#: name -> (body, output scale, output zero point)
ACTIVATIONS: dict[str, tuple[Callable[[QdqNet, str], str], float, int]] = {
    "hard_swish": (hard_swish, 0.04, -118),
    "hard_sigmoid_mul": (hard_sigmoid_mul, 0.04, -118),
    "swish": (swish, 0.035, -120),
    "gelu_erf": (gelu_erf, 0.035, -123),
    "mish": (mish, 0.037, -120),
    "tanh": (single("Tanh"), 1 / 128, 0),
    "sigmoid": (single("Sigmoid"), 1 / 255, -128),
    "leaky_relu": (single("LeakyRelu", alpha=0.1), 0.03, -100),
    "clip_exp": (clip_exp, 2.72 / 255, -128),
}


def activation_model(name: str, style: str, s_in: float = 0.05, z_in: int = 3) -> onnx.ModelProto:
    """float ``x -> Q -> DQ -> activation -> Q -> DQ -> y``."""
    body, s_out, z_out = ACTIVATIONS[name]
    net = QdqNet(style)
    y = net.qdq(body(net, net.qdq("x", s_in, z_in)), s_out, z_out)
    return net.model(y, SHAPE)


def mobilenet_v3_block(style: str = "quantize_static", c: int = 16, size: int = 12) -> onnx.ModelProto:
    """conv 1x1 -> hard-swish -> depthwise 3x3 -> hard-swish -> SE (global pool, 1x1 conv, ReLU, 1x1 conv,
    HardSigmoid, a per-channel gate Mul) -> conv 1x1, quantized per tensor (activations) / channel (weights)."""
    net = QdqNet(style, seed=3)
    x = net.qdq("x", 0.03, 0)
    expand = net.qdq(net.conv(x, c, 2 * c, s_x=0.03), 0.06, 5)
    h1 = net.qdq(hard_swish(net, expand), 0.04, -118)
    dw = net.qdq(net.conv(h1, 2 * c, 2 * c, k=3, group=2 * c, s_x=0.04), 0.05, 2)
    h2 = net.qdq(hard_swish(net, dw), 0.04, -118)
    pooled = net.qdq(net.node("GlobalAveragePool", [h2]), 0.02, -100)
    squeeze = net.qdq(net.node("Relu", [net.conv(pooled, 2 * c, c // 2, s_x=0.02)]), 0.02, -128)
    excite = net.qdq(net.conv(squeeze, c // 2, 2 * c, s_x=0.02), 0.05, 0)
    gate = net.qdq(net.node("HardSigmoid", [excite], alpha=1 / 6, beta=0.5), 1 / 255, -128)
    scaled = net.qdq(net.node("Mul", [h2, gate]), 0.04, -118)
    out = net.qdq(net.conv(scaled, 2 * c, c, s_x=0.04), 0.08, 1)
    return net.model(out, [1, c, size, size])
