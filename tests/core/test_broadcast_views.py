"""Zero-stride (broadcast) views and the resize index maps behind them: a nearest integer upsampling
is ``reshape -> broadcast_to -> reshape`` of its source, whose composition is one view with a zero
stride per repeated factor; DMA copies repeat whole runs; the index maps and interpolation matrices
agree with onnxruntime's Resize."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm_npu.relay_patterns.resize import interpolation_matrix, nearest_index, upsample_factor
from tvm_npu.relay_patterns.split import split_bounds
from tvm_npu.tir_schedules.dma import copy_plan

from tvm_npu.core import views


def _upsampled(shape: tuple[int, int, int, int], fh: int, fw: int) -> views.View:
    """The composed view of ``x`` (shape) that a nearest fh x fw upsampling reads."""
    n, c, h, w = shape
    split = views.reshape("x", (n, c, h, 1, w, 1))
    spread = views.broadcast("x1", (n, c, h, 1, w, 1), (n, c, h, fh, w, fw))
    out = views.reshape("x2", (n, c, h * fh, w * fw))
    return views.compose(views.compose(out, spread), split)


def test_a_nearest_upsampling_is_one_view_with_zero_strides() -> None:
    shape = (1, 3, 4, 5)
    view = _upsampled(shape, 2, 3)
    x = np.arange(np.prod(shape)).reshape(shape)
    expected = x.repeat(2, axis=2).repeat(3, axis=3)
    np.testing.assert_array_equal(views.indices(view), expected)
    assert view.dims[2] == ((4, 5), (2, 0)) and view.dims[3] == ((5, 1), (3, 0))
    assert not view.contiguous and views.invert(view, shape, "y") is None  # readers only: never stored through


def test_broadcast_adds_leading_axes_and_refuses_other_shapes() -> None:
    view = views.broadcast("x", (3, 1), (2, 3, 4))
    np.testing.assert_array_equal(views.indices(view), np.broadcast_to(np.arange(3).reshape(3, 1), (2, 3, 4)))
    with pytest.raises(views.NotAView, match="does not broadcast"):
        views.broadcast("x", (3, 2), (3, 4))


def test_dma_pieces_of_an_upsampled_tile_read_the_source_rows_again() -> None:
    """A tile of the upsampled map (channels 0..2, rows 2..5, all columns) as strided blocks of ``x``."""
    shape = (1, 3, 4, 5)
    view = _upsampled(shape, 2, 2)
    ext = [3, 4, 10]
    coefs = [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]
    sram = [40, 10, 1]
    got = np.full(120, -1)
    for off, s_off, p_ext, d_str, s_str in views.view_pieces(view, coefs, [0, 0, 2, 0], [0, 0, 0], ext, sram):
        for idx in np.ndindex(*p_ext):
            got[s_off + np.dot(idx, s_str)] = off + np.dot(idx, d_str)
    expected = views.indices(view)[0, :, 2:6, :].reshape(-1)
    np.testing.assert_array_equal(got, expected)


def test_zero_stride_loops_go_outermost_in_a_copy() -> None:
    """Runs stay whole rows: the repeat loop (DRAM stride 0) goes outside the rows, not innermost."""
    assert copy_plan([4, 2, 5], [5, 0, 1], [10, 5, 1]) == [(2, (0, 5)), (4, (5, 10)), (5, (1, 1))]
    assert copy_plan([2, 3, 4], [0, 4, 1], [12, 4, 1]) == [(2, (0, 12)), (12, (1, 1))]  # rows merged


@pytest.mark.parametrize(("extent", "sections", "bounds"), [(8, 2, [(0, 4), (4, 8)]), (7, 3, [(0, 3), (3, 6), (6, 7)]),
                                                            (6, [1, 4], [(0, 1), (1, 4), (4, 6)])])
def test_split_bounds(extent: int, sections: int | list[int], bounds: list[tuple[int, int]]) -> None:
    assert split_bounds(extent, sections) == bounds


def _ort_resize(x: np.ndarray, out_w: int, **attrs: object) -> np.ndarray:
    """onnxruntime's Resize of ``x`` (1, 1, 1, W) along W to ``out_w`` (sizes form, opset 13)."""
    sizes = numpy_helper.from_array(np.array([1, 1, 1, out_w], np.int64), "sizes")
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1, out_w])], [sizes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0].reshape(-1)


COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn"]
ROUNDINGS = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize(("n_in", "n_out"), [(5, 10), (4, 12), (6, 9), (8, 4)])
def test_index_maps_and_matrices_agree_with_onnxruntime(coord: str, n_in: int, n_out: int) -> None:
    x = np.random.default_rng(0).standard_normal((1, 1, 1, n_in)).astype(np.float32)
    for rounding in ROUNDINGS:
        got = x.reshape(-1)[nearest_index(coord, rounding, n_in, n_out)]
        expected = _ort_resize(x, n_out, mode="nearest", coordinate_transformation_mode=coord, nearest_mode=rounding)
        np.testing.assert_array_equal(got, expected, err_msg=rounding)
        factor = upsample_factor(coord, rounding, n_in, n_out)
        assert (factor is not None) == (n_out % n_in == 0 and np.array_equal(
            expected, np.repeat(x.reshape(-1), n_out // n_in))), rounding
    if coord != "tf_half_pixel_for_nn":  # a nearest-only transformation
        linear = interpolation_matrix("linear", coord, "", n_in, n_out) @ x.reshape(-1)
        expected = _ort_resize(x, n_out, mode="linear", coordinate_transformation_mode=coord)
        np.testing.assert_allclose(linear, expected, rtol=1e-5, atol=1e-6)
