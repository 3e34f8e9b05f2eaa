"""The linear resize operator alone (``tir_schedules/resize.py``, ``codegen/resize.py``): its runs, its
instruction stream (golden), its numerics against llvm bit for bit with the hazard referee on, its simulated
cycles and the cost model's estimate of them, and its SRAM budget. Regenerate the golden file with
``TVM_NPU_UPDATE_GOLDEN=1`` (``test_golden.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm_npu.codegen.operator import standalone_program
from tvm_npu.relay_patterns.resize_taps import COORDINATES, linear_taps
from tvm_npu.simulator import Simulator
from tvm_npu.simulator.disasm import disassemble
from tvm_npu.tir_schedules import kind_of, tile_search
from tvm_npu.tir_schedules.resize import runs

from tvm_npu.config import CompilerOptions, DType, HardwareConfig
from tvm_npu.core.ops import ResizeSpec, TensorRef
from tvm_npu.core.plan import spec_from_json, spec_to_json
from tvm_npu.core.tiles import ResizeTile, tile_from_json, tile_to_json

GOLDEN = Path(__file__).parent / "golden" / "resize_c2_h4_to_h8_half_pixel.txt"
HW = HardwareConfig()


def _spec(coord: str, c: int, hw: tuple[int, int], out: tuple[int, int]) -> ResizeSpec:
    return ResizeSpec("resize", TensorRef("y", (1, c, *out), DType.FP32, "NCHW"),
                      data=TensorRef("x", (1, c, *hw), DType.FP32, "NCHW"),
                      rows=linear_taps(coord, hw[0], out[0]), cols=linear_taps(coord, hw[1], out[1]))


def _llvm(x: np.ndarray, coord: str, out: tuple[int, int]) -> np.ndarray:
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(x.shape, "float32"))
    with bb.function("main", [xv]):
        bb.emit_func_output(bb.emit(relax.op.image.resize2d(xv, out, method="linear",
                                                            coordinate_transformation_mode=coord)))
    ex = relax.build(bb.get(), "llvm")
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def _simulate(spec: ResizeSpec, tile: ResizeTile) -> tuple[np.ndarray, int, np.ndarray]:
    """(NPU output, simulated cycles, input), the hazard referee on."""
    program, _ = standalone_program(spec, tile, HW)
    x = np.random.default_rng(0).standard_normal(spec.data.shape).astype(np.float32)
    res = Simulator(HW).run(program, {"x": x})
    return res.outputs["y"], res.stats.total_cycles, x


@pytest.mark.parametrize("coord", COORDINATES)
@pytest.mark.parametrize(("n_in", "n_out"), [(8, 16), (8, 32), (16, 8), (20, 33), (33, 20), (6, 9)])
def test_runs_cover_every_output_once_with_its_taps(coord: str, n_in: int, n_out: int) -> None:
    taps = linear_taps(coord, n_in, n_out)
    seen = []
    for r in runs(taps, 0, n_out):
        for k in range(r.n):
            o = r.o0 + k * r.step
            seen.append(o)
            assert taps[o] == (r.lo0 + k * r.src_step, r.hi0 + k * r.src_step, r.w0, r.w1)
    assert sorted(seen) == list(range(n_out))


def test_an_integer_factor_has_two_runs_per_phase_and_border() -> None:
    """x2 ``half_pixel``: the two clamped borders and the two phases, each one strided instruction shape."""
    assert [(r.o0, r.step, r.n) for r in runs(linear_taps("half_pixel", 16, 32), 0, 32)] == \
        [(0, 1, 1), (1, 2, 15), (2, 2, 15), (31, 1, 1)]


def test_golden_instructions() -> None:
    """Two bands of 4 output rows, both channels: per band one load, the W and H passes, one store."""
    program, _ = standalone_program(_spec("half_pixel", 2, (4, 4), (8, 8)), ResizeTile(tc=2, toh=4), HW)
    text = disassemble(program)
    if os.environ.get("TVM_NPU_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


@pytest.mark.parametrize(("coord", "hw", "out", "tile"), [
    ("half_pixel", (12, 10), (24, 20), ResizeTile(tc=3, toh=5)),  # ragged channel blocks and bands
    ("align_corners", (9, 13), (5, 7), ResizeTile(tc=4, toh=2, stages=3)),
    ("pytorch_half_pixel", (5, 6), (17, 11), ResizeTile(tc=8, toh=17, stages=1)),
    ("asymmetric", (7, 7), (10, 21), ResizeTile(tc=2, toh=3)),
    ("tf_half_pixel_for_nn", (6, 8), (9, 12), ResizeTile(tc=5, toh=4)),
])
def test_bit_for_bit_llvm(coord: str, hw: tuple[int, int], out: tuple[int, int], tile: ResizeTile) -> None:
    spec = _spec(coord, 8, hw, out)
    y, _, x = _simulate(spec, tile)
    assert np.array_equal(y, _llvm(x, coord, out))


def test_cycles_are_pinned_and_estimated() -> None:
    """32 channels 32x32 -> 64x64 at the planner's tile: 0.98 of the layer's DRAM bound, the estimate within 2%."""
    spec = _spec("half_pixel", 32, (32, 32), (64, 64))
    tile = tile_search.choose(spec, HW, CompilerOptions())
    program, _ = standalone_program(spec, tile, HW)
    # per band 4 column runs and 4 row runs (2 phases, 2 borders), 3 instructions each (no weight is 0 at x2)
    vector = sum(1 for i in program.instructions if type(i).__name__ in ("VecScale", "VecBinary"))
    assert vector == 3 * (4 + 4) * kind_of(spec).step_count(spec, tile), vector
    _, cycles, _ = _simulate(spec, tile)
    assert cycles == 41616, cycles
    assert (spec.data.nbytes + spec.out.nbytes) / HW.dram_bytes_per_cycle / cycles > 0.98
    assert abs(tile_search.estimate(spec, tile, HW).cycles / cycles - 1) < 0.02


def test_too_small_an_sram_is_no_tile() -> None:
    """No band fits 8 KiB (the smallest, one channel and one output row of 512, needs 16 KiB): the planner
    says so (the canonicalisation then keeps the matrix products, or the host runs it)."""
    spec = _spec("half_pixel", 4, (8, 256), (16, 512))
    assert tile_search.footprint(spec, ResizeTile(tc=1, toh=1), HW) == 16384
    small = HardwareConfig(max_sram_bytes=8192)
    assert not tile_search.fits(spec, small, CompilerOptions())
    assert tile_search.fits(spec, HW, CompilerOptions())


def test_spec_and_tile_round_trip_through_json() -> None:
    """Plans and tuning records store the taps and the band tile."""
    spec = _spec("align_corners", 3, (5, 7), (9, 4))
    assert spec_from_json(spec_to_json(spec)) == spec
    assert tile_from_json(tile_to_json(ResizeTile(tc=3, toh=4))) == ResizeTile(tc=3, toh=4)


def test_workload_takes_the_taps_as_inputs() -> None:
    """A tuning task's workload: the data, the four row and the four column tap vectors, the output."""
    spec = _spec("half_pixel", 2, (4, 4), (8, 8))
    assert len(kind_of(spec).workload(spec, ResizeTile(tc=2, toh=4)).params) == 10
