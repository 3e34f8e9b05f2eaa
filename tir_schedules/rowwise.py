"""Row-wise template: a program of vector steps over whole rows (softmax, layer norm, any
recognised normalisation), whole rows per tile.

A row-wise operator needs every element of a row before it can write any result (the
row's max, sum, mean or variance), so a tile is a block of whole rows: the data is viewed
as ``rows x cols``, a tile of ``RowTile.rows`` rows is loaded, worked on by a sequence of
vector instructions (:func:`row_steps`: the spec's own ``program``, or one of the two fixed
programs below) and stored. The fixed programs are:

* softmax: ``m = rowmax(x)``, ``d = x - m``, ``e = exp(d)``, ``s = rowsum(e)``,
  ``r = 1/s``, ``y = e * r`` (numerically stable: every exponent is <= 0);
* layer norm: ``mean = rowsum(x) / n``, ``d = x - mean``, ``var = rowsum(d * d) / n``,
  ``r = rsqrt(var + eps)``, ``y = d * r [* gamma] [+ beta]``.

A program whose last step is a per-row one (a plain reduction: ``mean``, ``sum``, ``max``, ``min`` of the
rows) stores one value per row, a ``rows x 1`` result. Per-row values (max, sum, ...) and per-row
parameters are broadcast back over the row by a zero
element stride, which every vector source allows; per-position parameters (gamma) along the rows
the same way. Elementwise consumers fused at ``-fusion>=1`` follow
as ordinary epilogue steps (not after a per-row result: its consumer stays an operator of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from tvm import s_tir, te, tirx
from tvm_npu.simulator import isa, timing

from tvm_npu.config import CompilerOptions, HardwareConfig
from tvm_npu.core.ops import Along, Broadcast, RowKind, RowStep, RowwiseSpec, TensorRef
from tvm_npu.core.tiles import RowTile

from .common import Scheduled, attach, buffer_name, epilogue_stages, mark, operand_name, pipeline, placeholder, split
from .contract import SRAM_SCOPE, Role, SiteKind
from .cost import Copy, Pipelining, Step, copy_cost, step_itemsizes, tile_extents
from .cost import ceil_div as _ceil
from .cost import vector_cycles as epilogue_cycles
from .kind import OpKind, register

#: The names of a row-wise operator's inputs in its step table (the stages are ``rw0``, ``rw1``, ...).
DATA, GAMMA, BETA = "x", "gamma", "beta"


def row_steps(spec: RowwiseSpec) -> tuple[RowStep, ...]:
    """The instruction sequence of one tile (the template's stages ``rw<i>``, in order)."""
    if spec.kind == RowKind.PROGRAM:
        return spec.program
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


def param_name(k: int) -> str:
    """The step-table name (and SRAM role) of a program's ``k``-th parameter."""
    return f"p{k}"


def row_inputs(spec: RowwiseSpec) -> tuple[tuple[str, TensorRef, Along], ...]:
    """The constants the steps read besides the data: (name, tensor, how it lines up with the rows)."""
    named = [(GAMMA, spec.gamma, Along.COLS), (BETA, spec.beta, Along.COLS)]
    named += [(param_name(k), p.ref, p.along) for k, p in enumerate(spec.params)]
    return tuple((n, ref, along) for n, ref, along in named if ref is not None)


def _along_extent(along: Along, rows: int, cols: int) -> int:
    """Elements a parameter holds for ``rows`` rows of ``cols``."""
    return {Along.COLS: cols, Along.ROWS: rows, Along.FULL: rows * cols}[along]


def _in_place(spec: RowwiseSpec) -> dict[int, int]:
    """Stages computed in place on an earlier stage's SRAM buffer (same shape and type, the earlier
    value dead by then): stage -> the stage whose storage it takes."""
    if spec.kind == RowKind.SOFTMAX:
        return {2: 1, 4: 3}
    if spec.kind == RowKind.PROGRAM:
        return _reused_buffers(spec.program, bool(spec.epilogue))
    places = {1: 0, 5: 4, 6: 4, 7: 3}  # mean over the sum, rsqrt over var; d * r over d * d
    for i in range(8, len(row_steps(spec))):
        places[i] = 3
    return places


def _reused_buffers(steps: tuple[RowStep, ...], epilogue: bool) -> dict[int, int]:
    """A program's in-place stages: stage ``i`` takes the buffer of an earlier stage ``j`` of its shape (per row
    or full) when every step reading ``j`` is one that ``i`` depends on, so runs before ``i`` in any order the
    schedule gives independent stages; the stored result (the last stage, without an epilogue) has a buffer
    of its own."""
    deps: list[set[int]] = []
    readers: dict[int, set[int]] = {}
    for i, st in enumerate(steps):
        deps.append(set())
        for src in (st.src, st.other):
            if src is not None and src.startswith("rw"):
                j = int(src[2:])
                deps[i] |= deps[j] | {j}
                readers.setdefault(j, set()).add(i)
    holder: dict[int, int] = {}  # buffer (the stage that owns it) -> the stage whose value it holds now
    places = {}
    for i, st in enumerate(steps):
        if i == len(steps) - 1 and not epilogue:
            break
        free = [b for b, j in holder.items() if steps[j].row == st.row and readers.get(j) and readers[j] <= deps[i]]
        own = free[0] if free else i
        holder[own] = i
        if own != i:
            places[i] = own
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
    along: dict[str, Along] = {}
    for name, ref, how in row_inputs(spec):
        shape = {Along.COLS: (cols,), Along.ROWS: (rows,), Along.FULL: (rows, cols)}[how]
        named[name] = placeholder(ref, shape, operand_name(ref, name))
        along[name] = how
        inputs.append(named[name])
    steps = row_steps(spec)
    for i, st in enumerate(steps):
        name = spec.out.name if i == len(steps) - 1 and not spec.epilogue else f"rw{i}"
        named[f"rw{i}"] = _stage(st, named, along, (rows, cols), dt, name)
    stages, operands = epilogue_stages(spec, named[f"rw{len(steps) - 1}"], lambda idx: idx[-1], (rows, cols))
    return [*inputs, *operands.values()], stages[-1] if stages else named[f"rw{len(steps) - 1}"]


def _unary(st: RowStep, dt: str) -> Callable[[tirx.PrimExpr], tirx.PrimExpr]:
    """The TE expression of a one-source step."""
    op = isa.Opcode
    if st.op == op.VCLIP:
        lo, hi = tirx.const(st.scale, dt), tirx.const(st.shift, dt)
        return lambda v: te.min(te.max(v, lo), hi)
    one = tirx.const(1.0, dt)
    table = {op.VEXP: te.exp, op.VLOG: te.log, op.VRECIP: lambda v: one / v, op.VRSQRT: te.rsqrt,
             op.VPOW: lambda v: te.power(v, tirx.const(st.scale, dt)),
             op.VSCALE: lambda v: v * tirx.const(st.scale, dt) + tirx.const(st.shift, dt)}
    return table[st.op]


def _stage(st: RowStep, named: dict[str, te.Tensor], along: dict[str, Along], shape: tuple[int, int], dt: str,
           name: str) -> te.Tensor:
    rows, cols = shape
    op = isa.Opcode

    def get(src: str, i: tirx.PrimExpr, j: tirx.PrimExpr) -> tirx.PrimExpr:
        """Source ``src`` at (row i, column j): per-row values broadcast along j, per-position ones along i."""
        t = named[src]
        if len(t.shape) == 2:
            return t[i, j]
        return t[j] if along.get(src) == Along.COLS else t[i]

    if st.reduce:
        k = te.reduce_axis((0, cols), name="k")
        red = te.max if st.op == op.VRMAX else te.sum
        return te.compute((rows,), lambda i: red(get(st.src, i, k), axis=k), name=name)
    if st.other is None:
        f = _unary(st, dt)
        if st.row:
            return te.compute((rows,), lambda i: f(get(st.src, i, 0)), name=name)
        return te.compute((rows, cols), lambda i, j: f(get(st.src, i, j)), name=name)
    binary = {op.VSUB: lambda u, v: u - v, op.VMUL: lambda u, v: u * v, op.VADD: lambda u, v: u + v,
              op.VMAX: te.max, op.VMIN: te.min}[st.op]
    if st.row:
        return te.compute((rows,), lambda i: binary(get(st.src, i, 0), get(st.other, i, 0)), name=name)
    return te.compute((rows, cols), lambda i, j: binary(get(st.src, i, j), get(st.other, i, j)), name=name)


def _read_index(sch: s_tir.Schedule, block: s_tir.SBlockRV, buffer: str) -> int:
    """Which of ``block``'s reads is the input buffer ``buffer`` (the steps read their sources in no fixed
    order: a parameter may be a step's first source)."""
    for i, region in enumerate(sch.get(block).reads):
        if region.source.name == buffer:
            return i
    raise ValueError(f"row-wise stage {sch.get(block).name_hint} does not read {buffer!r}")


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
        tensors = [(DATA, spec.data.name, Role.DATA), *((n, operand_name(r, n), n) for n, r, _ in row_inputs(spec))]
        for name, buf, role in tensors:
            idx = next((i for i, st in enumerate(steps) if name in (st.src, st.other)), None)
            if idx is None:
                continue
            blk = blocks.get(idx, last)
            copy = sch.cache_read(blk, _read_index(sch, blk, buf), SRAM_SCOPE)
            res.roles[buffer_name(sch, copy)] = role  # every step reading the tensor reads this copy
            res.loads.append(attach(sch, copy, t, SiteKind.DMA))
        res.stores.append(attach(sch, store, t, SiteKind.DMA, reverse=True))
        pipeline(sch, t, tile.stages, res.loads, res.stores)
        return res

    # -------------------------------------------------------------- tile space
    def axes(self, spec: RowwiseSpec, hw: HardwareConfig, opts: CompilerOptions) -> dict[str, list]:
        if spec.per_row and spec.epilogue:
            # the epilogue stages are made over the rows' elements; a per-row result leaves its consumer
            # an operator of its own
            return {"rows": [], "stages": [opts.pipeline_stages]}
        if spec.cols != spec.out.shape[-1] and any(e.broadcast == Broadcast.CHANNEL for e in spec.epilogue):
            # a per-channel operand runs along the output's last axis, which a row spanning several axes is not:
            # no tile computes it (the plan's fusion then leaves the step an operator of its own)
            return {"rows": [], "stages": [opts.pipeline_stages]}
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
        stored = tile.rows if spec.per_row else full
        buffers.append((2 if s > 1 else 1) * stored * spec.out.dtype.itemsize)  # the stored result
        # epilogue steps work in place on the last row stage, unless they change the type (a cast)
        buffers += [full * z for z in step_itemsizes(spec, spec.data.dtype)[:-1] if z != isz]
        buffers += [s * _along_extent(how, tile.rows, cols) * t.dtype.itemsize for _, t, how in row_inputs(spec)]
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
            if st.op == isa.Opcode.VPOW:
                c = isa.VecPow.EVALUATIONS * hw.transcendental_cycles
            total += timing.vector_cycles(hw, rows if st.row else rows * cols, c)
        return total + epilogue_cycles(hw, spec, rows * cols)

    def steps(self, spec: RowwiseSpec, tile: RowTile, hw: HardwareConfig) -> Iterator[Step]:
        rows, cols = _elems(spec)
        shape = (rows, cols)
        for slot in range(_tiles(spec, tile)):
            r0 = slot * tile.rows
            n = min(tile.rows, rows - r0)
            loads = copy_cost(hw, spec.data.dtype, shape, (r0, 0), (n, cols))
            for _, t, how in row_inputs(spec):
                if how == Along.COLS:
                    loads += copy_cost(hw, t.dtype, (cols,), (0,), (cols,))
                elif how == Along.ROWS:
                    loads += copy_cost(hw, t.dtype, (rows,), (r0,), (n,))
                else:
                    loads += copy_cost(hw, t.dtype, shape, (r0, 0), (n, cols))
            for e in spec.epilogue:
                if e.operand is None:
                    continue
                if e.broadcast == Broadcast.CHANNEL:
                    loads += copy_cost(hw, e.operand.dtype, (cols,), (0,), (cols,))
                else:
                    loads += copy_cost(hw, e.operand.dtype, shape, (r0, 0), (n, cols))
            if spec.per_row:  # one value per row: a ``rows x 1`` result
                store = copy_cost(hw, spec.out.dtype, (rows, 1), (r0, 0), (n, 1))
            else:
                store = copy_cost(hw, spec.out.dtype, shape, (r0, 0), (n, cols))
            yield Step(loads=Copy(), vector=self.row_cycles(spec, n, hw), store=store, operands=loads, slot=slot)

    def traffic_floor(self, spec: RowwiseSpec, tile: RowTile, hw: HardwareConfig) -> float:
        n = _tiles(spec, tile)
        # a per-position parameter is loaded with every tile, the others a slice per tile (once in all)
        params = sum(t.nbytes * (n if how == Along.COLS else 1) for _, t, how in row_inputs(spec))
        extra = sum(e.operand.nbytes for e in spec.epilogue if e.operand is not None)
        return (spec.data.nbytes + spec.out.nbytes + params + extra) / hw.dram_bytes_per_cycle

    def step_count(self, spec: RowwiseSpec, tile: RowTile) -> int:
        return _tiles(spec, tile)

    # ----------------------------------------------------------------- reports
    def describe(self, spec: RowwiseSpec) -> str:
        epi = "".join(f"+{e.kind.value}" for e in spec.epilogue)
        steps = f" ({len(spec.program)} steps{', one value per row' if spec.per_row else ''})" \
            if spec.kind == RowKind.PROGRAM else ""
        return f"{spec.kind.value}{steps}{epi} {spec.data.shape} over rows of {spec.cols}"


KIND = register(Rowwise())
