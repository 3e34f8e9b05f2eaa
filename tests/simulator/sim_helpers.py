"""Build-and-run helpers for single-instruction tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tvm_npu.simulator import Engine, ProgramBuilder, Simulator, TensorKind, isa

from tvm_npu.config import DType, HardwareConfig


def run_instruction(
    hw: HardwareConfig,
    instr: isa.Instruction,
    inputs: Sequence[tuple[int, np.ndarray]],
    out_addr: int,
    out_dtype: DType,
    out_count: int,
) -> np.ndarray:
    """Load each ``(sram_addr, array)`` (flattened), run ``instr``, return ``out_count`` elements from ``out_addr``."""
    b = ProgramBuilder(hw)
    loaded, done = b.semaphore(), b.semaphore()
    feeds = {}
    for i, (addr, arr) in enumerate(inputs):
        name = f"in{i}"
        t = b.tensor(name, (arr.size,), DType.from_str(arr.dtype.name), TensorKind.INPUT)
        b.dma_load(t, addr, (arr.size,))
        feeds[name] = np.ascontiguousarray(arr).reshape(-1)
    out = b.tensor("out", (out_count,), out_dtype, TensorKind.OUTPUT)
    b.signal(Engine.DMA_LOAD, loaded)
    b.wait(instr.engine, loaded)
    b.emit(instr)
    b.signal(instr.engine, done)
    b.wait(Engine.DMA_STORE, done)
    b.dma_store(out, out_addr, (out_count,))
    return Simulator(hw).run(b.build(), feeds).outputs["out"]


def program(hw: HardwareConfig, *instrs: isa.Instruction) -> isa.Program:
    """A program of ``instrs`` alone (plus one 4-element fp32 input ``x``): encoding and validation tests."""
    b = ProgramBuilder(hw)
    b.tensor("x", (4,), DType.FP32, TensorKind.INPUT)
    for ins in instrs:
        b.emit(ins)
    return b.build()


def strided(flat: np.ndarray, shape: Sequence[int], strides: Sequence[int], offset: int = 0) -> np.ndarray:
    """View ``flat[offset:]`` with element strides (to read a strided SRAM layout back)."""
    it = flat.itemsize
    return np.lib.stride_tricks.as_strided(flat[offset:], tuple(shape), tuple(s * it for s in strides))
