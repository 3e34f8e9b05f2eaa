"""Matmul / dense template: (M, N, K) tiles, one operand stationary, the other streamed."""

from __future__ import annotations

from tvm import s_tir, te

from .common import (
    SRAM,
    Scheduled,
    acc_dtype,
    attach,
    buffer_name,
    epilogue_stages,
    extent,
    mark,
    pipeline,
    placeholder,
    result_store,
    schedule_epilogue,
    split,
)
from .ops import MatmulSpec
from .params import MatmulTile, Order


def compute(spec: MatmulSpec) -> tuple[list[te.Tensor], te.Tensor]:
    """TE definition: inputs (a, b, epilogue operands) and the final output."""
    k = spec.mnk[2]
    a = placeholder(spec.a)
    b = placeholder(spec.b)
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


def schedule(spec: MatmulSpec, tile: MatmulTile) -> Scheduled:
    """Tile (M, N, K), stage A/B tiles into SRAM, accumulate in SRAM, fuse the epilogue."""
    inputs, final = compute(spec)
    sch = s_tir.Schedule(te.create_prim_func([*inputs, final]))
    res = Scheduled(spec, tile, sch, axes={"a": "MK", "b": "NK" if spec.transpose_b else "KN", "out": "MN"})
    m, n, k = spec.mnk
    blk = sch.get_sblock("acc" if spec.epilogue else spec.out.name)
    loops = sch.get_loops(blk)
    nb = len(loops) - 3
    batch, (i, j, kk) = loops[:nb], loops[nb:]
    mo, mi = split(sch, i, tile.tm)
    no, ni = split(sch, j, tile.tn)
    ko = None
    if tile.tk < k:
        ko, kk = split(sch, kk, tile.tk)
    order = tile.order
    n_m, n_n = -(-m // tile.tm), -(-n // tile.tn)
    if order == Order.A_STATIONARY and n_n == 1 < n_m:
        order = Order.B_STATIONARY  # pipeline the loop that has iterations
    elif order == Order.B_STATIONARY and n_m == 1 < n_n:
        order = Order.A_STATIONARY
    outer = (mo, no) if order == Order.A_STATIONARY else (no, mo)
    sch.reorder(*batch, *outer, *([ko] if ko else []), mi, ni, kk)
    inner_out = outer[-1]

    a_s = sch.cache_read(blk, 0, SRAM)
    b_s = sch.cache_read(blk, 1, SRAM)
    res.roles[buffer_name(sch, a_s)] = "a"
    res.roles[buffer_name(sch, b_s)] = "b"
    res.loads += [attach(sch, a_s, ko if ko else mo, "dma"), attach(sch, b_s, ko if ko else no, "dma")]

    store = result_store(sch, spec, blk)
    init = sch.decompose_reduction(blk, ko if ko else mi)
    mark(sch, sch.blockize(sch.get_loops(init)[nb + 2]), "zero")
    mark(sch, sch.blockize(mi), "matmul")
    schedule_epilogue(sch, res, blk, inner_out, store, own_result=ko is not None)

    pipe = ko if ko is not None and extent(sch, ko) > 1 else inner_out
    pipeline(sch, pipe, tile.stages, res.loads, res.stores)
    return res
