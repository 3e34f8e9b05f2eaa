"""Seed programs for the encoding, fuzz and disassembler tests."""

from __future__ import annotations

import numpy as np
from tvm_npu.simulator import Engine, ProgramBuilder, TensorKind, isa

from tvm_npu.config import DType, HardwareConfig

Op = isa.Opcode


def kitchen_sink(hw: HardwareConfig) -> tuple[isa.Program, dict[str, np.ndarray]]:
    """A valid, synchronised program that uses every record type (and every opcode at least once)."""
    rng = np.random.default_rng(0)
    b = ProgramBuilder(hw)
    x = b.tensor("x", (4, 8, 8), DType.INT8, TensorKind.INPUT)
    w = b.tensor("w", (4, 4, 3, 3), DType.INT8, TensorKind.CONSTANT, rng.integers(-5, 5, (4, 4, 3, 3), dtype=np.int8))
    f = b.tensor("f", (4, 8, 8), DType.FP32, TensorKind.INPUT)
    y = b.tensor("y", (4, 8, 8), DType.INT8, TensorKind.OUTPUT)
    z = b.tensor("z", (4, 4, 4), DType.FP32, TensorKind.OUTPUT)
    s = b.tensor("s", (64,), DType.FP16, TensorKind.SCRATCH)
    xa, wa, fa = b.alloc(256), b.alloc(144), b.alloc(1024)
    acc, q, g, pooled, h = b.alloc(1024), b.alloc(256), b.alloc(1024), b.alloc(256), b.alloc(128)
    loaded, computed, vec_done, stored = (b.semaphore() for _ in range(4))
    b.dma_load(x, xa, (4, 8, 8))
    b.dma_load(w, wa, (4, 4 * 9))
    b.dma_load(f, fa, (4, 8, 8))
    b.signal(Engine.DMA_LOAD, loaded)
    b.wait(Engine.TENSOR, loaded)
    b.emit(isa.Conv(xa, (64, 8, 1), 4, 8, 8, wa, (36, 9, 3, 1), acc, (64, 8, 1), 4, 8, 8, 3, 3, 1, 1, 1, 1,
                    1, 1, 1, 1, 1, DType.INT8, False))  # fmt: skip
    b.emit(isa.MatMul(xa, (8, 1), xa + 64, (8, 1), acc, (8, 1), 8, 8, 8, DType.INT8, True))
    b.signal(Engine.TENSOR, computed)
    b.wait(Engine.VECTOR, computed)
    d3 = (64, 8, 1)
    shape = (4, 8, 8)
    b.emit(isa.VecBiasAdd(shape, acc, d3, acc, d3, g, 0, DType.INT32))
    b.emit(isa.VecRequant(shape, q, d3, acc, d3, fa, (1, 0, 0), 3, -100, 120, DType.INT8))  # per-channel scales
    for op in sorted(isa.VecBinary.OPS):
        b.emit(isa.VecBinary(shape, g, d3, fa, d3, fa, (0, 0, 1), DType.FP32, op))
    for op in sorted(isa.VecUnary.OPS):
        b.emit(isa.VecUnary(shape, g, d3, fa, d3, DType.FP32, op))
    b.emit(isa.VecClip(shape, g, d3, g, d3, DType.FP32, -1.0, 6.0))
    b.emit(isa.VecScale(shape, g, d3, g, d3, DType.FP32, 0.5, 0.25))
    for op in sorted(isa.Pool.OPS):
        b.emit(isa.Pool(g, d3, 8, 8, pooled, (16, 4, 1), 4, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0, DType.FP32, op, True))
    b.emit(isa.VecCast((1, 1, 64), h, (64, 64, 1), pooled, (64, 64, 1), DType.FP32, DType.FP16))
    b.signal(Engine.VECTOR, vec_done)
    b.wait(Engine.DMA_STORE, vec_done)
    b.dma_store(y, q, (4, 8, 8))
    b.dma_store(z, pooled, (4, 4, 4))
    b.dma_store(s, h, (64,))
    b.signal(Engine.DMA_STORE, stored)
    b.wait(Engine.DMA_LOAD, stored)
    b.dma_load(s, h, (64,))
    feeds = {
        "x": rng.integers(-20, 20, (4, 8, 8), dtype=np.int8),
        "f": rng.standard_normal((4, 8, 8)).astype(np.float32),
    }
    return b.build(), feeds
