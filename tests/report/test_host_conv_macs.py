"""MACs are counted on whichever side runs them: a transposed convolution (or a 1-D convolution) left on
the host is in the host MAC figure, so the report's share of MACs on the NPU is true."""

from __future__ import annotations

import numpy as np
import tvm
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm import relax

import tvm_npu


def _lattice_taps(size: int, out: int, s: int, p: int, k: int) -> int:
    """(output, tap) pairs of one axis of a transposed convolution, by brute force over the scatter."""
    return sum(1 for o in range(out) for kk in range(k) if (o + p - kk) % s == 0)


def test_host_conv_transpose_macs_are_counted_in_the_report() -> None:
    """With ``npu.canonicalize.conv-transpose`` disabled the layer runs on the host and its MACs are the
    host's; the report then gives the NPU its share only."""
    net = OnnxNet()
    y = net.conv("x", 4, 8, 3)
    w = net.const(net.rng.standard_normal((8, 6, 4, 4)))
    t = net.node("ConvTranspose", [y, w], strides=[2, 2], pads=[1, 1, 1, 1])
    out = net.conv(t, 6, 4, 3, relu=False)
    model = net.model(out, [1, 4, 7, 7], [1, 4, 14, 14])
    with tvm.transform.PassContext(disabled_pass=["npu.canonicalize.conv-transpose"]):
        ex, info = tvm_npu.build_with_info(model, "npu")
    assert info.host_ops == {"relax.nn.conv2d_transpose": 1}, info.host_ops
    expected = 1 * 6 * 8 * _lattice_taps(7, 14, 2, 1, 4) ** 2
    assert info.host_macs == expected == 6 * 8 * 14 * 14 * 4  # (k / s)^2 = 4 taps per output
    npu_convs = 8 * 4 * 9 * 7 * 7 + 4 * 6 * 9 * 14 * 14
    assert info.npu_macs == npu_convs
    x = np.random.default_rng(0).standard_normal((1, 4, 7, 7)).astype(np.float32)
    with tvm_npu.profile(trace=True) as prof:
        relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))
    report = prof.report(info.host_macs)
    assert report.host_macs == expected and report.npu_macs == npu_convs
    assert f"host MACs {expected / 1e9:.3f} G" in report.table()

    _, on = tvm_npu.build_with_info(model, "npu")
    assert on.host_macs == 0 and on.npu_macs == npu_convs + expected  # the phases do exactly those MACs


def test_host_conv1d_macs_are_counted() -> None:
    """A 1-D convolution the NPU has no pattern for is counted on the host side too."""
    net = OnnxNet()
    w = net.const(net.rng.standard_normal((6, 4, 3)))
    y = net.node("Conv", ["x", w], pads=[1, 1])
    model = net.model(y, [1, 4, 10], [1, 6, 10])
    _, info = tvm_npu.build_with_info(model, "npu")
    if "relax.nn.conv1d" in info.host_ops:
        assert info.host_macs == 6 * 10 * 4 * 3
    else:  # (turned into a 2-D convolution the NPU runs)
        assert info.npu_macs == 6 * 10 * 4 * 3
