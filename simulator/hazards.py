"""Hazard checking: the simulator as a strict referee of a program's synchronisation.

A program means what its single instruction list computes when executed one
instruction at a time, in program order. The four engines run it concurrently, so
two instructions on *different* engines that touch the same memory (overlapping SRAM
bytes, or overlapping elements of one DRAM tensor), at least one of them writing,
must still take effect in program order: the later one in program order may start
only once the earlier one has completed. Pairs on one engine are ordered by its
in-order queue. Every violation raises :class:`HazardError`: read-after-write,
write-after-read, write-after-write, and the case where the later instruction runs
entirely before the earlier one. A run that raises nothing therefore computes
exactly what sequential execution computes, whatever the timing.

The check costs one comparison per candidate at run time:

* :func:`candidates` (once per loaded program) walks the program in order and finds,
  for every instruction ``j`` and every other engine ``f``, the latest instruction
  ``i < j`` on ``f`` that *may* conflict with ``j``: exact bounding byte ranges
  overlap in SRAM, or, in DRAM, both touch the same tensor and one of them writes it
  (only OUTPUT/SCRATCH tensors are ever written, so reads of INPUT and CONSTANT
  tensors are never tracked). Engines are in order, so once ``i`` has completed
  every earlier instruction of ``f`` has too: one candidate per engine suffices.
* :class:`~tvm_npu.simulator.machine.Simulator` records each instruction's
  completion time and, when ``j`` starts at cycle ``t``, compares every candidate's
  completion time with ``t`` (an instruction that has not started yet has none).
* only a candidate that had not completed by ``t`` leads to the exact test
  (:meth:`Referee.refute`): walking back over ``f``'s instructions from the candidate to the
  last one that completed by ``t``, the first that shares a byte (SRAM) or an element
  (DRAM) with ``j``'s accesses, one of them writing, is a hazard. Strided accesses
  whose bounding boxes interleave but whose elements do not are therefore fine.
  Compiled programs, synchronised by ``codegen/sync.py`` on bounding ranges rounded
  out to ``sram_align_bytes`` and on whole DRAM tensors, never get this far.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from functools import cached_property

import numpy as np

from . import isa
from .errors import HazardError
from .timing import contiguous_runs

#: Completion time of an instruction that has not been started.
NOT_DONE = 1 << 62
_N_ENGINES = len(isa.Engine)
_WRITABLE = (isa.TensorKind.OUTPUT, isa.TensorKind.SCRATCH)
_KINDS = ("read-after-write", "write-after-read", "write-after-write")  # reported in this order of preference


class _Ranges:
    """Distinct SRAM byte ranges seen so far (and one isolated range per written DRAM tensor).

    Each knows the ranges overlapping it (itself included) and, per engine, the latest
    instruction that wrote it and the latest that read or wrote it.
    """

    def __init__(self) -> None:
        self.ids: dict[tuple[int, int], int] = {}
        self.lo = np.empty(64, np.int64)
        self.hi = np.empty(64, np.int64)
        self.near: list[list[int]] = []
        self.last_write: list[list[int]] = []
        self.last_access: list[list[int]] = []

    def add(self, lo: int, hi: int) -> int:
        """A new range; ``lo >= hi`` makes one that overlaps nothing (a whole DRAM tensor)."""
        rid = len(self.near)
        if rid == len(self.lo):
            self.lo = np.concatenate([self.lo, np.empty(rid, np.int64)])
            self.hi = np.concatenate([self.hi, np.empty(rid, np.int64)])
        near = np.flatnonzero((self.lo[:rid] < hi) & (self.hi[:rid] > lo)).tolist() if lo < hi else []
        for other in near:
            self.near[other].append(rid)
        near.append(rid)
        self.lo[rid], self.hi[rid] = lo, hi
        self.near.append(near)
        self.last_write.append([-1] * _N_ENGINES)
        self.last_access.append([-1] * _N_ENGINES)
        return rid


def candidates(program: isa.Program, accesses: Sequence[tuple[isa.Access, ...]] | None = None) -> list[tuple[int, ...]]:
    """Per instruction, the latest earlier instruction of each other engine it may conflict with.

    ``accesses`` are the instructions' :meth:`accesses` if already known (equal records
    may share one tuple, which is then prepared once).
    """
    instructions = program.instructions
    if accesses is None:
        accesses = [ins.accesses() for ins in instructions]
    # only OUTPUT and SCRATCH tensors can be written (validation), so only they can conflict
    written = {t for t, decl in enumerate(program.tensors) if decl.kind in _WRITABLE}
    ranges = _Ranges()
    tensor_range: dict[int, int] = {}
    # per distinct accesses tuple: its tracked ranges, each with whether it is written
    prepared: dict[int, list[tuple[int, bool]]] = {}
    near, last_write, last_access = ranges.near, ranges.last_write, ranges.last_access
    deps: list[tuple[int, ...]] = [()] * len(instructions)
    for j, accs in enumerate(accesses):
        if not accs:
            continue
        ops = prepared.get(id(accs))
        if ops is None:
            tracked: dict[int, bool] = {}
            for acc in accs:
                if acc.space == isa.Space.SRAM:
                    key = acc.extent
                    rid = ranges.ids.get(key)
                    if rid is None:
                        rid = ranges.ids[key] = ranges.add(*key)
                elif acc.tensor in written:
                    rid = tensor_range.get(acc.tensor, -1)
                    if rid < 0:
                        rid = tensor_range[acc.tensor] = ranges.add(0, 0)
                else:
                    continue
                tracked[rid] = tracked.get(rid, False) or acc.write
            ops = prepared[id(accs)] = list(tracked.items())
        e = instructions[j].engine
        n0 = n1 = n2 = n3 = -1
        for rid, write in ops:
            # a write conflicts with every earlier access, a read with earlier writes
            table = last_access if write else last_write
            for other in near[rid]:
                a0, a1, a2, a3 = table[other]
                if a0 > n0:
                    n0 = a0
                if a1 > n1:
                    n1 = a1
                if a2 > n2:
                    n2 = a2
                if a3 > n3:
                    n3 = a3
            if write:
                last_write[rid][e] = j
            last_access[rid][e] = j
        if n0 >= 0 or n1 >= 0 or n2 >= 0 or n3 >= 0:
            need = [n0, n1, n2, n3]
            need[e] = -1
            deps[j] = tuple([i for i in need if i >= 0])
    return deps


class Referee:
    """What the exact test needs of one loaded program: per engine, its instructions that access memory."""

    def __init__(self, program: isa.Program) -> None:
        self.program = program

    @cached_property
    def by_engine(self) -> list[list[int]]:
        """Per engine, the indices of its instructions that access memory, in program order."""
        by_engine: list[list[int]] = [[] for _ in range(_N_ENGINES)]
        for index, ins in enumerate(self.program.instructions):
            if not isinstance(ins, isa.Signal | isa.Wait | isa.End):
                by_engine[ins.engine].append(index)
        return by_engine

    def refute(self, later: int, start: int, candidate: int, done: Sequence[int]) -> None:
        """Instruction ``candidate`` had not completed when ``later`` started at ``start``: raise on a real conflict.

        Walks back over the candidate's engine, from the candidate to the last instruction
        that completed by ``start``, and raises :class:`HazardError` for the first (the
        latest in program order) whose accesses share memory with ``later``'s.
        """
        instructions = self.program.instructions
        mine = instructions[later].accesses()
        queue = self.by_engine[instructions[candidate].engine]
        for pos in range(bisect_right(queue, candidate) - 1, -1, -1):
            k = queue[pos]
            if done[k] <= start:
                return
            found = conflict(instructions[k].accesses(), mine)
            if found is not None:
                kind, region = found
                raise HazardError(
                    kind,
                    self.describe(region),
                    self.who(k),
                    self.who(later),
                    start,
                    None if done[k] == NOT_DONE else done[k],
                )

    def who(self, index: int) -> tuple[int, str, str]:
        ins = self.program.instructions[index]
        return index, ins.opcode.name, ins.engine.name

    def describe(self, region: tuple[isa.Space, int, int, int]) -> str:
        space, tensor, lo, hi = region
        if space == isa.Space.SRAM:
            return f"SRAM bytes [{lo}, {hi})"
        return f"DRAM tensor {self.program.tensors[tensor].name!r} elements [{lo}, {hi})"


def conflict(
    earlier: Sequence[isa.Access], later: Sequence[isa.Access]
) -> tuple[str, tuple[isa.Space, int, int, int]] | None:
    """The hazard between two instructions' accesses, if any: (kind, (space, tensor, lo, hi) of the shared units).

    Kinds, by preference when several apply: read-after-write (the earlier writes what
    the later reads), write-after-read, write-after-write.
    """
    best: tuple[int, tuple[isa.Space, int, int, int]] | None = None
    for b in later:
        for a in earlier:
            if a.space != b.space or a.tensor != b.tensor or not (a.write or b.write):
                continue
            shared = overlap(a, b)
            if shared is None:
                continue
            rank = 0 if a.write and b.read else 1 if a.read and b.write else 2
            if best is None or rank < best[0]:
                best = rank, (a.space, a.tensor, *shared)
    return None if best is None else (_KINDS[best[0]], best[1])


def _dense(acc: isa.Access) -> bool:
    """True if the operand covers its bounding range completely (one contiguous run)."""
    _, outer = contiguous_runs(acc.shape, acc.strides)
    return not outer


def overlap(a: isa.Access, b: isa.Access) -> tuple[int, int] | None:
    """The smallest range holding every unit (SRAM byte / DRAM element) both operands touch, or None."""
    a_lo, a_hi = a.extent
    b_lo, b_hi = b.extent
    lo, hi = max(a_lo, b_lo), min(a_hi, b_hi)
    if lo >= hi:
        return None
    if _dense(a) and _dense(b):
        return lo, hi
    ua, ub = a.units(), b.units()
    ua = ua[(ua >= lo) & (ua < hi)]
    ub = ub[(ub >= lo) & (ub < hi)]
    shared = np.intersect1d(ua, ub, assume_unique=True)
    if not shared.size:
        return None
    return int(shared[0]), int(shared[-1]) + 1
