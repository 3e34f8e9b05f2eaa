"""The models with symbolic dimensions that the JIT tests and ``benchmarks/dynamic_shapes.py`` share: declared as
the exporters declare them, and every shape the benchmark runs them on is a valid input (onnxruntime runs it)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

from tvm_npu.testing.dynamic_models import MODELS, DynamicModel


def _dims(model: object) -> list[object]:
    """The input's dimensions as written: dim_value (an int, -1 kept) or dim_param (a str)."""
    dims = model.graph.input[0].type.tensor_type.shape.dim
    return [d.dim_param if d.HasField("dim_param") else d.dim_value for d in dims]


def test_inputs_are_declared_in_the_exporters_styles() -> None:
    declared = {m.name: _dims(m.build()) for m in MODELS}
    assert declared == {"recogniser": ["p2o.DynamicDimension.0", 3, 32, "p2o.DynamicDimension.1"],
                        "detector": [1, 3, "H", "W"], "yolo": ["batch", 3, "height", "width"],
                        "classifier": [-1, 3, "?", "?"]}


@pytest.mark.parametrize("spec", MODELS, ids=lambda m: m.name)
def test_every_benchmark_shape_runs_on_onnxruntime(spec: DynamicModel) -> None:
    model = spec.build()
    assert len(set(spec.shapes)) == 8
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in spec.shapes:
        (out,) = session.run(None, {"x": np.ones(shape, np.float32)})
        assert out.shape[0] == shape[0] and np.isfinite(out).all()
