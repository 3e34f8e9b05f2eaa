"""How an N-d copy becomes DMA descriptors (shared by the codegen and the cost model).

A copy is a set of loops, each with an extent and an element stride on each side.
Unit loops are dropped, loops contiguous on every side are merged (so a full-width
row block becomes one long run), and when more than three loops remain the
outermost ones are unrolled into separate descriptors.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

Dims = list[tuple[int, tuple[int, ...]]]


def merge_dims(extents: Sequence[int], *strides: Sequence[int]) -> Dims:
    """Drop unit loops and merge loops contiguous in every operand; outermost first."""
    dims = [(n, tuple(s[i] for s in strides)) for i, n in enumerate(extents) if n > 1]
    merged: Dims = []
    for n, st in dims:
        if merged:
            pn, pst = merged[-1]
            if all(ps == s * n for ps, s in zip(pst, st, strict=True)):
                merged[-1] = (pn * n, st)
                continue
        merged.append((n, st))
    return merged or [(1, tuple(0 for _ in strides))]


def split_outer(dims: Dims, max_dims: int = 3) -> Iterator[tuple[tuple[int, ...], Dims]]:
    """Yield (per-operand element offset, inner dims) covering ``dims`` with at most ``max_dims`` each."""
    cut = max(0, len(dims) - max_dims)
    outer, inner = dims[:cut], dims[cut:]
    nops = len(dims[0][1])
    for idx in itertools.product(*(range(n) for n, _ in outer)):
        offs = tuple(sum(i * st[k] for i, (_, st) in zip(idx, outer, strict=True)) for k in range(nops))
        yield offs, inner


def pad3(dims: Dims, operand: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(shape, strides) of one operand as the ISA's 3-D form (leading unit dims)."""
    shape = [n for n, _ in dims]
    strides = [st[operand] for _, st in dims]
    while len(shape) < 3:
        shape.insert(0, 1)
        strides.insert(0, 0)
    return tuple(shape), tuple(strides)  # type: ignore[return-value]


def copy_plan(extents: Sequence[int], dram_strides: Sequence[int], sram_strides: Sequence[int]) -> Dims:
    """Order a copy's loops with the smallest DRAM stride innermost (longest bursts), then merge. A loop
    of DRAM stride 0 (a broadcast view read again) goes outermost: it repeats whole runs instead of
    cutting them into single elements."""
    order = sorted(range(len(extents)), key=lambda i: (dram_strides[i] != 0, -dram_strides[i]))
    return merge_dims([extents[i] for i in order], [dram_strides[i] for i in order], [sram_strides[i] for i in order])
