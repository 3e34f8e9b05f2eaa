"""Local response normalisation (ONNX ``LRN``, AlexNet / Inception-v1) on the NPU: small models built
with ``onnx.helper`` (conv -> relu -> LRN -> max pool, as AlexNet writes it), in both layouts, against
llvm and onnxruntime, with no host operator left."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu

ort = pytest.importorskip("onnxruntime")


def lrn_model(c: int, h: int, w: int, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0,
              conv_first: bool = True) -> onnx.ModelProto:
    """[conv 3x3 -> relu ->] LRN -> max pool 2x2: the LRN between two NPU operators, as in AlexNet."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []
    x = "x"
    if conv_first:
        inits = [numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32), "w"),
                 numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), "b")]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4), helper.make_node("Relu", ["c"], ["r"])]
        x = "r"
    nodes += [helper.make_node("LRN", [x], ["n"], size=size, alpha=alpha, beta=beta, bias=bias),
              helper.make_node("MaxPool", ["n"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    graph = helper.make_graph(nodes, "lrn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, h // 2, w // 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def _run(model: onnx.ModelProto, target: str, x: np.ndarray) -> tuple[np.ndarray, tvm_npu.BuildInfo]:
    ex, info = tvm_npu.build_with_info(model, target)
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy(), info


def _reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return relax.VirtualMachine(tvm_npu.build_reference(model), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("c, h, w, size, alpha, beta, bias", [
    (16, 6, 10, 5, 1e-4, 0.75, 1.0),  # AlexNet's parameters
    (8, 4, 6, 3, 0.5, 0.6, 2.0),  # a short window and a strong normalisation (TVM 0.27 cannot import an even size)
])
def test_lrn_runs_on_the_npu_and_matches_llvm_and_onnxruntime(layout, c, h, w, size, alpha, beta, bias) -> None:
    model = lrn_model(c, h, w, size, alpha, beta, bias)
    x = (np.random.default_rng(1).standard_normal((1, c, h, w)) * 3).astype(np.float32)
    out, info = _run(model, f"npu -layout-pref={layout}", x)
    assert info.host_ops == {} and info.partitions == 1, (info.host_ops, info.partitions)
    assert "relax.power" in info.npu_ops and "relax.nn.avg_pool2d" in info.npu_ops
    np.testing.assert_allclose(out, _reference(model, x), rtol=1e-4, atol=1e-5)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fusion", [0, 2])
def test_lrn_at_other_fusion_levels(fusion) -> None:
    """Every step its own operator (``-fusion=0``), or ``x * x`` kept on chip (``-fusion=2``): same result."""
    model = lrn_model(8, 4, 6, 5, alpha=0.5, beta=0.75, bias=1.0)
    x = (np.random.default_rng(2).standard_normal((1, 8, 4, 6)) * 3).astype(np.float32)
    out, info = _run(model, f"npu -fusion={fusion}", x)
    assert info.host_ops == {}, info.host_ops
    np.testing.assert_allclose(out, _reference(model, x), rtol=1e-4, atol=1e-5)


def test_lrn_normalises_across_channels() -> None:
    """The window runs along C: an input that differs only in one channel changes the neighbours' results
    (a pool over H or W would not), and a large alpha makes the effect far above the tolerance."""
    c, h, w = 6, 2, 4
    model = lrn_model(c, h, w, 3, alpha=3.0, beta=0.75, bias=1.0, conv_first=False)
    x = np.ones((1, c, h, w), np.float32)
    x2 = x.copy()
    x2[0, 2] = 5.0
    ex = tvm_npu.build(model, "npu")
    vm = relax.VirtualMachine(ex, tvm.cpu())["main"]
    a, b = vm(tvm.runtime.tensor(x)).numpy(), vm(tvm.runtime.tensor(x2)).numpy()
    assert np.all(b[0, [1, 3]] < a[0, [1, 3]] * 0.5)  # neighbours of the loud channel are damped
    np.testing.assert_array_equal(a[0, 5], b[0, 5])  # outside its window nothing changes
    np.testing.assert_allclose(b, _reference(model, x2), rtol=1e-4, atol=1e-5)


def test_lrn_form_is_rewritten_to_a_pool_with_a_power_epilogue() -> None:
    """The canonical form: avg_pool2d over a (channels x positions) view, the division a power -beta."""
    from tvm_npu.relay_patterns import canonicalize_passes

    from tvm_npu.compiler.driver import load_model

    mod = load_model(lrn_model(8, 4, 4, 5, conv_first=False))
    text = tvm.transform.Sequential(canonicalize_passes())(mod).script()
    assert "avg_pool3d" not in text and "divide" not in text
    assert "R.nn.avg_pool2d" in text and "pool_size=[5, 1]" in text and "R.power" in text
    assert "R.const(-0.75" in text
