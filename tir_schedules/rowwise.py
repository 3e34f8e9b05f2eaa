"""Row-wise template: softmax and layer norm over the last axis, whole rows per tile.

A row-wise operator needs every element of a row before it can write any result (the
row's max, sum, mean or variance), so a tile is a block of whole rows: the data is viewed
as ``rows x cols``, a tile of ``RowTile.rows`` rows is loaded, worked on by a fixed
sequence of vector instructions (:func:`row_steps`) and stored. The steps are:

* softmax: ``m = rowmax(x)``, ``d = x - m``, ``e = exp(d)``, ``s = rowsum(e)``,
  ``r = 1/s``, ``y = e * r`` (numerically stable: every exponent is <= 0);
* layer norm: ``mean = rowsum(x) / n``, ``d = x - mean``, ``var = rowsum(d * d) / n``,
  ``r = rsqrt(var + eps)``, ``y = d * r [* gamma] [+ beta]``.

Per-row values (max, sum, ...) are broadcast back over the row by a zero element stride,
which every vector source allows. Elementwise consumers fused at ``-fusion>=1`` follow
as ordinary epilogue steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tvm import s_tir, te, tirx
from tvm_npu.simulator import isa, timing

from tvm_npu.config import CompilerOptions, HardwareConfig
from tvm_npu.core.ops import Broadcast, RowKind, RowwiseSpec
from tvm_npu.core.tiles import RowTile

from .common import Scheduled, attach, buffer_name, epilogue_stages, mark, operand_name, pipeline, placeholder, split
from .contract import SRAM_SCOPE, Role, SiteKind
from .cost import Copy, Pipelining, Step, copy_cost, step_itemsizes, tile_extents
from .cost import ceil_div as _ceil
from .cost import vector_cycles as epilogue_cycles
from .kind import OpKind, register

#: The names of a row-wise operator's inputs in its step table (the stages are ``rw0``, ``rw1``, ...).
DATA, GAMMA, BETA = "x", "gamma", "beta"
#: SRAM roles of the gamma / beta tiles (the data tile has :attr:`Role.DATA`).
GAMMA_ROLE, BETA_ROLE = "gamma", "beta"


@dataclass(frozen=True)
class RowStep:
    """One vector instruction of the sequence: ``op`` on ``src`` (and ``other``).

    ``row``: the result is one value per row (a reduction, or arithmetic on per-row values);
    else a full tile. ``scale``/``shift`` parameterise VSCALE. Sources name the data
    (:data:`DATA`), gamma / beta or an earlier stage (``rw<k>``).
    """

    op: isa.Opcode
    src: str
    other: str | None = None
    row: bool = False
    scale: float = 1.0
    shift: float = 0.0

    @property
    def reduce(self) -> bool:
        return self.op in isa.VecReduce.OPS


def row_steps(spec: RowwiseSpec) -> tuple[RowStep, ...]:
    """The instruction sequence of one tile (the template's stages ``rw<i>``, in order)."""
    op = isa.Opcode
    if spec.kind == RowKind.SOFTMAX:
        return (RowStep(op.VRMAX, DATA, row=True), RowStep(op.VSUB, DATA, "rw0"), RowStep(op.VEXP, "rw1"),
                RowStep(op.VRSUM, "rw2", row=True), RowStep(op.VRECIP, "rw3", row=True),
                RowStep(op.VMUL, "rw2", "rw4"))
    inv = 1.0 / spec.cols
    steps = [RowStep(op.VRSUM, DATA, row=True), RowStep(op.VSCALE, "rw0", row=True, scale=inv),
             RowStep(op.VSUB, DATA, "rw1"), RowStep(op.VMUL, "rw2", "rw2"), RowStep(op.VRSUM, "rw3", row=True),
             RowStep(op.VSCALE, "rw4", row=True, scale=inv, shift=spec.eps), RowStep(op.VRSQRT, "rw5", row=True),
             RowStep(op.VMUL, "rw2", "rw6")]
    if spec.gamma is not None:
        steps.append(RowStep(op.VMUL, f"rw{len(steps) - 1}", GAMMA))
    if spec.beta is not None:
        steps.append(RowStep(op.VADD, f"rw{len(steps) - 1}", BETA))
    return tuple(steps)


def _in_place(spec: RowwiseSpec) -> dict[int, int]:
    """Stages computed in place on an earlier stage's SRAM buffer (same shape and type, the earlier
    value dead by then): stage -> the stage whose storage it takes."""
    if spec.kind == RowKind.SOFTMAX:
        return {2: 1, 4: 3}
    places = {1: 0, 5: 4, 6: 4, 7: 3}  # mean over the sum, rsqrt over var; d * r over d * d
    for i in range(8, len(row_steps(spec))):
        places[i] = 3
    return places


def _elems(spec: RowwiseSpec) -> tuple[int, int]:
    return spec.rows, spec.cols


def compute(spec: RowwiseSpec) -> tuple[list[te.Tensor], te.Tensor]:
    """TE stages ``rw0 ...`` of :func:`row_steps`, then the epilogue; the last is named after the output."""
    rows, cols = _elems(spec)
    dt = spec.data.dtype.np.name
    x = placeholder(spec.data, (rows, cols))
    inputs = [x]
    named: dict[str, te.Tensor] = {DATA: x}
    for name, ref in ((GAMMA, spec.gamma), (BETA, spec.beta)):
        if ref is not None:
            named[name] = placeholder(ref, (cols,), operand_name(ref, name))
            inputs.append(named[name])
    steps = row_steps(spec)
    for i, st in enumerate(steps):
        name = spec.out.name if i == len(steps) - 1 and not spec.epilogue else f"rw{i}"
        named[f"rw{i}"] = _stage(st, named, rows, cols, dt, name)
    stages, operands = epilogue_stages(spec, named[f"rw{len(steps) - 1}"], lambda idx: idx[-1], (rows, cols))
    return [*inputs, *operands.values()], stages[-1] if stages else named[f"rw{len(steps) - 1}"]


def _stage(st: RowStep, named: dict[str, te.Tensor], rows: int, cols: int, dt: str, name: str) -> te.Tensor:
    a = named[st.src]
    b = named[st.other] if st.other is not None else None
    op = isa.Opcode

    def get(src: str, i: tirx.PrimExpr, j: tirx.PrimExpr) -> tirx.PrimExpr:
        """Source ``src`` at (row i, column j): per-row values broadcast along j, gamma/beta along i."""
        t = named[src]
        if len(t.shape) == 2:
            return t[i, j]
        return t[j] if src in (GAMMA, BETA) else t[i]

    if st.reduce:
        k = te.reduce_axis((0, cols), name="k")
        red = te.max if st.op == op.VRMAX else te.sum
        return te.compute((rows,), lambda i: red(a[i, k], axis=k), name=name)
    one = tirx.const(1.0, dt)
    unary = {op.VEXP: te.exp, op.VRECIP: lambda v: one / v, op.VRSQRT: te.rsqrt,
             op.VSCALE: lambda v: v * tirx.const(st.scale, dt) + tirx.const(st.shift, dt)}
    binary = {op.VSUB: lambda u, v: u - v, op.VMUL: lambda u, v: u * v, op.VADD: lambda u, v: u + v}
    if st.row:
        return te.compute((rows,), lambda i: unary[st.op](a[i]), name=name)
    if b is None:
        return te.compute((rows, cols), lambda i, j: unary[st.op](a[i, j]), name=name)
    return te.compute((rows, cols), lambda i, j: binary[st.op](get(st.src, i, j), get(st.other, i, j)), name=name)


def _tiles(spec: RowwiseSpec, tile: RowTile) -> int:
    return _ceil(spec.rows, tile.rows)


class Rowwise(OpKind):
    """Softmax / layer norm: whole rows streamed through SRAM, vector engine only."""

    spec_type = RowwiseSpec
    tile_type = RowTile
    name = "rowwise"

    # ---------------------------------------------------------------- template
    def pipelining(self, spec: RowwiseSpec, tile: RowTile) -> Pipelining:
        """The row-tile loop."""
        return Pipelining(_tiles(spec, tile) > 1)

    def definition(self, spec: RowwiseSpec, tile: RowTile) -> tuple:
        return compute(spec)

    def schedule(self, spec: RowwiseSpec, tile: RowTile) -> Scheduled:
        inputs, final = compute(spec)
        sch = s_tir.Schedule(te.create_prim_func([*inputs, final]))
        res = Scheduled(spec, tile, sch)
        steps = row_steps(spec)
        n_epi = len(spec.epilogue)
        last = sch.get_sblock(spec.out.name)
        store = sch.cache_write(last, 0, SRAM_SCOPE)
        io, ii = split(sch, sch.get_loops(last)[0], tile.rows)
        t = io
        # the last stage (a row step, or the last epilogue step) is the loop nest inside the tile loop
        mark(sch, ii, SiteKind.EPI if n_epi else SiteKind.ROW, n_epi - 1 if n_epi else len(steps) - 1)
        for idx in range(n_epi - 2, -1, -1):
            e = sch.get_sblock(f"epi{idx}")
            sch.set_scope(e, 0, SRAM_SCOPE)
            attach(sch, e, t, SiteKind.EPI, idx)
        in_place = []  # epilogue steps that work in place on the last row stage
        for idx in range(n_epi):
            e = sch.get_sblock(spec.out.name if idx == n_epi - 1 else f"epi{idx}")
            if spec.epilogue[idx].operand is not None:
                op_s = sch.cache_read(e, 1, SRAM_SCOPE)
                res.roles[buffer_name(sch, op_s)] = Role.operand(idx)
                res.loads.append(attach(sch, op_s, t, SiteKind.DMA))
            if idx < n_epi - 1:
                in_place.append(buffer_name(sch, e))
        blocks = {}
        for idx in range(len(steps) - (0 if n_epi else 1) - 1, -1, -1):
            b = sch.get_sblock(f"rw{idx}")
            sch.set_scope(b, 0, SRAM_SCOPE)
            attach(sch, b, t, SiteKind.ROW, idx)
            blocks[idx] = b
            res.roles[buffer_name(sch, b)] = f"rw{idx}"  # the codegen finds a step's sources by these names
        for idx, target in _in_place(spec).items():
            if idx in blocks and target in blocks:
                res.aliases[buffer_name(sch, blocks[idx])] = buffer_name(sch, blocks[target])
        for name in in_place:
            res.aliases[name] = buffer_name(sch, blocks[len(steps) - 1])
        first = blocks.get(0, last)
        data_s = sch.cache_read(first, 0, SRAM_SCOPE)
        res.roles[buffer_name(sch, data_s)] = Role.DATA
        res.loads.append(attach(sch, data_s, t, SiteKind.DMA))
        for name, role in ((GAMMA, GAMMA_ROLE), (BETA, BETA_ROLE)):
            idx = next((i for i, st in enumerate(steps) if st.other == name), None)
            if idx is None:
                continue
            blk = blocks.get(idx, last)
            g_s = sch.cache_read(blk, 1, SRAM_SCOPE)
            res.roles[buffer_name(sch, g_s)] = role
            res.loads.append(attach(sch, g_s, t, SiteKind.DMA))
        res.stores.append(attach(sch, store, t, SiteKind.DMA, reverse=True))
        pipeline(sch, t, tile.stages, res.loads, res.stores)
        return res

    # -------------------------------------------------------------- tile space
    def axes(self, spec: RowwiseSpec, hw: HardwareConfig, opts: CompilerOptions) -> dict[str, list]:
        return {"rows": tile_extents(spec.rows, 1, opts, limit=64), "stages": [opts.pipeline_stages]}

    def footprint(self, spec: RowwiseSpec, tile: RowTile, hw: HardwareConfig) -> int:
        s = tile.stages if self.pipelining(spec, tile).pipelined else 1
        cols = spec.cols
        isz = spec.data.dtype.itemsize
        full = tile.rows * cols
        places = _in_place(spec)
        steps = row_steps(spec)
        last = len(steps) - 1
        buffers = [s * full * isz]  # the loaded rows
        for i, st in enumerate(steps):
            if i in places or (i == last and not spec.epilogue):
                continue  # in place, or the stored result (below)
            buffers.append((tile.rows if st.row else full) * isz)
        buffers.append((2 if s > 1 else 1) * full * spec.out.dtype.itemsize)  # the stored result
        # epilogue steps work in place on the last row stage, unless they change the type (a cast)
        buffers += [full * z for z in step_itemsizes(spec, spec.data.dtype)[:-1] if z != isz]
        buffers += [s * cols * isz for t in (spec.gamma, spec.beta) if t is not None]
        for e in spec.epilogue:
            if e.operand is not None:
                buffers.append(s * (cols if e.broadcast == Broadcast.CHANNEL else full) * e.operand.dtype.itemsize)
        return sum(hw.align(x) for x in buffers)

    # -------------------------------------------------------------- cost model
    def row_cycles(self, spec: RowwiseSpec, rows: int, hw: HardwareConfig) -> int:
        """Vector-engine cycles of one tile of ``rows`` rows (the simulator's per-instruction formulas)."""
        cols = spec.cols
        total = 0
        for st in row_steps(spec):
            if st.reduce:
                total += timing.reduce_cycles(hw, (1, rows, cols))
                continue
            c = hw.transcendental_cycles if st.op in isa.VecUnary.TRANSCENDENTAL else 1
            total += timing.vector_cycles(hw, rows if st.row else rows * cols, c)
        return total + epilogue_cycles(hw, spec, rows * cols)

    def steps(self, spec: RowwiseSpec, tile: RowTile, hw: HardwareConfig) -> Iterator[Step]:
        rows, cols = _elems(spec)
        shape = (rows, cols)
        for slot in range(_tiles(spec, tile)):
            r0 = slot * tile.rows
            n = min(tile.rows, rows - r0)
            loads = copy_cost(hw, spec.data.dtype, shape, (r0, 0), (n, cols))
            for t in (spec.gamma, spec.beta):
                if t is not None:
                    loads += copy_cost(hw, t.dtype, (cols,), (0,), (cols,))
            for e in spec.epilogue:
                if e.operand is None:
                    continue
                if e.broadcast == Broadcast.CHANNEL:
                    loads += copy_cost(hw, e.operand.dtype, (cols,), (0,), (cols,))
                else:
                    loads += copy_cost(hw, e.operand.dtype, shape, (r0, 0), (n, cols))
            store = copy_cost(hw, spec.out.dtype, shape, (r0, 0), (n, cols))
            yield Step(loads=Copy(), vector=self.row_cycles(spec, n, hw), store=store, operands=loads, slot=slot)

    def traffic_floor(self, spec: RowwiseSpec, tile: RowTile, hw: HardwareConfig) -> float:
        n = _tiles(spec, tile)
        params = sum(t.nbytes for t in (spec.gamma, spec.beta) if t is not None)
        extra = sum(e.operand.nbytes for e in spec.epilogue if e.operand is not None)
        return (spec.data.nbytes + spec.out.nbytes + n * params + extra) / hw.dram_bytes_per_cycle

    def step_count(self, spec: RowwiseSpec, tile: RowTile) -> int:
        return _tiles(spec, tile)

    # ----------------------------------------------------------------- reports
    def describe(self, spec: RowwiseSpec) -> str:
        epi = "".join(f"+{e.kind.value}" for e in spec.epilogue)
        return f"{spec.kind.value}{epi} {spec.data.shape} over rows of {spec.cols}"


KIND = register(Rowwise())
