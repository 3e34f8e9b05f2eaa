"""Models to compile and check against: the light ONNX models shipped with the ``onnx``
package, a weight randomiser for them and the README's small CNN.

The light models carry constant weights (every weight is one repeated value, so every
logit is equal and the reference output is a flat softmax): a correct compiler and a
broken one can give the same answer. :func:`randomize_weights` replaces every weight
by seeded random values of a sensible scale so the comparison with llvm means something.
The backend tests' inputs are :func:`tvm_npu.models.inputs.backend_inputs`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

LIGHT_MODELS = ("resnet50", "squeezenet", "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2",
                "shufflenet", "vgg19", "zfnet512")


def light_model_path(name: str) -> Path:
    """Path of ``onnx/backend/test/data/light/light_<name>.onnx`` in the installed onnx package."""
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"
    if not path.is_file():
        raise FileNotFoundError(f"light model {name!r} is not shipped with this onnx ({path}); "
                                f"known: {', '.join(LIGHT_MODELS)}")
    return path


def _weight_values(rng: np.random.Generator, shape: tuple[int, ...], op: str, index: int) -> np.ndarray:
    """Random values for input ``index`` of an ``op`` node, scaled so activations stay O(1)."""
    if op in ("Conv", "Gemm", "MatMul") and index == 1 and len(shape) >= 2:
        fan_in = int(np.prod(shape[1:])) if op == "Conv" else int(shape[0] if op == "MatMul" else shape[1])
        return rng.normal(0.0, np.sqrt(1.0 / max(fan_in, 1)), shape)
    if op == "BatchNormalization":  # a mild contraction keeps deep residual stacks O(1)
        if index == 1:
            return rng.uniform(0.3, 0.7, shape)
        if index == 4:
            return rng.uniform(0.5, 1.5, shape)
        return rng.normal(0.0, 0.1, shape)  # bias, mean
    return rng.normal(0.0, 0.1, shape)


def randomize_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy of ``model`` whose constant weights (``ConstantOfShape`` outputs and float
    initializers feeding Conv/Gemm/MatMul/BatchNormalization/Add) are seeded random values."""
    rng = np.random.default_rng(seed)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    consumers: dict[str, tuple[str, int]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            consumers.setdefault(name, (node.op_type, i))
    keep, new_inits = [], []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits and node.output[0] in consumers:
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
            op, idx = consumers[node.output[0]]
            values = _weight_values(rng, shape, op, idx).astype(np.float32)
            new_inits.append(numpy_helper.from_array(values, node.output[0]))
            continue
        keep.append(node)
    for t in graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT and t.name in consumers:
            op, idx = consumers[t.name]
            arr = numpy_helper.to_array(t)
            t.CopyFrom(numpy_helper.from_array(_weight_values(rng, arr.shape, op, idx).astype(np.float32), t.name))
    del graph.node[:]
    graph.node.extend(keep)
    graph.initializer.extend(new_inits)
    if model.ir_version < 4:  # old IR: every initializer must also be listed as a graph input
        listed = {i.name for i in graph.input}
        graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                           for t in new_inits if t.name not in listed)
    onnx.checker.check_model(model)
    return model


def tiny_convnet(seed: int = 0) -> onnx.ModelProto:
    """A small residual CNN (conv/bn/relu, residual add, pools, dense) built with onnx.helper.

    Bundled as the README's main-job model: small enough to compile and simulate in
    seconds, with every operator kind the NPU runs and some the host keeps.
    """
    rng = np.random.default_rng(seed)
    inits = []

    def const(name: str, values: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(values.astype(np.float32), name))
        return name

    def conv(x: str, cin: int, cout: int, k: int, stride: int, name: str) -> list:
        w = const(f"{name}_w", rng.normal(0, np.sqrt(2 / (cin * k * k)), (cout, cin, k, k)))
        s = const(f"{name}_s", rng.uniform(0.5, 1.5, cout))
        b = const(f"{name}_b", rng.normal(0, 0.1, cout))
        m = const(f"{name}_m", rng.normal(0, 0.1, cout))
        v = const(f"{name}_v", rng.uniform(0.5, 1.5, cout))
        return [
            helper.make_node("Conv", [x, w], [f"{name}_c"], kernel_shape=[k, k], strides=[stride, stride],
                             pads=[k // 2] * 4),
            helper.make_node("BatchNormalization", [f"{name}_c", s, b, m, v], [f"{name}_bn"]),
        ]

    nodes = []
    nodes += conv("input", 3, 32, 3, 2, "stem")
    nodes.append(helper.make_node("Relu", ["stem_bn"], ["stem_r"]))
    nodes.append(helper.make_node("MaxPool", ["stem_r"], ["pool1"], kernel_shape=[3, 3], strides=[2, 2],
                                  pads=[1, 1, 1, 1]))
    nodes += conv("pool1", 32, 32, 3, 1, "b1a")
    nodes.append(helper.make_node("Relu", ["b1a_bn"], ["b1a_r"]))
    nodes += conv("b1a_r", 32, 32, 3, 1, "b1b")
    nodes.append(helper.make_node("Add", ["b1b_bn", "pool1"], ["b1_sum"]))
    nodes.append(helper.make_node("Relu", ["b1_sum"], ["b1_out"]))
    nodes += conv("b1_out", 32, 64, 3, 2, "b2a")
    nodes.append(helper.make_node("Relu", ["b2a_bn"], ["b2_out"]))
    nodes.append(helper.make_node("GlobalAveragePool", ["b2_out"], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    fc_w = const("fc_w", rng.normal(0, np.sqrt(1 / 64), (10, 64)))
    fc_b = const("fc_b", rng.normal(0, 0.1, 10))
    nodes.append(helper.make_node("Gemm", ["flat", fc_w, fc_b], ["logits"], transB=1))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], axis=1))
    graph = helper.make_graph(
        nodes, "tiny_convnet",
        [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("probs", onnx.TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
