"""Hypothesis strategies for random operator specs (shared by the numeric and the bound tests)."""

from __future__ import annotations

from helpers import conv, eltwise, matmul, pool
from hypothesis import strategies as st

from tvm_npu.core.ops import OpSpec

EPI_CHOICES = ("bias", "add", "add_c", "sub", "mul_c", "max", "min_c", "relu", "clip", "sigmoid", "tanh", "gelu")


@st.composite
def conv_specs(draw: st.DrawFn, strides: tuple[int, ...] = (1, 2)) -> OpSpec:
    layout = draw(st.sampled_from(["NCHW", "NHWC"]))
    k = draw(st.sampled_from([1, 3, 5, 7]))
    kw = draw(st.sampled_from([k, k, 1, 3]))
    stride = draw(st.sampled_from(strides))
    dilation = draw(st.sampled_from([1, 1, 2]))
    mode = draw(st.sampled_from(["dense", "dense", "depthwise", "grouped"]))
    if mode == "depthwise":
        c = o = draw(st.integers(1, 48))
        groups = c
    elif mode == "grouped":
        groups = draw(st.sampled_from([2, 3, 4]))
        c = groups * draw(st.integers(1, 8))
        o = groups * draw(st.integers(1, 8))
    else:
        groups = 1
        c, o = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    # padding up to the dilated kernel extent - 1 (wider padding: test_conv_padding_wider_than_the_kernel)
    pads = tuple(draw(st.integers(0, min(3, dilation * (kk - 1)))) for kk in (k, kw, k, kw))
    h = draw(st.integers(max(1, dilation * (k - 1) + 1 - pads[0] - pads[2]), 16))
    w = draw(st.integers(max(1, dilation * (kw - 1) + 1 - pads[1] - pads[3]), 16))
    epi = draw(st.lists(st.sampled_from(EPI_CHOICES), max_size=3))
    # a folded layout transform: the input DMA reads the other layout (ungrouped convs only)
    data_layout = draw(st.sampled_from([layout, layout, "NCHW", "NHWC"])) if groups == 1 else layout
    return conv(c, o, h, w, k=k, kw=kw, stride=stride, dilation=dilation, pad=pads, groups=groups,
                n=draw(st.sampled_from([1, 1, 2])), layout=layout, data_layout=data_layout, epi=epi)


@st.composite
def matmul_specs(draw: st.DrawFn) -> OpSpec:
    m, n, k = (draw(st.integers(1, 80)) for _ in range(3))
    batch = draw(st.sampled_from([0, 0, 2, 3]))
    epi = draw(st.lists(st.sampled_from(["bias", "add", "mul_c", "relu", "tanh", "gelu"]), max_size=3))
    return matmul(m, n, k, batch=batch, batch_b=draw(st.booleans()), transpose_b=draw(st.booleans()), epi=epi)


@st.composite
def pool_specs(draw: st.DrawFn) -> OpSpec:
    layout = draw(st.sampled_from(["NCHW", "NHWC"]))
    data_layout = draw(st.sampled_from([layout, layout, "NCHW", "NHWC"]))
    kind = draw(st.sampled_from(["max", "avg"]))
    c, h, w = draw(st.integers(1, 70)), draw(st.integers(1, 16)), draw(st.integers(1, 16))
    epi = draw(st.lists(st.sampled_from(["bias", "relu", "sigmoid"]), max_size=2))
    if draw(st.booleans()) or min(h, w) < 2:
        return pool(c, h, w, kind=kind, global_=True, layout=layout, data_layout=data_layout, epi=epi,
                    n=draw(st.sampled_from([1, 2])))
    k = draw(st.integers(2, min(h, w, 5)))
    pads = tuple(draw(st.integers(0, k - 1)) for _ in range(4))
    return pool(c, h, w, kind=kind, k=k, stride=draw(st.integers(1, 3)), pad=pads, layout=layout,
                data_layout=data_layout, count_include_pad=draw(st.booleans()), epi=epi)


@st.composite
def eltwise_specs(draw: st.DrawFn) -> OpSpec:
    layout = draw(st.sampled_from(["NCHW", "NHWC", "NC", "NCW", "C"]))
    shape = tuple(draw(st.integers(1, 12 if len(layout) > 2 else 70)) for _ in layout)
    epi = draw(st.lists(st.sampled_from(EPI_CHOICES), min_size=1, max_size=4))
    return eltwise(shape, layout, epi)
