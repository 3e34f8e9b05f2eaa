"""Sibling max pools of one map as a chain (``npu.canonicalize.pool-chains``, SPP -> SPPF): exact, every
pool a 5 x 5 window, and only where a smaller sibling exists."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import tvm
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm import relax

import tvm_npu

SIDE = 12


def _spp(kernels: tuple[int, ...], stride: int = 1) -> onnx.ModelProto:
    """Conv -> max pools of ``kernels`` ('same' padding) of the same map -> Concat with the map (YOLOX SPP)."""
    net = OnnxNet()
    y = net.conv("x", 4, 8, 1, relu=False)
    pools = [net.node("MaxPool", [y], kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride, stride])
             for k in kernels]
    out = net.node("Concat", [y, *pools] if stride == 1 else pools, axis=1)
    side = SIDE if stride == 1 else (SIDE - 1) // stride + 1
    return net.model(out, [1, 4, SIDE, SIDE], [1, 8 * (len(kernels) + (stride == 1)), side, side])


def _pool_windows(info: tvm_npu.BuildInfo) -> list[tuple[int, int]]:
    return [op.spec.kernel for p in info.plans for op in p.ops if "pool" in op.spec.name]


def _check(model: onnx.ModelProto) -> tvm_npu.BuildInfo:
    x = np.random.default_rng(0).standard_normal((1, 4, SIDE, SIDE)).astype(np.float32)
    ex, info = tvm_npu.build_with_info(model, "npu")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    (ort,) = onnxruntime.InferenceSession(model.SerializeToString(),
                                          providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got, ort, rtol=1e-4, atol=1e-5)
    assert info.host_ops == {}
    return info


def test_spp_becomes_sppf() -> None:
    """5, 9, 13 of one map: the 9 reads the 5's result, the 13 the 9's, each a 5 x 5 window."""
    assert sorted(_pool_windows(_check(_spp((5, 9, 13))))) == [(5, 5)] * 3


@pytest.mark.parametrize(("kernels", "windows"), [((13,), [(13, 13)]),  # alone: one pass over the map beats three
                                                  ((3, 7), [(3, 3), (5, 5)]),
                                                  ((9, 5), [(5, 5), (9, 9)])])  # the smaller one comes later
def test_only_pools_with_an_earlier_smaller_sibling_chain(kernels: tuple[int, ...],
                                                          windows: list[tuple[int, int]]) -> None:
    assert sorted(_pool_windows(_check(_spp(kernels)))) == windows


def test_strided_pools_do_not_chain() -> None:
    assert sorted(_pool_windows(_check(_spp((3, 5), stride=2)))) == [(3, 3), (5, 5)]


def test_switch_keeps_spp() -> None:
    with tvm.transform.PassContext(disabled_pass=["npu.canonicalize.pool-chains"]):
        assert sorted(_pool_windows(_check(_spp((5, 9, 13))))) == [(5, 5), (9, 9), (13, 13)]
