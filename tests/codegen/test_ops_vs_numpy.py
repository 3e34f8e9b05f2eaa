"""Single operators, compiled and simulated, against a float64 numpy reference.

Every case is scheduled with the planner's chosen tile for ``-pipeline-stages`` 1, 2
and 3, on the default 1 MiB SRAM and on a tight budget (64 KiB, or the smallest size
some tile of the operator fits in) that forces smaller tiles; the simulated SRAM
high-water mark must stay within the budget. A hypothesis test draws random specs and
random legal tiles and also checks that the planner's footprint is exactly what the
codegen allocates.
"""

from __future__ import annotations

import math

import pytest
from helpers import (
    assert_matches,
    conv,
    eltwise,
    matmul,
    pool,
    run_op,
    tight_budget,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strategies import conv_specs, eltwise_specs, matmul_specs, pool_specs
from tvm_npu.relay_patterns.extract import check_padding
from tvm_npu.tir_schedules import tile_search

from tvm_npu.config import CompilerOptions, HardwareConfig
from tvm_npu.core.ops import ElementwiseSpec, OpSpec
from tvm_npu.core.tiles import ConvTile, EltwiseTile, MatmulTile, PoolTile, TileParams

HW = HardwareConfig()
STAGES = (1, 2, 3)
#: Upper bound of the tight SRAM budget (see ``helpers.tight_budget``).
TIGHT = 65536

# ------------------------------------------------------------------------- the case table
CONV_CASES: dict[str, OpSpec] = {
    # kernel 1
    "k1_c3_o16_h9": conv(3, 16, 9, k=1),
    "k1s2_c24_o40_h11_bias": conv(24, 40, 11, k=1, stride=2, pad=0, epi=("bias",)),
    "k1x3_c5_o9_h7w10_nhwc": conv(5, 9, 7, 10, k=1, kw=3, pad=(0, 1, 0, 1), layout="NHWC", epi=("relu",)),
    # kernel 3
    "k3_c16_o32_h10_bias_add_relu": conv(16, 32, 10, epi=("bias", "add", "relu")),
    "k3s2_c8_o24_h11_nhwc_bias_relu": conv(8, 24, 11, stride=2, pad=1, layout="NHWC", epi=("bias", "relu")),
    "k3_c16_o48_h17w19_odd": conv(16, 48, 17, 19),
    "k3s2_n2_c16_o16_h13_residual": conv(16, 16, 13, stride=2, pad=1, n=2, epi=("bias", "add", "relu")),
    "k3d2_n2_c8_o16_h12_gelu": conv(8, 16, 12, dilation=2, n=2, epi=("gelu",)),
    "k3_asym_c5_o7_h10w13": conv(5, 7, 10, 13, pad=(0, 1, 1, 2), epi=("bias", "tanh")),
    "k3_nopad_c12_o20_h9_nhwc": conv(12, 20, 9, pad=0, layout="NHWC", epi=("clip",)),
    # kernel 5 / 7
    "k5_c4_o8_h13_clip": conv(4, 8, 13, k=5, epi=("bias", "clip")),
    "k5s2_c6_o12_h15_nhwc_sigmoid": conv(6, 12, 15, k=5, stride=2, pad=2, layout="NHWC", epi=("sigmoid",)),
    "k5d2s2_asym_c4_o8_h17_nhwc": conv(4, 8, 17, k=5, stride=2, dilation=2, pad=(1, 2, 3, 0), layout="NHWC"),
    "k7s2_c3_o16_h23_stem": conv(3, 16, 23, k=7, stride=2, pad=3, epi=("bias", "relu")),
    "k7_c8_o8_h9_nhwc_tanh": conv(8, 8, 9, k=7, layout="NHWC", epi=("tanh",)),
    # depthwise and grouped
    "dw3_c32_h10_bias_relu": conv(32, 32, 10, groups=32, epi=("bias", "relu")),
    "dw3s2_c24_h11_nhwc_clip": conv(24, 24, 11, stride=2, pad=1, groups=24, layout="NHWC", epi=("clip",)),
    "dw5d2_c16_h12": conv(16, 16, 12, k=5, dilation=2, groups=16),
    "g4_c16_o32_h9": conv(16, 32, 9, groups=4, epi=("bias", "add")),
    "g2s2_n2_c8_o8_h10_nhwc": conv(8, 8, 10, stride=2, pad=1, groups=2, n=2, layout="NHWC", epi=("relu",)),
    # many channels (small spatial)
    "k1_c512_o512_h3_bias_relu": conv(512, 512, 3, k=1, epi=("bias", "relu")),
    "k3s2_c256_o512_h4": conv(256, 512, 4, stride=2, pad=1),
    "k3_c512_o64_h5_nhwc_bias_add_relu": conv(512, 64, 5, layout="NHWC", epi=("bias", "add", "relu")),
    "k1_n2_c64_o256_h7_nhwc": conv(64, 256, 7, k=1, n=2, layout="NHWC", epi=("bias",)),
    # folded layout transforms: the input DMA reads the other layout (DenseNet's 1x1 classifier
    # conv on a 1x1 image once broke the emitter)
    "k1_c256_o100_h1_nchw_to_nhwc_bias": conv(256, 100, 1, k=1, pad=0, layout="NHWC", data_layout="NCHW",
                                              epi=("bias",)),
    "k1_c32_o24_h5_nhwc_to_nchw": conv(32, 24, 5, k=1, pad=0, layout="NCHW", data_layout="NHWC"),
    "k3s2_c16_o32_h9_nchw_to_nhwc_relu": conv(16, 32, 9, stride=2, pad=1, layout="NHWC", data_layout="NCHW",
                                              epi=("relu",)),
    "dw3_c512_h4": conv(512, 512, 4, groups=512, epi=("bias", "relu")),
    # every binary epilogue kind, per-channel and full operands
    "k3_c8_o16_h6_binary_chain": conv(8, 16, 6, epi=("add_c", "mul_c", "sub", "max", "min_c", "sigmoid")),
}

MATMUL_CASES: dict[str, OpSpec] = {
    "mm_1x10x64": matmul(1, 10, 64),
    "mm_17x33x45_bias_tanh": matmul(17, 33, 45, epi=("bias", "tanh")),
    "mm_100x70x130_relu": matmul(100, 70, 130, epi=("relu",)),
    "mm_31x47x200_tb_bias_gelu": matmul(31, 47, 200, transpose_b=True, epi=("bias", "gelu")),
    "mm_fc_1x1000x512_tb_bias": matmul(1, 1000, 512, transpose_b=True, epi=("bias",)),
    "mm_5x3x7_add_sigmoid": matmul(5, 3, 7, epi=("add", "sigmoid")),
    "bmm_3x20x30x40": matmul(20, 30, 40, batch=3),
    "bmm_2x19x21x23_shared_b_clip": matmul(19, 21, 23, batch=2, batch_b=False, epi=("bias", "clip")),
    "bmm_2x9x18x33_tb_shared_b": matmul(9, 18, 33, batch=2, batch_b=False, transpose_b=True, epi=("mul_c",)),
}

POOL_CASES: dict[str, OpSpec] = {
    "max2s2_c20_h13": pool(20, 13, kind="max", k=2),
    "max3s2p1_c64_h15_nhwc": pool(64, 15, kind="max", k=3, stride=2, pad=1, layout="NHWC"),
    "max2_c24_h6_nchw_to_nhwc": pool(24, 6, kind="max", k=2, layout="NHWC", data_layout="NCHW"),
    "gap_c40_h3_nhwc_to_nchw": pool(40, 3, kind="avg", global_=True, layout="NCHW", data_layout="NHWC"),
    "max3s1_asym_c7_h9w11_relu": pool(7, 9, 11, kind="max", k=3, stride=1, pad=(0, 1, 1, 0), epi=("relu",)),
    "avg3s1p1_cip_c10_h9": pool(10, 9, kind="avg", k=3, stride=1, pad=1, count_include_pad=True),
    "avg3s1p1_nocip_c10_h9_nhwc": pool(10, 9, kind="avg", k=3, stride=1, pad=1, layout="NHWC"),
    "avg5s3p2_cip_c7_h17": pool(7, 17, kind="avg", k=5, stride=3, pad=2, count_include_pad=True),
    "avg2s2_n2_c3_h8": pool(3, 8, kind="avg", k=2, n=2),
    "gap_c64_h7": pool(64, 7, kind="avg", global_=True),
    "gap_c100_h5_nhwc_bias_sigmoid": pool(100, 5, kind="avg", global_=True, layout="NHWC", epi=("bias", "sigmoid")),
    "gmax_n2_c48_h6": pool(48, 6, kind="max", global_=True, n=2),
}

ELTWISE_CASES: dict[str, OpSpec] = {
    "ew_1x10x7x9_add_mulc_sigmoid": eltwise((1, 10, 7, 9), "NCHW", ("add", "mul_c", "sigmoid")),
    "ew_1x64x14x14_residual_relu": eltwise((1, 64, 14, 14), "NCHW", ("add", "relu")),
    "ew_2x5x6x7_nhwc_bias_clip": eltwise((2, 5, 6, 7), "NHWC", ("bias", "clip")),
    "ew_1x7x7x100_nhwc_minc_max_addc": eltwise((1, 7, 7, 100), "NHWC", ("min_c", "max", "add_c")),
    "ew_3x8x11_subc_tanh_gelu": eltwise((3, 8, 11), "NCW", ("sub_c", "tanh", "gelu")),
    "ew_2x40_relu": eltwise((2, 40), "NC", ("relu",)),
    "ew_33_mul_sub": eltwise((33,), "C", ("mul", "sub")),
}

CASES = {**CONV_CASES, **MATMUL_CASES, **POOL_CASES, **ELTWISE_CASES}


def _machine(spec: OpSpec, stages: int, budget: str) -> HardwareConfig:
    return HW if budget == "1MiB" else tight_budget(spec, stages, HW, TIGHT)


@pytest.mark.parametrize("budget", ["1MiB", "tight"])
@pytest.mark.parametrize("stages", STAGES)
@pytest.mark.parametrize("name", list(CASES))
def test_chosen_tile_matches_numpy(name: str, stages: int, budget: str) -> None:
    spec = CASES[name]
    hw = _machine(spec, stages, budget)
    tile = tile_search.choose(spec, hw, CompilerOptions(pipeline_stages=stages))
    assert tile.stages == stages
    assert tile_search.footprint(spec, tile, hw) <= hw.max_sram_bytes
    r = run_op(spec, tile, hw, seed=stages)
    assert_matches(r.out, r.ref, f"{name} {tile} on {hw.max_sram_bytes} B")
    assert r.stats.sram_high_water <= hw.max_sram_bytes, (r.stats.sram_high_water, tile)
    assert r.sram_peak <= hw.max_sram_bytes


#: Machines other than the datasheet's default, so nothing silently assumes its numbers: a
#: small array with few lanes and short bursts; a large array on a small SRAM with a fast
#: channel; wide lanes, long bursts, coarse alignment and cheaper fp32.
OTHER_MACHINES = {
    "8x8_16lanes_32Bburst": HardwareConfig(mac_rows=8, mac_cols=8, vector_lanes=16, dram_burst_bytes=32),
    "32x32_256KiB_fastdram": HardwareConfig(mac_rows=32, mac_cols=32, max_sram_bytes=1 << 18, dram_bytes_per_cycle=32,
                                            dma_latency=40),
    "64lanes_128Bburst_align128": HardwareConfig(vector_lanes=64, dram_burst_bytes=128, sram_align_bytes=128,
                                                 fp32_mac_slowdown=2, tensor_issue_cycles=8, mac_rows=12),
}


@pytest.mark.parametrize("machine", list(OTHER_MACHINES))
@pytest.mark.parametrize("name", list(CASES))
def test_chosen_tile_matches_numpy_on_other_machines(name: str, machine: str) -> None:
    hw = OTHER_MACHINES[machine]
    spec = CASES[name]
    stages = 1 + len(name) % 3  # spread the pipeline depths over the cases
    tile = tile_search.choose(spec, hw, CompilerOptions(pipeline_stages=stages))
    r = run_op(spec, tile, hw, seed=stages)
    assert_matches(r.out, r.ref, f"{name} {tile} on {machine}")
    assert r.sram_peak == tile_search.footprint(spec, tile, hw)
    assert r.stats.sram_high_water <= hw.max_sram_bytes


@pytest.mark.parametrize("stages", STAGES)
def test_tight_budget_really_shrinks_tiles(stages: int) -> None:
    """The tight runs above are not vacuous: for most cases the preferred tile no longer fits,
    so the planner had to pick a smaller one (cases already at their smallest tile cannot)."""
    opts = CompilerOptions(pipeline_stages=stages)
    specs = {n: s for n, s in CASES.items() if n not in ELTWISE_CASES}  # elementwise: see the matrix
    shrunk = []
    for name, spec in specs.items():
        roomy = tile_search.choose(spec, HW, opts)
        roomy_fp = tile_search.footprint(spec, roomy, HW)
        hw = tight_budget(spec, stages, HW, TIGHT)
        tight = tile_search.choose(spec, hw, opts)
        assert tile_search.footprint(spec, tight, hw) <= hw.max_sram_bytes
        if roomy_fp > hw.max_sram_bytes:
            assert tight != roomy
            shrunk.append(name)
    assert len(shrunk) >= 0.6 * len(specs), sorted(set(specs) - set(shrunk))


# --------------------------------------------------------------- random specs, random tiles
def _output_tile_elements(spec: OpSpec, tile: TileParams) -> int:
    if isinstance(tile, ConvTile):
        return tile.tg * tile.toc * tile.toh * tile.tow
    if isinstance(tile, MatmulTile):
        return tile.tm * tile.tn
    if isinstance(tile, PoolTile):
        return tile.tc * tile.toh * tile.tow
    return math.prod(tile.tiles)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=st.one_of(conv_specs(), conv_specs(), matmul_specs(), pool_specs(), eltwise_specs()),
       stages=st.sampled_from(STAGES), data=st.data())
@pytest.mark.slow
def test_random_legal_tile(spec: OpSpec, stages: int, data: st.DataObject) -> None:
    opts = CompilerOptions(pipeline_stages=stages)
    legal = tile_search.legal(spec, HW, opts)
    assert legal, f"no legal tile for a small operator: {spec}"
    # one-element output tiles followed by an epilogue crash the emitter; that bug has its own
    # test (test_one_element_output_tile_with_an_epilogue) so that it cannot hide others here
    if len(spec.epilogue) >= (2 if isinstance(spec, ElementwiseSpec) else 1):
        legal = [(t, fp) for t, fp in legal if _output_tile_elements(spec, t) > 1]
        assume(legal)
    tile, fp = data.draw(st.sampled_from(legal), label="tile")
    r = run_op(spec, tile, HW, seed=len(legal))
    assert_matches(r.out, r.ref, f"{spec} {tile}")
    assert fp == tile_search.footprint(spec, tile, HW)
    assert r.sram_peak == fp, f"planner footprint {fp} B, codegen allocated {r.sram_peak} B for {tile}"
    assert r.stats.sram_high_water <= r.sram_peak


# ------------------------------------------------------------------ edge cases found above
EDGE_TILE_CASES: dict[str, tuple[OpSpec, TileParams | None]] = {
    # a one-unit dense head with bias + sigmoid (logistic output): the planner must pick tm = tn = 1
    "mm_1x1x64_tb_bias_sigmoid_chosen": (matmul(1, 1, 64, transpose_b=True, epi=("bias", "sigmoid")), None),
    "mm_1x1x4_relu": (matmul(1, 1, 4, epi=("relu",)), MatmulTile(1, 1, 4, stages=1)),
    "conv_1x1x1_bias_chosen": (conv(1, 1, 1, k=1, epi=("bias",)), None),
    "conv_c2_h3_bias_relu_tile1": (conv(2, 1, 3, k=1, epi=("bias", "relu")), ConvTile(1, 1, 1, 2, stages=2)),
    "gap_c1_relu": (pool(1, 2, kind="max", global_=True, epi=("relu",)), PoolTile(1, 1, 1, stages=1)),
    "ew_1x1_add_relu": (eltwise((1, 1), "NC", ("add", "relu")), EltwiseTile((1, 1), stages=1)),
    "ew_4x1_add_relu_tile1": (eltwise((4, 1), "NC", ("add", "relu")), EltwiseTile((1, 1), stages=2)),
}


@pytest.mark.parametrize("name", list(EDGE_TILE_CASES))
def test_one_element_output_tile_with_an_epilogue(name: str) -> None:
    """An output tile of a single element followed by epilogue steps (by the planner's choice when the
    output is one element, e.g. a one-unit dense head; otherwise a legal tile the planner may pick)."""
    spec, tile = EDGE_TILE_CASES[name]
    if tile is None:
        tile = tile_search.choose(spec, HW, CompilerOptions())
    assert tile in tile_search.candidates(spec, HW, CompilerOptions(pipeline_stages=tile.stages))
    assert tile_search.footprint(spec, tile, HW) <= HW.max_sram_bytes
    r = run_op(spec, tile, HW)
    assert_matches(r.out, r.ref, f"{name} {tile}")
    assert r.sram_peak == tile_search.footprint(spec, tile, HW)


WIDE_PAD_CASES: dict[str, OpSpec] = {
    "k1_pad1": conv(4, 8, 5, k=1, pad=1),
    "k3_pad3": conv(4, 8, 6, k=3, pad=3, epi=("bias",)),
    "k3s2_bottom_pad3": conv(4, 8, 6, k=3, stride=2, pad=(0, 0, 3, 0)),
    "k1_right_pad1_nhwc": conv(3, 8, 1, 1, k=1, pad=(0, 0, 0, 1), layout="NHWC"),
}


@pytest.mark.parametrize("name", list(WIDE_PAD_CASES))
def test_conv_padding_wider_than_the_kernel_stays_on_host(name: str) -> None:
    """Padding beyond the dilated kernel extent - 1 (legal in Relax and ONNX) leaves outputs that see
    only padding; the NPU pads inside a tile, so the pattern check refuses these convolutions."""
    with pytest.raises(ValueError, match="padding"):
        check_padding(WIDE_PAD_CASES[name])
