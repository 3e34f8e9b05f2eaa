"""How fast the simulator runs: instructions per second, and one large tiled matmul.

Usage: ``python benchmarks/simulator_speed.py [--tiles N] [--out PATH]``. Prints the
figures and ratios, writes them as JSON (default ``benchmarks/results/simulator_speed.json``)
and exits non-zero if timing-only mode is slower than the floor autotuning relies on
or the matmul result is wrong.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tvm_npu.simulator import Simulator, encode_program

from tvm_npu.config import DType, HardwareConfig
from tvm_npu.testing.workloads import streaming, tiled_matmul

#: Timing-only instructions per second below which the benchmark fails.
TIMING_ONLY_FLOOR = 200_000
RESULTS = Path(__file__).parent / "results" / "simulator_speed.json"


def best_of(n: int, fn: Callable[[], object]) -> float:
    """Smallest wall time of ``n`` calls (the least disturbed measurement)."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def synthetic(hw: HardwareConfig, tiles: int) -> dict[str, Any]:
    """Load -> 2 vector ops -> store per 1 KiB tile, double-buffered: 10 instructions a tile."""
    program = streaming(hw, tiles, 256, DType.FP32, buffers=2, reps=2)
    n = len(program.instructions)
    sim = Simulator(hw)
    blob = encode_program(program)
    x = np.random.default_rng(0).standard_normal((tiles, 256)).astype(np.float32)
    loaded = sim.load(program)
    timing_s = best_of(3, lambda: sim.run(loaded, timing_only=True))
    functional_s = best_of(1, lambda: sim.run(loaded, {"x": x}))
    trace_s = best_of(1, lambda: sim.run(loaded, timing_only=True, trace=True))
    return {
        "instructions": n,
        "load_from_program_s": best_of(1, lambda: sim.load(program)),
        "load_from_bytes_s": best_of(1, lambda: sim.load(blob)),
        "timing_only_s": timing_s,
        "functional_s": functional_s,
        "timing_only_with_trace_s": trace_s,
        "timing_only_instr_per_s": n / timing_s,
        "functional_instr_per_s": n / functional_s,
        "functional_over_timing_only": functional_s / timing_s,
        "simulated_cycles": sim.run(loaded, timing_only=True).stats.total_cycles,
    }


def matmul_1024(hw: HardwareConfig) -> dict[str, Any]:
    """1024^3 fp32 matmul, 128x128x256 tiles, double-buffered operands and output (640 KiB of SRAM)."""
    size = 1024
    program = tiled_matmul(hw, size, size, size, DType.FP32, 128, 128, 256)
    sim = Simulator(hw)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((size, size)).astype(np.float32)
    b = rng.standard_normal((size, size)).astype(np.float32)
    load_s = best_of(1, lambda: sim.load(program))
    loaded = sim.load(program)
    timing_s = best_of(3, lambda: sim.run(loaded, timing_only=True))
    start = time.perf_counter()
    result = sim.run(loaded, {"a": a, "b": b})
    functional_s = time.perf_counter() - start
    ref = a.astype(np.float64) @ b.astype(np.float64)
    rel_err = float(np.abs(result.outputs["c"] - ref).max() / np.abs(ref).max())
    stats = result.stats
    return {
        "instructions": len(program.instructions),
        "load_s": load_s,
        "timing_only_s": timing_s,
        "functional_s": functional_s,
        "simulated_cycles": stats.total_cycles,
        "lower_bound_cycles": stats.lower_bound_cycles,
        "efficiency": stats.efficiency,
        "sram_high_water": stats.sram_high_water,
        "max_relative_error": rel_err,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, default=10_240, help="tiles of the synthetic program (10 instr each)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    hw = HardwareConfig()
    report = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "synthetic": synthetic(hw, args.tiles),
        "matmul_1024_fp32": matmul_1024(hw),
    }
    syn, mm = report["synthetic"], report["matmul_1024_fp32"]
    print(f"synthetic program: {syn['instructions']} instructions, {syn['simulated_cycles']} simulated cycles")
    print(f"  load {syn['load_from_program_s']:.2f} s from a Program, {syn['load_from_bytes_s']:.2f} s from bytes")
    print(f"  timing-only  {syn['timing_only_instr_per_s']:>12,.0f} instr/s  ({syn['timing_only_s']:.3f} s)")
    print(f"  functional   {syn['functional_instr_per_s']:>12,.0f} instr/s  ({syn['functional_s']:.3f} s)")
    print(f"  functional / timing-only = {syn['functional_over_timing_only']:.1f}x;"
          f" tracing costs {syn['timing_only_with_trace_s'] / syn['timing_only_s']:.1f}x")
    print(f"1024^3 fp32 matmul: {mm['instructions']} instructions, {mm['simulated_cycles']} cycles,"
          f" efficiency {mm['efficiency']:.3f} vs the roofline")
    print(f"  load {mm['load_s']:.3f} s, timing-only {mm['timing_only_s']:.4f} s, functional {mm['functional_s']:.3f} s"
          f" (max relative error {mm['max_relative_error']:.1e})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    failures = []
    if syn["timing_only_instr_per_s"] < TIMING_ONLY_FLOOR:
        failures.append(f"timing-only speed {syn['timing_only_instr_per_s']:.0f} < floor {TIMING_ONLY_FLOOR}")
    if mm["max_relative_error"] > 1e-5:
        failures.append(f"matmul result is wrong: relative error {mm['max_relative_error']:.1e}")
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
