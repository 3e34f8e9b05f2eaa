"""Every nearest rounding and coordinate transformation of ONNX Resize, and bilinear up- and
downsampling, on the NPU (``relay_patterns/resize.py``): the forms whose index map is ``o // f`` are
broadcast views, the other nearest ones constant matrix products, the linear ones the resize operator;
against llvm and onnxruntime."""

from __future__ import annotations

import pytest
from resize_nets import check, resize_after_conv  # tests/ is on sys.path

NEAREST_VIEWS = [("half_pixel", "round_prefer_floor", 2), ("half_pixel", "round_prefer_ceil", 3),
                 ("pytorch_half_pixel", "round_prefer_floor", 4), ("asymmetric", "floor", 3),
                 ("asymmetric", "round_prefer_floor", 2), ("tf_half_pixel_for_nn", "floor", 2)]
NEAREST_OTHERS = [("asymmetric", "ceil", 2), ("asymmetric", "round_prefer_ceil", 2), ("half_pixel", "floor", 2),
                  ("tf_half_pixel_for_nn", "round_prefer_floor", 2), ("align_corners", "round_prefer_floor", 3),
                  ("half_pixel", "round_prefer_floor", 1.5)]


@pytest.mark.parametrize(("coord", "rounding", "factor"), NEAREST_VIEWS + NEAREST_OTHERS)
def test_nearest_modes(coord: str, rounding: str, factor: float) -> None:
    """Every nearest form runs on the NPU; exactly those whose index map is ``o // f`` are a view (no
    operator of their own), the others pick their rows through selection matrices."""
    attrs = {"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": rounding,
             "scales": [1.0, 1.0, factor, factor]}
    info = check(resize_after_conv(attrs))
    viewed = (coord, rounding, factor) in NEAREST_VIEWS
    assert info.npu_ops.get("relax.matmul", 0) == (0 if viewed else 1), info.npu_ops


@pytest.mark.parametrize(("coord", "factor"), [("half_pixel", 2.0), ("half_pixel", 0.5), ("pytorch_half_pixel", 4.0),
                                             ("align_corners", 2.0), ("align_corners", 1.5), ("asymmetric", 1.5)])
def test_linear_resize(coord: str, factor: float) -> None:
    """Bilinear up- and downsampling, integer and not, every coordinate transformation: the resize operator
    (cheaper than the matrix products at these sizes; ``test_resize_operator.py`` checks it bit for bit)."""
    attrs = {"mode": "linear", "coordinate_transformation_mode": coord, "scales": [1.0, 1.0, factor, factor]}
    info = check(resize_after_conv(attrs, in_hw=8))
    assert info.npu_ops.get("relax.image.resize2d", 0) == 1 and "relax.matmul" not in info.npu_ops, info.npu_ops


