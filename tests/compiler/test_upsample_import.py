"""ONNX ``Upsample`` (opsets 7-9) by integer factors imported as the broadcast it is (``npu.import.upsample``):
onnxruntime's values (``floor(i / s)``), on the NPU as a view; other forms are left to TVM's importer."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu
from tvm_npu.compiler.onnx_import import prepare


def _model(opset: int, scales: list[float], mode: str = "nearest") -> onnx.ModelProto:
    """Conv -> Upsample -> Conv (an old YOLO neck), opset 7 (scales attribute) or 9 (scales input)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w2")]
    if opset >= 9:
        inits.append(numpy_helper.from_array(np.asarray(scales, np.float32), "s"))
        up = helper.make_node("Upsample", ["a", "s"], ["u"], mode=mode)
    else:
        up = helper.make_node("Upsample", ["a"], ["u"], mode=mode, scales=scales)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), up,
             helper.make_node("Conv", ["u", "w2"], ["y"])]
    out = [1, 4, int(6 * scales[2]), int(5 * scales[3])]
    graph = helper.make_graph(nodes, "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    return model


def _outputs(model: onnx.ModelProto) -> tuple[np.ndarray, np.ndarray, np.ndarray, tvm_npu.BuildInfo]:
    x = np.random.default_rng(1).standard_normal((1, 3, 6, 5)).astype(np.float32)
    ex, info = tvm_npu.build_with_info(model, "npu")
    run = lambda e: relax.VirtualMachine(e, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()  # noqa: E731
    (ort,) = onnxruntime.InferenceSession(model.SerializeToString(),
                                          providers=["CPUExecutionProvider"]).run(None, {"x": x})
    return run(ex), run(tvm_npu.build_reference(model)), ort, info


@pytest.mark.parametrize(("opset", "scales"), [(7, [1.0, 1.0, 2.0, 3.0]), (9, [1.0, 1.0, 2.0, 3.0]),
                                               (8, [1.0, 1.0, 3.0, 1.0])])
def test_integer_upsample_matches_onnxruntime_on_the_npu(opset: int, scales: list[float]) -> None:
    assert "Upsample" not in [n.op_type for n in prepare(_model(opset, scales)).graph.node]
    npu, ref, ort, info = _outputs(_model(opset, scales))
    np.testing.assert_allclose(npu, ort, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ref, ort, rtol=1e-4, atol=1e-5)
    assert info.host_ops == {} and info.partitions == 1, (info.host_ops, info.partitions)


@pytest.mark.parametrize(("mode", "scales"), [("linear", [1.0, 1.0, 2.0, 2.0]), ("nearest", [1.0, 1.0, 1.5, 2.0])])
def test_other_upsamples_are_left_to_the_importer(mode: str, scales: list[float]) -> None:
    assert "Upsample" in [n.op_type for n in prepare(_model(7, scales, mode)).graph.node]


def test_switch_leaves_it() -> None:
    with tvm.transform.PassContext(disabled_pass=["npu.import.upsample"]):
        assert "Upsample" in [n.op_type for n in prepare(_model(9, [1.0, 1.0, 2.0, 2.0])).graph.node]
