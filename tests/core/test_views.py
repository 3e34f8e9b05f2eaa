"""The index arithmetic of views (``tvm_npu/views.py``) against numpy: reshape / transpose / concat
slices composed in chains, and the strided DMA blocks the codegen addresses a view with."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tvm_npu.core import views
from tvm_npu.core.ops import View

_SIZES = st.sampled_from([1, 2, 3, 4, 6])


def _shape(draw: st.DrawFn, rank: int) -> tuple[int, ...]:
    return tuple(draw(_SIZES) for _ in range(rank))


@st.composite
def _chains(draw: st.DrawFn) -> tuple[np.ndarray, View | None]:
    """A random tensor, a chain of reshapes and transposes on it as numpy does them, and the same
    chain as one composed view (None where composition declines)."""
    shape = _shape(draw, draw(st.integers(2, 4)))
    value = np.arange(math.prod(shape)).reshape(shape)
    view, name = None, "t0"
    for step in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            new = list(value.shape)
            if draw(st.booleans()) and len(new) > 1:  # merge two neighbours
                i = draw(st.integers(0, len(new) - 2))
                new[i : i + 2] = [new[i] * new[i + 1]]
            else:  # split a dim by a divisor
                i = draw(st.integers(0, len(new) - 1))
                d = draw(st.sampled_from([d for d in range(1, new[i] + 1) if new[i] % d == 0]))
                new[i : i + 1] = [new[i] // d, d]
            rel = views.reshape(name, new)
            value = value.reshape(new)
        else:
            axes = draw(st.permutations(range(value.ndim)))
            rel = views.permute(name, value.shape, axes)
            value = value.transpose(axes)
        try:
            view = rel if view is None else views.compose(rel, view)
        except views.NotAView:
            return value, None
        name = f"t{step + 1}"
    return value, view


@settings(max_examples=80, deadline=None)
@given(_chains())
def test_composed_views_index_like_numpy(chain: tuple) -> None:
    value, view = chain
    if view is None:
        return  # composition declined (the partition graph then copies): nothing to check
    assert views.shape_of(view) == value.shape
    np.testing.assert_array_equal(views.indices(view), value)  # the base is arange: indices are values


def test_reshapes_and_transposes_of_a_plain_tensor_always_compose() -> None:
    """Merging and splitting the axes of a transposed tensor stays a view (the shuffle's case)."""
    base = views.reshape("x", (2, 3, 4))
    t = views.compose(views.permute("b", (2, 3, 4), (1, 0, 2)), base)
    merged = views.compose(views.reshape("t", (6, 4)), t)
    np.testing.assert_array_equal(views.indices(merged), np.arange(24).reshape(2, 3, 4).transpose(1, 0, 2)
                                  .reshape(6, 4))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_views_of_a_concat_slice_address_the_concat(data: st.DataObject) -> None:
    """A tensor written into a concat slice, then read through a reshape / transpose of it."""
    part = _shape(data.draw, 4)
    axis = data.draw(st.integers(0, 3))
    before, after = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))
    whole = list(part)
    whole[axis] += before + after
    z = np.arange(math.prod(whole)).reshape(whole)
    member = np.take(z, range(before, before + part[axis]), axis=axis)
    slice_view = views.slice_of("z", whole, part, axis, before)
    np.testing.assert_array_equal(views.indices(slice_view), member)
    axes = data.draw(st.permutations(range(4)))
    flat = views.compose(views.reshape("m", (math.prod(part),)), slice_view) if axis == 0 or all(
        d == 1 for d in part[:axis]) else None
    if flat is not None:
        np.testing.assert_array_equal(views.indices(flat), member.reshape(-1))
    permuted = views.compose(views.permute("m", part, axes), slice_view)
    np.testing.assert_array_equal(views.indices(permuted), member.transpose(axes))


def test_channel_shuffle_is_one_view_with_a_split_channel_axis() -> None:
    n, c, h, w, g = 1, 12, 2, 3, 4
    x = np.arange(n * c * h * w).reshape(n, c, h, w)
    s = views.reshape("x", (n, g, c // g, h, w))
    t = views.compose(views.permute("s", (n, g, c // g, h, w), (0, 2, 1, 3, 4)), s)
    y = views.compose(views.reshape("t", (n, c, h, w)), t)
    assert y.dims[1] == ((c // g, h * w), (g, c // g * h * w))  # channel j*g+i is x's channel i*(c/g)+j
    np.testing.assert_array_equal(views.indices(y), x.reshape(n, g, c // g, h, w).transpose(0, 2, 1, 3, 4)
                                  .reshape(n, c, h, w))
    assert not y.contiguous and views.reshape("x", (c * h * w,)).contiguous


def test_a_reshape_of_a_strided_slice_splits_axes_into_factors_or_is_declined() -> None:
    z = np.arange(30).reshape(6, 5)
    inner = views.slice_of("z", (6, 5), (6, 3), 1, 1)  # 6 rows of 3, stride 5
    nine = views.compose(views.reshape("m", (2, 9)), inner)  # 3 whole rows per row: two factors
    np.testing.assert_array_equal(views.indices(nine), z[:, 1:4].reshape(2, 9))
    with pytest.raises(views.NotAView):
        views.compose(views.reshape("m", (9, 2)), inner)  # rows of 2 straddle the rows of 3


def _gather(pieces: list, base: np.ndarray, sram_size: int) -> np.ndarray:
    """What the DMA blocks load into SRAM (-1 where nothing is written)."""
    sram = np.full(sram_size, -1, dtype=np.int64)
    flat = base.reshape(-1)
    for off, s_off, ext, dstr, sstr in pieces:
        for idx in np.ndindex(*ext):
            sram[s_off + int(np.dot(idx, sstr))] = flat[off + int(np.dot(idx, dstr))]
    return sram


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_dma_blocks_of_a_shuffled_tensor_load_the_tile(data: st.DataObject) -> None:
    """A tile ``[c0, c0 + tc) x [h0, h0 + th) x W`` of a shuffled tensor, loaded as strided blocks of the
    unshuffled one, is the numpy tile (aligned or not to the shuffle's groups)."""
    g = data.draw(st.sampled_from([2, 3, 4]))
    cg, h, w = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    c = g * cg
    x = np.arange(c * h * w).reshape(1, c, h, w)
    shuffled = x.reshape(1, g, cg, h, w).transpose(0, 2, 1, 3, 4).reshape(1, c, h, w)
    s = views.reshape("x", (1, g, cg, h, w))
    y = views.compose(views.reshape("t", (1, c, h, w)),
                      views.compose(views.permute("s", (1, g, cg, h, w), (0, 2, 1, 3, 4)), s))
    c0 = data.draw(st.integers(0, c - 1))
    tc = data.draw(st.integers(1, c - c0))
    h0 = data.draw(st.integers(0, h - 1))
    th = data.draw(st.integers(1, h - h0))
    # loops (c, h, w): the tile's dims in SRAM row-major [tc, th, w]
    coefs = [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]
    pieces = views.view_pieces(y, coefs, [0, c0, h0, 0], [0, 0, 0], [tc, th, w], [th * w, w, 1])
    got = _gather(pieces, x, tc * th * w)
    np.testing.assert_array_equal(got.reshape(tc, th, w), shuffled[0, c0 : c0 + tc, h0 : h0 + th])
    if c0 % g == 0 and tc % g == 0:
        assert len(pieces) == 1  # aligned to the groups: one strided block


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_strided_selections_of_views_index_like_numpy(data: st.DataObject) -> None:
    """A strided slice (positive steps) or a scalar gather of a plain or transposed tensor, as numpy
    indexes it; where composition declines (not strided blocks), nothing is claimed."""
    shape = _shape(data.draw, data.draw(st.integers(2, 4)))
    value = np.arange(math.prod(shape)).reshape(shape)
    outer = None
    if data.draw(st.booleans()):
        axes = data.draw(st.permutations(range(len(shape))))
        outer, value = views.permute("x", shape, axes), value.transpose(axes)
    begin, step, extent, keep, index = [], [], [], [], []
    for n in value.shape:
        b = data.draw(st.integers(0, n - 1))
        k = data.draw(st.integers(1, 3))
        e = data.draw(st.integers(1, (n - 1 - b) // k + 1))
        scalar = e == 1 and data.draw(st.booleans())
        begin.append(b), step.append(k), extent.append(e), keep.append(not scalar)
        index.append(b if scalar else slice(b, b + (e - 1) * k + 1, k))
    inner = views.strided("t", value.shape, begin, step, extent, keep)
    expect = value[tuple(index)]
    view = inner if outer is None else views.compose(inner, outer)
    assert views.shape_of(view) == expect.shape
    np.testing.assert_array_equal(views.indices(view), expect)


def test_a_selection_outside_the_tensor_or_a_dropped_axis_of_several_is_refused() -> None:
    with pytest.raises(views.NotAView, match="axis 1"):
        views.strided("x", (2, 5), [0, 3], [1, 2], [2, 2])  # elements 3 and 5 of 5
    with pytest.raises(views.NotAView, match="dropped"):
        views.strided("x", (2, 5), [0, 0], [1, 1], [2, 5], [False, True])
