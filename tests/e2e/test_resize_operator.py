"""The linear resize operator (``tir_schedules/resize.py``, ``codegen/resize.py``) through the whole build:
every coordinate transformation, integer and non-integer factors, up and down, bit for bit llvm's (TVM's
order of the two passes and of the float32 roundings) and within the fp32 standard of onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx_net import OnnxNet  # tests/ is on sys.path
from resize_nets import ATOL, RTOL, model_at, model_input, ort, run
from tvm import relax

import tvm_npu

#: (coordinate transformation, input H x W, output H x W): x2 / x4 up, x0.5 down, non-integer up and down.
CASES = [("half_pixel", (8, 8), (16, 16)), ("half_pixel", (16, 12), (8, 6)), ("pytorch_half_pixel", (6, 5), (24, 20)),
         ("align_corners", (8, 8), (12, 12)), ("asymmetric", (8, 10), (12, 15)), ("align_corners", (12, 9), (7, 5)),
         ("half_pixel", (10, 15), (17, 23)), ("tf_half_pixel_for_nn", (8, 8), (12, 12))]


def _resize_model(coord: str, channels: int, hw: tuple[int, int], out: tuple[int, int]) -> onnx.ModelProto:
    """One Resize of the input to ``out`` (by ``sizes``)."""
    net = OnnxNet(seed=3)
    y = net.node("Resize", ["x", "", "", net.const(np.array([1, channels, *out]), np.int64)], mode="linear",
                 coordinate_transformation_mode=coord)
    return model_at(net, y, [1, channels, *hw], [1, channels, *out], 13)


@pytest.mark.parametrize(("coord", "hw", "out"), CASES)
def test_linear_resize_is_llvm_bit_for_bit(coord: str, hw: tuple[int, int], out: tuple[int, int]) -> None:
    """The resize runs as its own operator on the NPU, every output llvm's exactly, onnxruntime's within
    the fp32 standard."""
    model = _resize_model(coord, 16, hw, out)
    x = model_input(model)
    y, ref, info = run(model, x)
    assert info.host_ops == {} and info.npu_ops == {"relax.image.resize2d": 1}, (info.host_ops, info.npu_ops)
    assert np.array_equal(y, ref), np.abs(y - ref).max()
    np.testing.assert_allclose(y, ort(model, x), rtol=RTOL, atol=ATOL)


def test_too_small_an_sram_keeps_the_matrix_products() -> None:
    """At -max-sram-bytes=8192 no band of the resize operator fits (``tests/codegen/test_resize_emission.py``):
    the canonicalisation keeps the two matrix products, within the fp32 standard of llvm."""
    model = _resize_model("half_pixel", 4, (8, 256), (16, 512))
    x = model_input(model)
    ex, info = tvm_npu.build_with_info(model, "npu -max-sram-bytes=8192")
    assert "relax.image.resize2d" not in info.npu_ops and info.npu_ops.get("relax.matmul") == 1, info.npu_ops
    y = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(y, ort(model, x), rtol=RTOL, atol=ATOL)
