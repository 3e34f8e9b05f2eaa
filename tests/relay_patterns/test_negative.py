"""``-x`` as ``x * (-1)`` (``npu.canonicalize.negative``): on the NPU, bit for bit the negation."""

from __future__ import annotations

import numpy as np
import tvm
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm import relax

import tvm_npu


def _model() -> object:
    net = OnnxNet()
    y = net.conv("x", 4, 8, 3, relu=False)
    n = net.node("Neg", [y])
    return net.model(net.node("Relu", [n]), [1, 4, 6, 6], [1, 8, 6, 6])


def _run(target_ctx: tvm.transform.PassContext) -> tuple[np.ndarray, np.ndarray, tvm_npu.BuildInfo]:
    model = _model()
    x = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)
    with target_ctx:
        ex, info = tvm_npu.build_with_info(model, "npu")
    run = lambda e: relax.VirtualMachine(e, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()  # noqa: E731
    return run(ex), run(tvm_npu.build_reference(model)), info


def test_negation_runs_on_the_npu() -> None:
    got, ref, info = _run(tvm.transform.PassContext())
    assert info.host_ops == {} and info.partitions == 1, info.host_ops
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)  # the conv sums in its own order


def test_switch_keeps_the_negation_on_the_host() -> None:
    got, ref, info = _run(tvm.transform.PassContext(disabled_pass=["npu.canonicalize.negative"]))
    assert info.host_ops == {"relax.negative": 1}
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)  # the conv sums in its own order
