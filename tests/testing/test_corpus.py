"""The exporter-style corpus (``tvm_npu.testing.corpus``): every model is a valid ONNX model that onnxruntime
runs to finite outputs of the inferred shape, and the forms each family is named for are in it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tvm_npu.testing.corpus import CORPUS
from tvm_npu.testing.layerwise import ort_run

#: Operators each family's exporter writes and the model must therefore contain.
FORMS = {
    "mobilenet_v3": {"HardSwish", "HardSigmoid", "GlobalAveragePool", "Mul"},
    "efficientnet": {"Sigmoid", "Mul", "ReduceMean"},
    "densenet": {"Pad", "Concat", "Mul", "Add", "AveragePool", "ReduceMean"},
    "resnet_v2": {"Pad", "MaxPool", "Mul", "Add"},
    "pp_lcnet": {"HardSwish", "HardSigmoid", "Flatten", "MatMul"},
    "yolov8": {"Split", "Resize", "Concat", "Softmax", "Sigmoid"},
    "vit_encoder": {"ReduceMean", "Reciprocal", "Sqrt", "Neg", "Softmax", "Erf"},
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_model_runs_on_onnxruntime(name: str) -> None:
    model = CORPUS[name]()
    assert FORMS[name] <= {n.op_type for n in model.graph.node}
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (y,) = ort_run(model, {"x": x}, "basic")
    expected = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert list(y.shape) == expected and np.all(np.isfinite(y))
    assert 0.01 < float(np.std(y)) < 100, "activations should stay O(1) through the depth"
    onnx.checker.check_model(model, full_check=True)


def test_corpus_is_deterministic() -> None:
    assert CORPUS["yolov8"]().SerializeToString() == CORPUS["yolov8"]().SerializeToString()
