"""The LUT epilogue step (``VLUT``) compiled as the compiler compiles it and simulated, against numpy:
a table pass of its own over an 8-bit tensor (two chained tables too), and a table after the
requantisation in the epilogue of an 8-bit conv2d (dense and depthwise) and matmul, on every tile
:func:`test_quantized_ops.tile_variants` tries (edge tiles, tight SRAM, several reduction passes).
The reference is written here: integer conv / matmul in int64, the requantisation of
:func:`test_quantized_ops.requantize_ref`, then ``table[value - qmin]`` with numpy indexing."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from helpers import simulate
from test_quantized_ops import (  # tests/codegen is on sys.path (pytest's prepend import)
    HW,
    Requant,
    accepted,
    conv_direct,
    int_env,
    matmul_direct,
    qconv,
    qmatmul,
    requantize_ref,
    tile_variants,
)
from tvm_npu.codegen.operator import standalone_program
from tvm_npu.simulator import Simulator
from tvm_npu.tir_schedules import tile_search

from tvm_npu.config import CompilerOptions, DType
from tvm_npu.core.ops import Broadcast, Conv2dSpec, ElementwiseSpec, EpiKind, Epilogue, MatmulSpec, OpSpec, TensorRef

I8, U8 = DType.INT8, DType.UINT8


def lut_step(name: str, dtype: DType) -> Epilogue:
    return Epilogue(EpiKind.LUT, TensorRef(name, (256,), dtype), Broadcast.TABLE, dtype=dtype)


def with_tables(spec: OpSpec, *dtypes: DType) -> OpSpec:
    """``spec`` with a table step per dtype appended (the last one's type is the output's)."""
    steps = tuple(lut_step(f"table{i}", dt) for i, dt in enumerate(dtypes))
    return replace(spec, out=replace(spec.out, dtype=dtypes[-1]), epilogue=spec.epilogue + steps)


def look_up(values: np.ndarray, spec: OpSpec, env: dict[str, np.ndarray], dtype: DType) -> np.ndarray:
    """Every table step of ``spec`` applied to ``values`` (8-bit integers of ``dtype``) with numpy indexing."""
    for step in spec.epilogue:
        if step.kind == EpiKind.LUT:
            values = env[step.operand.name][values.astype(np.int64) - int(np.iinfo(dtype.np).min)]
            dtype = step.dtype
    return values


def check_tiles(spec: OpSpec, reference) -> None:
    rng = np.random.default_rng(3)
    env = int_env(accepted(spec), rng)
    want = reference(env)
    assert len(np.unique(want)) > 10, "a reference of few values checks little"
    for tile, hw in tile_variants(spec):
        got = simulate(spec, tile, hw, env)
        np.testing.assert_array_equal(got, want, err_msg=f"{tile} on {hw.max_sram_bytes} bytes")


@pytest.mark.parametrize("dtypes", [(I8, I8), (I8, U8), (U8, I8), (I8, U8, I8)], ids=str)
@pytest.mark.parametrize("shape, layout", [((1, 6, 9, 11), "NCHW"), ((1, 5, 7, 13), "NHWC"), ((3, 70), "NC")])
def test_table_pass_of_its_own(dtypes: tuple[DType, ...], shape: tuple[int, ...], layout: str) -> None:
    data = TensorRef("x", shape, dtypes[0], layout)
    spec = with_tables(ElementwiseSpec("lut", TensorRef("y", shape, dtypes[0], layout), data=data), *dtypes[1:])
    check_tiles(spec, lambda env: look_up(env["x"], spec, env, dtypes[0]))


def _requantised(spec: Conv2dSpec | MatmulSpec, env: dict[str, np.ndarray], requant: Requant) -> np.ndarray:
    if isinstance(spec, Conv2dSpec):
        acc, axis = conv_direct(spec, env["x"].astype(np.int64), env["w"].astype(np.int64)), spec.layout.index("C")
    else:
        acc = matmul_direct(spec, env[spec.a.name].astype(np.int64), env[spec.b.name].astype(np.int64))
        axis = acc.ndim - 1
    acc = acc + env["bias"].reshape([-1 if a == axis else 1 for a in range(acc.ndim)])
    acc = acc.astype(np.int32)
    return requantize_ref(acc, env["mult"], axis, requant.zero_point, requant.lo, requant.hi).astype(requant.dtype.np)


@pytest.mark.parametrize("out", [I8, U8])
@pytest.mark.parametrize("geometry", [{"k": 3, "stride": 1, "pad": 1}, {"k": 3, "stride": 2, "pad": 1, "groups": 8}],
                         ids=["dense", "depthwise"])
def test_table_after_the_requantisation_of_a_conv(out: DType, geometry: dict) -> None:
    """conv -> bias -> requant -> LUT: one operator; the table reads the requantised value in SRAM."""
    requant = Requant(I8, -5, -128, 127)
    spec = with_tables(qconv(I8, 8, 8, 10, 9, bias=True, requant=requant, **geometry), out)
    check_tiles(spec, lambda env: look_up(_requantised(spec, env, requant), spec, env, I8))


def test_table_after_the_requantisation_of_a_matmul() -> None:
    requant = Requant(U8, 7, 0, 255)
    spec = with_tables(qmatmul(I8, 20, 24, 40, bias=True, requant=requant), I8)
    check_tiles(spec, lambda env: look_up(_requantised(spec, env, requant), spec, env, U8))


def test_table_counts_one_version_in_the_footprint() -> None:
    """A table is loaded once per operator: its 256 bytes are one aligned buffer whatever the pipelining."""
    data = TensorRef("x", (1, 8, 16, 16), I8, "NCHW")
    relu = ElementwiseSpec("relu", TensorRef("y", data.shape, I8, "NCHW"), data=data,
                           epilogue=(Epilogue(EpiKind.RELU),))
    plain, table = relu.with_epilogue(Epilogue(EpiKind.RELU)), with_tables(relu, I8)  # two steps each
    tiles = tile_search.candidates(plain, HW, CompilerOptions())
    for tile in tiles:
        assert tile_search.footprint(table, tile, HW) == tile_search.footprint(plain, tile, HW) + HW.align(256)
    for tile in (tiles[0], tiles[len(tiles) // 2], tiles[-1]):  # what the codegen allocates stays within it
        peak = standalone_program(table, tile, HW)[1]
        assert peak <= tile_search.footprint(table, tile, HW), (tile, peak)


@pytest.mark.parametrize("with_conv", [False, True], ids=["pass", "conv"])
def test_cost_model_prices_the_table(with_conv: bool) -> None:
    """The flow model's estimate, with the table loaded once before the first tile, against the simulator:
    within 3 % (measured: 12,972 vs 12,960 cycles for a pass over 1x32x56x56; 33,016 vs 32,440 with a conv)."""
    if with_conv:
        spec = with_tables(qconv(I8, 32, 32, 28, 28, bias=True, requant=Requant(I8, 0, -128, 127)), I8)
    else:
        shape = (1, 32, 56, 56)
        spec = with_tables(ElementwiseSpec("lut", TensorRef("y", shape, I8, "NCHW"),
                                           data=TensorRef("x", shape, I8, "NCHW")), I8)
    tile = tile_search.choose(spec, HW, CompilerOptions())
    simulated = Simulator(HW).run(standalone_program(spec, tile, HW)[0], timing_only=True).stats.total_cycles
    assert abs(tile_search.estimate(spec, tile, HW).cycles - simulated) <= 0.03 * simulated
