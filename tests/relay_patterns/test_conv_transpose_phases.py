"""The phase decomposition of transposed convolutions (``relay_patterns/conv_transpose.py``), the ONNX
``output_shape`` / ``auto_pad`` rewrite (``tvm_npu/compiler/conv_transpose_pads.py``) and the partition
graph's strided stores of the phases."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm_npu.relay_patterns.conv_transpose import ZERO_TAP, AxisPhase, axis_phases, own_macs, sub_weight

from tvm_npu.compiler.conv_transpose_pads import explicit_conv_transpose_pads
from tvm_npu.compiler.driver import partition_plans
from tvm_npu.core.views import indices


def _direct_1d(x: np.ndarray, w: np.ndarray, s: int, p: int, d: int, out: int) -> np.ndarray:
    """The definition: ``y[i * s - p + k * d] += x[i] * w[k]``."""
    y = np.zeros(out)
    for i, k in itertools.product(range(len(x)), range(len(w))):
        o = i * s - p + k * d
        if 0 <= o < out:
            y[o] += x[i] * w[k]
    return y


def _phase_1d(x: np.ndarray, w: np.ndarray, ph: AxisPhase, rows: int) -> np.ndarray:
    """One phase as the NPU's correlation: input cropped, zero padded, the phase's taps dilated."""
    if ph.empty:
        return np.zeros(rows)
    xs = x[ph.crop[0]:len(x) - ph.crop[1]]
    xp = np.concatenate([np.zeros(ph.pad[0]), xs, np.zeros(ph.pad[1])])
    taps = np.array([0.0 if t == ZERO_TAP else w[t] for t in ph.taps])
    n = len(xp) - (len(taps) - 1) * ph.dilation
    assert n == rows, (n, rows)
    assert max(ph.pad) <= (len(taps) - 1) * ph.dilation  # what the NPU's convolution accepts
    return np.array([sum(xp[q + j * ph.dilation] * taps[j] for j in range(len(taps))) for q in range(n)])


@pytest.mark.parametrize("s,k,d", [(1, 3, 1), (2, 4, 1), (2, 3, 2), (3, 2, 1), (3, 5, 2), (4, 3, 3), (2, 1, 1)])
def test_phases_interleave_to_the_transposed_conv(s: int, k: int, d: int) -> None:
    """Every padding and output padding: the interleaved phases are the transposed convolution."""
    rng = np.random.default_rng(s * 100 + k * 10 + d)
    for size, pb, pe, op in itertools.product((1, 2, 5), range(0, (k - 1) * d + 1), range(0, (k - 1) * d + 1),
                                              range(s)):
        out = (size - 1) * s - pb - pe + (k - 1) * d + 1 + op
        if out < 1:
            continue
        x, w = rng.standard_normal(size), rng.standard_normal(k)
        phases = axis_phases(size, out, s, pb, d, k)
        rows = -(-out // s)
        y = np.zeros(rows * s)
        for r, ph in enumerate(phases):
            assert ph.rows == len(range(r, out, s))
            y[r::s] = _phase_1d(x, w, ph, rows)
        np.testing.assert_allclose(y[:out], _direct_1d(x, w, s, pb, d, out), atol=1e-12)


def test_own_macs_count_the_taps_on_the_lattice() -> None:
    """Per axis: the (output, tap) pairs with ``o + p - k * d`` a multiple of the stride; for a stride
    that divides the kernel, exactly ``out * k / s``; the phases' real taps add up to it."""
    for size, out, s, p, d, k in [(5, 10, 2, 1, 1, 4), (4, 11, 3, 0, 1, 2), (6, 11, 2, 1, 1, 3), (3, 9, 3, 2, 2, 4)]:
        brute = sum(1 for o in range(out) for kk in range(k) if (o + p - kk * d) % s == 0)
        assert own_macs(size, out, s, p, d, k) == brute
        phases = axis_phases(size, out, s, p, d, k)
        assert sum(ph.rows * sum(t != ZERO_TAP for t in ph.taps) for ph in phases) == brute
    assert own_macs(8, 16, 2, 1, 1, 4) == 16 * 4 // 2


def test_sub_weight_swaps_channels_per_group() -> None:
    """IOHW (per group: in, out / groups) -> OIHW (out, in / groups), the picked taps, zero taps filled."""
    rng = np.random.default_rng(0)
    g, cig, cog = 2, 3, 4
    w = rng.standard_normal((g * cig, cog, 3, 3))
    sub = sub_weight(w, g, (2, 0), (1, ZERO_TAP), fill=0.0)
    assert sub.shape == (g * cog, cig, 2, 2)
    for gi, o, ci in itertools.product(range(g), range(cog), range(cig)):
        np.testing.assert_array_equal(sub[gi * cog + o, ci, :, 0], w[gi * cig + ci, o, [2, 0], 1])
        np.testing.assert_array_equal(sub[gi * cog + o, ci, :, 1], 0.0)
    zw = np.arange(cog, dtype=np.int8)
    wq = rng.integers(-100, 100, (cig, cog, 2, 2)).astype(np.int8)
    subq = sub_weight(wq, 1, (ZERO_TAP, 0), (1,), fill=zw)
    np.testing.assert_array_equal(subq[:, 0, 0, 0], zw)  # a zero tap dequantizes to 0 in every channel


def _convt_model(attrs: dict, size: tuple[int, int], k: int = 3) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(2).standard_normal((2, 3, k, k)).astype(np.float32), "w")
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, *size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("attrs", [
    dict(strides=[2, 2], output_shape=[10, 9]),
    dict(strides=[2, 2], output_shape=[8, 12]),
    dict(strides=[2, 2], output_shape=[10, 10], auto_pad="SAME_UPPER"),
    dict(strides=[2, 2], output_shape=[9, 8], auto_pad="SAME_LOWER"),
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(strides=[3, 3], auto_pad="SAME_LOWER"),
], ids=str)
def test_output_shape_and_auto_pad_become_explicit_pads(attrs: dict) -> None:
    """The rewritten node computes what onnxruntime computes for the original one, with explicit pads
    (TVM's importer ignores ``output_shape``)."""
    model = _convt_model(attrs, (5, 5))
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert explicit_conv_transpose_pads(rewritten) == 1
    names = {a.name for a in rewritten.graph.node[0].attribute}
    assert "output_shape" not in names and "auto_pad" not in names and "pads" in names
    x = np.random.default_rng(1).standard_normal((1, 2, 5, 5)).astype(np.float32)

    def run(m: onnx.ModelProto) -> np.ndarray:
        session = onnxruntime.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, {"x": x})[0]

    want, got = run(model), run(rewritten)
    assert want.shape == got.shape
    np.testing.assert_array_equal(got, want)


def _phase_graph(tail: bool) -> list:
    """The plan's specs of conv -> ConvTranspose(k 4, stride 2, pad 1, 8 channels, 6x6 -> 12x12) [-> conv]."""
    net = OnnxNet()
    y = net.conv("x", 4, 8, 3)
    w = net.const(net.rng.standard_normal((8, 8, 4, 4)))
    out = net.node("ConvTranspose", [y, w, net.const(net.rng.standard_normal(8))], strides=[2, 2],
                   pads=[1, 1, 1, 1])
    if tail:
        out = net.conv(out, 8, 4, 3, relu=False)
    (plan,) = partition_plans(net.model(out, [1, 4, 6, 6], [1, 4 if tail else 8, 12, 12]), "npu")
    return [op.spec for op in plan.ops]


def test_phases_store_in_runs_and_the_reader_interleaves() -> None:
    """The four phase convolutions store into slices of one DRAM buffer (the concat's, in runs of
    consecutive elements), and the next conv reads the interleaved tensor through a view of it that visits
    every element once: no copy, no byte moved twice."""
    specs = _phase_graph(tail=True)
    assert [type(s).__name__ for s in specs] == ["Conv2dSpec"] * 6
    phases, tail = specs[1:5], specs[5]
    buffer = phases[0].out.view.base
    written = np.zeros(4 * 8 * 6 * 6, dtype=int)
    for spec in phases:  # (in whichever layout the layout stage chose: slices along its channel axis)
        view = spec.out.view
        assert view.base == buffer and any(e > 1 and st == 1 for dim in view.dims for e, st in dim)
        written[indices(view).reshape(-1)] += 1
    assert np.all(written == 1)
    (read,) = [t for t in tail.inputs if t.view is not None and t.view.base == buffer]
    assert np.all(np.bincount(indices(read.view).reshape(-1), minlength=written.size) == 1)


def test_an_interleaved_result_is_copied_not_stored_element_by_element() -> None:
    """As the partition's result, the interleave is one copy (reading the phases' blocks in runs, writing
    the output in runs), not phase stores through a view in which no two elements are adjacent (a DRAM
    burst per element)."""
    specs = _phase_graph(tail=False)
    assert [type(s).__name__ for s in specs] == ["Conv2dSpec"] * 5 + ["PoolSpec"]
    assert specs[-1].name.startswith("copy") and specs[-1].out.view is None
