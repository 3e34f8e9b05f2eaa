"""Small ONNX models whose inputs have symbolic dimensions, written as the exporters write them.

The tests of the JIT route and ``benchmarks/dynamic_shapes.py`` share them: a variable-width text
recogniser (paddle2onnx's ``p2o.DynamicDimension.N`` names; conv stem, then a small transformer block
with LayerNorm), a detector with symbolic ``H`` and ``W`` (an FPN with nearest upsampling), an
ultralytics-style YOLO (``batch`` / ``height`` / ``width``; SiLU, an SPPF block) and a classifier
declared ``[-1, 3, '?', '?']`` (anonymous dimensions). Built with ``onnx.helper`` and checked; weights
are seeded and scaled by fan-in so activations stay O(1). :data:`MODELS` lists them with the shapes the
benchmark runs (every one a valid input: the detectors' sizes are multiples of their stride).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: The opset the models declare (LayerNormalization is opset 17).
OPSET = 17


class _Net:
    """Nodes and seeded initializers added one by one (one input ``x``)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, values: np.ndarray, dtype: type = np.float32) -> str:
        name = f"w{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs: object) -> str:
        out = f"{op.lower()}{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int = 3, stride: int = 1, act: str | None = "Relu") -> str:
        """k x k convolution with bias, 'same' padding, then ``act`` (``"Silu"``: x * sigmoid(x), as exported)."""
        w = self.const(self.rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k))
        b = self.const(self.rng.standard_normal(cout) * 0.1)
        y = self.node("Conv", [x, w, b], pads=[k // 2] * 4, strides=[stride, stride])
        if act == "Silu":
            return self.node("Mul", [y, self.node("Sigmoid", [y])])
        return self.node(act, [y]) if act else y

    def matmul(self, x: str, din: int, dout: int, bias: bool = True) -> str:
        y = self.node("MatMul", [x, self.const(self.rng.standard_normal((din, dout)) / np.sqrt(din))])
        return self.node("Add", [y, self.const(self.rng.standard_normal(dout) * 0.1)]) if bias else y

    def layer_norm(self, x: str, d: int) -> str:
        scale = self.const(1.0 + 0.1 * self.rng.standard_normal(d))
        return self.node("LayerNormalization", [x, scale, self.const(0.1 * self.rng.standard_normal(d))],
                         axis=-1, epsilon=1e-5)

    def model(self, y: str, in_shape: list, out_shape: list, name: str) -> onnx.ModelProto:
        """The checked model from ``x`` to ``y``; a dimension of ``-1`` is written as ``dim_value: -1`` (paddle2onnx),
        which ``helper.make_tensor_value_info`` does not write."""
        graph = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                                  [helper.make_tensor_value_info(y, TensorProto.FLOAT, out_shape)], self.inits)
        shape = graph.input[0].type.tensor_type.shape
        for d in in_shape:
            dim = shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            else:
                dim.dim_param = d
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=name)
        onnx.checker.check_model(model, full_check=True)
        return model


def recogniser(seed: int = 0, d: int = 32) -> onnx.ModelProto:
    """``x: [p2o.DynamicDimension.0, 3, 32, p2o.DynamicDimension.1]`` (paddle2onnx): a conv stem to height 1,
    a sequence of width / 4, one pre-norm transformer block (single-head attention, MLP) and per-step class
    scores. Widths 32..1024 (multiples of 4)."""
    net = _Net(seed)
    y = net.conv("x", 3, 16, 3, stride=2)
    y = net.conv(y, 16, d, 3, stride=2)
    y = net.node("Conv", [y, net.const(net.rng.standard_normal((d, d, 8, 1)) / np.sqrt(8 * d))],
                 strides=[8, 1])                                         # [N, d, 1, T]
    t = net.node("Transpose", [net.node("Squeeze", [y, net.const([2], np.int64)])], perm=[0, 2, 1])  # [N, T, d]
    h = net.layer_norm(t, d)
    q, k, v = (net.matmul(h, d, d) for _ in range(3))
    scores = net.node("Mul", [net.node("MatMul", [q, net.node("Transpose", [k], perm=[0, 2, 1])]),
                              net.const(np.float32(1 / np.sqrt(d)))])
    att = net.node("MatMul", [net.node("Softmax", [scores], axis=-1), v])
    t = net.node("Add", [t, net.matmul(att, d, d)])
    mlp = net.matmul(net.node("Relu", [net.matmul(net.layer_norm(t, d), d, 2 * d)]), 2 * d, d)
    t = net.node("Add", [t, mlp])
    y = net.node("Softmax", [net.matmul(net.layer_norm(t, d), d, 40)], axis=-1)
    return net.model(y, ["p2o.DynamicDimension.0", 3, 32, "p2o.DynamicDimension.1"],
                     ["p2o.DynamicDimension.0", "p2o.DynamicDimension.2", 40], "recogniser")


def _upsample(net: _Net, x: str) -> str:
    """Nearest 2x upsampling as exporters write it: Resize with scales (no roi, no sizes)."""
    return net.node("Resize", [x, "", net.const([1.0, 1.0, 2.0, 2.0])], mode="nearest",
                    coordinate_transformation_mode="asymmetric", nearest_mode="floor")


def detector(seed: int = 0) -> onnx.ModelProto:
    """``x: [1, 3, H, W]``: three stride-2 stages, an FPN (1x1 laterals, nearest 2x upsampling, adds) and a
    per-pixel score map at H/2 x W/2. H and W multiples of 8."""
    net = _Net(seed)
    c1 = net.conv("x", 3, 8, 3, stride=2)
    c2 = net.conv(c1, 8, 16, 3, stride=2)
    c3 = net.conv(c2, 16, 32, 3, stride=2)
    p3 = net.conv(c3, 32, 16, 1, act=None)
    p2 = net.node("Add", [net.conv(c2, 16, 16, 1, act=None), _upsample(net, p3)])
    p1 = net.node("Add", [net.conv(c1, 8, 16, 1, act=None), _upsample(net, p2)])
    y = net.node("Sigmoid", [net.conv(net.conv(p1, 16, 8, 3), 8, 1, 1, act=None)])
    return net.model(y, [1, 3, "H", "W"], [1, 1, "H2", "W2"], "detector")


def yolo(seed: int = 0) -> onnx.ModelProto:
    """``images: ['batch', 3, 'height', 'width']`` as ultralytics exports it (input renamed ``x`` here for the
    shared harness): SiLU convs to stride 4, a residual bottleneck, SPPF (three 5x5 max-pools, concat) and a
    1x1 detect head of 4 box + 2 class channels. Height and width multiples of 4."""
    net = _Net(seed)
    y = net.conv("x", 3, 8, 3, stride=2, act="Silu")
    y = net.conv(y, 8, 16, 3, stride=2, act="Silu")
    y = net.node("Add", [y, net.conv(net.conv(y, 16, 16, 3, act="Silu"), 16, 16, 3, act="Silu")])
    s = net.conv(y, 16, 8, 1, act="Silu")
    pools = [s]
    for _ in range(3):
        pools.append(net.node("MaxPool", [pools[-1]], kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[1, 1]))
    y = net.conv(net.node("Concat", pools, axis=1), 32, 16, 1, act="Silu")
    y = net.node("Sigmoid", [net.conv(y, 16, 6, 1, act=None)])
    return net.model(y, ["batch", 3, "height", "width"], ["batch", 6, "h4", "w4"], "yolo")


def classifier(seed: int = 0) -> onnx.ModelProto:
    """``x: [-1, 3, '?', '?']`` (each ``?`` its own dimension): convs, global average pooling, flatten, Gemm to
    4 orientation classes, softmax."""
    net = _Net(seed)
    y = net.conv("x", 3, 8, 3, stride=2)
    y = net.conv(y, 8, 16, 3)
    y = net.node("Flatten", [net.node("GlobalAveragePool", [y])], axis=1)
    w = net.const(net.rng.standard_normal((4, 16)) / 4.0)
    y = net.node("Softmax", [net.node("Gemm", [y, w, net.const(np.zeros(4))], transB=1)], axis=-1)
    return net.model(y, [-1, 3, "?", "?"], [None, 4], "classifier")


@dataclass(frozen=True)
class DynamicModel:
    """A model builder and the input shapes the benchmark runs it on."""

    name: str
    build: Callable[[], onnx.ModelProto]
    shapes: tuple[tuple[int, ...], ...]


MODELS = (
    DynamicModel("recogniser", recogniser, tuple((1, 3, 32, w) for w in (32, 64, 100, 160, 256, 320, 512, 1024))),
    DynamicModel("detector", detector, ((1, 3, 32, 32), (1, 3, 48, 64), (1, 3, 64, 48), (1, 3, 64, 64),
                                        (1, 3, 80, 96), (1, 3, 96, 128), (1, 3, 128, 96), (1, 3, 128, 128))),
    DynamicModel("yolo", yolo, ((1, 3, 32, 32), (2, 3, 32, 32), (1, 3, 48, 64), (1, 3, 64, 48), (1, 3, 64, 64),
                                (2, 3, 64, 96), (1, 3, 96, 96), (1, 3, 128, 128))),
    DynamicModel("classifier", classifier, ((1, 3, 16, 16), (2, 3, 16, 16), (1, 3, 24, 40), (1, 3, 40, 24),
                                            (1, 3, 32, 32), (3, 3, 48, 48), (1, 3, 64, 96), (1, 3, 96, 64))),
)
