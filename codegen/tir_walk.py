"""Read a lowered, scheduled PrimFunc as a stream of NPU instruction sites.

The NPU has no loops, so every tile loop of the schedule is unrolled. Rather than
interpreting TVM objects per tile (slow: every attribute access crosses the FFI),
the lowered function is translated once into Python source -- ``for`` loops over
the tile loops, ``if`` for predicates, one ``yield`` per instruction site -- and
run. A *site* is a blockized block, or a loop nest, carrying the ``npu.instr``
annotation; its accesses are reduced statically to affine forms
``index_d = base_d(outer loops) + sum_v coef_dv * v`` over the site's own inner
loops ``v``, so the emitter gets integers only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm_npu.simulator.builder import row_major
from tvm_npu.tir_schedules.contract import EPI_KEY, INSTR_KEY, SRAM_SCOPE

_E = tirx.expr
_BINOPS = {
    _E.Add: "+",
    _E.Sub: "-",
    _E.Mul: "*",
    _E.FloorDiv: "//",
    _E.FloorMod: "%",
    _E.LT: "<",
    _E.LE: "<=",
    _E.GT: ">",
    _E.GE: ">=",
    _E.EQ: "==",
    _E.NE: "!=",
}


class WalkError(RuntimeError):
    """The lowered TIR has a form the codegen does not understand (a template bug)."""


def _truncdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


class _ExprSource:
    """PrimExpr -> Python source over a slot list ``v`` (one slot per loop/bound var)."""

    def __init__(self) -> None:
        self.slots: dict[int, int] = {}

    def slot(self, var: tirx.Var) -> int:
        return self.slots.setdefault(var.__chandle__(), len(self.slots))

    def __call__(self, x: object) -> str:
        if isinstance(x, bool | int):
            return repr(int(x))
        if isinstance(x, tirx.IntImm):
            return repr(int(x.value))
        if isinstance(x, tirx.Var):
            if x.__chandle__() not in self.slots:
                raise WalkError(f"variable {x.name} is used outside the loop that defines it")
            return f"v[{self.slots[x.__chandle__()]}]"
        op = _BINOPS.get(type(x))
        if op:
            return f"({self(x.a)} {op} {self(x.b)})"
        if isinstance(x, _E.Min | _E.Max):
            return f"{type(x).__name__.lower()}({self(x.a)}, {self(x.b)})"
        if isinstance(x, _E.And | _E.Or):
            return f"({self(x.a)} {type(x).__name__.lower()} {self(x.b)})"
        if isinstance(x, _E.Not):
            return f"(not {self(x.a)})"
        if isinstance(x, _E.Div):
            return f"_truncdiv({self(x.a)}, {self(x.b)})"
        if isinstance(x, _E.Mod):
            a, b = self(x.a), self(x.b)
            return f"({a} - _truncdiv({a}, {b}) * {b})"
        if isinstance(x, _E.Select):
            return f"({self(x.true_value)} if {self(x.condition)} else {self(x.false_value)})"
        if isinstance(x, _E.Cast):
            return f"int({self(x.value)})"
        if isinstance(x, tvm.ir.Call) and x.op.name == "tirx.likely":
            return self(x.args[0])
        raise WalkError(f"unsupported index expression {type(x).__name__}: {x}")


@dataclass(frozen=True)
class Access:
    """One buffer access of a site: per dimension an affine form over the site's loops."""

    buffer: str
    scope: str
    shape: tuple[int, ...]
    dtype: str
    coefs: tuple[tuple[int, ...], ...]  # [dim][inner loop] -> coefficient
    is_write: bool
    # derived once here, read by the emitter for every event of the site:
    strides: tuple[int, ...] = field(init=False, repr=False, compare=False)  # row-major, of the buffer
    loop_strides: tuple[int, ...] = field(init=False, repr=False, compare=False)  # element stride per inner loop
    #: per dim, the one inner loop it follows with coefficient 1, None when it follows none, else -1
    loops: tuple[int | None, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        strides = row_major(self.shape)
        nloops = len(self.coefs[0]) if self.coefs else 0
        loop_strides = tuple(sum(c[v] * s for c, s in zip(self.coefs, strides, strict=True)) for v in range(nloops))
        loops = []
        for c in self.coefs:
            used = [i for i, x in enumerate(c) if x != 0]
            loops.append(None if not used else used[0] if len(used) == 1 and c[used[0]] == 1 else -1)
        object.__setattr__(self, "strides", strides)
        object.__setattr__(self, "loop_strides", loop_strides)
        object.__setattr__(self, "loops", tuple(loops))


@dataclass(frozen=True)
class Site:
    """Static description of one instruction site; the run supplies the bases."""

    kind: str
    name: str
    epi: int
    extents: tuple[int, ...]  # inner loop extents, outermost first
    accesses: tuple[Access, ...]


@dataclass(frozen=True)
class Event:
    """One executed site: ``bases[a][d]`` is access ``a``'s index at the inner loops' origin."""

    site: Site
    bases: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class SramBuffer:
    name: str
    shape: tuple[int, ...]
    dtype: str


def _scope(buf: tirx.Buffer) -> str:
    return str(buf.scope())


def _linear(expr: tvm.ir.PrimExpr, loop_vars: list[tirx.Var]) -> tuple[list[int], tvm.ir.PrimExpr]:
    """``expr = base + sum coef_i * loop_vars[i]`` with integer coefficients, or WalkError."""
    if not loop_vars:
        return [], expr
    res = tvm.sym.detect_linear_equation(expr, loop_vars)
    if len(res) != len(loop_vars) + 1:
        raise WalkError(f"index {expr} is not affine in the tile loops {[v.name for v in loop_vars]}")
    coefs = []
    for c in res[:-1]:
        c = tvm.sym.Analyzer().simplify(c)
        if not isinstance(c, tirx.IntImm):
            raise WalkError(f"index {expr} has a non-constant coefficient {c}")
        coefs.append(int(c.value))
    return coefs, res[-1]


def _loads(expr: tvm.ir.PrimExpr) -> bool:
    """Whether an index reads memory (a table lookup's index is the looked-up value)."""
    found: list[bool] = []
    tvm_ffi.structural_walk(expr, ((tvm.ir.TensorLoad, lambda _e: found.append(True)),))
    return bool(found)


def _site_parts(stmt: tirx.Stmt) -> tuple[list[tirx.For], list[tuple[tirx.Buffer, list, bool]]]:
    """The loops inside a site and every (buffer, indices, is_write) access in its body."""
    loops: list[tirx.For] = []
    accesses: list[tuple[tirx.Buffer, list, bool]] = []

    def on_for(s: tirx.For) -> None:
        loops.append(s)

    def on_store(s: tirx.BufferStore) -> None:
        accesses.append((s.buffer, list(s.indices), True))

    def on_load(e: tvm.ir.TensorLoad) -> None:
        accesses.append((e.source, list(e.indices), False))

    tvm_ffi.structural_walk(
        stmt, ((tirx.For, on_for), (tirx.BufferStore, on_store), (tvm.ir.TensorLoad, on_load))
    )
    return loops, accesses


class _Translator:
    """Builds the Python generator source for one lowered PrimFunc."""

    def __init__(self) -> None:
        self.src = _ExprSource()
        self.lines: list[str] = []
        self.sites: list[Site] = []
        self.site_exprs: list[str] = []
        self.sram: dict[str, SramBuffer] = {}

    def _line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def _alloc(self, buf: tirx.Buffer) -> None:
        if _scope(buf) == SRAM_SCOPE:
            shape = tuple(int(n) for n in buf.shape)
            self.sram[buf.name] = SramBuffer(buf.name, shape, str(buf.dtype))

    def stmt(self, s: tirx.Stmt, depth: int) -> None:
        if isinstance(s, tirx.SeqStmt):
            for c in s.seq:
                self.stmt(c, depth)
        elif isinstance(s, tirx.For):
            kind = s.annotations.get(INSTR_KEY)
            if kind is not None:
                epi = s.annotations.get(EPI_KEY)
                self.site(str(kind), s.loop_var.name, -1 if epi is None else int(epi), s, depth)
                return
            self.src.slot(s.loop_var)
            lo, ext = self.src(s.min), self.src(s.extent)
            self._line(depth, f"for {self.src(s.loop_var)} in range({lo}, {lo} + {ext}):")
            n = len(self.lines)
            self.stmt(s.body, depth + 1)
            if len(self.lines) == n:
                self._line(depth + 1, "pass")
        elif isinstance(s, s_tir.SBlockRealize):
            self.block(s, depth)
        elif isinstance(s, tirx.IfThenElse):
            self._line(depth, f"if {self.src(s.condition)}:")
            self.stmt(s.then_case, depth + 1)
            if s.else_case is not None:
                self._line(depth, "else:")
                self.stmt(s.else_case, depth + 1)
        elif isinstance(s, tirx.Bind):
            self.src.slot(s.var)
            self._line(depth, f"{self.src(s.var)} = {self.src(s.value)}")
        elif isinstance(s, tirx.AttrStmt):
            self.stmt(s.body, depth)
        elif isinstance(s, tirx.AllocBuffer | tirx.DeclBuffer):
            self._alloc(s.buffer)
        elif isinstance(s, tirx.Evaluate) and isinstance(s.value, tirx.IntImm):
            pass  # an empty pipeline body
        else:
            raise WalkError(f"{type(s).__name__} outside an instruction site: {s}")

    def block(self, realize: s_tir.SBlockRealize, depth: int) -> None:
        blk = realize.block
        pred = realize.predicate
        if not (isinstance(pred, tirx.IntImm) and int(pred.value) == 1):
            self._line(depth, f"if {self.src(pred)}:")
            depth += 1
        for b in blk.alloc_buffers:
            self._alloc(b)
        kind = blk.annotations.get(INSTR_KEY)
        if kind is None:
            n = len(self.lines)
            self.stmt(blk.body, depth)
            if len(self.lines) == n:
                self._line(depth, "pass")
            return
        epi = blk.annotations.get(EPI_KEY)
        self.site(str(kind), blk.name_hint, -1 if epi is None else int(epi), blk.body, depth)

    def site(self, kind: str, name: str, epi: int, body: tirx.Stmt, depth: int) -> None:
        loops, raw = _site_parts(body)
        loop_vars = [f.loop_var for f in loops]
        extents = []
        for f in loops:
            if not isinstance(f.extent, tirx.IntImm) or not (isinstance(f.min, tirx.IntImm) and int(f.min.value) == 0):
                raise WalkError(f"site {name}: inner loop {f.loop_var.name} must have a constant extent from 0")
            extents.append(int(f.extent.value))
        accesses, base_src = [], []
        seen: set[tuple[str, bool]] = set()
        for buf, indices, is_write in raw:
            key = (buf.name, is_write)
            if key in seen:  # e.g. the accumulator read and written by C += A * B
                continue
            seen.add(key)
            coefs, bases = [], []
            for idx in indices:
                if _loads(idx):  # a lookup (a table read at the value): the instruction reads the whole dim
                    coefs.append((0,) * len(loop_vars))
                    bases.append("0")
                    continue
                c, base = _linear(idx, loop_vars)
                coefs.append(tuple(c))
                bases.append(self.src(tvm.sym.Analyzer().simplify(base)))
            accesses.append(
                Access(buf.name, _scope(buf), tuple(int(n) for n in buf.shape), str(buf.dtype), tuple(coefs), is_write)
            )
            base_src.append("(" + "".join(b + ", " for b in bases) + ")")
        self.sites.append(Site(kind, name, epi, tuple(extents), tuple(accesses)))
        self._line(depth, f"yield ({len(self.sites) - 1}, ({', '.join(base_src)},))")


@dataclass(frozen=True)
class CompiledWalk:
    """The instruction sites of a PrimFunc and a generator replaying them in program order."""

    sites: tuple[Site, ...]
    sram_buffers: dict[str, SramBuffer]
    source: str
    _gen: Callable[[], Iterator[tuple[int, tuple]]]

    def events(self) -> Iterator[Event]:
        sites = self.sites
        for idx, bases in self._gen():
            yield Event(sites[idx], bases)

    def __reduce__(self) -> tuple:
        """Pickled as its plain parts (a codegen worker's result): the generator is rebuilt from the source."""
        return _from_source, (self.sites, self.sram_buffers, self.source)


def _from_source(sites: tuple[Site, ...], sram: dict[str, SramBuffer], source: str) -> CompiledWalk:
    namespace: dict = {"_truncdiv": _truncdiv}
    exec(compile(source, "<npu_walk>", "exec"), namespace)  # our own generated source
    return CompiledWalk(sites, sram, source, namespace["_walk"])


def compile_walk(func: tirx.PrimFunc) -> CompiledWalk:
    """Translate a lowered PrimFunc into a :class:`CompiledWalk` (done once per operator)."""
    t = _Translator()
    t.stmt(func.body, 1)
    header = ["def _walk():", f"    v = [0] * {max(1, len(t.src.slots))}"]
    source = "\n".join([*header, *t.lines, "    return", "    yield"]) + "\n"
    return _from_source(tuple(t.sites), t.sram, source)
