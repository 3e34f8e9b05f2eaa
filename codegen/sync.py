"""Semaphores from data dependences: the pass that makes four in-order engines safe.

Engines only synchronise through semaphores, so after instruction selection every
cross-engine dependence must become a ``Signal`` on the producer's engine right
after the producer and a ``Wait`` on the consumer's engine right before the
consumer. Dependences are found on SRAM byte ranges (read-after-write,
write-after-read, write-after-write; in granules of :func:`granule` bytes) and on
DRAM tensors. Each ordered engine pair owns one counting semaphore: signals and
waits on it occur in the same order on both sides, so counts always match and a
wait never blocks forever. A consumer that already waited for a later instruction
of the same producer needs no new wait (engines are in order). Operand geometry comes
from each record's :meth:`accesses`; the simulator's hazard checker
(:mod:`tvm_npu.simulator.hazards`) refuses any run in which two conflicting accesses of
different engines are not ordered, so a dependence missed here is an error there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from tvm_npu.simulator import isa
from tvm_npu.simulator.builder import row_major
from tvm_npu.simulator.hazards import overlap

from tvm_npu.config import HardwareConfig

Range = tuple[int, int]

#: The finest SRAM granule the pass tracks (bytes): a floor on :func:`granule`'s tables' size and time.
MIN_GRANULE_BYTES = 4


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
    hw: HardwareConfig, instructions: Sequence[isa.Instruction], meta: Sequence[int] | None = None,
    shapes: Sequence[Sequence[int]] | None = None,
) -> tuple[list[isa.Instruction], list[int]]:
    """Return the instruction list with Signal/Wait pairs inserted (and ``meta`` carried along).

    ``meta`` is a per-instruction tag (e.g. the layer index) that inserted
    synchronisation instructions inherit from their neighbour. ``shapes`` (the DRAM tensors'
    shapes, by table index) only makes the DRAM overlap test faster (:func:`box`); the result
    is the same without it.
    """
    engines = list(isa.Engine)
    accesses_of = [ins.accesses() if ins.engine is not None else () for ins in instructions]
    g = granule(hw, accesses_of)
    n_gran = -(-hw.max_sram_bytes // g)
    # per engine (row = engine id) and SRAM granule, the last instruction that wrote / read it
    last_write = np.full((len(engines), n_gran), -1, dtype=np.int32)
    last_read = np.full((len(engines), n_gran), -1, dtype=np.int32)
    # DRAM dependences by element range per tensor (bounding ranges: conservative), so an operator's
    # first loads wait only for the stores of the rows they read, not for its producer's last store
    # (per tensor and engine, in program order)
    dram_write: dict[tuple[int, isa.Engine], list[_Dram]] = {}
    dram_read: dict[tuple[int, isa.Engine], list[_Dram]] = {}
    waited = {(f, e): -1 for f in engines for e in engines}
    sem_of = _semaphore_ids(hw, engines)
    strides = [row_major(shape) for shape in shapes or ()]
    waits_before: dict[int, list[isa.Wait]] = {}
    signals_after: dict[int, list[isa.Signal]] = {}

    for i, ins in enumerate(instructions):
        e = ins.engine
        if e is None:
            continue
        accesses = accesses_of[i]
        reads, writes = _footprint(accesses)
        need = {f: -1 for f in engines if f != e}
        _need_sram(last_write, reads + writes, g, need)
        _need_sram(last_read, writes, g, need)
        dram = [_Dram(acc, e, i, None if shapes is None else box(acc, shapes[acc.tensor], strides[acc.tensor]),
                      acc.extent)
                for acc in accesses if acc.space == isa.Space.DRAM]
        _need_dram(dram, e, need, waited, dram_write, dram_read)
        for f, j in need.items():
            if j > waited[(f, e)]:
                sem = sem_of[(f, e)]
                signals_after.setdefault(j, []).append(isa.Signal(f, sem))
                waits_before.setdefault(i, []).append(isa.Wait(e, sem))
                waited[(f, e)] = j
        for lo, hi in reads:
            last_read[e, lo // g: -(-hi // g)] = i
        for lo, hi in writes:
            last_write[e, lo // g: -(-hi // g)] = i
        for d in dram:
            if d.acc.read:
                dram_read.setdefault((d.acc.tensor, e), []).append(d)
            if d.acc.write:
                dram_write.setdefault((d.acc.tensor, e), []).append(d)
    return _interleave(instructions, meta, waits_before, signals_after)


def granule(hw: HardwareConfig, accesses_of: Sequence[Sequence[isa.Access]]) -> int:
    """The SRAM granule (bytes) dependences are tracked in: the largest that divides every SRAM range's
    ends (then two ranges share a granule only if they share a byte), at most the allocation alignment
    and at least :data:`MIN_GRANULE_BYTES`.

    Why not always the alignment: the versions of a pipelined buffer are contiguous, and one of a
    9 x 27 x 32 int8 result tile ends mid-granule, so the store of tile i would wait for the epilogue of
    tile i+1 writing the other version. Why not always a byte: the tables' time grows with their size."""
    g = hw.sram_align_bytes
    for accesses in accesses_of:
        for acc in accesses:
            if acc.space == isa.Space.SRAM:
                lo, hi = acc.extent
                g = math.gcd(g, lo, hi)
    return max(g, MIN_GRANULE_BYTES)


def _semaphore_ids(hw: HardwareConfig, engines: Sequence[isa.Engine]) -> dict[tuple[isa.Engine, isa.Engine], int]:
    """The semaphore of each ordered pair of distinct engines (signalling, waiting); ValueError when
    the hardware has too few."""
    sem_of = {}
    for f in engines:
        for e in engines:
            if f != e:
                sem_of[(f, e)] = len(sem_of)
    if len(sem_of) > hw.num_semaphores:
        raise ValueError(f"the synchronisation pass needs {len(sem_of)} semaphores; "
                         f"-num-semaphores={hw.num_semaphores}")
    return sem_of


def _need_sram(arr: np.ndarray, rngs: list[Range], g: int, need: dict[isa.Engine, int]) -> None:
    """Raise ``need`` (per other engine, the last instruction to wait for) to the latest of ``arr``'s
    instructions (per engine and SRAM granule of ``g`` bytes) in the byte ranges ``rngs``."""
    for lo, hi in rngs:
        a, b = lo // g, -(-hi // g)
        if b <= a:
            continue
        latest = arr[:, a:b].max(axis=1).tolist()  # every engine at once
        for f in need:
            if latest[f] > need[f]:
                need[f] = latest[f]


def _need_dram(dram: list[_Dram], e: isa.Engine, need: dict[isa.Engine, int],
               waited: dict[tuple[isa.Engine, isa.Engine], int], dram_write: dict[tuple[int, isa.Engine], list[_Dram]],
               dram_read: dict[tuple[int, isa.Engine], list[_Dram]]) -> None:
    """Raise ``need`` to the latest earlier DRAM access of another engine that the accesses ``dram``
    (of an instruction on ``e``) overlap: writes for a read, reads and writes for a write."""
    for d in dram:
        for f in need:
            for earlier in (dram_write, dram_read) if d.acc.write else (dram_write,):
                # an access at or before what ``e`` already waits for cannot add a wait: stop there
                j = _latest_overlap(earlier.get((d.acc.tensor, f), ()), d, max(need[f], waited[(f, e)]))
                need[f] = max(need[f], j)


def _interleave(instructions: Sequence[isa.Instruction], meta: Sequence[int] | None,
                waits_before: dict[int, list[isa.Wait]],
                signals_after: dict[int, list[isa.Signal]]) -> tuple[list[isa.Instruction], list[int]]:
    """The instructions with their waits before and signals after them, and the tags (``meta``, else 0)
    the inserted ones inherit from their instruction."""
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


class _Dram(NamedTuple):
    """A DRAM access of instruction ``index`` on ``engine``, with its :func:`box` (None: none found)."""

    acc: isa.Access
    engine: isa.Engine
    index: int
    box: Box | None
    extent: tuple[int, int]  # (of ``acc``, computed once)


#: Per tensor dimension, the progression ``(start, step, count)`` of indices an access reaches.
Box = tuple[tuple[int, int, int], ...]


def box(acc: isa.Access, shape: Sequence[int], strides: Sequence[int] | None = None) -> Box | None:
    """The elements ``acc`` reaches in a DRAM tensor of ``shape`` as a product of one arithmetic
    progression per tensor dimension, or None when they are not one (then :func:`shares` falls back to
    comparing element sets).

    Why: comparing the element sets (:func:`~tvm_npu.simulator.hazards.overlap`) costs a sort of every
    element of both tiles, and a partition compares tens of thousands of pairs of tiles of the same
    tensor (most of the codegen's time); two boxes are compared one dimension at a time.
    Each access dimension must step along one tensor dimension (its stride a multiple ``m`` of that
    dimension's row-major stride, ``m`` below its extent) without leaving it, and no two along the same
    one; a dimension that runs over whole rows of a contiguous block (DMA merges those) is split first.
    Then every reached element has exactly one coordinate per tensor dimension, so the sets are equal.
    ``strides`` (``row_major(shape)``) may be passed in when known.
    """
    strides = row_major(shape) if strides is None else strides
    if not 0 <= acc.base < math.prod(shape):
        return None
    coord = [acc.base // s % n for s, n in zip(strides, shape, strict=True)]
    prog: list[tuple[int, int, int] | None] = [None] * len(shape)
    work = [(n, s) for n, s in zip(acc.shape, acc.strides, strict=True) if n > 1 and s != 0]
    while work:
        n, s = work.pop()
        d = len(shape) - 1
        while d >= 0 and (s % strides[d] or s // strides[d] >= shape[d]):
            d -= 1
        if d < 0 or prog[d] is not None:
            return None
        m = s // strides[d]
        if coord[d] + (n - 1) * m < shape[d]:
            prog[d] = (coord[d], m, n)
        elif m == 1 and coord[d] == 0 and n % shape[d] == 0 and d > 0:  # whole rows: one dim per axis
            work += [(n // shape[d], strides[d - 1]), (shape[d], s)]
        else:
            return None
    return tuple(p if p is not None else (c, 1, 1) for p, c in zip(prog, coord, strict=True))


def _meet(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    """Whether two progressions ``(start, step, count)`` share an index."""
    lo = max(a[0], b[0])
    hi = min(a[0] + (a[2] - 1) * a[1], b[0] + (b[2] - 1) * b[1])
    if lo > hi:
        return False
    if a[1] < b[1]:
        a, b = b, a  # walk the one with the larger step
    first = a[0] + -(-(lo - a[0]) // a[1]) * a[1]
    # within [lo, hi] both are inside their ranges; residues mod b's step repeat after b[1] of a's steps
    return any((x - b[0]) % b[1] == 0 for x in range(first, min(hi, first + a[1] * (b[1] - 1)) + 1, a[1]))


def shares(x: _Dram, y: _Dram) -> bool:
    """Whether two accesses of one DRAM tensor reach a common element (exact)."""
    if x.box is None or y.box is None:
        return overlap(x.acc, y.acc) is not None
    for a, b in zip(x.box, y.box, strict=True):
        if a[0] + (a[2] - 1) * a[1] < b[0] or b[0] + (b[2] - 1) * b[1] < a[0]:
            return False  # (the common case, tiles of other rows or channels, without a call)
        if (a[1] != 1 or b[1] != 1) and not _meet(a, b):
            return False
    return True


def _latest_overlap(accesses: Sequence[_Dram], acc: _Dram, floor: int) -> int:
    """The index of the latest of ``accesses`` (one engine's, in program order) after ``floor`` that
    shares an element with ``acc``, or -1."""
    lo, hi = acc.extent
    for other in reversed(accesses):
        if other.index <= floor:
            break
        a, b = other.extent
        if a < hi and lo < b and shares(other, acc):
            return other.index
    return -1
