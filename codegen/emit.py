"""Instruction selection: turn the instruction sites of a lowered operator into ISA records.

Each event from :mod:`tir_walk` carries integer affine forms of its buffer
accesses; this module maps them to DMA descriptors, tensor-engine tiles and vector
operations. Three things are decided here rather than in TIR:

* **clamping** -- schedules split loops without predicates, so edge tiles overhang
  their tensors; DMA descriptors are clamped to the DRAM tensor and the SRAM side
  trimmed by the same amount;
* **validity** -- every SRAM tile remembers which part of it holds real data (and
  where it sits in the global tensor), so compute instructions process only real
  rows/columns and a convolution sees the clamped border as zero padding;
* **accumulate** -- a reduction's zero-initialisation site is folded into the first
  tensor instruction that writes the tile (``accumulate=False``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from tvm_npu.simulator import ProgramBuilder, isa
from tvm_npu.tir_schedules.common import Scheduled, dram_name
from tvm_npu.tir_schedules.contract import SRAM_SCOPE, Role, SiteKind
from tvm_npu.tir_schedules.dma import copy_plan, merge_dims, pad3, split_outer
from tvm_npu.tir_schedules.kind import kind_of
from tvm_npu.tir_schedules.pool import scratch_shape, separable
from tvm_npu.tir_schedules.rowwise import DATA, row_steps

from tvm_npu.config import DType
from tvm_npu.core.epilogue import RULES
from tvm_npu.core.ops import Conv2dSpec, EpiKind, Epilogue, OpSpec, PoolKind, PoolSpec, RowwiseSpec
from tvm_npu.core.tiles import ConvEngine, TileParams
from tvm_npu.core.views import NotAView, compose, reshape, shape_of, view_pieces

from .tir_walk import Access, CompiledWalk, Event, SramBuffer


class EmitError(RuntimeError):
    """A site cannot be expressed in the ISA (a template / codegen bug, reported with context)."""


def _dot(a: Sequence[int], b: Sequence[int]) -> int:
    return sum(x * y for x, y in zip(a, b, strict=True))


# ---------------------------------------------------------------- program state
@dataclass(frozen=True)
class Resident:
    """An intermediate tensor kept in SRAM between its producer and its consumer (``-fusion=2``)."""

    addr: int
    dtype: DType


# ------------------------------------------------------------ validity records
@dataclass(frozen=True)
class _Tile:
    """Which part of an SRAM tile holds data: per buffer dim ``[lo, hi)`` relative to the
    access origin, and (for tiles loaded from DRAM) the global coordinate of the origin."""

    lo: tuple[int, ...]
    hi: tuple[int, ...]
    origin: tuple[int | None, ...]


def _loop_of(acc: Access, dim: int) -> int | None:
    """The single inner loop a dimension of an access follows with coefficient 1 (None: no loop, -1: other)."""
    return acc.loops[dim]


def _flat(acc: Access, base: Sequence[int]) -> tuple[int, tuple[int, ...]]:
    """Element offset of the access origin and the element stride of every inner loop."""
    return sum(b * s for b, s in zip(base, acc.strides, strict=True)), acc.loop_strides


@dataclass(frozen=True)
class _Operand:
    """One access of a compute site, addressed by axis name (``axes`` = its trailing buffer dims)."""

    acc: Access
    base: tuple[int, ...]
    axes: str
    tile: _Tile | None

    def dim(self, axis: str) -> int:
        return len(self.acc.shape) - len(self.axes) + self.axes.index(axis)

    def stride(self, axis: str) -> int:
        return self.acc.strides[self.dim(axis)]

    @property
    def offset(self) -> int:
        return _dot(self.base, self.acc.strides)

    def loop(self, axis: str) -> int | None:
        v = _loop_of(self.acc, self.dim(axis))
        if v is not None and v < 0:
            raise EmitError(f"buffer {self.acc.buffer} axis {axis} does not follow a single tile loop")
        return v

    def extent(self, axis: str, ev: Event) -> int:
        v = self.loop(axis)
        return 1 if v is None else ev.site.extents[v]

    def range(self, axis: str, ranges: Sequence[Sequence[int]]) -> tuple[int, int]:
        """The data-holding ``[lo, hi)`` of an axis (a dim without a loop has extent 1)."""
        v = self.loop(axis)
        return (0, 1) if v is None else (ranges[v][0], ranges[v][1])

    def index_in(self, ev: Event) -> int:
        return next(i for i, a in enumerate(ev.site.accesses) if a is self.acc)


@dataclass(frozen=True)
class Template:
    """What the emitter reads of a :class:`~tvm_npu.tir_schedules.common.Scheduled` besides its walk
    (plain data: no TVM objects, so a codegen worker can hand it back)."""

    tile: TileParams
    roles: dict[str, str]
    axes: dict[str, str]
    dram_axes: dict[str, str]
    aliases: dict[str, str]

    @classmethod
    def of(cls, scheduled: Scheduled) -> Template:
        return cls(scheduled.tile, scheduled.roles, scheduled.axes, scheduled.dram_axes, scheduled.aliases)


class OperatorEmitter:
    """Emits one scheduled operator into a :class:`~tvm_npu.simulator.ProgramBuilder`."""

    def __init__(self, asm: ProgramBuilder, spec: OpSpec, walk: CompiledWalk, template: Template,
                 layer: int, resident: Mapping[str, Resident], names: Mapping[str, str] | None = None) -> None:
        """``names`` maps the DRAM tensor names of ``walk`` to ``spec``'s where the walk was compiled
        for a renamed copy of it (:func:`~.operator.canonical`)."""
        self.tile = template.tile
        spec = kind_of(spec).as_scheduled(spec, self.tile)  # the form the template was built for
        self.asm, self.spec, self.walk, self.layer, self.resident = asm, spec, walk, layer, resident
        self.names = names or {}
        self.roles, self.axes, self.dram_axes = template.roles, template.axes, template.dram_axes
        aliases = template.aliases
        self.views = {t.name: t.view for t in (*spec.inputs, spec.out) if t.view is not None}
        self.hw = asm.hw
        self.addr: dict[str, int] = {}
        self.tiles: dict[tuple[str, tuple[int, ...]], _Tile] = {}
        self.zeroed: set[tuple[str, tuple[int, ...]]] = set()
        self._scratch: int | None = None  # a separable pool's row maxima (tir_schedules.pool.separable)
        self._allocate(walk.sram_buffers, aliases)

    # ------------------------------------------------------------------ SRAM
    def _allocate(self, buffers: dict[str, SramBuffer], aliases: dict[str, str]) -> None:
        """Give every SRAM buffer an address; a buffer shares its alias target's storage when
        both have the same shape and element size (elementwise steps run in place, a float32 -> int32
        cast too: as the footprints' :func:`~tvm_npu.tir_schedules.cost.chain` counts them)."""

        def place(name: str) -> int:
            if name in self.addr:
                return self.addr[name]
            buf, target = buffers[name], aliases.get(name)
            if target in buffers and buffers[target].shape == buf.shape and \
                    np.dtype(buffers[target].dtype).itemsize == np.dtype(buf.dtype).itemsize:
                self.addr[name] = place(target)
            else:
                self.addr[name] = self.asm.alloc(math.prod(buf.shape) * np.dtype(buf.dtype).itemsize, name)
            return self.addr[name]

        for name in buffers:
            place(name)

    def _sram_addr(self, acc: Access, elem_offset: int) -> int:
        return self.addr[acc.buffer] + elem_offset * np.dtype(acc.dtype).itemsize

    def _emit(self, instr: isa.Instruction) -> None:
        self.asm.emit(instr, self.layer)

    # ------------------------------------------------------------------ driver
    def run(self) -> None:
        handlers = {SiteKind.DMA: self._dma, SiteKind.ZERO: self._zero, SiteKind.INIT: self._no_op,
                    SiteKind.MATMUL: self._matmul, SiteKind.CONV: self._conv, SiteKind.POOL: self._pool,
                    SiteKind.EPI: self._epilogue, SiteKind.ROW: self._row}
        for ev in self.walk.events():
            try:
                handler = handlers[SiteKind(ev.site.kind)]
            except ValueError:
                raise EmitError(f"unknown instruction site kind {ev.site.kind!r} ({ev.site.name}); "
                                f"known: {[k.value for k in SiteKind]}") from None
            handler(ev)

    # --------------------------------------------------------------------- DMA
    def _dma(self, ev: Event) -> None:
        site = ev.site
        (ri, r), (wi, w) = _one_read_one_write(site.accesses)
        if r.scope == SRAM_SCOPE and w.scope != SRAM_SCOPE:
            dram, dram_base, sram, sram_base, load = w, ev.bases[wi], r, ev.bases[ri], False
        elif w.scope == SRAM_SCOPE and r.scope != SRAM_SCOPE:
            dram, dram_base, sram, sram_base, load = r, ev.bases[ri], w, ev.bases[wi], True
        else:
            raise EmitError(f"site {site.name}: a DMA must copy between DRAM and SRAM ({r.scope} -> {w.scope})")
        lo = [0] * len(site.extents)
        hi = list(site.extents)
        for d, n in enumerate(dram.shape):
            v = _loop_of(dram, d)
            b = dram_base[d]
            if v is None:
                if not 0 <= b < n:
                    return  # the whole tile lies outside the tensor (padding only)
            elif v >= 0:
                lo[v] = max(lo[v], -b)
                hi[v] = min(hi[v], n - b)
            elif not (b >= 0 and b + sum(c * (e - 1) for c, e in zip(dram.coefs[d], site.extents, strict=True)) < n):
                raise EmitError(f"site {site.name}: strided DRAM dim {d} cannot be clamped")
        if any(h <= a for a, h in zip(lo, hi, strict=True)):
            return
        s_off, s_str = _flat(sram, sram_base)
        s_off += _dot(lo, s_str)
        ext = [h - a for a, h in zip(lo, hi, strict=True)]
        name = dram_name(dram.buffer)
        name = self.names.get(name, name)
        view = self.views.get(name)
        if view is None:
            d_off, d_str = _flat(dram, dram_base)
            pieces = [(d_off + _dot(lo, d_str), 0, ext, list(d_str), s_str)]
        else:  # the tensor lives in another one (a reshape, shuffle or concat slice): address that one
            if tuple(dram.shape) != shape_of(view):  # the template splits an axis (a conv's groups)
                try:
                    view = compose(reshape(name, dram.shape), view)
                except NotAView as e:
                    raise EmitError(f"site {site.name}: {name} read as {tuple(dram.shape)}: {e}") from None
            pieces = view_pieces(view, dram.coefs, dram_base, lo, ext, s_str)
            name = view.base
        for d_off, s_extra, p_ext, p_dstr, p_sstr in pieces:
            self._dma_copy(name, copy_plan(p_ext, p_dstr, p_sstr), d_off, s_off + s_extra, sram, load)
        if load:
            self._record_load(sram, tuple(sram_base), dram, dram_base, lo, hi)

    def _dma_copy(self, name: str, dims: list, d_off: int, s_off: int, sram: Access, load: bool) -> None:
        """DMA descriptors (or on-chip copies, for a resident tensor) for one strided block."""
        resident = self.resident.get(name)
        tensor = -1 if resident else self.asm.tensor_index(name)
        dtype = resident.dtype if resident else self.asm.tensors[tensor].dtype
        itemsize = dtype.itemsize
        cls = isa.DmaLoad if load else isa.DmaStore
        for (od, osr), inner in split_outer(dims):
            shape, dstr = pad3(inner, 0)
            _, sstr = pad3(inner, 1)
            tile_addr = self.addr[sram.buffer] + (s_off + osr) * itemsize
            if resident:  # an on-chip intermediate (-fusion=2): the vector engine copies within SRAM
                region_addr = resident.addr + (d_off + od) * itemsize
                src, s_st, dst, d_st = (region_addr, dstr, tile_addr, sstr) if load else (tile_addr, sstr,
                                                                                          region_addr, dstr)
                self._emit(isa.VecUnary(shape, dst, d_st, src, s_st, dtype, isa.Opcode.VCOPY))
            else:
                self._emit(cls(tensor, d_off + od, tile_addr, dtype, shape, dstr, sstr))

    def _record_load(self, sram: Access, sram_base, dram: Access, dram_base, lo, hi) -> None:
        """Remember the loaded tile's data-holding box and its global origin per dim.

        A dim that follows a loop takes the clamped loop range; a dim of extent one
        (no loop) lines up with the DRAM dim of the same axis name when the load changes
        the layout (a folded transform), else with the DRAM dim in the same trailing
        position (the copy keeps the tensor's dim order; pipeline versions lead on the SRAM side).
        """
        t_lo, t_hi, origin = [], [], []
        shift = len(dram.shape) - len(sram.shape)
        role = self.roles.get(sram.buffer, "")
        sram_axes, dram_axes = self.axes.get(role, ""), self.dram_axes.get(role, "")
        for d in range(len(sram.shape)):
            v = _loop_of(sram, d)
            if v is not None and v >= 0:
                t_lo.append(lo[v])
                t_hi.append(hi[v])
                origin.append(next((dram_base[dd] for dd in range(len(dram.shape)) if _loop_of(dram, dd) == v), None))
                continue
            t_lo.append(0)
            t_hi.append(1)
            dd = d + shift
            a = d - (len(sram.shape) - len(sram_axes))
            if dram_axes and len(dram_axes) == len(dram.shape) and 0 <= a < len(sram_axes):
                dd = dram_axes.find(sram_axes[a])
            origin.append(dram_base[dd] if 0 <= dd < len(dram.shape) and _loop_of(dram, dd) is None else None)
        self.tiles[(sram.buffer, sram_base)] = _Tile(tuple(t_lo), tuple(t_hi), tuple(origin))

    # ------------------------------------------------------------- validity
    def _loop_ranges(self, ev: Event, operands: Sequence[int]) -> list[list[int]]:
        """Per inner loop ``[lo, hi)``: the data-holding part of the tiles ``operands`` read."""
        ranges = [[0, n] for n in ev.site.extents]
        for ai in operands:
            acc = ev.site.accesses[ai]
            tile = self.tiles.get((acc.buffer, tuple(ev.bases[ai])))
            if tile is None:
                continue
            for d in range(len(acc.shape)):
                v = _loop_of(acc, d)
                if v is not None and v >= 0:
                    ranges[v][0] = max(ranges[v][0], tile.lo[d])
                    ranges[v][1] = min(ranges[v][1], tile.hi[d])
        return ranges

    # ------------------------------------------------------------ reductions
    def _zero(self, ev: Event) -> None:
        (wi, w), = [(i, a) for i, a in enumerate(ev.site.accesses) if a.is_write]
        self.zeroed.add((w.buffer, tuple(ev.bases[wi])))

    def _no_op(self, ev: Event) -> None:
        """Pool instructions initialise their own output; the TIR init block needs nothing."""

    def _first_write(self, acc: Access, base: Sequence[int]) -> bool:
        key = (acc.buffer, tuple(base))
        if key in self.zeroed:
            self.zeroed.discard(key)
            return True
        return False

    def _operand(self, ev: Event, role: str) -> _Operand:
        for i, a in enumerate(ev.site.accesses):
            if (role == Role.OUT and a.is_write) or (not a.is_write and self.roles.get(a.buffer) == role):
                return _Operand(a, tuple(ev.bases[i]), self.axes[role], self.tiles.get((a.buffer, tuple(ev.bases[i]))))
        raise EmitError(f"site {ev.site.name}: no {role} operand among {[a.buffer for a in ev.site.accesses]}")

    def _matmul(self, ev: Event) -> None:
        a, b, c = (self._operand(ev, r) for r in (Role.A, Role.B, Role.OUT))
        ranges = self._loop_ranges(ev, [a.index_in(ev), b.index_in(ev)])
        m0, m1 = a.range("M", ranges)
        k0, k1 = a.range("K", ranges)
        bk0, bk1 = b.range("K", ranges)
        n0, n1 = b.range("N", ranges)
        k0, k1 = max(k0, bk0), min(k1, bk1)
        a_off = a.offset + m0 * a.stride("M") + k0 * a.stride("K")
        b_off = b.offset + k0 * b.stride("K") + n0 * b.stride("N")
        c_off = c.offset + m0 * c.stride("M") + n0 * c.stride("N")
        self._emit(isa.MatMul(
            self._sram_addr(a.acc, a_off), (a.stride("M"), a.stride("K")), self._sram_addr(b.acc, b_off),
            (b.stride("K"), b.stride("N")), self._sram_addr(c.acc, c_off), (c.stride("M"), c.stride("N")),
            m1 - m0, n1 - n0, k1 - k0, DType.from_str(a.acc.dtype), not self._first_write(c.acc, c.base)))
        self._record(c, {"M": (m0, m1), "N": (n0, n1)})

    def _spatial(self, ev: Event, data: _Operand, out: _Operand, kernel, strides, dilation, padding,
                 out_hw) -> list[tuple[int, int, int, int, int]]:
        """Per spatial axis: (first valid input row, valid rows, outputs, pad before, pad after)."""
        tile = data.tile
        if tile is None:
            raise EmitError(f"site {ev.site.name}: input tile was not loaded before use")
        res = []
        for i, axis in enumerate("HW"):
            dim = data.dim(axis)
            lo, hi, g0 = tile.lo[dim], tile.hi[dim], tile.origin[dim]
            if g0 is None:
                raise EmitError(f"site {ev.site.name}: input tile has no global origin")
            first_out = (g0 + padding[i]) // strides[i]
            n_out = min(out.extent(axis, ev), out_hw[i] - first_out)
            span = (n_out - 1) * strides[i] + (kernel[i] - 1) * dilation[i] + 1
            res.append((lo, hi - lo, n_out, lo, max(0, span - hi)))
        return res

    def _conv(self, ev: Event) -> None:
        spec = self.spec
        assert isinstance(spec, Conv2dSpec)
        d, w, o = (self._operand(ev, r) for r in (Role.DATA, Role.WEIGHT, Role.OUT))
        ranges = self._loop_ranges(ev, [d.index_in(ev), w.index_in(ev)])
        (h_lo, in_h, out_h, pt, pb), (w_lo, in_w, out_w, pl, pr) = self._spatial(
            ev, d, o, spec.kernel, spec.strides, spec.dilation, spec.padding, (spec.out.dim("H"), spec.out.dim("W")))
        o_lo, o_hi = w.range("O", ranges)
        c_lo, c_hi = w.range("I", ranges)
        oc, ic = o_hi - o_lo, c_hi - c_lo
        d_off = d.offset + h_lo * d.stride("H") + w_lo * d.stride("W") + c_lo * d.stride("C")
        w_off = w.offset + o_lo * w.stride("O") + c_lo * w.stride("I")
        o_off = o.offset + o_lo * o.stride("C")
        groups = 1
        if "G" in o.axes:
            g_lo, g_hi = o.range("G", ranges)
            groups = g_hi - g_lo
            d_off += g_lo * d.stride("G")
            w_off += g_lo * w.stride("G")
            o_off += g_lo * o.stride("G")
            whole = (d.stride("G") == ic * d.stride("C") and w.stride("G") == oc * w.stride("O")
                     and o.stride("G") == oc * o.stride("C"))
            if groups > 1 and not whole:
                raise EmitError(f"site {ev.site.name}: a multi-group tile must hold whole groups")
        if getattr(self.tile, "engine", ConvEngine.TENSOR) == ConvEngine.VECTOR:
            self._dwconv(ev, d, w, o, d_off, w_off, o_off, groups, ic, oc, (in_h, in_w, out_h, out_w),
                         (pt, pl, pb, pr))
        else:
            self._emit(isa.Conv(
                self._sram_addr(d.acc, d_off), (d.stride("C"), d.stride("H"), d.stride("W")), ic * groups, in_h,
                in_w, self._sram_addr(w.acc, w_off), (w.stride("O"), w.stride("I"), w.stride("H"), w.stride("W")),
                self._sram_addr(o.acc, o_off), (o.stride("C"), o.stride("H"), o.stride("W")), oc * groups, out_h,
                out_w, spec.kernel[0], spec.kernel[1], spec.strides[0], spec.strides[1], spec.dilation[0],
                spec.dilation[1], pt, pl, pb, pr, groups, DType.from_str(d.acc.dtype),
                not self._first_write(o.acc, o.base), spec.pad_value))
        valid = {"C": (o_lo, o_hi), "H": (0, out_h), "W": (0, out_w)}
        if "G" in o.axes:
            valid["G"] = o.range("G", ranges)
        self._record(o, valid)

    def _dwconv(self, ev: Event, d: _Operand, w: _Operand, o: _Operand, d_off: int, w_off: int, o_off: int,
                groups: int, ic: int, oc: int, hw: tuple[int, int, int, int], pads: tuple[int, int, int, int]) -> None:
        """A depthwise tile on the vector engine: the groups of the tile are its channels."""
        spec = self.spec
        assert isinstance(spec, Conv2dSpec)
        if "G" not in o.axes or ic != 1 or oc != 1:
            raise EmitError(f"site {ev.site.name}: the vector engine computes depthwise tiles only "
                            f"(1 input and 1 output channel per group), got {ic} and {oc}")
        in_h, in_w, out_h, out_w = hw
        self._emit(isa.DwConv(
            self._sram_addr(d.acc, d_off), (d.stride("G"), d.stride("H"), d.stride("W")), in_h, in_w,
            self._sram_addr(w.acc, w_off), (w.stride("G"), w.stride("H"), w.stride("W")),
            self._sram_addr(o.acc, o_off), (o.stride("G"), o.stride("H"), o.stride("W")), groups, out_h, out_w,
            spec.kernel[0], spec.kernel[1], spec.strides[0], spec.strides[1], spec.dilation[0], spec.dilation[1],
            *pads, DType.from_str(d.acc.dtype), not self._first_write(o.acc, o.base), spec.pad_value))

    def _pool(self, ev: Event) -> None:
        spec = self.spec
        assert isinstance(spec, PoolSpec)
        d, o = self._operand(ev, Role.DATA), self._operand(ev, Role.OUT)
        ranges = self._loop_ranges(ev, [d.index_in(ev)])
        (h_lo, in_h, out_h, pt, pb), (w_lo, in_w, out_w, pl, pr) = self._spatial(
            ev, d, o, spec.kernel, spec.strides, (1, 1), spec.padding, (spec.out.dim("H"), spec.out.dim("W")))
        c_lo, c_hi = d.range("C", ranges)
        d_off = d.offset + h_lo * d.stride("H") + w_lo * d.stride("W") + c_lo * d.stride("C")
        o_off = o.offset + c_lo * o.stride("C")
        src = (self._sram_addr(d.acc, d_off), (d.stride("C"), d.stride("H"), d.stride("W")), in_h, in_w)
        dst = (self._sram_addr(o.acc, o_off), (o.stride("C"), o.stride("H"), o.stride("W")))
        (kh, kw), (sh, sw) = spec.kernel, spec.strides
        if separable(spec, self.tile, self.hw):  # rows' maxima into the scratch, then the columns of those
            c, rows, cols = scratch_shape(spec, self.tile)
            if self._scratch is None:
                self._scratch = self.asm.alloc(c * rows * cols * np.dtype(d.acc.dtype).itemsize, "pool_rows")
            strides = (rows * cols, cols, 1)
            self._pool_pass(src, (self._scratch, strides), c_hi - c_lo, (in_h, out_w), (1, kw), (1, sw),
                            (0, pl, 0, pr), d.acc.dtype)
            src = (self._scratch, strides, in_h, out_w)
            kw, sw, pl, pr = 1, 1, 0, 0
        self._pool_pass(src, dst, c_hi - c_lo, (out_h, out_w), (kh, kw), (sh, sw), (pt, pl, pb, pr), d.acc.dtype)
        self._record(o, {"C": (c_lo, c_hi), "H": (0, out_h), "W": (0, out_w)})

    def _pool_pass(self, src: tuple, dst: tuple, channels: int, out_hw: tuple[int, int], kernel: tuple[int, int],
                   strides: tuple[int, int], pads: tuple[int, int, int, int], dtype: str) -> None:
        """One pool instruction: ``src`` (address, strides, in_h, in_w) -> ``dst`` (address, strides)."""
        spec = self.spec
        assert isinstance(spec, PoolSpec)
        op = isa.Opcode.VMAXPOOL if spec.kind == PoolKind.MAX else isa.Opcode.VAVGPOOL
        fields = (*src, *dst, channels, *out_hw, *kernel, *strides, *pads, DType.from_str(dtype))
        if spec.pad_value is None:
            self._emit(isa.Pool(*fields, op, spec.count_include_pad))
        else:  # a folded constant pad: the padding reads its value
            self._emit(isa.PaddedMaxPool(*fields, isa.Opcode.VMAXPOOL_PAD, False, spec.pad_value))

    def _record_loops(self, acc: Access, base: tuple[int, ...], ranges: Sequence[Sequence[int]]) -> None:
        """Record a computed tile whose dims follow the site's loops (elementwise sites)."""
        lo, hi = [], []
        for d in range(len(acc.shape)):
            v = _loop_of(acc, d)
            ok = v is not None and v >= 0
            lo.append(ranges[v][0] if ok else 0)
            hi.append(ranges[v][1] if ok else 1)
        self.tiles[(acc.buffer, base)] = _Tile(tuple(lo), tuple(hi), (None,) * len(lo))

    def _record(self, op: _Operand, valid: dict[str, tuple[int, int]]) -> None:
        """Remember which part of a computed tile holds data (axes not named: extent 1)."""
        lo, hi = [0] * len(op.acc.shape), [1] * len(op.acc.shape)
        for axis, (a, b) in valid.items():
            lo[op.dim(axis)], hi[op.dim(axis)] = a, b
        self.tiles[(op.acc.buffer, op.base)] = _Tile(tuple(lo), tuple(hi), (None,) * len(lo))

    # --------------------------------------------------------------- vector
    def _epilogue(self, ev: Event) -> None:
        """One epilogue step as vector instructions of at most three dims (the ISA's form) each, over
        only the data-holding part of its source tile (an overhanging edge tile's rest is garbage)."""
        step = self.spec.epilogue[ev.site.epi]
        (oi, o), (si, s), other = self._epi_accesses(ev, step)
        ranges = self._loop_ranges(ev, (si,))
        terms = [(o, ev.bases[oi]), (s, ev.bases[si])]
        if other is not None:
            terms.append((other[1], ev.bases[other[0]]))
        lo = [r[0] for r in ranges]
        flat = [_flat(acc, base) for acc, base in terms]
        offsets = [off + _dot(lo, st) for off, st in flat]
        ext = [r[1] - r[0] for r in ranges]
        if any(e <= 0 for e in ext):
            return
        dtype = DType.from_str(o.dtype)
        for offs, inner in split_outer(merge_dims(ext, *(st for _, st in flat))):
            shape, dst_st = pad3(inner, 0)
            _, src_st = pad3(inner, 1)
            dst = (self._sram_addr(o, offsets[0] + offs[0]), dst_st)
            src = (self._sram_addr(s, offsets[1] + offs[1]), src_st)
            x = None if other is None else (self._sram_addr(other[1], offsets[2] + offs[2]), pad3(inner, 2)[1])
            self._emit(_epi_instr(step, shape, dst, src, x, dtype, s.dtype))
        self._record_loops(o, tuple(ev.bases[oi]), ranges)

    def _epi_accesses(self, ev: Event, step: Epilogue) -> tuple[tuple[int, Access], tuple[int, Access],
                                                                tuple[int, Access] | None]:
        """The written tile, the source tile and the step's operand tile (None: a unary step) of an epilogue
        site, each with its access index. The operand is told from the source by its role, as the sites
        read both in no fixed order; ``x op x`` reads one tile as both."""
        reads = [(i, a) for i, a in enumerate(ev.site.accesses) if not a.is_write]
        (oi, o), = [(i, a) for i, a in enumerate(ev.site.accesses) if a.is_write]
        other = next(((i, a) for i, a in reads if self.roles.get(a.buffer) == Role.operand(ev.site.epi)), None)
        if other is None and step.kind.binary:  # ``x op x``: both operands read the same tile
            other = reads[-1]
        rest = [(i, a) for i, a in reads if other is None or i != other[0]]
        return (oi, o), rest[0] if rest else other, other

    def _row(self, ev: Event) -> None:
        """One step of a row-wise operator (:func:`~tvm_npu.tir_schedules.rowwise.row_steps`):
        its sources found by name, per-row values broadcast through a zero stride."""
        spec = self.spec
        assert isinstance(spec, RowwiseSpec)
        step = row_steps(spec)[ev.site.epi]
        (oi, o), = [(i, a) for i, a in enumerate(ev.site.accesses) if a.is_write]
        names = {Role.DATA: DATA}  # parameters' roles are their names in the step table

        def source(name: str) -> tuple[int, Access]:
            for i, a in enumerate(ev.site.accesses):
                role = self.roles.get(a.buffer)
                if not a.is_write and a.buffer != o.buffer and names.get(role, role) == name:
                    return i, a
            raise EmitError(f"site {ev.site.name}: no source {name!r} among {[a.buffer for a in ev.site.accesses]}")

        srcs = [source(step.src)] + ([source(step.other)] if step.other is not None else [])
        ranges = self._loop_ranges(ev, [i for i, _ in srcs])
        lo = [r[0] for r in ranges]
        ext = [r[1] - r[0] for r in ranges]
        if any(e <= 0 for e in ext):
            return
        flat = [_flat(a, ev.bases[i]) for i, a in [(oi, o), *srcs]]
        offs = [off + _dot(lo, st) for off, st in flat]
        strides = [st for _, st in flat]
        dtype = DType.from_str(o.dtype)
        addr = [self._sram_addr(a, off) for a, off in zip([o] + [a for _, a in srcs], offs, strict=True)]
        if step.reduce:  # a row loop and the reduced loop (along which the destination does not move)
            # (TIR drops unit loops: no row loop is a one-row tile, no reduced loop a one-column row)
            # (a loop of one iteration is neither: the row loop of a one-row tile has a zero stride too)
            red = [v for v, st in enumerate(strides[0]) if st == 0 and ext[v] > 1]
            rows = [v for v in range(len(ext)) if v not in red and ext[v] > 1]
            if len(red) > 1 or len(rows) > 1:
                raise EmitError(f"site {ev.site.name}: a row reduction needs at most one row and one reduced loop, "
                                f"got extents {ext} with destination strides {strides[0]}")
            n, dst_r, src_r = (ext[rows[0]], strides[0][rows[0]], strides[1][rows[0]]) if rows else (1, 0, 0)
            cols, src_k = (ext[red[0]], strides[1][red[0]]) if red else (1, 0)
            self._emit(isa.VecReduce((1, n, cols), addr[0], (0, dst_r), addr[1], (0, src_r, src_k), dtype, step.op))
        else:
            for inner_offs, inner in split_outer(merge_dims(ext, *strides)):
                shape, dst_st = pad3(inner, 0)
                _, src_st = pad3(inner, 1)
                dst = addr[0] + inner_offs[0] * dtype.itemsize
                src = addr[1] + inner_offs[1] * dtype.itemsize
                if step.op == isa.Opcode.VSCALE:
                    instr = isa.VecScale(shape, dst, dst_st, src, src_st, dtype, step.scale, step.shift)
                elif step.op == isa.Opcode.VPOW:
                    instr = isa.VecPow(shape, dst, dst_st, src, src_st, dtype, step.scale)
                elif step.op == isa.Opcode.VCLIP:
                    instr = isa.VecClip(shape, dst, dst_st, src, src_st, dtype, step.scale, step.shift)
                elif step.other is None:
                    instr = isa.VecUnary(shape, dst, dst_st, src, src_st, dtype, step.op)
                else:
                    _, x_st = pad3(inner, 2)
                    instr = isa.VecBinary(shape, dst, dst_st, src, src_st, addr[2] + inner_offs[2] * dtype.itemsize,
                                          x_st, dtype, step.op)
                self._emit(instr)
        self._record_loops(o, tuple(ev.bases[oi]), ranges)


#: An SRAM operand of a vector instruction: its address and element strides in the ISA's 3-D form.
_VecOperand = tuple[int, tuple[int, int, int]]


def _epi_instr(step: Epilogue, shape: tuple[int, int, int], dst: _VecOperand, src: _VecOperand,
               x: _VecOperand | None, dtype: DType, src_dtype: str) -> isa.Instruction:
    """The vector instruction computing ``dst = step(src[, x])`` over one chunk (``x``: the step's operand,
    None for a unary step). Steps with parameters, mixed types or an operand order of their own have
    instructions of their own; the rest are a generic unary or binary operation by opcode."""
    kind, opcode = step.kind, RULES[step.kind].opcode
    if kind == EpiKind.CLIP:
        return isa.VecClip(shape, *dst, *src, dtype, step.lo, step.hi)
    if kind in (EpiKind.HSIGMOID, EpiKind.HSWISH):
        return isa.VecHardSigmoid(shape, *dst, *src, dtype, *step.floats, opcode)
    if kind == EpiKind.POW:
        return isa.VecPow(shape, *dst, *src, dtype, step.floats[0])
    if kind == EpiKind.SCALE:
        return isa.VecScale(shape, *dst, *src, dtype, *step.floats)
    if kind == EpiKind.CAST:
        return isa.VecCast(shape, *dst, *src, DType.from_str(src_dtype), dtype)
    if kind in (EpiKind.QADD, EpiKind.QADD_R):
        lo, hi = step.ints
        # QADD_R: the operand is the instruction's first (offset) term
        a, b = (x, src) if kind == EpiKind.QADD_R else (src, x)
        return isa.VecQAdd(shape, *dst, *a, *b, *step.floats, lo, hi, DType.from_str(src_dtype), dtype)
    if kind == EpiKind.QMUL:  # ints (zero_a, zero_b, zero_y, lo, hi), floats (ratio,)
        return isa.VecQMul(shape, *dst, *src, *x, *step.ints[:2], step.floats[0], *step.ints[2:],
                           DType.from_str(src_dtype), dtype)
    if kind == EpiKind.REQUANT:
        zero_point, lo, hi = step.ints
        wide = isa.Opcode.VREQUANT64 if DType.from_str(src_dtype) == DType.INT64 else isa.Opcode.VREQUANT
        return isa.VecRequant(shape, *dst, *src, *x, zero_point, lo, hi, dtype, wide)
    if kind == EpiKind.LUT:  # the operand is the whole table (its access does not move with the tile)
        return isa.VecLut(shape, *dst, *src, x[0], DType.from_str(src_dtype), dtype)
    if not kind.binary:
        return isa.VecUnary(shape, *dst, *src, dtype, opcode)
    xaddr, x_st = x
    nonzero = [i for i, st in enumerate(x_st) if st]
    if kind == EpiKind.BIAS and len(nonzero) == 1 and x_st[nonzero[0]] == 1:  # a per-channel vector
        return isa.VecBiasAdd(shape, *dst, *src, xaddr, nonzero[0], dtype)
    return isa.VecBinary(shape, *dst, *src, xaddr, x_st, dtype, opcode)


def _one_read_one_write(accesses: Sequence[Access]) -> tuple[tuple[int, Access], tuple[int, Access]]:
    reads = [(i, a) for i, a in enumerate(accesses) if not a.is_write]
    writes = [(i, a) for i, a in enumerate(accesses) if a.is_write]
    if len(reads) != 1 or len(writes) != 1:
        raise EmitError(f"a DMA site needs one source and one destination, got {len(reads)} and {len(writes)}")
    return reads[0], writes[0]
