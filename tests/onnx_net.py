"""A small ONNX graph under construction, as the end-to-end tests build theirs (``tests/`` is on
``sys.path``): named nodes, seeded random weights, one float input ``x`` and one output ``y``."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class OnnxNet:
    """Nodes and initializers added one by one; :meth:`model` closes the graph."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def _name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.n}"

    def const(self, values: np.ndarray, dtype: type = np.float32) -> str:
        name = self._name("w")
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs: object) -> str:
        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int = 1, relu: bool = True) -> str:
        """A k x k convolution with bias ('same' padding), then a ReLU unless ``relu=False``."""
        w = self.const(self.rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k))
        b = self.const(self.rng.standard_normal(cout) * 0.1)
        y = self.node("Conv", [x, w, b], pads=[k // 2] * 4)
        return self.node("Relu", [y]) if relu else y

    def model(self, y: str, in_shape: list[int], out_shape: list[int], name: str = "net") -> onnx.ModelProto:
        """The graph from input ``x`` of ``in_shape`` to ``y`` (renamed "y") of ``out_shape``, opset 13, checked."""
        self.nodes[-1].output[0] = "y"
        for node in self.nodes:  # the renamed result
            node.input[:] = ["y" if i == y else i for i in node.input]
        graph = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        onnx.checker.check_model(model)
        return model
