"""Exact cycle counts from the datasheet formulas (simulator/timing.py), on two configurations."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm_npu.simulator import DeadlockError, Engine, ProgramBuilder, Simulator, TensorKind, isa
from tvm_npu.simulator.timing import dram_bursts

from tvm_npu.config import DType, HardwareConfig
from tvm_npu.testing.workloads import streaming, tiled_matmul

Op = isa.Opcode


def _offsets(dims: list[tuple[int, int]]) -> list[int]:
    """Element offsets of a nest of (extent, stride) dims, in iteration order."""
    offsets = [0]
    for n, s in dims:
        offsets = [o + i * s for o in offsets for i in range(n)]
    return offsets


def brute_force_bursts(shape: tuple[int, ...], strides: tuple[int, ...], offset: int, itemsize: int, burst: int) -> int:
    """The run rule by enumeration: a run is the largest block of innermost dims that is contiguous in order."""
    dims = [(n, s) for n, s in zip(shape, strides, strict=True) if n > 1]
    split = len(dims)
    while split > 0 and _offsets(dims[split - 1 :]) == list(range(math.prod(n for n, _ in dims[split - 1 :]))):
        split -= 1
    run = math.prod(n for n, _ in dims[split:]) * itemsize
    return sum(math.ceil(((offset + o) * itemsize % burst + run) / burst) for o in _offsets(dims[:split]))


@settings(max_examples=300, deadline=None)
@given(
    shape=st.tuples(*[st.integers(1, 6)] * 3),
    strides=st.tuples(*[st.integers(0, 40)] * 3),
    offset=st.integers(0, 200),
    itemsize=st.sampled_from([1, 2, 4]),
    burst=st.sampled_from([1, 4, 16, 64]),
)
def test_burst_count_matches_brute_force(
    shape: tuple[int, int, int], strides: tuple[int, int, int], offset: int, itemsize: int, burst: int
) -> None:
    hw = HardwareConfig(dram_burst_bytes=burst, sram_align_bytes=min(burst, 64))
    assert dram_bursts(hw, shape, strides, offset, itemsize) == brute_force_bursts(
        shape, strides, offset, itemsize, burst
    )


def single_dma(hw: HardwareConfig, tensor_shape: tuple[int, ...], dtype: DType, **dma: object) -> isa.Program:
    b = ProgramBuilder(hw)
    t = b.tensor("x", tensor_shape, dtype, TensorKind.INPUT)
    b.dma_load(t, 0, **dma)
    return b.build()


# (tensor shape, dtype, dma kwargs, run starts in bytes, run length in bytes)
DMA_CASES = {
    "aligned_4KiB": ((1024,), DType.FP32, dict(shape=(1024,)), [0], 4096),
    "short_row_straddling": ((64,), DType.FP32, dict(shape=(10,), dram_offset=13), [52], 40),
    "strided_rows": ((64, 25), DType.FP32, dict(shape=(10, 10), dram_strides=(25, 1)),
                     [100 * r for r in range(10)], 40),
    "column_gather": ((32, 32), DType.INT8, dict(shape=(32, 1), dram_strides=(32, 1), dram_offset=5),
                      [32 * r + 5 for r in range(32)], 1),
}  # fmt: skip


@pytest.mark.parametrize("case", list(DMA_CASES))
def test_single_dma_cycles(hw: HardwareConfig, case: str) -> None:
    tensor_shape, dtype, dma, starts, run = DMA_CASES[case]
    burst = hw.dram_burst_bytes
    bursts = sum(math.ceil((a % burst + run) / burst) for a in starts)
    stats = Simulator(hw).run(single_dma(hw, tensor_shape, dtype, **dma), timing_only=True).stats
    transfer = math.ceil(bursts * burst / hw.dram_bytes_per_cycle)
    assert stats.total_cycles == hw.dma_latency + transfer
    assert stats.busy_cycles["DRAM"] == transfer
    assert stats.busy_cycles["DMA_LOAD"] == hw.dma_latency + transfer
    assert stats.dma_load_bytes == run * len(starts)
    assert stats.dma_load_descriptors == 1
    assert stats.wasted_burst_bytes == bursts * burst - run * len(starts)


def test_loads_and_stores_share_the_channel(hw: HardwareConfig) -> None:
    """Both DMA engines stream 64 KiB descriptors: the run is bandwidth-bound."""
    k, nbytes = 6, 64 * 1024
    assert nbytes // hw.dram_bytes_per_cycle >= hw.dma_latency  # transfers hide the latency
    b = ProgramBuilder(hw)
    x = b.tensor("x", (k, nbytes), DType.INT8, TensorKind.INPUT)
    y = b.tensor("y", (k, nbytes), DType.INT8, TensorKind.OUTPUT)
    src, dst = b.alloc(nbytes), b.alloc(nbytes)
    for i in range(k):
        b.dma_load(x, src, (nbytes,), dram_offset=i * nbytes)
        b.dma_store(y, dst, (nbytes,), dram_offset=i * nbytes)
    stats = Simulator(hw).run(b.build(), timing_only=True).stats
    total_bytes = 2 * k * nbytes
    assert stats.total_cycles == hw.dma_latency + total_bytes // hw.dram_bytes_per_cycle
    assert stats.busy_cycles["DRAM"] == total_bytes // hw.dram_bytes_per_cycle
    assert stats.lower_bound_cycles == total_bytes / hw.dram_bytes_per_cycle
    assert stats.efficiency == pytest.approx(1 - hw.dma_latency / stats.total_cycles)


@pytest.mark.parametrize(("op", "reps"), [(Op.VRELU, 1), (Op.VSIGMOID, 3)], ids=["dma_bound", "compute_bound"])
def test_double_buffering_overlaps_dma_and_compute(hw: HardwareConfig, op: isa.Opcode, reps: int) -> None:
    n_tiles, tile = 12, 2048  # fp32: 8 KiB per tile, a whole number of bursts
    dma = hw.dma_latency + tile * 4 // hw.dram_bytes_per_cycle
    per_group = hw.transcendental_cycles if op == Op.VSIGMOID else 1
    compute = reps * (hw.vector_issue_cycles + math.ceil(tile / hw.vector_lanes) * per_group)
    sim = Simulator(hw)
    single = sim.run(streaming(hw, n_tiles, tile, buffers=1, op=op, reps=reps, store=False), timing_only=True)
    double = sim.run(streaming(hw, n_tiles, tile, buffers=2, op=op, reps=reps, store=False), timing_only=True)
    assert single.stats.total_cycles == n_tiles * (dma + compute)
    assert double.stats.total_cycles == min(dma, compute) + n_tiles * max(dma, compute)
    assert double.stats.total_cycles / (n_tiles * max(dma, compute)) < 1 + 1 / n_tiles + 1e-9


@pytest.mark.parametrize("dtype", [DType.INT8, DType.FP16, DType.FP32])
@pytest.mark.parametrize(("m", "n", "k"), [(1, 1, 1), (7, 33, 17), (64, 16, 48)])
def test_matmul_cycles(hw: HardwareConfig, dtype: DType, m: int, n: int, k: int) -> None:
    b = ProgramBuilder(hw)
    b.emit(isa.MatMul(0, (k, 1), 0x20000, (n, 1), 0x40000, (n, 1), m, n, k, dtype, False))
    stats = Simulator(hw).run(b.build(), timing_only=True).stats
    cycles = hw.tensor_issue_cycles + math.ceil(k / hw.mac_rows) * math.ceil(n / hw.mac_cols) * m * (
        hw.fp32_mac_slowdown if dtype == DType.FP32 else 1
    )
    assert stats.total_cycles == stats.busy_cycles["TENSOR"] == cycles
    assert stats.macs == {dtype.name: m * n * k}
    assert stats.lower_bound_cycles == m * n * k / hw.peak_macs_per_cycle(dtype)


def test_conv_cycles(hw: HardwareConfig) -> None:
    c, h, w, o, g, kh, kw = 8, 6, 6, 12, 2, 3, 3
    b = ProgramBuilder(hw)
    b.emit(isa.Conv(0, (h * w, w, 1), c, h, w, 0x10000, (c // g * 9, 9, 3, 1), 0x20000, (36, 6, 1), o, 6, 6,
                    kh, kw, 1, 1, 1, 1, 1, 1, 1, 1, g, DType.INT8, False))  # fmt: skip
    stats = Simulator(hw).run(b.build(), timing_only=True).stats
    m, kk, nn = 36, c // g * kh * kw, o // g
    assert stats.total_cycles == hw.tensor_issue_cycles + g * math.ceil(kk / hw.mac_rows) * math.ceil(
        nn / hw.mac_cols
    ) * m
    assert stats.macs == {"INT8": o * 36 * kk}


@pytest.mark.parametrize("op", [Op.VRELU, Op.VCOPY, Op.VTANH, Op.VGELU])
def test_vector_and_pool_cycles(hw: HardwareConfig, op: isa.Opcode) -> None:
    shape = (3, 5, 37)
    b = ProgramBuilder(hw)
    dense = (185, 37, 1)
    b.emit(isa.VecUnary(shape, 0, dense, 0x10000, dense, DType.FP16, op))
    b.emit(isa.Pool(0, (49, 7, 1), 7, 7, 0x20000, (9, 3, 1), 4, 3, 3, 3, 3, 2, 2, 0, 0, 0, 0, DType.FP16,
                    Op.VMAXPOOL, False))  # fmt: skip
    stats = Simulator(hw).run(b.build(), timing_only=True).stats
    per = hw.transcendental_cycles if op in isa.VecUnary.TRANSCENDENTAL else 1
    unary = hw.vector_issue_cycles + math.ceil(3 * 5 * 37 / hw.vector_lanes) * per
    pool = hw.vector_issue_cycles + math.ceil(4 * 3 * 3 / hw.vector_lanes) * 9
    assert stats.total_cycles == unary + pool


def test_wait_starts_at_the_signal_time(hw: HardwareConfig) -> None:
    """A vector op waiting on a load starts when the load ends; the load engine is free meanwhile."""
    b = ProgramBuilder(hw)
    x = b.tensor("x", (256,), DType.FP32, TensorKind.INPUT)
    sem = b.semaphore()
    b.dma_load(x, 0, (256,))
    b.signal(Engine.DMA_LOAD, sem)
    b.wait(Engine.VECTOR, sem)
    b.emit(isa.VecUnary((1, 1, 256), 0, (256, 256, 1), 0, (256, 256, 1), DType.FP32, Op.VRELU))
    stats = Simulator(hw).run(b.build(), timing_only=True).stats
    dma = hw.dma_latency + 1024 // hw.dram_bytes_per_cycle
    vec = hw.vector_issue_cycles + math.ceil(256 / hw.vector_lanes)
    assert stats.total_cycles == dma + vec
    assert stats.busy_cycles["VECTOR"] == vec


def small_programs(hw: HardwareConfig) -> dict[str, tuple[isa.Program, dict[str, np.ndarray]]]:
    rng = np.random.default_rng(0)
    a, bm = rng.integers(-128, 128, (40, 50), dtype=np.int8), rng.integers(-128, 128, (50, 24), dtype=np.int8)
    x1, x2 = rng.standard_normal((9, 300), np.float32), rng.standard_normal((5, 64), np.float32)
    return {
        "streaming_store": (streaming(hw, 9, 300, buffers=3, reps=2), {"x": x1}),
        "streaming_single": (streaming(hw, 5, 64, buffers=1, op=Op.VTANH), {"x": x2}),
        "tiled_matmul_int8": (tiled_matmul(hw, 40, 24, 50, DType.INT8, 16, 16, 16), {"a": a, "b": bm}),
    }


def test_timing_only_equals_functional(hw: HardwareConfig) -> None:
    sim = Simulator(hw)
    for name, (program, feeds) in small_programs(hw).items():
        loaded = sim.load(program)
        functional = sim.run(loaded, feeds, trace=True)
        timing = sim.run(loaded, timing_only=True, trace=True)
        assert functional.stats == timing.stats, name
        assert functional.trace == timing.trace, name
        assert timing.outputs == {}
    a, bm = small_programs(hw)["tiled_matmul_int8"][1].values()
    c = sim.run(small_programs(hw)["tiled_matmul_int8"][0], {"a": a, "b": bm}).outputs["c"]
    np.testing.assert_array_equal(c, a.astype(np.int32) @ bm.astype(np.int32))


def test_stats_are_deterministic_and_consistent(hw: HardwareConfig) -> None:
    program, feeds = small_programs(hw)["streaming_store"]
    sim = Simulator(hw)
    first, second = sim.run(program, feeds), sim.run(program, feeds)
    assert first.stats == second.stats
    s = first.stats
    assert s.dma_load_bytes == s.dma_store_bytes == 9 * 300 * 4
    assert s.dma_load_descriptors == s.dma_store_descriptors == 9
    assert s.sram_high_water == 2 * hw.align(1200) + 1200
    assert s.lower_bound_cycles == 2 * 9 * 300 * 4 / hw.dram_bytes_per_cycle
    assert s.efficiency == s.lower_bound_cycles / s.total_cycles
    for track, busy in s.busy_cycles.items():
        assert 0 <= busy <= s.total_cycles
        assert s.utilisation[track] == busy / s.total_cycles


def test_deadlock_is_reported_not_hung(hw: HardwareConfig) -> None:
    b = ProgramBuilder(hw)
    s1, s2 = b.semaphore(), b.semaphore()
    b.wait(Engine.TENSOR, s1)  # waits for the vector engine ...
    b.signal(Engine.TENSOR, s2)
    b.wait(Engine.VECTOR, s2)  # ... which waits for the tensor engine
    b.signal(Engine.VECTOR, s1)
    for timing_only in (True, False):
        with pytest.raises(DeadlockError) as err:
            Simulator(hw).run(b.build(), {}, timing_only=timing_only)
        assert err.value.blocked == [(0, "TENSOR", s1), (2, "VECTOR", s2)]
        assert "instruction #0" in str(err.value) and "field 'sem'" in str(err.value)


def test_more_waits_than_signals_deadlocks(hw: HardwareConfig) -> None:
    b = ProgramBuilder(hw)
    sem = b.semaphore()
    b.signal(Engine.DMA_LOAD, sem)
    b.wait(Engine.VECTOR, sem)
    b.wait(Engine.VECTOR, sem)
    with pytest.raises(DeadlockError) as err:
        Simulator(hw).run(b.build(), timing_only=True)
    assert err.value.blocked == [(2, "VECTOR", sem)]


def test_chrome_trace(hw: HardwareConfig, tmp_path: Path) -> None:
    program, feeds = small_programs(hw)["streaming_store"]
    result = Simulator(hw).run(program, feeds, trace=True)
    path = tmp_path / "trace.json"
    result.write_chrome_trace(path)
    doc = json.loads(path.read_text())
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert sorted(names.values()) == sorted(["DMA_LOAD", "DMA_STORE", "TENSOR", "VECTOR", "DRAM"])
    per_track: dict[str, float] = dict.fromkeys(names.values(), 0.0)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and not e["name"].startswith("WAIT"):
            per_track[names[e["tid"]]] += e["dur"]
    for track, busy in result.stats.busy_cycles.items():
        assert per_track[track] == pytest.approx(busy / hw.clock_mhz)
    last_end = max(e["ts"] + e.get("dur", 0) for e in doc["traceEvents"] if e["ph"] in "Xi")
    assert last_end == pytest.approx(result.stats.total_cycles / hw.clock_mhz)
    with pytest.raises(ValueError, match="trace=True"):
        Simulator(hw).run(program, timing_only=True).write_chrome_trace(path)


def test_channel_ties_go_to_the_lower_engine_id(hw: HardwareConfig) -> None:
    """A load and a store issued at cycle 0: DMA_LOAD (engine 0) gets the channel first."""
    b = ProgramBuilder(hw)
    x = b.tensor("x", (4096,), DType.INT8, TensorKind.INPUT)
    y = b.tensor("y", (1024,), DType.INT8, TensorKind.OUTPUT)
    b.dma_store(y, 0x10000, (1024,))
    b.dma_load(x, 0, (4096,))
    stats = Simulator(hw).run(b.build(), timing_only=True).stats
    load, store = 4096 // hw.dram_bytes_per_cycle, 1024 // hw.dram_bytes_per_cycle
    assert stats.busy_cycles["DMA_LOAD"] == hw.dma_latency + load
    assert stats.busy_cycles["DMA_STORE"] == hw.dma_latency + load + store
    assert stats.total_cycles == hw.dma_latency + load + store
