"""A tile for every convolution the SRAM can hold at all (issue 24 item 5).

Depthwise tiles normally hold a whole SRAM granule's worth of groups (``group_quantum``: 64 groups
of 8-bit data, 16 of fp32), so that pipelined buffer versions never share a granule. A depthwise
window of a whole image (the 8-bit global average pool, a depthwise convolution with unit weights)
then needs 64 whole images in SRAM and was refused ("no tile fits") on the host, although one image
fits. The kind's fallback axes (fewer groups) are searched only when no ordinary tile fits, so every
operator that fitted before keeps its tile (and its cycles).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import tvm
from helpers import F32, assert_matches, conv, run_op
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from tvm import relax
from tvm_npu.tir_schedules import tile_search
from tvm_npu.tir_schedules.conv2d import group_quantum

import tvm_npu
from tvm_npu.config import DType, HardwareConfig, parse_target
from tvm_npu.core.ops import Broadcast, Conv2dSpec, EpiKind, Epilogue, TensorRef

I8, I32 = DType.from_str("int8"), DType.from_str("int32")
TARGET = parse_target("npu")


def _budget(nbytes: int) -> HardwareConfig:
    return dataclasses.replace(TARGET.hw, max_sram_bytes=nbytes)


def _as_int8(spec: Conv2dSpec) -> Conv2dSpec:
    """``spec`` as the QDQ pass writes an 8-bit conv: int8 data / weights / output, int32 bias, per-channel
    requantisation."""
    o = spec.out.dim("C")
    retype = {"data": I8, "weight": I8, "out": I8}
    fields = {k: dataclasses.replace(getattr(spec, k), dtype=dt) for k, dt in retype.items()}
    epi = (Epilogue(EpiKind.BIAS, TensorRef("b", (o,), I32), Broadcast.CHANNEL),
           Epilogue(EpiKind.REQUANT, TensorRef("m", (o,), F32), Broadcast.CHANNEL, ints=(0, -128, 127), dtype=I8))
    return dataclasses.replace(spec, **fields, epilogue=epi)


def test_global_window_of_a_large_image_fits_with_fewer_groups() -> None:
    """An 8-bit global average pool of 16 x 224 x 224 (a depthwise conv whose window is the image): 1.6 MB
    for a quantum of groups, about 100 KB for one; it fits the default 1 MiB with a fallback tile."""
    spec = _as_int8(conv(16, 16, 224, k=224, pad=0, groups=16))
    hw = TARGET.hw
    assert hw.max_sram_bytes == 1 << 20
    tile = tile_search.choose(spec, hw, TARGET.options)
    assert tile.tg < group_quantum(spec, hw)
    assert tile_search.footprint(spec, tile, hw) <= hw.max_sram_bytes
    assert tile_search.fits(spec, hw, TARGET.options)


def test_ordinary_tiles_win_where_they_fit() -> None:
    """Where a quantum of groups fits, the fallback space is not searched: the choice is unchanged."""
    spec = _as_int8(conv(64, 64, 28, k=3, groups=64))
    tile = tile_search.choose(spec, TARGET.hw, TARGET.options)
    assert tile.tg % group_quantum(spec, TARGET.hw) == 0 or tile.tg == 64


def test_fallback_tile_computes_the_convolution() -> None:
    """The simulator runs a fallback tile (fewer groups than the quantum, versions sharing granules) and
    matches numpy."""
    spec = conv(32, 32, 20, k=20, pad=0, groups=32)
    hw = _budget(16384)
    opts = TARGET.options
    assert all(tile_search.footprint(spec, t, hw) > hw.max_sram_bytes for t in tile_search.candidates(spec, hw, opts))
    tile = tile_search.choose(spec, hw, opts)
    assert tile.tg < group_quantum(spec, hw)
    run = run_op(spec, tile, hw)
    assert_matches(run.out, run.ref, tile)


@settings(max_examples=25, deadline=None)
@given(c=st.sampled_from([8, 16, 32, 64, 96]), side=st.integers(4, 40), k=st.sampled_from([1, 3, 5]),
       depthwise=st.booleans(), budget=st.sampled_from([4096, 8192, 16384, 65536]))
def test_int8_fits_wherever_fp32_fits(c: int, side: int, k: int, depthwise: bool, budget: int) -> None:
    """8-bit tensors are a quarter of fp32's: wherever some fp32 tile of a convolution fits, some 8-bit one
    does too (the global window included: ``k`` of the whole side)."""
    for kernel in (min(k, side), side):
        spec = conv(c, c, side, k=kernel, pad=0, groups=c if depthwise else 1)
        hw = _budget(budget)
        if tile_search.fits(spec, hw, TARGET.options):
            assert tile_search.fits(_as_int8(spec), hw, TARGET.options), (spec, budget)


def _global_pool_model(c: int, side: int) -> onnx.ModelProto:
    """float x -> QuantizeLinear -> DequantizeLinear -> GlobalAveragePool -> QuantizeLinear ->
    DequantizeLinear, as ``quantize_static`` writes a pooled head."""
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in
             (("s_x", np.float32(0.02)), ("z_x", np.int8(-3)), ("s_y", np.float32(0.011)), ("z_y", np.int8(5)))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_x", "z_x"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s_x", "z_x"], ["xf"]),
             helper.make_node("GlobalAveragePool", ["xf"], ["p"]),
             helper.make_node("QuantizeLinear", ["p", "s_y", "z_y"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "s_y", "z_y"], ["y"])]
    graph = helper.make_graph(nodes, "global_pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                   [1, c, side, side])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 1, 1])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_int8_global_average_pool_of_a_large_map_runs_on_the_npu() -> None:
    """The 8-bit global average pool of a 64 x 56 x 56 map at -max-sram-bytes=65536 (a quantum of 64 whole
    images would need 400 KB): on the NPU, bit-exact with llvm."""
    model = _global_pool_model(64, 56)
    target = "npu -max-sram-bytes=65536"
    ex, info = tvm_npu.build_with_info(model, target)
    assert info.npu_ops.get("relax.nn.conv2d") == 1, info.npu_ops
    assert set(info.host_ops) <= {"relax.quantize", "relax.dequantize"}, info.host_ops
    x = np.random.default_rng(0).uniform(-2, 2, (1, 64, 56, 56)).astype(np.float32)
    def run(executable: relax.VMExecutable) -> np.ndarray:
        return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()

    np.testing.assert_array_equal(run(ex), run(tvm_npu.build_reference(model)))
