"""ProgramBuilder's resource checks and the disassembler (library call and CLI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from programs import kitchen_sink
from tvm_npu.simulator import (
    BuildError,
    ProgramBuilder,
    SramBudgetError,
    TensorKind,
    disassemble,
    encode_program,
    format_instruction,
    isa,
)
from tvm_npu.simulator.disasm import main

from tvm_npu.config import DType, HardwareConfig, parse_target

HW = HardwareConfig()


def test_alloc_aligns_and_tracks_high_water() -> None:
    b = ProgramBuilder(HW)
    first = b.alloc(1)
    mark = b.sram_mark()
    second = b.alloc(HW.sram_align_bytes + 1)
    assert (first, second) == (0, HW.sram_align_bytes)
    b.sram_release(mark)
    assert b.alloc(8) == second
    assert b.sram_high_water == 3 * HW.sram_align_bytes


def test_sram_budget_error_names_the_numbers() -> None:
    hw = parse_target("npu -max-sram-bytes=8192").hw
    b = ProgramBuilder(hw)
    b.alloc(8000, "weights")
    with pytest.raises(SramBudgetError, match=r"'acts' needs 256 bytes at 8000.*-max-sram-bytes=8192"):
        b.alloc(256, "acts")
    with pytest.raises(BuildError, match="mark"):
        b.sram_release(9000)


def test_semaphores_run_out() -> None:
    b = ProgramBuilder(HW)
    ids = [b.semaphore() for _ in range(HW.num_semaphores)]
    assert ids == list(range(HW.num_semaphores))
    with pytest.raises(BuildError, match="semaphores"):
        b.semaphore()


def test_tensor_declarations() -> None:
    b = ProgramBuilder(HW)
    b.tensor("w", (2,), DType.INT8, TensorKind.CONSTANT, np.array([1, 2], np.int8))
    with pytest.raises(BuildError, match="twice"):
        b.tensor("w", (2,), DType.INT8, TensorKind.INPUT)
    with pytest.raises(BuildError, match="needs its data"):
        b.tensor("k", (2,), DType.INT8, TensorKind.CONSTANT)
    with pytest.raises(BuildError, match="declared int8"):
        b.tensor("k", (2,), DType.INT8, TensorKind.CONSTANT, np.array([1, 2], np.int32))
    with pytest.raises(BuildError, match="only CONSTANT"):
        b.tensor("i", (2,), DType.INT8, TensorKind.INPUT, np.array([1, 2], np.int8))
    with pytest.raises(BuildError, match="not declared"):
        b.dma_load(5, 0, (2,))
    with pytest.raises(BuildError, match="1 to 3 dims"):
        b.dma_load(0, 0, (1, 1, 1, 2))
    program = b.build()
    assert program.instructions == (isa.End(),)
    assert program.config_hash == HW.config_hash


def test_disassembly_lists_every_instruction() -> None:
    program, _ = kitchen_sink(HW)
    text = disassemble(program)
    lines = text.splitlines()
    assert lines[0] == f"; config_hash 0x{HW.config_hash:016x}"
    body = [line for line in lines if not line.startswith(";")]
    assert len(body) == len(program.instructions)
    for line, instr in zip(body, program.instructions, strict=True):
        assert format_instruction(instr, program.tensors) in line
    assert "DMA_LOAD   tensor=x " in text and "sram_addr=0x000000" in text
    assert "MATMUL" in text and "in_dtype=INT8" in text and "engine_id=TENSOR" in text


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program, _ = kitchen_sink(HW)
    path = tmp_path / "prog.bin"
    path.write_bytes(encode_program(program))
    assert main([str(path)]) == 0
    assert capsys.readouterr().out == disassemble(program)
    path.write_bytes(encode_program(program)[:-3])
    assert main([str(path)]) == 1
    assert capsys.readouterr().err.startswith("error: corrupted program")


def test_cli_as_module(tmp_path: Path) -> None:
    program, _ = kitchen_sink(HW)
    path = tmp_path / "prog.bin"
    path.write_bytes(encode_program(program))
    out = subprocess.run(
        [sys.executable, "-P", "-m", "tvm_npu.simulator.disasm", str(path)], capture_output=True, text=True, check=True
    ).stdout
    assert out == disassemble(program)
