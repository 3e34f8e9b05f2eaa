"""Errors of the simulator: the only exceptions a program, good or bad, can raise in it."""

from __future__ import annotations


class SimulatorError(Exception):
    """Base class: anything wrong with a program or its run."""


class ProgramFormatError(SimulatorError):
    """The binary program is truncated, corrupted, of another format version or malformed."""


class ConfigMismatchError(ProgramFormatError):
    """The program was compiled for a different hardware configuration."""


class InstructionError(SimulatorError):
    """An instruction breaks a rule; names the instruction index, the field and the rule."""

    def __init__(self, index: int, opcode: str, field: str, rule: str) -> None:
        self.index, self.opcode, self.field, self.rule = index, opcode, field, rule
        super().__init__(f"instruction #{index} ({opcode}): field '{field}': {rule}")


class DeadlockError(SimulatorError):
    """Engines wait on semaphores that no remaining instruction can signal.

    ``blocked`` lists ``(instruction index, engine name, semaphore)`` of every stuck Wait.
    """

    def __init__(self, blocked: list[tuple[int, str, int]]) -> None:
        self.blocked = blocked
        self.index, self.field = blocked[0][0], "sem"
        self.rule = "the wait can never be satisfied: every unfinished engine is blocked and nothing is left to signal"
        waits = "; ".join(
            f"instruction #{i} (WAIT on {engine}): field 'sem': semaphore {sem}" for i, engine, sem in blocked
        )
        super().__init__(f"deadlock: {waits}: {self.rule}")


class BindingError(SimulatorError):
    """The arrays passed to a run do not match the program's tensor table."""


class BuildError(SimulatorError):
    """ProgramBuilder was asked for more than the hardware has, or for something inconsistent."""


class SramBudgetError(BuildError):
    """An SRAM allocation would end past max-sram-bytes."""
