"""Reference programs built with :class:`ProgramBuilder`.

They are the worked examples of engine synchronisation (N-deep buffering with two
counting semaphores per producer/consumer pair) and the programs the tests and
``benchmarks/simulator_speed.py`` time.
"""

from __future__ import annotations

from tvm_npu.config import ACCUMULATOR, DType, HardwareConfig
from tvm_npu.simulator import isa
from tvm_npu.simulator.builder import ProgramBuilder

Engine = isa.Engine


def streaming(
    hw: HardwareConfig,
    n_tiles: int,
    tile_elems: int,
    dtype: DType = DType.FP32,
    *,
    buffers: int = 2,
    op: isa.Opcode = isa.Opcode.VRELU,
    reps: int = 1,
    store: bool = True,
) -> isa.Program:
    """``y[i] = op^reps(x[i])`` for ``n_tiles`` rows of ``tile_elems``, through ``buffers`` SRAM slots.

    DMA_LOAD fills a slot, VECTOR transforms it in place, DMA_STORE writes it back
    (without ``store`` the vector engine frees the slot itself and there is no output).
    A slot is reloaded only after the engine that last used it signals ``free``.
    """
    b = ProgramBuilder(hw)
    x = b.tensor("x", (n_tiles, tile_elems), dtype, isa.TensorKind.INPUT)
    y = b.tensor("y", (n_tiles, tile_elems), dtype, isa.TensorKind.OUTPUT) if store else -1
    slots = [b.alloc(tile_elems * dtype.itemsize, f"slot{i}") for i in range(buffers)]
    full, done, free = b.semaphore(), b.semaphore(), b.semaphore()
    shape, strides = (1, 1, tile_elems), (tile_elems, tile_elems, 1)
    for i in range(n_tiles):
        addr = slots[i % buffers]
        if i >= buffers:
            b.wait(Engine.DMA_LOAD, free)
        b.dma_load(x, addr, (tile_elems,), dram_offset=i * tile_elems)
        b.signal(Engine.DMA_LOAD, full)
        b.wait(Engine.VECTOR, full)
        for _ in range(reps):
            b.emit(isa.VecUnary(shape, addr, strides, addr, strides, dtype, op))
        if store:
            b.signal(Engine.VECTOR, done)
            b.wait(Engine.DMA_STORE, done)
            b.dma_store(y, addr, (tile_elems,), dram_offset=i * tile_elems)
            b.signal(Engine.DMA_STORE, free)
        else:
            b.signal(Engine.VECTOR, free)
    return b.build()


def tiled_matmul(
    hw: HardwareConfig,
    m: int,
    n: int,
    k: int,
    dtype: DType,
    tile_m: int,
    tile_n: int,
    tile_k: int,
    *,
    buffers: int = 2,
) -> isa.Program:
    """``c = a @ b`` (a: m x k, b: k x n, c in the accumulator type) tiled for the SRAM.

    Operand tiles stream through ``buffers`` slots; the output tile is double-buffered
    so the store of one tile overlaps the products of the next.
    """
    acc = ACCUMULATOR[dtype]
    bld = ProgramBuilder(hw)
    a = bld.tensor("a", (m, k), dtype, isa.TensorKind.INPUT)
    b = bld.tensor("b", (k, n), dtype, isa.TensorKind.INPUT)
    c = bld.tensor("c", (m, n), acc, isa.TensorKind.OUTPUT)
    a_slots = [bld.alloc(tile_m * tile_k * dtype.itemsize, f"a{i}") for i in range(buffers)]
    b_slots = [bld.alloc(tile_k * tile_n * dtype.itemsize, f"b{i}") for i in range(buffers)]
    c_slots = [bld.alloc(tile_m * tile_n * acc.itemsize, f"c{i}") for i in range(2)]
    full, empty, c_full, c_free = (bld.semaphore() for _ in range(4))
    step = tile = 0
    for mi in range(0, m, tile_m):
        tm = min(tile_m, m - mi)
        for ni in range(0, n, tile_n):
            tn = min(tile_n, n - ni)
            c_addr = c_slots[tile % 2]
            if tile >= 2:
                bld.wait(Engine.TENSOR, c_free)
            for ki in range(0, k, tile_k):
                tk = min(tile_k, k - ki)
                s = step % buffers
                if step >= buffers:
                    bld.wait(Engine.DMA_LOAD, empty)
                bld.dma_load(a, a_slots[s], (tm, tk), dram_offset=mi * k + ki, dram_strides=(k, 1))
                bld.dma_load(b, b_slots[s], (tk, tn), dram_offset=ki * n + ni, dram_strides=(n, 1))
                bld.signal(Engine.DMA_LOAD, full)
                bld.wait(Engine.TENSOR, full)
                bld.matmul(a_slots[s], b_slots[s], c_addr, tm, tn, tk, dtype, accumulate=ki > 0)
                bld.signal(Engine.TENSOR, empty)
                step += 1
            bld.signal(Engine.TENSOR, c_full)
            bld.wait(Engine.DMA_STORE, c_full)
            bld.dma_store(c, c_addr, (tm, tn), dram_offset=mi * n + ni, dram_strides=(n, 1))
            bld.signal(Engine.DMA_STORE, c_free)
            tile += 1
    return bld.build()
