"""16-bit activation operators (issue 28), compiled as the compiler compiles them and simulated, against the
independent integer references of :mod:`test_quantized_ops`: int16 / uint16 x int8 convolutions and matmuls
with an int64 accumulator and int64 biases, requantised to 16 or 8 bits (and an int8 conv requantised to 16
bits), 16-bit max pooling; bit-exact on every tile :func:`test_quantized_ops.tile_variants` tries (the
planner's, a tight SRAM budget's, the shortlist's and one streaming the reduction through SRAM)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from helpers import pool, simulate
from test_quantized_ops import (  # tests/codegen is on sys.path (pytest's prepend import)
    Requant,
    accepted,
    check_int,
    int_env,
    maxpool_ref,
    qconv,
    qmatmul,
    retyped,
    tile_variants,
)

from tvm_npu.config import DType
from tvm_npu.core.ops import EpiKind, OpSpec

I8, I16, U16, I32, I64 = DType.INT8, DType.INT16, DType.UINT16, DType.INT32, DType.INT64


def widened(spec: OpSpec) -> OpSpec:
    """An 8-bit builder's spec with the 16x8 accumulator: int64 biases, an int64 result when not requantised."""
    steps = tuple(replace(e, operand=replace(e.operand, dtype=I64)) if e.kind == EpiKind.BIAS else e
                  for e in spec.epilogue)
    out = replace(spec.out, dtype=I64) if spec.out.dtype == I32 else spec.out
    return replace(spec, epilogue=steps, out=out)


CASES: dict[str, OpSpec] = {
    "conv_k3_i16_c16_o16_h8_bias_requant_i16": widened(
        qconv(I16, 16, 16, 8, pad_value=-1200, bias=True, requant=Requant(I16, 37, -32768, 32767))),
    "conv_k3s2_u16_c12_o20_h11_nhwc_bias_requant_u8": widened(
        qconv(U16, 12, 20, 11, stride=2, pad=1, layout="NHWC", pad_value=30001, bias=True,
              requant=Requant(DType.UINT8, 120, 0, 255))),
    "dw3_i16_c24_h10_bias_requant_relu": widened(
        qconv(I16, 24, 24, 10, groups=24, pad_value=0, bias=True, requant=Requant(I16, 0, 0, 32767))),
    "conv_k1_i16_c24_o8_h6_int64": widened(qconv(I16, 24, 8, 6, k=1, bias=True)),
    "conv_k3_i8_c16_o16_h8_requant_i16": qconv(I8, 16, 16, 8, pad_value=-3, bias=True,
                                               requant=Requant(I16, -500, -32768, 32767)),
    "mm_i16_17x20x70_bias_requant_i16": widened(
        qmatmul(I16, 17, 20, 70, bias=True, requant=Requant(I16, 5, -32768, 32767))),
    "mm_u16_9x40x64_tb_requant_u16": widened(qmatmul(U16, 9, 40, 64, transpose_b=True,
                                                     requant=Requant(U16, 32768, 0, 65535))),
}


def _env(spec: OpSpec, seed: int) -> dict[str, np.ndarray]:
    """:func:`test_quantized_ops.int_env` with the int64 biases it does not know (it draws floats for them)."""
    env = int_env(spec, np.random.default_rng(seed))
    rng = np.random.default_rng(seed + 1)
    for t in spec.inputs:
        if t.dtype == I64:
            env[t.name] = rng.integers(-(2**33), 2**33, t.shape).astype(np.int64)
    return env


@pytest.mark.parametrize("name", list(CASES))
def test_16bit_op_on_every_tile(name: str) -> None:
    spec = CASES[name]
    check_int(spec, _env(spec, len(name)), tile_variants(spec))


def test_16x8_accumulator_does_not_wrap_at_int32() -> None:
    """Every product at its extreme (-32768 x -128 over 3 x 3 x 64 = 576 terms, 2.4e9 > 2**31): int64 sums
    it exactly through the compiled schedule, where int32 would wrap."""
    spec = widened(qconv(I16, 64, 16, 6, pad=0, bias=True, requant=Requant(I16, 0, -32768, 32767)))
    env = _env(spec, 0)
    env[spec.data.name] = np.full(spec.data.shape, -32768, np.int16)
    env[spec.weight.name] = np.full(spec.weight.shape, -128, np.int8)
    env[next(t.name for t in spec.inputs if t.dtype == I64)][...] = 0
    env[next(t.name for t in spec.inputs if t.dtype == DType.FP32)][...] = np.float32(1e-5)
    assert 576 * 32768 * 128 > 2**31
    check_int(spec, env, tile_variants(spec))


@pytest.mark.parametrize("dtype", [I16, U16], ids=["int16", "uint16"])
def test_16bit_max_pool_on_every_tile(dtype: DType) -> None:
    spec = accepted(retyped(pool(24, 11, k=3, stride=2, pad=1, layout="NHWC"), dtype))
    x = int_env(spec, np.random.default_rng(3))[spec.data.name]
    for tile, hw in tile_variants(spec):
        np.testing.assert_array_equal(simulate(spec, tile, hw, {spec.data.name: x}), maxpool_ref(spec, x))
