"""Readable text for programs: ``python -m tvm_npu.simulator.disasm prog.bin``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from tvm_npu.config import DType

from . import isa
from .encoding import decode_program
from .errors import SimulatorError


def _value(name: str, value: object, tensors: Sequence[isa.TensorDecl]) -> str:
    if name == "tensor" and isinstance(value, int) and 0 <= value < len(tensors):
        return tensors[value].name
    if name.endswith("addr") and isinstance(value, int):
        return f"0x{value:06x}"
    if isinstance(value, DType | isa.Engine):
        return value.name
    if isinstance(value, tuple):
        return "(" + ",".join(str(v) for v in value) + ")"
    return str(value)


def format_instruction(instr: isa.Instruction, tensors: Sequence[isa.TensorDecl] = ()) -> str:
    """One line: opcode, then every field as ``name=value`` (tensor names resolved, addresses hex)."""
    fields = " ".join(
        f"{f.name}={_value(f.name, getattr(instr, f.name), tensors)}"
        for f in dataclasses.fields(instr)
        if f.name != "op"
    )
    return f"{instr.opcode.name:<10} {fields}".rstrip()


def disassemble(program: isa.Program) -> str:
    """The whole program: configuration hash, tensor table, then one numbered line per instruction."""
    lines = [f"; config_hash 0x{program.config_hash:016x}", f"; {len(program.tensors)} tensors"]
    for i, t in enumerate(program.tensors):
        lines.append(f";   {i:3d} {t.name} {t.kind.name} {t.dtype.name} {t.shape}")
    lines.append(f"; {len(program.instructions)} instructions")
    width = len(str(max(len(program.instructions) - 1, 0)))
    for i, ins in enumerate(program.instructions):
        engine = ins.engine.name if ins.engine is not None else "-"
        lines.append(f"{i:>{width}}  {engine:<9} {format_instruction(ins, program.tensors)}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tvm_npu.simulator.disasm", description=__doc__)
    parser.add_argument("program", type=Path, help="an encoded NPU program (.bin)")
    args = parser.parse_args(argv)
    try:
        text = disassemble(decode_program(args.program.read_bytes()))
    except (OSError, SimulatorError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
