"""``VLUT`` (0x3E), the vector engine's 8-bit table lookup, against numpy: numerics over
hypothesis-drawn shapes, strides, types and tables, timing (one lookup per lane per cycle, the
table's DMA load priced like any load), a golden encoding and its disassembly, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import program, run_instruction, strided
from tvm_npu.simulator import Engine, ProgramBuilder, Simulator, TensorKind, isa
from tvm_npu.simulator.disasm import format_instruction
from tvm_npu.simulator.encoding import decode_program, encode_instruction, encode_program
from tvm_npu.simulator.errors import InstructionError
from tvm_npu.simulator.timing import compute_cycles

from tvm_npu.config import DType, HardwareConfig

HW = HardwareConfig()
A0, A1, A2 = 0x00000, 0x10000, 0x20000
Q8 = [DType.INT8, DType.UINT8]
shapes3 = st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 70))


def _table(seed: int, dtype: DType) -> np.ndarray:
    info = np.iinfo(dtype.np)
    return np.random.default_rng(seed).integers(info.min, info.max, 256, endpoint=True).astype(dtype.np)


@settings(max_examples=30, deadline=None)
@given(shape=shapes3, src=st.sampled_from(Q8), dst=st.sampled_from(Q8), transpose=st.booleans(),
       seed=st.integers(0, 2**16))
def test_lookup_matches_numpy(shape, src, dst, transpose, seed) -> None:
    n = math.prod(shape)
    info = np.iinfo(src.np)
    x = np.random.default_rng(seed).integers(info.min, info.max, n, endpoint=True).astype(src.np)
    table = _table(seed + 1, dst)
    _, b, c = shape
    src_strides = (b * c, 1, b) if transpose else (b * c, c, 1)
    ins = isa.VecLut(shape, A2, (b * c, c, 1), A0, src_strides, A1, src, dst)
    got = run_instruction(HW, ins, [(A0, x), (A1, table)], A2, dst, n).reshape(shape)
    want = table[strided(x, shape, src_strides).astype(np.int64) - int(info.min)]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("src", Q8)
def test_every_input_value_reads_its_own_entry_in_place(src: DType) -> None:
    """All 256 inputs: entry ``x - qmin``; the result may overwrite its source (in place, as the epilogue runs)."""
    info = np.iinfo(src.np)
    x = np.arange(info.min, info.max + 1).astype(src.np)
    table = (255 - np.arange(256)).astype(np.uint8)  # reversed: a wrong offset cannot pass
    ins = isa.VecLut((1, 1, 256), A0, (256, 256, 1), A0, (256, 256, 1), A1, src, DType.UINT8)
    got = run_instruction(HW, ins, [(A0, x), (A1, table)], A0, DType.UINT8, 256)
    np.testing.assert_array_equal(got, table)


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 4, 32), (2, 3, 33)])
def test_timing_one_lookup_per_lane_per_cycle(shape) -> None:
    a, b, c = shape
    ins = isa.VecLut(shape, A1, (b * c, c, 1), A0, (b * c, c, 1), A2, DType.INT8, DType.INT8)
    assert compute_cycles(HW, ins) == HW.vector_issue_cycles + -(-(a * b * c) // HW.vector_lanes)
    wide = HardwareConfig(vector_lanes=64, vector_issue_cycles=3)
    assert compute_cycles(wide, ins) == 3 + -(-(a * b * c) // 64)


def test_table_load_is_an_ordinary_dma() -> None:
    """The 256-byte table arrives by one DMA descriptor: latency plus four 64-byte bursts (the load engine is
    busy from issue to the end of its transfer, so the data's descriptor follows it), then the lookup."""
    b = ProgramBuilder(HW)
    t = b.tensor("table", (256,), DType.INT8, TensorKind.CONSTANT, data=np.zeros(256, np.int8))
    x = b.tensor("x", (32,), DType.INT8, TensorKind.INPUT)
    sem = b.semaphore()
    b.dma_load(t, A1, (256,))
    b.dma_load(x, A0, (32,))
    b.signal(Engine.DMA_LOAD, sem)
    b.wait(Engine.VECTOR, sem)
    b.emit(isa.VecLut((1, 1, 32), A2, (32, 32, 1), A0, (32, 32, 1), A1, DType.INT8, DType.INT8))
    stats = Simulator(HW).run(b.build(), {"x": np.zeros(32, np.int8)}, timing_only=True).stats
    table_transfer = 256 // HW.dram_bytes_per_cycle
    x_transfer = HW.dram_burst_bytes // HW.dram_bytes_per_cycle
    lookup = HW.vector_issue_cycles + 1
    assert stats.total_cycles == 2 * HW.dma_latency + table_transfer + x_transfer + lookup


def test_golden_encoding_and_disassembly() -> None:
    ins = isa.VecLut((1, 2, 3), 0x40, (6, 3, 1), 0x80, (6, 3, 1), 0x100, DType.INT8, DType.UINT8)
    blob = encode_instruction(ins)
    assert blob.hex() == ("3e" + "010000000200000003000000" + "40000000" + "060000000300000001000000"
                          + "80000000" + "060000000300000001000000" + "00010000"
                          + f"{int(DType.INT8):02x}" + f"{int(DType.UINT8):02x}")
    prog = program(HW, ins)
    assert decode_program(encode_program(prog)).instructions == (ins, isa.End())
    assert format_instruction(ins) == ("VLUT       shape=(1,2,3) dst_addr=0x000040 dst_strides=(6,3,1) "
                                       "src_addr=0x000080 src_strides=(6,3,1) table_addr=0x000100 "
                                       "src_dtype=INT8 dst_dtype=UINT8")


@pytest.mark.parametrize("ins, field", [
    (isa.VecLut((1, 2, 4), A1, (8, 4, 1), A0, (8, 4, 1), A2, DType.FP32, DType.INT8), "src_dtype"),
    (isa.VecLut((1, 2, 4), A1, (8, 4, 1), A0, (8, 4, 1), A2, DType.INT8, DType.INT32), "dst_dtype"),
    (isa.VecLut((1, 2, 4), A1, (8, 4, 1), A0, (8, 4, 1), HW.max_sram_bytes - 128, DType.INT8, DType.INT8),
     "table_addr"),
    (isa.VecLut((1, 2, 4), A1, (8, 0, 1), A0, (8, 4, 1), A2, DType.INT8, DType.INT8), "dst_strides"),
])
def test_validation_names_the_field(ins, field) -> None:
    with pytest.raises(InstructionError) as err:
        Simulator(HW).run(program(HW, ins), {"x": np.zeros(4, np.float32)})
    assert err.value.field == field
