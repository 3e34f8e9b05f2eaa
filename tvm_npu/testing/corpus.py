"""Exporter-style models nobody on the team wrote, built with ``onnx.helper`` (issues 24 and 26).

Each builder writes a small network of one family the way its usual exporter does - torch's
(``HardSwish`` as one operator, batch norms folded into convs, ``Split`` with a sizes input, nearest
``Resize`` with scales), tf2onnx's (Keras batch norms left as per-channel ``Mul`` + ``Add`` after a
``Concat``, ``ZeroPadding2D`` as a ``Pad``, hard-swish decomposed into ``Add``/``Clip``/``Mul``,
``ReduceMean`` with ``keepdims=0``, layer norm as reductions and elementwise operators) - with seeded
random weights scaled by fan-in, so that activations stay O(1) through the depth. Inputs are small
(64 x 64 or less) so that a whole model simulates in seconds. :data:`CORPUS` lists them by name;
``benchmarks/converter_corpus.py`` compiles each in fp32 and quantized by onnxruntime's
``quantize_static`` and reports what stays on the host. The models are not trained: they exercise
the operator forms, not accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

OPSET = 17


class Net:
    """Nodes and initializers added one by one (channels tracked by the caller); :meth:`model` closes the
    graph with onnx shape inference filling in the output's shape."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def _name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}_{self.n}"

    def const(self, values: np.ndarray | Sequence[float] | float, dtype: type = np.float32) -> str:
        name = self._name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def node(self, op: str, inputs: Sequence[str], outputs: int = 1, **attrs: object) -> str | list[str]:
        names = [self._name(op.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), names, name=names[0], **attrs))
        return names[0] if outputs == 1 else names

    def op(self, op: str, *inputs: str, **attrs: object) -> str:
        out = self.node(op, inputs, **attrs)
        assert isinstance(out, str)
        return out

    def weights(self, shape: Sequence[int], fan_in: int) -> str:
        return self.const(self.rng.standard_normal(tuple(shape)) / math.sqrt(fan_in))

    def conv(self, x: str, cin: int, cout: int, k: int = 1, s: int = 1, groups: int = 1, act: str = "relu",
             pad: bool = True) -> str:
        """Conv (bias, 'same' padding unless ``pad`` is False) and an activation (:meth:`act`)."""
        w = self.weights((cout, cin // groups, k, k), cin // groups * k * k)
        b = self.const(self.rng.standard_normal(cout) * 0.1)
        p = k // 2 if pad else 0
        y = self.op("Conv", x, w, b, kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, group=groups)
        return self.act(y, act)

    def act(self, x: str, kind: str) -> str:
        """``relu``, ``relu6`` (Clip with bound inputs), ``hardswish`` (the operator), ``hardswish_tf``
        (``x * Relu6(x + 3) / 6`` as tf2onnx writes it), ``swish`` (``x * Sigmoid(x)``), ``silu`` (the same,
        torch's spelling), ``hardsigmoid``, ``gelu`` (the ``Erf`` form), ``leaky``, or ``none``."""
        if kind == "relu":
            return self.op("Relu", x)
        if kind == "relu6":
            return self.op("Clip", x, self.const(0.0), self.const(6.0))
        if kind == "hardswish":
            return self.op("HardSwish", x)
        if kind == "hardswish_tf":
            r6 = self.op("Clip", self.op("Add", x, self.const(3.0)), self.const(0.0), self.const(6.0))
            return self.op("Mul", self.op("Mul", x, r6), self.const(1 / 6))
        if kind in ("swish", "silu"):
            return self.op("Mul", x, self.op("Sigmoid", x))
        if kind == "hardsigmoid":
            return self.op("HardSigmoid", x, alpha=1 / 6, beta=0.5)
        if kind == "gelu":
            inner = self.op("Add", self.op("Erf", self.op("Div", x, self.const(math.sqrt(2)))), self.const(1.0))
            return self.op("Mul", self.op("Mul", x, inner), self.const(0.5))
        if kind == "leaky":
            return self.op("LeakyRelu", x, alpha=0.1)
        assert kind == "none", kind
        return x

    def bn(self, x: str, c: int) -> str:
        """A Keras batch norm as tf2onnx leaves it after a Concat: ``x * a + b`` by per-channel constants."""
        a = self.const(self.rng.uniform(0.5, 1.5, (1, c, 1, 1)))
        return self.op("Add", self.op("Mul", x, a), self.const(self.rng.standard_normal((1, c, 1, 1)) * 0.1))

    def se(self, x: str, c: int, gate: str = "hardsigmoid", squeeze: int = 4) -> str:
        """Squeeze-excitation: global pool -> 1x1 conv -> ReLU -> 1x1 conv -> gate -> times the features."""
        mid = max(8, c // squeeze)
        g = self.conv(self.conv(self.op("GlobalAveragePool", x), c, mid), mid, c, act="none")
        return self.op("Mul", x, self.op("Sigmoid", g) if gate == "sigmoid" else self.act(g, gate))

    def model(self, y: str, in_shape: Sequence[int], name: str) -> onnx.ModelProto:
        """The graph from input ``x`` to ``y``, opset :data:`OPSET`, checked, the output's shape inferred."""
        graph = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                   list(in_shape))],
                                  [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        model = shape_inference.infer_shapes(model, strict_mode=True)
        onnx.checker.check_model(model, full_check=True)
        return model


# ------------------------------------------------------------------------------ classifiers
def _head(net: Net, x: str, c: int, classes: int = 10, keepdims: bool = True) -> str:
    """Global average pool -> classifier: torch's ``GlobalAveragePool -> Flatten -> Gemm``, or the Keras
    head ``ReduceMean(axes=[2, 3], keepdims=0) -> MatMul -> Add``."""
    if keepdims:
        flat = net.op("Flatten", net.op("GlobalAveragePool", x))
        return net.op("Gemm", flat, net.weights((classes, c), c), net.const(np.zeros(classes)), transB=1)
    mean = net.op("ReduceMean", x, axes=[2, 3], keepdims=0)
    return net.op("Add", net.op("MatMul", mean, net.weights((c, classes), c)), net.const(np.zeros(classes)))


def mobilenet_v3() -> onnx.ModelProto:
    """MobileNetV3-style (torch): hard-swish stem, inverted residuals with squeeze-excitation gated by
    ``HardSigmoid``, ReLU and hard-swish blocks, 1x1 head conv."""
    net = Net(1)
    x = net.conv("x", 3, 16, 3, 2, act="hardswish")
    c = 16
    for expand, out, k, s, se, act in ((16, 16, 3, 2, True, "relu"), (64, 24, 3, 2, False, "relu"),
                                       (72, 24, 3, 1, False, "relu"), (96, 40, 5, 2, True, "hardswish"),
                                       (240, 40, 5, 1, True, "hardswish")):
        y = net.conv(x, c, expand, act=act) if expand != c else x
        y = net.conv(y, expand, expand, k, s, groups=expand, act=act)
        y = net.se(y, expand) if se else y
        y = net.conv(y, expand, out, act="none")
        x = net.op("Add", x, y) if s == 1 and out == c else y
        c = out
    x = net.conv(x, c, 96, act="hardswish")
    return net.model(_head(net, x, 96), (1, 3, 64, 64), "mobilenet_v3")


def efficientnet() -> onnx.ModelProto:
    """EfficientNet-style (tf2onnx): swish as ``x * Sigmoid(x)``, MBConv blocks with ``Sigmoid``-gated
    squeeze-excitation, the Keras head (``ReduceMean`` without keepdims)."""
    net = Net(2)
    x = net.conv("x", 3, 16, 3, 2, act="swish")
    c = 16
    for expand, out, k, s in ((16, 16, 3, 1), (64, 24, 3, 2), (96, 24, 3, 1), (96, 40, 5, 2)):
        y = net.conv(x, c, expand, act="swish") if expand != c else x
        y = net.se(net.conv(y, expand, expand, k, s, groups=expand, act="swish"), expand, gate="sigmoid")
        y = net.conv(y, expand, out, act="none")
        x = net.op("Add", x, y) if s == 1 and out == c else y
        c = out
    x = net.conv(x, c, 128, act="swish")
    return net.model(_head(net, x, 128, keepdims=False), (1, 3, 64, 64), "efficientnet")


def densenet() -> onnx.ModelProto:
    """DenseNet-style (tf2onnx): Keras ``ZeroPadding2D`` as a ``Pad`` before the stem conv and max pool,
    dense blocks whose batch norms are per-channel ``Mul`` + ``Add`` after each ``Concat``, average-pool
    transitions, the ``keepdims=0`` mean head."""
    net = Net(3)
    pads = net.const([0, 0, 3, 3, 0, 0, 3, 3], np.int64)
    x = net.conv(net.op("Pad", "x", pads), 3, 32, 7, 2, pad=False)
    x = net.op("MaxPool", net.op("Pad", x, net.const([0, 0, 1, 1, 0, 0, 1, 1], np.int64)), kernel_shape=[3, 3],
               strides=[2, 2])
    c, growth = 32, 16
    for block in range(2):
        for _ in range(3):
            y = net.conv(net.op("Relu", net.bn(x, c)), c, 4 * growth, act="none")
            y = net.conv(net.op("Relu", net.bn(y, 4 * growth)), 4 * growth, growth, 3, act="none")
            x, c = net.op("Concat", x, y, axis=1), c + growth
        if block == 0:
            x = net.conv(net.op("Relu", net.bn(x, c)), c, c // 2, act="none")
            x, c = net.op("AveragePool", x, kernel_shape=[2, 2], strides=[2, 2]), c // 2
    return net.model(_head(net, net.op("Relu", net.bn(x, c)), c, keepdims=False), (1, 3, 64, 64), "densenet")


def resnet_v2() -> onnx.ModelProto:
    """Pre-activation ResNetV2-style (tf2onnx): ``Pad`` + 7x7 stem, zero-padded max pool, bottlenecks whose
    batch norms are ``Mul`` + ``Add`` before the ReLU, stride-2 shortcuts as a 1x1 max pool."""
    net = Net(4)
    x = net.conv(net.op("Pad", "x", net.const([0, 0, 3, 3, 0, 0, 3, 3], np.int64)), 3, 32, 7, 2, pad=False,
                 act="none")
    x = net.op("MaxPool", net.op("Pad", x, net.const([0, 0, 1, 1, 0, 0, 1, 1], np.int64)), kernel_shape=[3, 3],
               strides=[2, 2])
    c = 32
    for out, s in ((64, 1), (64, 2), (128, 1)):
        pre = net.op("Relu", net.bn(x, c))
        if s == 2:
            short = net.op("MaxPool", x, kernel_shape=[1, 1], strides=[2, 2])
        else:
            short = x if out == c else net.conv(pre, c, out, act="none")
        y = net.conv(pre, c, out // 4, act="none")
        y = net.conv(net.op("Relu", net.bn(y, out // 4)), out // 4, out // 4, 3, s, act="none")
        y = net.conv(net.op("Relu", net.bn(y, out // 4)), out // 4, out, act="none")
        x, c = net.op("Add", short, y), out
    return net.model(_head(net, net.op("Relu", net.bn(x, c)), c, keepdims=False), (1, 3, 64, 64), "resnet_v2")


def pp_lcnet() -> onnx.ModelProto:
    """PP-LCNet-style (paddle2onnx): depthwise-separable hard-swish blocks, squeeze-excitation in the last
    stage, a 1x1 conv after the global pool, ``Flatten`` and ``MatMul``."""
    net = Net(5)
    x = net.conv("x", 3, 16, 3, 2, act="hardswish")
    c = 16
    for out, k, s, se in ((32, 3, 1, False), (64, 3, 2, False), (64, 3, 1, False), (128, 5, 2, True),
                          (128, 5, 1, True)):
        x = net.conv(x, c, c, k, s, groups=c, act="hardswish")
        x = net.se(x, c) if se else x
        x, c = net.conv(x, c, out, act="hardswish"), out
    x = net.conv(net.op("GlobalAveragePool", x), c, 256, act="hardswish")
    flat = net.op("Flatten", x)
    return net.model(net.op("MatMul", flat, net.weights((256, 10), 256)), (1, 3, 64, 64), "pp_lcnet")


# ------------------------------------------------------------------------------ detectors
def _c2f(net: Net, x: str, c: int, act: str = "silu") -> str:
    """YOLOv8's C2f: 1x1 conv, ``Split`` in two, a bottleneck on the second half, ``Concat``, 1x1 conv."""
    y = net.conv(x, c, c, act=act)
    a, b = net.node("Split", [y, net.const([c // 2, c // 2], np.int64)], outputs=2, axis=1)
    m = net.conv(net.conv(b, c // 2, c // 2, 3, act=act), c // 2, c // 2, 3, act=act)
    return net.conv(net.op("Concat", a, b, net.op("Add", b, m), axis=1), 3 * c // 2, c, act=act)


def _sppf(net: Net, x: str, c: int) -> str:
    """SPPF: three chained 5x5 stride-1 max pools, concatenated with their input."""
    y = net.conv(x, c, c // 2, act="silu")
    pools = [y]
    for _ in range(3):
        pools.append(net.op("MaxPool", pools[-1], kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[1, 1]))
    return net.conv(net.op("Concat", *pools, axis=1), 2 * c, c, act="silu")


def _dfl(net: Net, box: str, anchors: int, reg: int = 16) -> str:
    """YOLOv8's distribution focal loss decode: ``[1, 4 * reg, A] -> [1, 4, reg, A] -> Transpose ->
    Softmax(axis=1) -> 1x1 conv with weights 0..reg-1``."""
    r = net.op("Reshape", box, net.const([1, 4, reg, anchors], np.int64))
    s = net.op("Softmax", net.op("Transpose", r, perm=[0, 2, 1, 3]), axis=1)
    w = net.const(np.arange(reg, dtype=np.float32).reshape(1, reg, 1, 1))
    return net.op("Reshape", net.op("Conv", s, w), net.const([1, 4, anchors], np.int64))


def yolov8() -> onnx.ModelProto:
    """YOLOv8-style (ultralytics' torch export): SiLU convs, C2f blocks with ``Split``, SPPF, a neck with
    nearest ``Resize`` (scales) and ``Concat``, and a DFL box head (softmax over axis 1)."""
    net = Net(6)
    x = net.conv(net.conv("x", 3, 16, 3, 2, act="silu"), 16, 32, 3, 2, act="silu")
    p3 = _c2f(net, x, 32)
    p4 = _sppf(net, _c2f(net, net.conv(p3, 32, 64, 3, 2, act="silu"), 64), 64)
    up = net.op("Resize", p4, "", net.const([1, 1, 2, 2]), mode="nearest")
    n3 = _c2f(net, net.conv(net.op("Concat", up, p3, axis=1), 96, 32, act="silu"), 32)
    box = net.op("Conv", n3, net.weights((64, 32, 1, 1), 32), net.const(np.zeros(64)))
    anchors = 16 * 16
    flat = net.op("Reshape", box, net.const([1, 64, anchors], np.int64))
    return net.model(_dfl(net, flat, anchors), (1, 3, 64, 64), "yolov8")


# ------------------------------------------------------------------------------ transformers
def _layer_norm_tf(net: Net, x: str, c: int) -> str:
    """Keras ``LayerNormalization`` as tf2onnx writes it: ``x * s + (beta - mean * s)`` with
    ``s = gamma / sqrt(var + eps)``, the variance a mean of squared differences."""
    mean = net.op("ReduceMean", x, axes=[-1], keepdims=1)
    d = net.op("Sub", x, mean)
    var = net.op("ReduceMean", net.op("Mul", d, d), axes=[-1], keepdims=1)
    inv = net.op("Reciprocal", net.op("Sqrt", net.op("Add", var, net.const(1e-3))))
    scale = net.op("Mul", inv, net.const(net.rng.uniform(0.5, 1.5, c)))
    shift = net.op("Add", net.op("Mul", net.op("Neg", mean), scale), net.const(net.rng.standard_normal(c) * 0.1))
    return net.op("Add", net.op("Mul", x, scale), shift)


def _dense(net: Net, x: str, cin: int, cout: int) -> str:
    return net.op("Add", net.op("MatMul", x, net.weights((cin, cout), cin)), net.const(np.zeros(cout)))


def _attention(net: Net, x: str, tokens: int, c: int, heads: int) -> str:
    """Multi-head self-attention as tf2onnx writes a Keras ``MultiHeadAttention``: per-head reshapes and
    transposes around two batched ``MatMul``s, the scores scaled by ``1 / sqrt(d)`` before ``Softmax``."""
    d = c // heads
    split = net.const([1, tokens, heads, d], np.int64)
    q, k, v = (net.op("Reshape", _dense(net, x, c, c), split) for _ in range(3))
    scores = net.op("MatMul", net.op("Transpose", q, perm=[0, 2, 1, 3]), net.op("Transpose", k, perm=[0, 2, 3, 1]))
    probs = net.op("Softmax", net.op("Mul", scores, net.const(1 / math.sqrt(d))), axis=-1)
    ctx = net.op("Transpose", net.op("MatMul", probs, net.op("Transpose", v, perm=[0, 2, 1, 3])), perm=[0, 2, 1, 3])
    return _dense(net, net.op("Reshape", ctx, net.const([1, tokens, c], np.int64)), c, c)


def vit_encoder() -> onnx.ModelProto:
    """A Keras ViT encoder (tf2onnx): 8x8 patch conv, two pre-norm blocks (tf2onnx layer norm, attention,
    GELU MLP), a final layer norm, the mean over tokens and a classifier."""
    net = Net(7)
    c, tokens = 64, 16
    x = net.conv("x", 3, c, 8, 8, act="none", pad=False)
    x = net.op("Transpose", net.op("Reshape", x, net.const([1, c, tokens], np.int64)), perm=[0, 2, 1])
    for _ in range(2):
        x = net.op("Add", x, _attention(net, _layer_norm_tf(net, x, c), tokens, c, 4))
        mlp = _dense(net, net.act(_dense(net, _layer_norm_tf(net, x, c), c, 2 * c), "gelu"), 2 * c, c)
        x = net.op("Add", x, mlp)
    pooled = net.op("ReduceMean", _layer_norm_tf(net, x, c), axes=[1], keepdims=0)
    return net.model(_dense(net, pooled, c, 10), (1, 3, 32, 32), "vit_encoder")


CORPUS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mobilenet_v3": mobilenet_v3,
    "efficientnet": efficientnet,
    "densenet": densenet,
    "resnet_v2": resnet_v2,
    "pp_lcnet": pp_lcnet,
    "yolov8": yolov8,
    "vit_encoder": vit_encoder,
}
