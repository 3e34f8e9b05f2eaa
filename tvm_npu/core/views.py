"""Index arithmetic of :class:`~tvm_npu.core.ops.View`: tensors that live inside another DRAM tensor.

A reshape, squeeze, flatten, a transpose, a strided slice with positive steps, a gather of
evenly spaced constant indices, a broadcast (stride 0 along a repeated axis: readers only),
and the inputs of a concat move no data on the NPU: the partition graph
describes each as a view of the tensor that holds its elements, chains of views are
composed here into one view of a real DRAM tensor, and the codegen turns an access to
a viewed tensor into DMA descriptors on the real one (:func:`view_pieces`).

All strides and offsets count elements of the base tensor. A view's strides are given
relative to its base's *logical* row-major order; :func:`compose` re-expresses them in
the storage of the base's own base. Composition fails (:class:`NotAView`) only where
the result is not a set of strided blocks, e.g. a reshape that splits a strided axis
unevenly; the partition graph then copies the data instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import fields, replace

import numpy as np

from tvm_npu.core.ops import OpSpec, TensorRef, View
from tvm_npu.simulator.builder import row_major

Factors = tuple[tuple[int, int], ...]


class NotAView(ValueError):
    """The composition of two views is not expressible as strided factors."""


def storage(t: TensorRef) -> str:
    """The DRAM tensor ``t``'s elements live in (its view's base, or ``t`` itself)."""
    return t.name if t.view is None else t.view.base


def shape_of(view: View) -> tuple[int, ...]:
    """The logical shape a view presents."""
    return tuple(math.prod(e for e, _ in dim) for dim in view.dims)


def reshape(base: str, new_shape: Sequence[int]) -> View:
    """``base`` read under ``new_shape`` (same element count, row-major order unchanged)."""
    return View(base, 0, tuple(((int(n), s),) for n, s in zip(new_shape, row_major(new_shape), strict=True)))


def permute(base: str, shape: Sequence[int], axes: Sequence[int]) -> View:
    """``permute_dims(base, axes)`` of a tensor of ``shape``."""
    strides = row_major(shape)
    return View(base, 0, tuple(((int(shape[a]), strides[a]),) for a in axes))


def slice_of(base: str, whole: Sequence[int], part: Sequence[int], axis: int, start: int) -> View:
    """The block ``[start, start + part[axis])`` along ``axis`` of ``base`` (shape ``whole``): a concat input."""
    strides = row_major(whole)
    return View(base, start * strides[axis], tuple(((int(n), s),) for n, s in zip(part, strides, strict=True)))


def broadcast(base: str, shape: Sequence[int], out_shape: Sequence[int]) -> View:
    """``broadcast_to(base, out_shape)`` of a tensor of ``shape`` (numpy's rule: leading axes added, axes of
    one element repeated): a repeated axis has stride 0, so its readers load the same elements again
    (a nearest-neighbour upsampling is ``reshape -> broadcast_to -> reshape``)."""
    lead = len(out_shape) - len(shape)
    full = (1,) * lead + tuple(int(n) for n in shape) if lead >= 0 else ()
    if lead < 0 or any(n not in (1, m) for n, m in zip(full, out_shape, strict=True)):
        raise NotAView(f"{tuple(shape)} does not broadcast to {tuple(out_shape)}")
    strides = row_major(full)
    return View(base, 0, tuple(((int(m), s if n == m else 0),) for n, m, s in zip(full, out_shape, strides,
                                                                                      strict=True)))


def strided(base: str, shape: Sequence[int], begin: Sequence[int], step: Sequence[int], extent: Sequence[int],
            keep: Sequence[bool] | None = None) -> View:
    """Elements ``begin[d] + i * step[d]`` (``i < extent[d]``) of every axis of ``base`` (shape ``shape``):
    a strided slice, or a gather of evenly spaced indices; an axis with ``keep[d]`` false (a scalar index,
    extent 1) is dropped from the view's shape."""
    strides = row_major(shape)
    for d, (n, b, k, e) in enumerate(zip(shape, begin, step, extent, strict=True)):
        if e < 1 or k < 1 or b < 0 or b + (e - 1) * k >= n:
            raise NotAView(f"axis {d}: {e} elements from {b} by {k} do not lie inside its {n}")
    keep = [True] * len(shape) if keep is None else keep
    if any(not kd and e != 1 for kd, e in zip(keep, extent, strict=True)):
        raise NotAView("only an axis of one element can be dropped")
    offset = sum(b * s for b, s in zip(begin, strides, strict=True))
    return View(base, offset, tuple(((int(e), int(k * s)),) for e, k, s, kd in zip(extent, step, strides, keep,
                                                                                  strict=True) if kd))


def _atoms(view: View) -> list[tuple[int, int, int]]:
    """(extent, logical weight, storage stride) of every non-unit factor, outermost first, with
    neighbours that are contiguous in both orders merged."""
    flat: list[tuple[int, int]] = [f for dim in view.dims for f in dim]
    weights = row_major([e for e, _ in flat])
    atoms: list[tuple[int, int, int]] = []
    for (e, s), w in zip(flat, weights, strict=True):
        if e == 1:
            continue
        if atoms:
            pe, pw, ps = atoms[-1]
            if pw == e * w and ps == e * s:
                atoms[-1] = (pe * e, w, s)
                continue
        atoms.append((e, w, s))
    return atoms


def compose(inner: View, outer: View) -> View:
    """``inner`` (a view of the tensor ``outer`` presents) as a view of ``outer.base``."""
    atoms = _atoms(outer)
    total = math.prod(e for e, _, _ in atoms)
    if inner.offset >= max(total, 1) and atoms:
        raise NotAView(f"offset {inner.offset} lies outside the {total} elements of {outer.base}'s view")
    used = [0] * len(atoms)
    offset = outer.offset
    for j, (e, w, s) in enumerate(atoms):
        digit = inner.offset // w % e
        used[j] += digit
        offset += digit * s

    def place(extent: int, stride: int) -> list[tuple[int, int]]:
        if stride == 0:  # a repeated (broadcast) factor reads the same elements whatever lies under it
            return [(extent, 0)]
        parts: list[tuple[int, int]] = []
        while extent > 1:
            j = next((j for j, (_, w, _) in enumerate(atoms) if w <= stride), None)
            if j is None or stride % atoms[j][1]:
                raise NotAView(f"stride {stride} does not line up with the factors of {outer.base}'s view")
            e, w, s = atoms[j]
            k = stride // w
            if k >= e:
                raise NotAView(f"a factor of extent {extent} runs past {outer.base}'s view")
            if (extent - 1) * k < e:
                parts.append((extent, k * s))
                used[j] += (extent - 1) * k
                break
            if e % k or extent % (e // k):
                raise NotAView(f"a factor of extent {extent} splits {outer.base}'s axis of {e} unevenly")
            c = e // k
            parts.append((c, k * s))
            used[j] += (c - 1) * k
            extent //= c
            stride *= c
        return parts[::-1] or [(1, 0)]

    dims = tuple(tuple(p for e, st in dim for p in place(e, st)) for dim in inner.dims)
    for (e, _, _), u in zip(atoms, used, strict=True):
        if u >= e:  # an index would carry into the next factor: not affine
            raise NotAView(f"the view of {inner.base} wraps around an axis of {outer.base}")
    return View(outer.base, offset, dims)


def indices(view: View) -> np.ndarray:
    """The base element index of every element of the view (its logical shape); for checks."""
    shape = shape_of(view)
    idx = np.full(shape, view.offset, dtype=np.int64)
    for d, factors in enumerate(view.dims):
        vec = np.zeros(shape[d], dtype=np.int64)
        rest = np.arange(shape[d])
        for e, s in reversed(factors):
            vec += (rest % e) * s
            rest //= e
        idx += vec.reshape([-1 if i == d else 1 for i in range(len(shape))])
    return idx


def _ranges(factors: Factors, start: int, n: int) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """Index range ``[start, start + n)`` of one axis split into ``factors``, as strided blocks:
    (storage offset, first index, loops (extent, stride) outermost first)."""
    if n <= 0:
        return []
    if len(factors) == 1:
        return [(start * factors[0][1], start, [(n, factors[0][1])])]
    block = math.prod(e for e, _ in factors[1:])
    stride = factors[0][1]
    out = []

    def within(a: int, m: int) -> None:
        q, r = divmod(a, block)
        out.extend((q * stride + off, a - r + first, loops) for off, first, loops in _ranges(factors[1:], r, m))

    head = min(n, (-start) % block)
    if head:
        within(start, head)
        start, n = start + head, n - head
    if n >= block:
        q = n // block
        for off, first, loops in _ranges(factors[1:], 0, block):
            out.append(((start // block) * stride + off, start + first, [(q, stride), *loops]))
        start, n = start + q * block, n - q * block
    if n:
        within(start, n)
    return out


Piece = tuple[int, int, list[int], list[int], list[int]]


def view_pieces(view: View, coefs: Sequence[Sequence[int]], base: Sequence[int], lo: Sequence[int],
                ext: Sequence[int], sram_strides: Sequence[int]) -> list[Piece]:
    """A DMA over a viewed tensor as strided blocks of its base tensor.

    The access reads index ``base[d] + sum_v coefs[d][v] * (lo[v] + i_v)`` of logical dim ``d``
    for loop counters ``i_v < ext[v]``; the SRAM side moves by ``sram_strides[v]`` per step.
    Returns (base offset, extra SRAM element offset, extents, base strides, SRAM strides)
    per block. A split axis followed by one loop becomes nested loops (one block when the
    range is aligned to its factors); any other loop over a split axis is unrolled.
    """
    nloops = len(ext)
    split = [d for d, f in enumerate(view.dims) if len(f) > 1]
    followed: dict[int, int] = {}
    unrolled: set[int] = set()
    for d in split:
        used = [v for v in range(nloops) if coefs[d][v] and ext[v] > 1]
        if len(used) == 1 and coefs[d][used[0]] == 1 and used[0] not in followed.values():
            followed[d] = used[0]
        else:
            unrolled.update(used)
    for d, v in list(followed.items()):  # a followed loop that also moves another axis is unrolled
        if v in unrolled or any(coefs[dd][v] for dd in range(len(view.dims)) if dd != d):
            unrolled.add(v)
            del followed[d]
    order = sorted(unrolled)
    pieces: list[Piece] = []
    for fixed in np.ndindex(*(ext[v] for v in order)):
        at = dict(zip(order, fixed, strict=True))
        start = [base[d] + sum(coefs[d][v] * (lo[v] + at.get(v, 0)) for v in range(nloops))
                 for d in range(len(view.dims))]
        head: Piece = (view.offset, sum(sram_strides[v] * i for v, i in at.items()), [], [], [])
        free = [v for v in range(nloops) if v not in at and v not in followed.values()]
        for v in free:
            head[2].append(ext[v])
            head[3].append(sum(coefs[d][v] * view.dims[d][0][1] for d in range(len(view.dims)) if d not in split))
            head[4].append(sram_strides[v])
        off = view.offset
        for d, factors in enumerate(view.dims):
            if d not in followed:
                rest, pos = start[d], 0
                for e, s in reversed(factors):
                    pos += (rest % e) * s
                    rest //= e
                off += pos
        current = [(off, head[1], head[2], head[3], head[4])]
        for d, v in followed.items():
            grown = []
            for o, so, ex, ds, ss in current:
                for b_off, first, loops in _ranges(view.dims[d], start[d], ext[v]):
                    inner = row_major([e for e, _ in loops])
                    grown.append((o + b_off, so + (first - start[d]) * sram_strides[v],
                                  ex + [e for e, _ in loops], ds + [s for _, s in loops],
                                  ss + [sram_strides[v] * w for w in inner]))
            current = grown
        pieces.extend(current)
    return pieces


def invert(view: View, base_shape: Sequence[int], name: str) -> View | None:
    """The base (of ``base_shape``) as a view of ``name``, the tensor ``view`` presents, when ``view``
    visits every base element exactly once (a reshape or transpose of the whole base); else None."""
    flat = [f for dim in view.dims for f in dim]
    weights = row_major([e for e, _ in flat])
    atoms = sorted(((e, s, w) for (e, s), w in zip(flat, weights, strict=True) if e > 1), key=lambda a: -a[1])
    expect = 1
    for e, s, _ in reversed(atoms):
        if s != expect:
            return None
        expect *= e
    if view.offset != 0 or expect != math.prod(base_shape):
        return None
    in_base_order = View(name, 0, tuple(((e, w),) for e, _, w in atoms))
    try:
        return compose(reshape(name, base_shape), in_base_order)
    except NotAView:
        return None


def map_refs(spec: OpSpec, fn: Callable[[TensorRef], TensorRef]) -> OpSpec:
    """``spec`` with ``fn`` applied to every tensor it names (operands, epilogue operands, result)."""
    changes = {f.name: fn(v) for f in fields(spec) if isinstance(v := getattr(spec, f.name), TensorRef)}
    epilogue = tuple(replace(e, operand=fn(e.operand)) if e.operand is not None else e for e in spec.epilogue)
    return replace(spec, **changes, epilogue=epilogue)


def without_views(spec: OpSpec) -> OpSpec:
    """``spec`` with every operand stored on its own (an operator compiled alone, as tuning measures it)."""
    return map_refs(spec, lambda t: replace(t, view=None))
