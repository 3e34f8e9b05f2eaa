"""The simulator as a strict referee: unsynchronised conflicting accesses raise HazardError.

Two accesses to overlapping SRAM bytes (or elements of one DRAM tensor) from different
engines, at least one a write, must run in program order: the later one may start only
once the earlier one has completed. Each hazard kind is shown by a hand-built program,
which runs cleanly once the right Signal/Wait pair is added; interleaved but disjoint
strided accesses are not flagged; compiled programs with a semaphore removed either
raise or still compute exactly the same outputs, never a wrong answer.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from programs import kitchen_sink
from tvm_npu.codegen.sync import _footprint
from tvm_npu.simulator import (
    DeadlockError,
    Engine,
    HazardError,
    ProgramBuilder,
    Simulator,
    Space,
    TensorKind,
    isa,
)

from tvm_npu.config import CompilerOptions, DType, HardwareConfig
from tvm_npu.testing.workloads import streaming, tiled_matmul

Op = isa.Opcode
F32, I8 = DType.FP32, DType.INT8


def vec_copy(dst: int, src: int, n: int, dtype: DType = F32, dst_stride: int = 1, src_stride: int = 1) -> isa.VecUnary:
    return isa.VecUnary((1, 1, n), dst, (0, 0, dst_stride), src, (0, 0, src_stride), dtype, Op.VCOPY)


def dma_cycles(hw: HardwareConfig, nbytes: int) -> int:
    """Latency plus transfer of one aligned, contiguous descriptor."""
    return hw.dma_latency + math.ceil(math.ceil(nbytes / hw.dram_burst_bytes) * hw.dram_burst_bytes
                                      / hw.dram_bytes_per_cycle)


def assert_hazard(
    hw: HardwareConfig,
    program: isa.Program,
    feeds: dict[str, np.ndarray],
    kind: str,
    earlier: tuple[int, str, str],
    later: tuple[int, str, str],
    region: str,
) -> HazardError:
    """Both modes raise the same HazardError, naming both instructions, their engines, the kind and the region."""
    errors = []
    for timing_only in (False, True):
        with pytest.raises(HazardError) as info:
            Simulator(hw).run(program, feeds, timing_only=timing_only)
        e = info.value
        assert (e.kind, e.earlier, e.later, e.region) == (kind, earlier, later, region), str(e)
        text = str(e)
        for index, opcode, engine in (earlier, later):
            assert f"#{index} ({opcode} on the {engine} engine)" in text
        assert kind in text and region in text
        errors.append(str(e))
    assert errors[0] == errors[1]
    return e


# ------------------------------------------------------------------------ RAW on SRAM
def raw_program(hw: HardwareConfig, synced: bool) -> tuple[isa.Program, dict[str, np.ndarray]]:
    """The issue's example: a vector copy reads the buffer a DMA load is still filling."""
    b = ProgramBuilder(hw)
    x = b.tensor("x", (256,), F32, TensorKind.INPUT)
    y = b.tensor("y", (256,), F32, TensorKind.OUTPUT)
    src, dst = b.alloc(1024), b.alloc(1024)
    loaded, copied = b.semaphore(), b.semaphore()
    b.dma_load(x, src, (256,))
    if synced:
        b.signal(Engine.DMA_LOAD, loaded)
        b.wait(Engine.VECTOR, loaded)
    b.emit(vec_copy(dst, src, 256))
    b.signal(Engine.VECTOR, copied)
    b.wait(Engine.DMA_STORE, copied)
    b.dma_store(y, dst, (256,))
    return b.build(), {"x": np.arange(256, dtype=np.float32)}


def test_raw_vector_copy_before_the_load_completes(hw: HardwareConfig) -> None:
    program, feeds = raw_program(hw, synced=False)
    e = assert_hazard(hw, program, feeds, "read-after-write", (0, "DMA_LOAD", "DMA_LOAD"), (1, "VCOPY", "VECTOR"),
                      "SRAM bytes [0, 1024)")
    # the copy would run at 0-16 while the load ends at 164 (default machine)
    assert (e.start, e.earlier_end) == (0, dma_cycles(hw, 1024))
    program, feeds = raw_program(hw, synced=True)
    y = Simulator(hw).run(program, feeds).outputs["y"]
    np.testing.assert_array_equal(y, feeds["x"])


def test_the_issue_example_cycles() -> None:
    hw = HardwareConfig()
    program, feeds = raw_program(hw, synced=False)
    with pytest.raises(HazardError, match=r"started at cycle 0, .* completes at cycle 164"):
        Simulator(hw).run(program, feeds)
    trace = Simulator(hw, check_hazards=False).run(program, timing_only=True, trace=True).trace
    assert trace is not None
    spans = {(ev.track, ev.name): (ev.start, ev.end) for ev in trace}
    assert spans[("VECTOR", "VCOPY")] == (0, 16) and spans[("DMA_LOAD", "DMA_LOAD")] == (0, 164)


def test_later_instruction_runs_entirely_before_the_earlier_one(hw: HardwareConfig) -> None:
    """The load that fills the buffer has not even started when the copy (later in program order) is done."""
    b = ProgramBuilder(hw)
    big = b.tensor("big", (8192,), F32, TensorKind.INPUT)
    x = b.tensor("x", (256,), F32, TensorKind.INPUT)
    scratch, src, dst = b.alloc(8192 * 4), b.alloc(1024), b.alloc(1024)
    b.dma_load(big, scratch, (8192,))  # keeps DMA_LOAD busy
    b.dma_load(x, src, (256,))
    b.emit(vec_copy(dst, src, 256))
    program = b.build()
    feeds = {"big": np.zeros(8192, np.float32), "x": np.ones(256, np.float32)}
    e = assert_hazard(hw, program, feeds, "read-after-write", (1, "DMA_LOAD", "DMA_LOAD"), (2, "VCOPY", "VECTOR"),
                      f"SRAM bytes [{src}, {src + 1024})")
    assert e.earlier_end is None and "had not started yet" in str(e)


# ------------------------------------------------------------------------ WAR on SRAM
def war_program(hw: HardwareConfig, synced: bool) -> tuple[isa.Program, dict[str, np.ndarray]]:
    """A load overwrites the A tile the tensor engine is still reading."""
    m = n = k = 64
    b = ProgramBuilder(hw)
    a = b.tensor("a", (2, m, k), I8, TensorKind.INPUT)
    bt = b.tensor("b", (k, n), I8, TensorKind.INPUT)
    c = b.tensor("c", (m, n), DType.INT32, TensorKind.OUTPUT)
    a_buf, b_buf, c_buf = b.alloc(m * k), b.alloc(k * n), b.alloc(m * n * 4)
    full, free, done = b.semaphore(), b.semaphore(), b.semaphore()
    b.dma_load(a, a_buf, (m, k))
    b.dma_load(bt, b_buf, (k, n))
    b.signal(Engine.DMA_LOAD, full)
    b.wait(Engine.TENSOR, full)
    b.matmul(a_buf, b_buf, c_buf, m, n, k, I8)  # #4
    b.signal(Engine.TENSOR, done)
    if synced:
        b.signal(Engine.TENSOR, free)
        b.wait(Engine.DMA_LOAD, free)
    b.dma_load(a, a_buf, (m, k), dram_offset=m * k)  # the next A tile, into the same buffer
    b.wait(Engine.DMA_STORE, done)
    b.dma_store(c, c_buf, (m, n))
    rng = np.random.default_rng(0)
    return b.build(), {"a": rng.integers(-9, 9, (2, m, k), dtype=np.int8),
                       "b": rng.integers(-9, 9, (k, n), dtype=np.int8)}


def test_war_load_overwrites_a_tile_the_tensor_engine_reads(hw: HardwareConfig) -> None:
    program, feeds = war_program(hw, synced=False)
    assert_hazard(hw, program, feeds, "write-after-read", (4, "MATMUL", "TENSOR"), (6, "DMA_LOAD", "DMA_LOAD"),
                  "SRAM bytes [0, 4096)")
    program, feeds = war_program(hw, synced=True)
    c = Simulator(hw).run(program, feeds).outputs["c"]
    np.testing.assert_array_equal(c, feeds["a"][0].astype(np.int32) @ feeds["b"].astype(np.int32))


# ------------------------------------------------------------------------ WAW on SRAM
def waw_program(hw: HardwareConfig, synced: bool) -> tuple[isa.Program, dict[str, np.ndarray]]:
    """A load fills a buffer, then (in program order) the vector engine overwrites part of it."""
    b = ProgramBuilder(hw)
    x = b.tensor("x", (256,), F32, TensorKind.INPUT)
    y = b.tensor("y", (256,), F32, TensorKind.OUTPUT)
    buf, zeros = b.alloc(1024), b.alloc(1024)
    loaded, done = b.semaphore(), b.semaphore()
    b.dma_load(x, buf, (256,))
    if synced:
        b.signal(Engine.DMA_LOAD, loaded)
        b.wait(Engine.VECTOR, loaded)
    b.emit(vec_copy(buf + 512, zeros, 64))  # elements 128..191 := 0
    b.signal(Engine.VECTOR, done)
    b.wait(Engine.DMA_STORE, done)
    if not synced:  # the store still needs the load
        b.signal(Engine.DMA_LOAD, loaded)
        b.wait(Engine.DMA_STORE, loaded)
    b.dma_store(y, buf, (256,))
    return b.build(), {"x": np.arange(1, 257, dtype=np.float32)}


def test_waw_vector_write_before_the_load_completes(hw: HardwareConfig) -> None:
    program, feeds = waw_program(hw, synced=False)
    assert_hazard(hw, program, feeds, "write-after-write", (0, "DMA_LOAD", "DMA_LOAD"), (1, "VCOPY", "VECTOR"),
                  "SRAM bytes [512, 768)")
    program, feeds = waw_program(hw, synced=True)
    y = Simulator(hw).run(program, feeds).outputs["y"]
    expect = feeds["x"].copy()
    expect[128:192] = 0
    np.testing.assert_array_equal(y, expect)


# ------------------------------------------------------------------------ DRAM
def dram_raw_program(hw: HardwareConfig, synced: bool) -> tuple[isa.Program, dict[str, np.ndarray]]:
    """A tile goes to a scratch tensor and is loaded back before the store has finished writing it."""
    b = ProgramBuilder(hw)
    x = b.tensor("x", (256,), F32, TensorKind.INPUT)
    s = b.tensor("spill", (512,), F32, TensorKind.SCRATCH)
    y = b.tensor("y", (256,), F32, TensorKind.OUTPUT)
    a_buf, b_buf = b.alloc(1024), b.alloc(1024)
    loaded, stored, back = b.semaphore(), b.semaphore(), b.semaphore()
    b.dma_load(x, a_buf, (256,))
    b.signal(Engine.DMA_LOAD, loaded)
    b.wait(Engine.DMA_STORE, loaded)
    b.dma_store(s, a_buf, (256,), dram_offset=128)  # #3
    if synced:
        b.signal(Engine.DMA_STORE, stored)
        b.wait(Engine.DMA_LOAD, stored)
    b.dma_load(s, b_buf, (256,), dram_offset=128)
    b.signal(Engine.DMA_LOAD, back)
    b.wait(Engine.DMA_STORE, back)
    b.dma_store(y, b_buf, (256,))
    return b.build(), {"x": np.arange(256, dtype=np.float32)}


def test_dram_raw_load_from_scratch_before_the_store_finishes(hw: HardwareConfig) -> None:
    program, feeds = dram_raw_program(hw, synced=False)
    assert_hazard(hw, program, feeds, "read-after-write", (3, "DMA_STORE", "DMA_STORE"), (4, "DMA_LOAD", "DMA_LOAD"),
                  "DRAM tensor 'spill' elements [128, 384)")
    program, feeds = dram_raw_program(hw, synced=True)
    np.testing.assert_array_equal(Simulator(hw).run(program, feeds).outputs["y"], feeds["x"])


def test_dram_war_store_overwrites_what_a_load_still_reads(hw: HardwareConfig) -> None:
    b = ProgramBuilder(hw)
    big = b.tensor("big", (8192,), F32, TensorKind.INPUT)
    s = b.tensor("spill", (256,), F32, TensorKind.SCRATCH)
    buf, other = b.alloc(8192 * 4), b.alloc(1024)
    b.dma_load(big, buf, (8192,))  # keeps DMA_LOAD busy ...
    b.dma_load(s, other, (64,), dram_offset=32)  # ... so this read of the scratch starts late
    b.dma_store(s, other + 512, (128,))  # a later write of elements 0..127 does not wait for it
    program = b.build()
    assert_hazard(hw, program, {"big": np.zeros(8192, np.float32)}, "write-after-read",
                  (1, "DMA_LOAD", "DMA_LOAD"), (2, "DMA_STORE", "DMA_STORE"), "DRAM tensor 'spill' elements [32, 96)")


# --------------------------------------------------------------- disjoint, interleaved
def test_disjoint_interleaved_strided_sram_accesses_are_not_hazards(hw: HardwareConfig) -> None:
    """The load writes the even fp32 elements of a buffer while the vector engine reads and writes the odd ones."""
    b = ProgramBuilder(hw)
    x = b.tensor("x", (128,), F32, TensorKind.INPUT)
    buf = b.alloc(1024)
    b.dma_load(x, buf, (128,), sram_strides=(0, 0, 2))  # even elements
    b.emit(vec_copy(buf + 4, buf + 4, 128, dst_stride=2, src_stride=2))  # odd elements, in place
    program = b.build()
    for timing_only in (False, True):
        Simulator(hw).run(program, {"x": np.ones(128, np.float32)}, timing_only=timing_only)
    # the same with the copy on the even elements is a hazard (it reads them: read-after-write first)
    bad = isa.Program(program.config_hash, program.tensors,
                      (program.instructions[0], vec_copy(buf + 8, buf + 8, 64, dst_stride=2, src_stride=2),
                       isa.End()), program.constants)  # fmt: skip
    assert_hazard(hw, bad, {"x": np.ones(128, np.float32)}, "read-after-write", (0, "DMA_LOAD", "DMA_LOAD"),
                  (1, "VCOPY", "VECTOR"), f"SRAM bytes [{buf + 8}, {buf + 8 + 63 * 8 + 4})")


def test_interleaved_fp16_and_int8_bytes(hw: HardwareConfig) -> None:
    """A load writes bytes 0-1 of every 4, the vector engine bytes 2-3, then byte 3 only (disjoint): no hazard."""
    b = ProgramBuilder(hw)
    x = b.tensor("x", (64,), DType.FP16, TensorKind.INPUT)
    b.dma_load(x, 0, (64,), sram_strides=(0, 0, 2))  # fp16 at bytes 4i, 4i+1
    b.emit(isa.VecUnary((1, 1, 64), 2, (0, 0, 2), 1024, (0, 0, 1), DType.FP16, Op.VCOPY))  # bytes 4i+2, 4i+3
    b.emit(isa.VecUnary((1, 1, 64), 3, (0, 0, 4), 2048, (0, 0, 1), I8, Op.VCOPY))  # bytes 4i+3
    program = b.build()
    Simulator(hw).run(program, {"x": np.ones(64, np.float16)}, timing_only=True)
    clash = isa.VecUnary((1, 1, 64), 1, (0, 0, 4), 2048, (0, 0, 1), I8, Op.VCOPY)  # bytes 4i+1: the load's
    bad = isa.Program(program.config_hash, program.tensors, (program.instructions[0], clash, isa.End()))
    assert_hazard(hw, bad, {"x": np.ones(64, np.float16)}, "write-after-write", (0, "DMA_LOAD", "DMA_LOAD"),
                  (1, "VCOPY", "VECTOR"), "SRAM bytes [1, 254)")


def test_disjoint_interleaved_dram_elements_are_not_hazards(hw: HardwareConfig) -> None:
    """A store writes the even elements of a scratch tensor while a load reads the odd ones."""
    b = ProgramBuilder(hw)
    s = b.tensor("spill", (512,), F32, TensorKind.SCRATCH)
    src, dst = b.alloc(1024), b.alloc(1024)
    b.dma_store(s, src, (256,), dram_strides=(0, 0, 2))
    b.dma_load(s, dst, (256,), dram_offset=1, dram_strides=(0, 0, 2))
    program = b.build()
    for timing_only in (False, True):
        Simulator(hw).run(program, timing_only=timing_only)
    bad = isa.Program(program.config_hash, program.tensors,
                      (program.instructions[0], isa.DmaLoad(0, 2, dst, F32, (1, 1, 4), (0, 0, 2), (0, 0, 1)),
                       isa.End()))  # fmt: skip
    assert_hazard(hw, bad, {}, "read-after-write", (0, "DMA_STORE", "DMA_STORE"), (1, "DMA_LOAD", "DMA_LOAD"),
                  "DRAM tensor 'spill' elements [2, 9)")


def test_the_exact_test_walks_back_past_a_disjoint_candidate(hw: HardwareConfig) -> None:
    """The latest load of the buffer writes other elements; the one before it is the real conflict."""
    b = ProgramBuilder(hw)
    x = b.tensor("x", (128,), F32, TensorKind.INPUT)
    buf = b.alloc(1024)
    b.dma_load(x, buf + 4, (128,), sram_strides=(0, 0, 2))  # odd elements: read below
    b.dma_load(x, buf, (128,), sram_strides=(0, 0, 2))  # even elements: the bounding-range candidate
    b.emit(vec_copy(4096, buf + 4, 128, src_stride=2))
    assert_hazard(hw, b.build(), {"x": np.ones(128, np.float32)}, "read-after-write", (0, "DMA_LOAD", "DMA_LOAD"),
                  (2, "VCOPY", "VECTOR"), f"SRAM bytes [{buf + 4}, {buf + 4 + 127 * 8 + 4})")


def test_same_engine_pairs_need_no_semaphore(hw: HardwareConfig) -> None:
    b = ProgramBuilder(hw)
    d = (0, 0, 1)
    b.emit(isa.VecUnary((1, 1, 64), 0, d, 256, d, F32, Op.VRELU))
    b.emit(isa.VecUnary((1, 1, 64), 512, d, 0, d, F32, Op.VCOPY))
    b.emit(isa.VecUnary((1, 1, 64), 0, d, 512, d, F32, Op.VRELU))
    Simulator(hw).run(b.build(), timing_only=True)


def test_hazard_checking_can_be_switched_off(hw: HardwareConfig) -> None:
    program, feeds = raw_program(hw, synced=False)
    Simulator(hw, check_hazards=False).run(program, feeds)


# --------------------------------------------------- correct programs: nothing changes
def correct_programs(hw: HardwareConfig) -> dict[str, tuple[isa.Program, dict[str, np.ndarray]]]:
    rng = np.random.default_rng(0)
    return {
        "kitchen_sink": kitchen_sink(hw),
        "streaming": (streaming(hw, 9, 300, buffers=3, reps=2), {"x": rng.standard_normal((9, 300), np.float32)}),
        "tiled_matmul": (tiled_matmul(hw, 40, 24, 50, I8, 16, 16, 16),
                         {"a": np.ones((40, 50), np.int8), "b": np.ones((50, 24), np.int8)}),
    }  # fmt: skip


def test_checking_changes_no_cycle_count_or_statistic(hw: HardwareConfig) -> None:
    for name, (program, feeds) in correct_programs(hw).items():
        on, off = Simulator(hw), Simulator(hw, check_hazards=False)
        for timing_only in (False, True):
            a = on.run(program, feeds, timing_only=timing_only, trace=True)
            b_ = off.run(program, feeds, timing_only=timing_only, trace=True)
            assert a.stats == b_.stats and a.trace == b_.trace, name
            for out in a.outputs:
                np.testing.assert_array_equal(a.outputs[out], b_.outputs[out])


# ------------------------------------------------------------- the operand descriptions
def test_accesses_describe_every_operand() -> None:
    hw = HardwareConfig()
    acc = isa.MatMul(0, (8, 1), 256, (1, 8), 512, (8, 1), 8, 8, 8, I8, True).accesses()
    assert [(a.space, a.base, a.shape, a.strides, a.dtype, a.read, a.write) for a in acc] == [
        (Space.SRAM, 0, (8, 8), (8, 1), I8, True, False),
        (Space.SRAM, 256, (8, 8), (1, 8), I8, True, False),
        (Space.SRAM, 512, (8, 8), (8, 1), DType.INT32, True, True),  # accumulating: read and written
    ]
    assert not isa.MatMul(0, (8, 1), 256, (1, 8), 512, (8, 1), 8, 8, 8, I8, False).accesses()[2].read
    bias = isa.VecBiasAdd((4, 5, 6), 0, (30, 6, 1), 0, (30, 6, 1), 1024, 1, F32).accesses()[2]
    assert (bias.base, bias.shape, bias.strides, bias.extent, bias.read, bias.write) == (
        1024, (4, 5, 6), (0, 1, 0), (1024, 1044), True, False)  # fmt: skip
    dram, sram = isa.DmaStore(3, 10, 64, F32, (1, 2, 4), (0, 8, 1), (0, 4, 1)).accesses()
    assert (dram.space, dram.tensor, dram.base, dram.extent, dram.write) == (Space.DRAM, 3, 10, (10, 22), True)
    assert (sram.space, sram.extent, sram.read, sram.write) == (Space.SRAM, (64, 96), True, False)
    req = isa.VecRequant((1, 1, 16), 0, (0, 0, 1), 64, (0, 0, 1), 128, (0, 0, 0), 1, -128, 127, I8).accesses()
    assert [a.dtype for a in req] == [I8, DType.INT32, DType.FP32]
    assert req[2].strides == (0, 0, 0) and not req[2].distinct
    assert isa.Signal(Engine.VECTOR, 0).accesses() == () == isa.End().accesses()
    # codegen/sync.py reads its footprints from the same descriptions
    program, _ = kitchen_sink(hw)
    for ins in program.instructions:
        reads, writes = _footprint(ins.accesses())  # sync's SRAM byte ranges (read, written) of one instruction
        sram_ops = [a for a in ins.accesses() if a.space == Space.SRAM]
        assert reads == [a.extent for a in sram_ops if a.read]
        assert writes == [a.extent for a in sram_ops if a.write]
        for a in sram_ops:
            assert 0 <= a.extent[0] < a.extent[1] <= hw.max_sram_bytes
            assert len(a.units()) <= a.extent[1] - a.extent[0]


# ------------------------------------------------------------------ compiled programs
@cache
def compiled(name: str) -> tuple[HardwareConfig, isa.Program, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A compiled operator, its inputs and the outputs of the intact program."""
    from helpers import conv, matmul, pool, random_env
    from tvm_npu.codegen.operator import standalone_program
    from tvm_npu.tir_schedules import tile_search

    hw = HardwareConfig()
    spec, stages = {
        "conv": (conv(16, 32, 10, epi=("bias", "add", "relu")), 2),
        "conv_nhwc_s2": (conv(8, 24, 11, stride=2, pad=1, layout="NHWC", epi=("bias", "relu")), 3),
        "matmul": (matmul(17, 33, 45, epi=("bias", "tanh")), 2),
        "pool": (pool(64, 15, kind="max", k=3, stride=2, pad=1, layout="NHWC"), 2),
    }[name]
    tile = tile_search.choose(spec, hw, CompilerOptions(pipeline_stages=stages))
    program, _ = standalone_program(spec, tile, hw)
    env = random_env(spec, 0)
    feeds = {t.name: env[t.name] for t in program.tensors if t.kind == TensorKind.INPUT}
    return hw, program, feeds, Simulator(hw).run(program, feeds).outputs


COMPILED = ["conv", "conv_nhwc_s2", "matmul", "pool"]


def without(program: isa.Program, drop: set[int]) -> isa.Program:
    kept = tuple(ins for i, ins in enumerate(program.instructions) if i not in drop)
    return isa.Program(program.config_hash, program.tensors, kept, program.constants)


def matching_signal(program: isa.Program, wait: int) -> int:
    """The Signal the ``wait``-th Wait consumes: the k-th Wait on a semaphore takes its k-th Signal."""
    instrs = program.instructions
    sem = instrs[wait].sem
    k = sum(1 for ins in instrs[:wait] if isinstance(ins, isa.Wait) and ins.sem == sem)
    return [i for i, ins in enumerate(instrs) if isinstance(ins, isa.Signal) and ins.sem == sem][k]


def test_compiled_program_without_one_wait_raises() -> None:
    """Drop the tensor engine's first Wait (for the loads of its first tile) and its Signal: the conv runs early."""
    hw, program, feeds, _ = compiled("conv")
    instrs = program.instructions
    wait = next(i for i, ins in enumerate(instrs) if isinstance(ins, isa.Wait) and ins.engine_id == Engine.TENSOR)
    signal = matching_signal(program, wait)
    conv_at = next(i for i in range(wait, len(instrs)) if isinstance(instrs[i], isa.Conv))
    load_at = max(i for i in range(signal) if isinstance(instrs[i], isa.DmaLoad))
    mutant = without(program, {wait, signal})
    for timing_only in (False, True):
        with pytest.raises(HazardError) as info:
            Simulator(hw).run(mutant, feeds, timing_only=timing_only)
        e = info.value
        assert e.kind == "read-after-write"
        # indices after removing the Wait (before the conv) and the Signal (after the load)
        assert e.later == (conv_at - 1 - (signal < conv_at), "CONV", "TENSOR"), str(e)
        assert e.earlier[1:] == ("DMA_LOAD", "DMA_LOAD") and e.earlier[0] <= load_at, str(e)


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_programs_are_never_flagged(name: str) -> None:
    hw, program, _, _ = compiled(name)
    Simulator(hw).run(program, timing_only=True)  # functional run done by compiled()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(COMPILED), pick=st.floats(0, 1, exclude_max=True),
       what=st.sampled_from(["wait", "signal", "pair"]))
def test_removing_a_semaphore_never_gives_a_wrong_answer_silently(name: str, pick: float, what: str) -> None:
    """Remove one Wait, one Signal, or a Wait with its Signal: the run raises HazardError or DeadlockError,
    or computes exactly what the intact program computes (the timing happened to keep the order)."""
    hw, program, feeds, good = compiled(name)
    instrs = program.instructions
    kind = isa.Signal if what == "signal" else isa.Wait
    sites = [i for i, ins in enumerate(instrs) if isinstance(ins, kind)]
    site = sites[int(pick * len(sites))]
    drop = {site, matching_signal(program, site)} if what == "pair" else {site}
    mutant = without(program, drop)
    results: list[str] = []
    for timing_only in (False, True):
        try:
            r = Simulator(hw).run(mutant, feeds, timing_only=timing_only)
        except (HazardError, DeadlockError) as e:
            results.append(type(e).__name__)
            continue
        results.append("ok")
        for out, value in r.outputs.items():
            np.testing.assert_array_equal(value, good[out], err_msg=f"{name}: {what} #{site} removed, wrong answer")
    assert results[0] == results[1], results


def test_single_wait_removals_from_a_compiled_conv() -> None:
    """Every Wait of the compiled conv, removed with its Signal: every wait behind a compute engine is needed
    (its removal is a hazard); a wait behind a load may leave a race the simulated timing happens to order
    (e.g. the bias load finishes long before the epilogue it no longer waits behind: with the epilogue in a
    pipeline stage of its own its operands are loaded a tile ahead), which is no hazard by definition, and
    those compute exactly the same outputs."""
    hw, program, feeds, good = compiled("conv")
    hazards = same = 0
    for site, ins in enumerate(program.instructions):
        if not isinstance(ins, isa.Wait):
            continue
        signal = matching_signal(program, site)
        mutant = without(program, {site, signal})
        try:
            r = Simulator(hw).run(mutant, feeds)
        except HazardError:
            hazards += 1
            continue
        same += 1
        assert program.instructions[signal].engine_id == Engine.DMA_LOAD, (site, program.instructions[signal])
        for out, value in r.outputs.items():
            np.testing.assert_array_equal(value, good[out])
    assert hazards >= 4, (hazards, same)  # the vector engine behind both convs, the store behind both epilogues
