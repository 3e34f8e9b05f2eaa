"""A constant ``Pad`` the ONNX-level fold cannot prove exact, on the NPU (issue 24 item 4).

Keras ``ZeroPadding2D`` before a max pool (ResNetV2 / DenseNet stems, via tf2onnx) pads with zeros a map
that may be negative: a zero wins the max there, so the pad does not fold into the pool's own padding
(which a max ignores). TVM imports the ``Pad`` as a ``call_tir`` of topi's pad, which ran on the host
and cut the partition; canonicalisation now lifts it back to ``nn.pad`` (``relay_patterns/pads.py``) and
the pattern table folds it into the pool as ``VMAXPOOL_PAD`` (padding that reads the value) or into a
convolution's padding. Models as tf2onnx writes them (``onnx.helper``), against llvm and onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import tvm
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm import relax

import tvm_npu

RTOL, ATOL = 1e-4, 1e-5


def _run(model: onnx.ModelProto, target: str = "npu") -> tvm_npu.BuildInfo:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    ex, info = tvm_npu.build_with_info(model, target)
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ref = relax.VirtualMachine(tvm_npu.build_reference(model), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    (expected,) = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
    return info


def _stem(pads: list[int], value: float | None = None, mode: str = "constant") -> onnx.ModelProto:
    """Conv (no activation: negative values) -> Pad -> MaxPool 3x3/2 (valid) -> Conv."""
    net = OnnxNet()
    y = net.conv("x", 4, 8, 3, relu=False)
    inputs = [y, net.const(np.array(pads), np.int64)]
    if value is not None:
        inputs.append(net.const(np.array(value, np.float32)))
    p = net.node("Pad", inputs, mode=mode)
    m = net.node("MaxPool", [p], kernel_shape=[3, 3], strides=[2, 2])
    out = net.conv(m, 8, 8, 1, relu=False)
    h = (16 + pads[2] + pads[6] - 3) // 2 + 1
    w = (16 + pads[3] + pads[7] - 3) // 2 + 1
    return net.model(out, [1, 4, 16, 16], [1, 8, h, w])


@pytest.mark.parametrize(("pads", "value"), [([0, 0, 1, 1, 0, 0, 1, 1], None),  # Keras ZeroPadding2D(1)
                                             ([0, 0, 0, 1, 0, 0, 1, 0], None),  # asymmetric
                                             ([0, 0, 1, 1, 0, 0, 1, 1], -0.25)])  # a constant value
def test_pad_before_max_pool_runs_in_the_pool(pads: list[int], value: float | None) -> None:
    info = _run(_stem(pads, value))
    assert info.host_ops == {} and info.partitions == 1, (info.host_ops, info.partitions)
    assert info.npu_ops.get("relax.nn.pad") == 1


def test_reflect_pad_stays_on_the_host() -> None:
    """Only topi's constant pad is lifted: a reflect pad stays the importer's call_tir (on the host)."""
    info = _run(_stem([0, 0, 1, 1, 0, 0, 1, 1], mode="reflect"))
    assert info.host_ops == {"relax.call_tir": 1}


def test_switch_turns_it_off() -> None:
    """``npu.canonicalize.pad`` off: the pad is the importer's call_tir again."""
    with tvm.transform.PassContext(disabled_pass=["npu.canonicalize.pad"]):
        info = _run(_stem([0, 0, 1, 1, 0, 0, 1, 1]))
    assert info.host_ops == {"relax.call_tir": 1}


def test_pad_before_max_pool_with_its_own_padding_is_a_pad_and_a_pool() -> None:
    """A pool with padding of its own (ignored by the max) cannot take the pad's (read): the pool runs on
    the NPU, the pad alone on the host (a pad that no NPU operator reads has no NPU form yet)."""
    net = OnnxNet()
    y = net.conv("x", 4, 8, 3, relu=False)
    p = net.node("Pad", [y, net.const(np.array([0, 0, 1, 1, 0, 0, 1, 1]), np.int64)])
    m = net.node("MaxPool", [p], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    info = _run(net.model(m, [1, 4, 16, 16], [1, 8, 9, 9]))
    assert "relax.nn.max_pool2d" in info.npu_ops, info.npu_ops
    assert info.host_ops == {"relax.nn.pad": 1}, info.host_ops  # a pad alone has no NPU form (yet)
