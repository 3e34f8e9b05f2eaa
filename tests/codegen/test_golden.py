"""Golden files: the scheduled TIR and the instruction stream of a few fixed operators and tiles.

A change to a template, to lowering, to instruction selection or to the semaphore pass shows
up here as a readable diff (numerics tests only say that something broke). When a change is
intended, regenerate with ``TVM_NPU_UPDATE_GOLDEN=1 pytest tests/codegen/test_golden.py``
and review the diff of ``tests/codegen/golden/`` like code.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import assert_matches, conv, matmul, pool, run_op
from tvm_npu.codegen.operator import standalone_program
from tvm_npu.simulator.disasm import disassemble
from tvm_npu.tir_schedules import schedule

from tvm_npu.config import HardwareConfig
from tvm_npu.core.ops import OpSpec
from tvm_npu.core.tiles import ConvTile, MatmulTile, Order, PoolTile, TileParams

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("TVM_NPU_UPDATE_GOLDEN") == "1"
HW = HardwareConfig()

CASES: dict[str, tuple[OpSpec, TileParams]] = {
    # two spatial tiles, double-buffered input windows, bias + relu epilogue in SRAM
    "conv3x3_c16_o16_h8_bias_relu": (conv(16, 16, 8, epi=("bias", "relu")),
                                     ConvTile(toc=16, toh=4, tow=8, tic=16, order=Order.A_STATIONARY, stages=2)),
    # a folded layout transform: NCHW data read by the DMA of an NHWC conv
    "conv1x1_c8_o16_h4_nchw_to_nhwc": (conv(8, 16, 4, k=1, pad=0, layout="NHWC", data_layout="NCHW"),
                                       ConvTile(toc=16, toh=2, tow=4, tic=8, stages=2)),
    # four spatial tiles: the epilogue in a pipeline stage of its own (accumulator, result and bias
    # double-buffered, so the array computes tile i+1 while the vector engine finishes tile i)
    "conv1x1_c16_o16_h8_bias_relu_epilogue_stage": (
        conv(16, 16, 8, k=1, pad=0, epi=("bias", "relu")),
        ConvTile(toc=16, toh=2, tow=8, tic=16, order=Order.B_STATIONARY, stages=2)),
    # streamed reduction (tk < K) with triple buffering, ragged M/N edges, gelu epilogue; the output-tile
    # loop pipelined around the reduction's own pipeline (accumulator and result double-buffered)
    "matmul_20x24x40_bias_gelu": (matmul(20, 24, 40, epi=("bias", "gelu")), MatmulTile(tm=16, tn=16, tk=16, stages=3)),
    "maxpool3x3s2_c16_h9": (pool(16, 9, kind="max", k=3, stride=2, pad=1), PoolTile(tc=16, toh=2, tow=4, stages=2)),
    # a 1x1 / 2 pool reading only the rows it uses (a row-skipping view: DRAM row stride 2 * 8) and, its tiles
    # whole rows, whole input rows (the window reads the stride's two columns; the instruction one)
    "maxpool1x1s2_c16_h8_skip_rows": (pool(16, 8, kind="max", k=1, stride=2),
                                      PoolTile(tc=16, toh=2, tow=4, stages=2, skip_rows=True)),
    # a downsampling 1x1 / 2 convolution over the same view: two output rows per tile, rows 0 and 2 loaded
    "conv1x1s2_c16_o16_h8_skip_rows": (conv(16, 16, 8, k=1, stride=2, pad=0),
                                       ConvTile(toc=16, toh=2, tow=4, tic=16, stages=2, skip_rows=True)),
}


def _check(path: Path, text: str) -> None:
    if UPDATE:
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"{path.name} is missing: run with TVM_NPU_UPDATE_GOLDEN=1 to create it")
    expected = path.read_text()
    assert text == expected, f"{path.name} changed; if intended, regenerate with TVM_NPU_UPDATE_GOLDEN=1"


@pytest.mark.parametrize("name", list(CASES))
def test_scheduled_tir(name: str) -> None:
    spec, tile = CASES[name]
    _check(GOLDEN / f"{name}.tir", schedule(spec, tile).sch.mod.script())


@pytest.mark.parametrize("name", list(CASES))
def test_instructions(name: str) -> None:
    spec, tile = CASES[name]
    _check(GOLDEN / f"{name}.asm", disassemble(standalone_program(spec, tile, HW)[0]))


@pytest.mark.parametrize("name", list(CASES))
def test_golden_programs_compute_the_right_thing(name: str) -> None:
    """The golden programs are not just stable but right."""
    spec, tile = CASES[name]
    r = run_op(spec, tile, HW)
    assert_matches(r.out, r.ref, name)
