"""Vector-engine depthwise tiles that stream their weights (``ConvTile.stream_groups`` on a vector tile, issue 27
item 3): each step loads its group tile's weights and per-channel epilogue operands with its data, so the first
tile waits for its own channels' constants only, not the whole layer's (most of the pipeline fill of a layer
of few large tiles). Offered only where the vector engine, not the DMA, binds the layer
(:func:`tvm_npu.tir_schedules.conv2d.vector_streaming_pays`): the extra descriptors' latency would otherwise
show on a busy DRAM channel.

Pinned simulated cycles of the streamed tile beside the same tile loading whole weights (fp32 within
rtol 1e-4 / atol 1e-5 of float64), and an int8 QDQ layer, requantised, bit-exact against llvm.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from helpers import assert_matches, conv, run_op
from onnx import TensorProto, helper, numpy_helper
from tvm import relax
from tvm_npu.tir_schedules import conv2d, tile_search

import tvm_npu
from tvm_npu.config import CompilerOptions, HardwareConfig
from tvm_npu.core.tiles import ConvEngine
from tvm_npu.tools.quantize import quantize_model

HW = HardwareConfig()
OPTS = CompilerOptions()


def _streams(spec) -> set[bool]:
    return {t.stream_groups for t in tile_search.candidates(spec, HW, OPTS) if t.engine == ConvEngine.VECTOR}


def test_only_vector_bound_depthwise_layers_offer_streamed_weights() -> None:
    """A 5x5 window keeps the lanes busy 25 cycles per lane group: vector-bound, both forms offered; an fp32
    3x3 layer moves more bytes than its taps take cycles: DMA-bound, whole weights only."""
    vector_bound = conv(240, 240, 11, k=5, groups=240, epi=("bias", "relu"))
    dma_bound = conv(240, 240, 14, groups=240, epi=("bias",))
    assert conv2d.vector_streaming_pays(vector_bound, HW) and _streams(vector_bound) == {False, True}
    assert not conv2d.vector_streaming_pays(dma_bound, HW) and _streams(dma_bound) == {False}


@pytest.mark.parametrize(("spec", "streamed", "whole"), [
    # mobilenet_v3's 5x5 depthwise on 240 channels at 11x11: vector busy 25,065 cycles
    (conv(240, 240, 11, k=5, groups=240, epi=("bias", "relu")), 26433, 27993),
    (conv(128, 128, 14, k=7, groups=128, epi=("bias",)), 41392, 42896),  # vector busy 39,328
])
def test_streamed_weights_shorten_the_fill(spec, streamed: int, whole: int) -> None:
    """The planner streams the weights; pinned cycles of its tile and of the same tile with whole weights,
    and the streamed tile's numerics against float64."""
    tile = tile_search.choose(spec, HW, OPTS)
    assert tile.engine == ConvEngine.VECTOR and tile.stream_groups, tile
    assert run_op(spec, tile, HW, timing_only=True).stats.total_cycles == streamed
    whole_tile = dataclasses.replace(tile, stream_groups=False)
    assert run_op(spec, whole_tile, HW, timing_only=True).stats.total_cycles == whole
    run = run_op(spec, tile, HW)
    assert_matches(run.out, run.ref, tile)
    assert run.sram_peak <= tile_search.footprint(spec, tile, HW)


def _depthwise_model(c: int, h: int, k: int) -> onnx.ModelProto:
    """fp32 ONNX: two depthwise k x k convs + bias + relu (quantized below to QDQ, per-channel weights: the
    first one's output stays int8, requantised, as between MobileNetV2's layers)."""
    rng = np.random.default_rng(7)
    inits, nodes, x = [], [], "x"
    for i in range(2):
        inits += [numpy_helper.from_array((rng.standard_normal((c, 1, k, k)) / k).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], group=c, kernel_shape=[k, k],
                                   pads=[k // 2] * 4),
                  helper.make_node("Relu", [f"c{i}"], [f"y{i}"])]
        x = f"y{i}"
    graph = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, c, h, h])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_int8_streamed_depthwise_is_bit_exact() -> None:
    """MobileNetV2's last depthwise shape (960 channels at 7x7), int8 QDQ: the first layer's vector tile
    (int8 in and out) streams its weights, bias and requantisation operands; the result is bit-exact
    against llvm."""
    with tempfile.TemporaryDirectory() as tmp:
        model = onnx.load(str(quantize_model(_depthwise_model(960, 7, 3), Path(tmp) / "q.onnx", random=4, seed=1)))
    x = tvm.runtime.tensor(np.random.default_rng(5).standard_normal((1, 960, 7, 7)).astype(np.float32))
    with tvm_npu.profile() as prof:
        got = relax.VirtualMachine(tvm_npu.build(model, "npu"), tvm.cpu())["main"](x).numpy()
    want = relax.VirtualMachine(tvm_npu.build_reference(model), tvm.cpu())["main"](x).numpy()
    np.testing.assert_array_equal(got, want)
    tiles = [x.tile for r in prof.runs for x in r.artifact.layers if x.op == "conv2d"]
    assert (tiles[0].get("engine"), tiles[0].get("stream_groups")) == ("vector", True), tiles
