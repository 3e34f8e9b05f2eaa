"""The linear resize operator (``tir_schedules/resize.py``, ``codegen/resize.py``) through the whole build:
every coordinate transformation, integer and non-integer factors, up and down, bit for bit llvm's (TVM's
order of the two passes and of the float32 roundings) and within the fp32 standard of onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx_net import OnnxNet  # tests/ is on sys.path
from resize_nets import RTOL, ATOL, model_at, model_input, ort, run

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
