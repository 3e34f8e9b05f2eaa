"""Matmul / dense template: (M, N, K) tiles, one operand stationary, the other streamed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from tvm import s_tir, te
from tvm_npu.simulator import timing

from tvm_npu.config import ACCUMULATOR, CompilerOptions, DType, HardwareConfig
from tvm_npu.core.ops import Broadcast, MatmulSpec
from tvm_npu.core.tiles import MatmulTile, Order

from .common import (
    Scheduled,
    acc_dtype,
    attach,
    buffer_name,
    epilogue_stages,
    mark,
    operand_name,
    pipeline,
    pipeline_outputs,
    placeholder,
    result_store,
    schedule_epilogue,
    split,
)
from .contract import SRAM_SCOPE, Role, SiteKind
from .cost import (
    NO_COPY,
    Copy,
    Pipelining,
    Step,
    axis_tiles,
    copy_cost,
    epilogue_sizes,
    sum_ceil,
    tile_extents,
    vector_cycles,
)
from .cost import ceil_div as _ceil
from .kind import OpKind, epilogue_text, register

#: A tile along one axis: (start, extent), as :func:`~.cost.axis_tiles` gives them.
_Span = tuple[int, int]


def effective_order(spec: MatmulSpec, tile: MatmulTile) -> Order:
    """The loop order the template uses: the requested one, swapped when its pipelined
    (inner) loop would have a single iteration and the other loop has several."""
    m, n, _ = spec.mnk
    n_m, n_n = _ceil(m, tile.tm), _ceil(n, tile.tn)
    if tile.order == Order.A_STATIONARY and n_n == 1 < n_m:
        return Order.B_STATIONARY
    if tile.order == Order.B_STATIONARY and n_m == 1 < n_n:
        return Order.A_STATIONARY
    return tile.order


def compute(spec: MatmulSpec) -> tuple[list[te.Tensor], te.Tensor]:
    """TE definition: inputs (a, b, epilogue operands) and the final output."""
    k = spec.mnk[2]
    a = placeholder(spec.a)
    # one tensor as both operands (x @ x): a second TIR buffer of its own name, mapped back by dram_name
    b = placeholder(spec.b, name=operand_name(spec.b, "b") if spec.b.name == spec.a.name else None)
    nb_a, nb_b = len(spec.a.shape) - 2, len(spec.b.shape) - 2
    out_shape = tuple(spec.out.shape)
    rk = te.reduce_axis((0, k), name="k")
    adt = acc_dtype(spec.a.dtype)

    def body(*idx):
        batch, i, j = idx[:-2], idx[-2], idx[-1]
        av = a[(*batch[len(batch) - nb_a:], i, rk)]
        bidx = (j, rk) if spec.transpose_b else (rk, j)
        bv = b[(*batch[len(batch) - nb_b:], *bidx)]
        return te.sum(av.astype(adt) * bv.astype(adt), axis=rk)

    acc = te.compute(out_shape, body, name="acc" if spec.epilogue else spec.out.name)
    stages, operands = epilogue_stages(spec, acc, lambda idx: idx[-1])
    final = stages[-1] if stages else acc
    return [a, b, *operands.values()], final


class _StepCopies:
    """The copies of :meth:`Matmul.steps`: the boxes of A, B, the output and the epilogue operands a step
    moves in batch ``bi`` (any number of batch dims; a 2-D operand is shared by every batch)."""

    def __init__(self, spec: MatmulSpec, hw: HardwareConfig, a_stationary: bool) -> None:
        self.spec, self.hw, self.dt = spec, hw, spec.a.dtype
        self.a_stationary = a_stationary
        self.batch_shape = spec.out.shape[:-2]

    def _box(self, shape: Sequence[int], bi: int, lo: tuple[int, ...], ext: tuple[int, ...]) -> Copy:
        """Copy cost of an operand's ``(lo, ext)`` tile in batch ``bi``."""
        batch_shape = self.batch_shape
        lead = len(shape) - 2
        idx = tuple(int(i) for i in np.unravel_index(bi, batch_shape))[len(batch_shape) - lead:] if lead else ()
        return copy_cost(self.hw, self.dt, shape, (*idx, *lo), (*(1,) * lead, *ext))

    def a_box(self, bi: int, mt: _Span, kt: _Span) -> Copy:
        return self._box(self.spec.a.shape, bi, (mt[0], kt[0]), (mt[1], kt[1]))

    def b_box(self, bi: int, nt: _Span, kt: _Span) -> Copy:
        lo, ext = ((nt[0], kt[0]), (nt[1], kt[1])) if self.spec.transpose_b else ((kt[0], nt[0]), (kt[1], nt[1]))
        return self._box(self.spec.b.shape, bi, lo, ext)

    def out_box(self, bi: int, mt: _Span, nt: _Span, dtype: DType | None = None) -> Copy:
        """The output tile's box (of an output-shaped tensor of ``dtype``, default the output's)."""
        out, batch_shape = self.spec.out, self.batch_shape
        lead = len(batch_shape)
        idx = tuple(int(i) for i in np.unravel_index(bi, batch_shape)) if lead else ()
        return copy_cost(self.hw, out.dtype if dtype is None else dtype, out.shape, (*idx, mt[0], nt[0]),
                         (*(1,) * lead, mt[1], nt[1]))

    def loads(self, bi: int, mt: _Span, nt: _Span, kt: _Span, new_outer: bool,
              streamed_k: bool) -> tuple[Copy, Copy | None]:
        """A step's loads, and those of its outer loop's stationary operand (None: none at this step)."""
        if streamed_k:
            return self.a_box(bi, mt, kt) + self.b_box(bi, nt, kt), None
        if self.a_stationary:
            return self.b_box(bi, nt, kt), self.a_box(bi, mt, kt) if new_outer else None
        return self.a_box(bi, mt, kt), self.b_box(bi, nt, kt) if new_outer else None

    def epi_loads(self, bi: int, mt: _Span, nt: _Span) -> Copy:
        """The epilogue operands of an output tile: per-channel ones along N, whole ones as the output."""
        operands = NO_COPY
        for e in self.spec.epilogue:
            if e.operand is None or e.broadcast == Broadcast.TABLE:  # loaded once (cost.with_table_loads)
                continue
            if e.broadcast == Broadcast.CHANNEL:
                operands += copy_cost(self.hw, e.operand.dtype, (e.operand.size,), (nt[0],), (nt[1],))
            else:
                operands += self.out_box(bi, mt, nt, e.operand.dtype)
        return operands


class Matmul(OpKind):
    """Matmul / dense (2-D and batched, ``b`` optionally transposed) on the tensor engine."""

    spec_type = MatmulSpec
    tile_type = MatmulTile
    name = "matmul"

    # ---------------------------------------------------------------- template
    def pipelining(self, spec: MatmulSpec, tile: MatmulTile) -> Pipelining:
        """The K loop when the reduction is streamed, else the inner output-tile loop (where the
        epilogue gets a stage of its own, beside the array)."""
        m, n, k = spec.mnk
        streamed = min(tile.tk, k) < k
        inner = _ceil(n, tile.tn) if effective_order(spec, tile) == Order.A_STATIONARY else _ceil(m, tile.tm)
        own = inner > 1 and tile.stages > 1 and (streamed or bool(spec.epilogue))
        return Pipelining(streamed or inner > 1, streamed, own)

    def definition(self, spec: MatmulSpec, tile: MatmulTile) -> tuple:
        return compute(spec)

    def schedule(self, spec: MatmulSpec, tile: MatmulTile) -> Scheduled:
        """Tile (M, N, K), stage A/B tiles into SRAM, accumulate in SRAM, fuse the epilogue."""
        inputs, final = compute(spec)
        sch = s_tir.Schedule(te.create_prim_func([*inputs, final]))
        res = Scheduled(spec, tile, sch,
                        axes={Role.A: "MK", Role.B: "NK" if spec.transpose_b else "KN", Role.OUT: "MN"})
        k = spec.mnk[2]
        blk = sch.get_sblock("acc" if spec.epilogue else spec.out.name)
        loops = sch.get_loops(blk)
        nb = len(loops) - 3
        batch, (i, j, kk) = loops[:nb], loops[nb:]
        mo, mi = split(sch, i, tile.tm)
        no, ni = split(sch, j, tile.tn)
        ko = None
        if tile.tk < k:
            ko, kk = split(sch, kk, tile.tk)
        outer = (mo, no) if effective_order(spec, tile) == Order.A_STATIONARY else (no, mo)
        sch.reorder(*batch, *outer, *([ko] if ko else []), mi, ni, kk)
        inner_out = outer[-1]

        a_s = sch.cache_read(blk, 0, SRAM_SCOPE)
        b_s = sch.cache_read(blk, 1, SRAM_SCOPE)
        res.roles[buffer_name(sch, a_s)] = Role.A
        res.roles[buffer_name(sch, b_s)] = Role.B
        res.loads += [attach(sch, a_s, ko if ko else mo, SiteKind.DMA),
                      attach(sch, b_s, ko if ko else no, SiteKind.DMA)]

        store = result_store(sch, spec, blk)
        init = sch.decompose_reduction(blk, ko if ko else mi)
        mark(sch, sch.blockize(sch.get_loops(init)[nb + 2]), SiteKind.ZERO)
        mark(sch, sch.blockize(mi), SiteKind.MATMUL)
        p = self.pipelining(spec, tile)
        schedule_epilogue(sch, res, blk, inner_out, store, own_result=ko is not None or p.epilogue_stage)

        pipe = ko if p.streamed_reduction else inner_out
        late = (res.epilogue, res.operand_loads) if p.epilogue_stage and not p.streamed_reduction else ((), ())
        pipeline(sch, pipe, tile.stages, res.loads, res.stores, *late)
        if p.epilogue_stage and p.streamed_reduction:
            pipeline_outputs(sch, inner_out, ko, res)
        return res

    # -------------------------------------------------------------- tile space
    def axes(self, spec: MatmulSpec, hw: HardwareConfig, opts: CompilerOptions) -> dict[str, list]:
        m, n, k = spec.mnk
        return {"tm": tile_extents(m, hw.mac_rows, opts), "tn": tile_extents(n, hw.mac_cols, opts),
                "tk": tile_extents(k, hw.mac_rows, opts, limit=4), "order": list(Order),
                "stages": [opts.pipeline_stages]}

    def footprint(self, spec: MatmulSpec, tile: MatmulTile, hw: HardwareConfig) -> int:
        k = spec.mnk[2]
        tk = min(tile.tk, k)
        p = self.pipelining(spec, tile)
        streamed_k = p.streamed_reduction
        order = effective_order(spec, tile)
        s = tile.stages if p.pipelined else 1
        isz, acc = spec.a.dtype.itemsize, ACCUMULATOR[spec.a.dtype]
        a_v = s if (streamed_k or order == Order.B_STATIONARY) else 1
        b_v = s if (streamed_k or order == Order.A_STATIONARY) else 1
        own = p.epilogue_stage  # accumulator, result and epilogue operands double-buffered
        out_v = 2 if own else 1 if streamed_k else (2 if s > 1 else 1)
        buffers = [a_v * tile.tm * tk * isz, b_v * tk * tile.tn * isz]
        buffers += epilogue_sizes(spec, tile.tm * tile.tn, tile.tn, acc, 2 if own else 1 if streamed_k else s,
                                  out_v, streamed_k or own, acc_v=2 if own else 1)
        return sum(hw.align(x) for x in buffers)

    # -------------------------------------------------------------- cost model
    def steps(self, spec: MatmulSpec, tile: MatmulTile, hw: HardwareConfig) -> Iterator[Step]:
        """The steps of ``tile``'s loop nest in order, with their copies (:class:`_StepCopies`) and cycles."""
        m, n, k = spec.mnk
        dt = spec.a.dtype
        k_tiles = axis_tiles(k, min(tile.tk, k))
        m_tiles, n_tiles = axis_tiles(m, tile.tm), axis_tiles(n, tile.tn)
        a_stationary = effective_order(spec, tile) == Order.A_STATIONARY
        copies = _StepCopies(spec, hw, a_stationary)
        streamed_k = len(k_tiles) > 1
        last_k = len(k_tiles) - 1
        for bi in range(spec.batch):
            pairs = ([(mt, nt) for mt in m_tiles for nt in n_tiles] if a_stationary
                     else [(mt, nt) for nt in n_tiles for mt in m_tiles])
            prev = None
            slot = 0
            for mt, nt in pairs:
                key = mt if a_stationary else nt
                new_outer = key != prev
                slot = 0 if new_outer else slot + 1
                prev = key
                vec = vector_cycles(hw, spec, mt[1] * nt[1])
                store = copies.out_box(bi, mt, nt)
                for ki, kt in enumerate(k_tiles):
                    loads, stationary = copies.loads(bi, mt, nt, kt, new_outer, streamed_k)
                    last = ki == last_k
                    operands = copies.epi_loads(bi, mt, nt) if last else NO_COPY
                    tensor = timing.matmul_cycles(hw, mt[1], nt[1], kt[1], dt)
                    yield Step(loads, tensor, last, vec if last else 0, store if last else NO_COPY,
                               stationary, operands, ki if streamed_k else slot, slot)

    def compute_floor(self, spec: MatmulSpec, tile: MatmulTile, hw: HardwareConfig) -> int:
        m, n, k = spec.mnk
        tk = min(tile.tk, k)
        n_steps = _ceil(m, tile.tm) * _ceil(n, tile.tn) * _ceil(k, tk)
        work = sum_ceil(k, tk, hw.mac_rows) * sum_ceil(n, tile.tn, hw.mac_cols) * m * hw.mac_pass_cycles(spec.a.dtype)
        return spec.batch * (n_steps * hw.tensor_issue_cycles + work)

    def traffic_floor(self, spec: MatmulSpec, tile: MatmulTile, hw: HardwareConfig) -> float:
        extra = sum(e.operand.nbytes for e in spec.epilogue
                    if e.operand is not None and e.broadcast == Broadcast.FULL)
        m, n, k = spec.mnk
        n_m, n_n = _ceil(m, tile.tm), _ceil(n, tile.tn)
        streamed = min(tile.tk, k) < k
        order = effective_order(spec, tile)
        a_loads = n_n if (streamed or order == Order.B_STATIONARY) else 1
        b_loads = n_m if (streamed or order == Order.A_STATIONARY) else 1
        return (spec.a.nbytes * a_loads + spec.b.nbytes * b_loads + spec.out.nbytes + extra) / hw.dram_bytes_per_cycle

    def outer_count(self, spec: MatmulSpec, tile: MatmulTile) -> int:
        m, n, _ = spec.mnk
        return _ceil(m, tile.tm) if effective_order(spec, tile) == Order.A_STATIONARY else _ceil(n, tile.tn)

    def step_count(self, spec: MatmulSpec, tile: MatmulTile) -> int:
        m, n, k = spec.mnk
        return spec.batch * _ceil(m, tile.tm) * _ceil(n, tile.tn) * _ceil(k, min(tile.tk, k))

    # ----------------------------------------------------------------- reports
    def describe(self, spec: MatmulSpec) -> str:
        m, n, k = spec.mnk
        return f"matmul {m}x{n}x{k}" + epilogue_text(spec)


KIND = register(Matmul())
