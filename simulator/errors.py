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


class HazardError(SimulatorError):
    """Two instructions on different engines touch the same memory, at least one writing, out of program order.

    The later one in program order started before the earlier one had completed (a
    Signal/Wait pair is missing). ``kind`` is ``"read-after-write"``,
    ``"write-after-read"`` or ``"write-after-write"``; ``region`` names the shared
    memory (SRAM byte range, or DRAM tensor and element range); ``earlier`` and
    ``later`` are ``(instruction index, opcode name, engine name)``; ``start`` is the
    cycle the later one started and ``earlier_end`` the cycle the earlier one completes
    (None if it had not started yet). ``index`` is the later instruction's.
    """

    def __init__(
        self,
        kind: str,
        region: str,
        earlier: tuple[int, str, str],
        later: tuple[int, str, str],
        start: int,
        earlier_end: int | None,
    ) -> None:
        self.kind, self.region, self.earlier, self.later = kind, region, earlier, later
        self.start, self.earlier_end = start, earlier_end
        self.index = later[0]
        when = "had not started yet" if earlier_end is None else f"completes at cycle {earlier_end}"
        super().__init__(
            f"{kind} hazard on {region}: instruction #{later[0]} ({later[1]} on the {later[2]} engine) started at "
            f"cycle {start}, but instruction #{earlier[0]} ({earlier[1]} on the {earlier[2]} engine), earlier in "
            f"program order, {when}; a Signal/Wait pair must order them"
        )


class BindingError(SimulatorError):
    """The arrays passed to a run do not match the program's tensor table."""


class BuildError(SimulatorError):
    """ProgramBuilder was asked for more than the hardware has, or for something inconsistent."""


class SramBudgetError(BuildError):
    """An SRAM allocation would end past max-sram-bytes."""
