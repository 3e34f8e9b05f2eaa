"""Semaphores from data dependences: the pass that makes four in-order engines safe.

Engines only synchronise through semaphores, so after instruction selection every
cross-engine dependence must become a ``Signal`` on the producer's engine right
after the producer and a ``Wait`` on the consumer's engine right before the
consumer. Dependences are found on SRAM byte ranges (read-after-write,
write-after-read, write-after-write; granule = the allocation alignment) and on
DRAM tensors. Each ordered engine pair owns one counting semaphore: signals and
waits on it occur in the same order on both sides, so counts always match and a
wait never blocks forever. A consumer that already waited for a later instruction
of the same producer needs no new wait (engines are in order).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tvm_npu.simulator import isa

from tvm_npu.config import HardwareConfig

Range = tuple[int, int]


def _span(addr: int, shape: Sequence[int], strides: Sequence[int], itemsize: int) -> Range:
    last = sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
    return addr, addr + (last + 1) * itemsize


def sram_footprint(ins: isa.Instruction) -> tuple[list[Range], list[Range]]:
    """Byte ranges an instruction reads and writes in SRAM (bounding boxes)."""
    if isinstance(ins, isa.DmaLoad | isa.DmaStore):
        r = _span(ins.sram_addr, ins.shape, ins.sram_strides, ins.dtype.itemsize)
        return ([r], []) if isinstance(ins, isa.DmaStore) else ([], [r])
    if isinstance(ins, isa.MatMul):
        isz, asz = ins.in_dtype.itemsize, ins.acc_dtype.itemsize
        c = _span(ins.c_addr, (ins.m, ins.n), ins.c_strides, asz)
        reads = [_span(ins.a_addr, (ins.m, ins.k), ins.a_strides, isz),
                 _span(ins.b_addr, (ins.k, ins.n), ins.b_strides, isz)]
        return ([*reads, c] if ins.accumulate else reads), [c]
    if isinstance(ins, isa.Conv):
        isz, asz = ins.in_dtype.itemsize, ins.acc_dtype.itemsize
        out = _span(ins.out_addr, (ins.out_c, ins.out_h, ins.out_w), ins.out_strides, asz)
        reads = [
            _span(ins.in_addr, (ins.in_c, ins.in_h, ins.in_w), ins.in_strides, isz),
            _span(ins.w_addr, (ins.out_c, ins.in_c // ins.groups, ins.kernel_h, ins.kernel_w), ins.w_strides, isz),
        ]
        return ([*reads, out] if ins.accumulate else reads), [out]
    if isinstance(ins, isa.Pool):
        sz = ins.dtype.itemsize
        return ([_span(ins.in_addr, (ins.channels, ins.in_h, ins.in_w), ins.in_strides, sz)],
                [_span(ins.out_addr, (ins.channels, ins.out_h, ins.out_w), ins.out_strides, sz)])
    if isinstance(ins, isa._VecBase):
        src_t, dst_t = _vec_dtypes(ins)
        reads = [_span(ins.src_addr, ins.shape, ins.src_strides, src_t.itemsize)]
        if isinstance(ins, isa.VecBinary):
            reads.append(_span(ins.other_addr, ins.shape, ins.other_strides, src_t.itemsize))
        if isinstance(ins, isa.VecBiasAdd):
            reads.append((ins.bias_addr, ins.bias_addr + ins.shape[ins.axis] * src_t.itemsize))
        return reads, [_span(ins.dst_addr, ins.shape, ins.dst_strides, dst_t.itemsize)]
    return [], []


def _vec_dtypes(ins: isa._VecBase):
    from tvm_npu.config import DType

    if isinstance(ins, isa.VecRequant):
        return DType.INT32, DType.INT8
    if isinstance(ins, isa.VecCast):
        return ins.src_dtype, ins.dst_dtype
    return ins.dtype, ins.dtype


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
    dram_write: dict[int, tuple[isa.Engine, int]] = {}
    dram_read: dict[int, dict[isa.Engine, int]] = {}
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
        reads, writes = sram_footprint(ins)
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
        if isinstance(ins, isa.DmaLoad):
            w = dram_write.get(ins.tensor)
            if w is not None and w[0] != e:
                need[w[0]] = max(need[w[0]], w[1])
        elif isinstance(ins, isa.DmaStore):
            w = dram_write.get(ins.tensor)
            if w is not None and w[0] != e:
                need[w[0]] = max(need[w[0]], w[1])
            for f, j in dram_read.get(ins.tensor, {}).items():
                if f != e:
                    need[f] = max(need[f], j)
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
        if isinstance(ins, isa.DmaLoad):
            dram_read.setdefault(ins.tensor, {})[e] = i
        elif isinstance(ins, isa.DmaStore):
            dram_write[ins.tensor] = (e, i)

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
