"""The NPU's functional and timing simulator, its ISA, encoding, builder and disassembler."""

from .builder import ProgramBuilder
from .disasm import disassemble, format_instruction
from .encoding import decode_program, encode_program
from .errors import (
    BindingError,
    BuildError,
    ConfigMismatchError,
    DeadlockError,
    HazardError,
    InstructionError,
    ProgramFormatError,
    SimulatorError,
    SramBudgetError,
)
from .isa import Access, Engine, Opcode, Program, Space, TensorDecl, TensorKind
from .machine import LoadedProgram, RunResult, RunStats, Simulator, TraceEvent

__all__ = [
    "Access",
    "BindingError",
    "BuildError",
    "ConfigMismatchError",
    "DeadlockError",
    "Engine",
    "HazardError",
    "InstructionError",
    "LoadedProgram",
    "Opcode",
    "Program",
    "ProgramBuilder",
    "ProgramFormatError",
    "RunResult",
    "RunStats",
    "Simulator",
    "SimulatorError",
    "Space",
    "SramBudgetError",
    "TensorDecl",
    "TensorKind",
    "TraceEvent",
    "decode_program",
    "disassemble",
    "encode_program",
    "format_instruction",
]
