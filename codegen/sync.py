"""Semaphores from data dependences: the pass that makes four in-order engines safe.

Engines only synchronise through semaphores, so after instruction selection every
cross-engine dependence must become a ``Signal`` on the producer's engine right
after the producer and a ``Wait`` on the consumer's engine right before the
consumer. Dependences are found on SRAM byte ranges (read-after-write,
write-after-read, write-after-write; granule = the allocation alignment) and on
DRAM tensors. Each ordered engine pair owns one counting semaphore: signals and
waits on it occur in the same order on both sides, so counts always match and a
wait never blocks forever. A consumer that already waited for a later instruction
of the same producer needs no new wait (engines are in order). Operand geometry comes
from each record's :meth:`accesses`; the simulator's hazard checker
(:mod:`tvm_npu.simulator.hazards`) refuses any run in which two conflicting accesses of
different engines are not ordered, so a dependence missed here is an error there.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tvm_npu.simulator import isa
from tvm_npu.simulator.hazards import overlap

from tvm_npu.config import HardwareConfig

Range = tuple[int, int]


def sram_footprint(ins: isa.Instruction) -> tuple[list[Range], list[Range]]:
    """Byte ranges an instruction reads and writes in SRAM (bounding boxes of its :meth:`accesses`)."""
    return _footprint(ins.accesses())


def _footprint(accesses: Sequence[isa.Access]) -> tuple[list[Range], list[Range]]:
    reads: list[Range] = []
    writes: list[Range] = []
    for acc in accesses:
        if acc.space == isa.Space.SRAM:
            r = acc.extent
            if acc.read:
                reads.append(r)
            if acc.write:
                writes.append(r)
    return reads, writes


def insert_semaphores(
    hw: HardwareConfig, instructions: Sequence[isa.Instruction], meta: Sequence[int] | None = None
) -> tuple[list[isa.Instruction], list[int]]:
    """Return the instruction list with Signal/Wait pairs inserted (and ``meta`` carried along).

    ``meta`` is a per-instruction tag (e.g. the layer index) that inserted
    synchronisation instructions inherit from their neighbour.
    """
    engines = list(isa.Engine)
    g = hw.sram_align_bytes
    n_gran = hw.max_sram_bytes // g
    last_write = {e: np.full(n_gran, -1, dtype=np.int64) for e in engines}
    last_read = {e: np.full(n_gran, -1, dtype=np.int64) for e in engines}
    # DRAM dependences by element range per tensor (bounding ranges: conservative), so an operator's
    # first loads wait only for the stores of the rows they read, not for its producer's last store
    dram_write: dict[int, list[tuple[isa.Access, isa.Engine, int]]] = {}
    dram_read: dict[int, list[tuple[isa.Access, isa.Engine, int]]] = {}
    waited = {(f, e): -1 for f in engines for e in engines}
    sem_of = {}
    for f in engines:
        for e in engines:
            if f != e:
                sem_of[(f, e)] = len(sem_of)
    if len(sem_of) > hw.num_semaphores:
        raise ValueError(f"the synchronisation pass needs {len(sem_of)} semaphores; "
                         f"-num-semaphores={hw.num_semaphores}")
    waits_before: dict[int, list[isa.Wait]] = {}
    signals_after: dict[int, list[isa.Signal]] = {}

    for i, ins in enumerate(instructions):
        e = ins.engine
        if e is None:
            continue
        accesses = ins.accesses()
        reads, writes = _footprint(accesses)
        need = {f: -1 for f in engines if f != e}

        def dep(arr: dict, rngs: list[Range], need: dict = need) -> None:
            for lo, hi in rngs:
                a, b = lo // g, -(-hi // g)
                for f in need:
                    j = int(arr[f][a:b].max()) if b > a else -1
                    if j > need[f]:
                        need[f] = j

        dep(last_write, reads + writes)
        dep(last_read, writes)
        dram = [acc for acc in accesses if acc.space == isa.Space.DRAM]
        for acc in dram:
            _latest_overlap(dram_write.get(acc.tensor, ()), acc, e, need)
            if acc.write:
                _latest_overlap(dram_read.get(acc.tensor, ()), acc, e, need)
        for f, j in need.items():
            if j > waited[(f, e)]:
                sem = sem_of[(f, e)]
                signals_after.setdefault(j, []).append(isa.Signal(f, sem))
                waits_before.setdefault(i, []).append(isa.Wait(e, sem))
                waited[(f, e)] = j
        for lo, hi in reads:
            last_read[e][lo // g: -(-hi // g)] = i
        for lo, hi in writes:
            last_write[e][lo // g: -(-hi // g)] = i
        for acc in dram:
            rng = (acc, e, i)
            if acc.read:
                dram_read.setdefault(acc.tensor, []).append(rng)
            if acc.write:
                dram_write.setdefault(acc.tensor, []).append(rng)

    out: list[isa.Instruction] = []
    out_meta: list[int] = []
    for i, ins in enumerate(instructions):
        tag = meta[i] if meta is not None else 0
        for w in waits_before.get(i, ()):
            out.append(w)
            out_meta.append(tag)
        out.append(ins)
        out_meta.append(tag)
        for s in signals_after.get(i, ()):
            out.append(s)
            out_meta.append(tag)
    return out, out_meta


def _latest_overlap(accesses: Sequence[tuple[isa.Access, isa.Engine, int]], acc: isa.Access, e: isa.Engine,
                    need: dict[isa.Engine, int]) -> None:
    """Raise ``need[f]`` to the latest access of each other engine ``f`` that shares an element with
    ``acc`` (lists are in program order, so the first hit from the end is an engine's latest)."""
    lo, hi = acc.extent
    found: set[isa.Engine] = set()
    for other, f, j in reversed(accesses):
        if f == e or f in found:
            continue
        a, b = other.extent
        if a < hi and lo < b and overlap(other, acc) is not None:
            found.add(f)
            need[f] = max(need[f], j)
            if len(found) == len(need):
                return
