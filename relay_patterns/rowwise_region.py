"""Normalisations as exporters wrote them, found in Relax and made one row-wise NPU operator each.

A *row program* is a connected subgraph of elementwise operators (add, subtract, multiply, divide,
maximum, minimum, clip, power by a constant, sqrt, rsqrt, exp, log, abs, negative), row reductions (sum, mean,
max, min, variance over a set of trailing axes, ``keepdims``), reshapes and broadcasts of per-row
values over their rows, computed from ONE tensor ``x`` and constants, whose one result has ``x``'s
element count or one value per row (a plain reduction, ``keepdims`` or not, with any elementwise prologue:
``mean(x * x)``; the template writes it as ``rows x 1``, which is the reduced shape's row-major order). A
mean over H and W of NCHW / NHWC alone is left to the pattern table's global average pool. The reductions
fix the row: ``cols`` consecutive elements of ``x`` in row-major
order, so a norm over H, W of NCHW (InstanceNorm) or over (C/G, H, W) after a group reshape
(GroupNorm) is a view of rows like a norm over the last axis. Constants are classified by how they
line up with the ``rows x cols`` view (:class:`Along`: per position in the row, per row, or per
element) and the subgraph's expression is brought to its canonical form (:mod:`.rowwise_algebra`),
whose vector-step program the row-wise template runs.

At partition time :func:`row_program_entries` finds the programs of a module and gives one
``npu.row_program`` pattern per found structure (the subgraph's own, highest priority), whose check
builds the operator as the codegen will (:func:`row_program_spec`) and asks the planner whether it
fits; anything else (a reduction over non-contiguous axes, two inputs) leaves the subgraph as the
operators it is.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import DFPattern, is_const, is_op, wildcard
from tvm.relax.transform import PatternCheckContext
from tvm_npu.tir_schedules.rowwise import param_name
from tvm_npu.tir_schedules.tile_search import fits

from tvm_npu.config import DType, NpuTarget
from tvm_npu.core.ops import Along, RowKind, RowParam, RowwiseSpec, TensorRef

from . import rowwise_algebra as alg
from .extract import ExtractedOp, GenericConst, const_array, tensor_type
from .spatial_mean import SPATIAL_AXES

#: The composite name of a recognised row program.
ROW_PROGRAM = "npu.row_program"

REDUCTIONS = frozenset({"relax.sum", "relax.mean", "relax.max", "relax.min", "relax.variance"})
_BINARY: dict[str, Callable[[alg.Node, alg.Node], alg.Node]] = {
    "relax.add": alg.add, "relax.subtract": alg.sub, "relax.multiply": alg.mul, "relax.divide": alg.div,
    "relax.maximum": alg.maximum, "relax.minimum": alg.minimum,
}
_UNARY: dict[str, Callable[[alg.Node], alg.Node]] = {
    "relax.sqrt": alg.sqrt, "relax.rsqrt": alg.rsqrt, "relax.exp": alg.exp, "relax.negative": alg.neg,
    "relax.log": alg.log, "relax.abs": lambda a: alg.maximum(a, alg.neg(a)),
}
_IMM = (tvm.tirx.FloatImm, tvm.tirx.IntImm)  # scalar attributes passed as arguments (a clip's bounds)
_OPS = REDUCTIONS | set(_BINARY) | set(_UNARY) | {"relax.power", "relax.reshape", "relax.broadcast_to", "relax.clip"}


@dataclass(frozen=True)
class RowProgram:
    """A recognised subgraph: its data, the ``rows x cols`` view, the canonical expression of its result
    and the constants that expression names (key -> values in the shape ``along`` gives, and ``along``)."""

    data: relax.Var
    rows: int
    cols: int
    expr: alg.Node
    params: Mapping[str, tuple[np.ndarray, Along]]


def _float_tensor(expr: relax.Expr) -> tuple[int, ...]:
    shape, dtype = tensor_type(expr)
    if dtype != DType.FP32:
        raise alg.NotRowwise(f"a row program on {dtype.np.name}; accepted: float32")
    return shape


def _reduced_cols(call: relax.Call) -> int:
    """The row length of a reduction over trailing axes (no ``axis``: all of them, one row), else
    :class:`NotRowwise`. Without ``keepdims`` its value drops the reduced axes; where it would then
    broadcast against the rows, :meth:`_Canon._operand` refuses it."""
    shape = _float_tensor(call.args[0])
    rank = len(shape)
    axes = sorted(int(a) % rank for a in call.attrs.axis) if call.attrs.axis is not None else list(range(rank))
    if not axes or axes != list(range(axes[0], len(shape))):
        raise alg.NotRowwise(f"{call.op.name} over axes {axes} of {list(shape)}; a row is a set of trailing axes")
    return math.prod(shape[axes[0]:])


class _Canon:
    """Relax expressions of one subgraph -> canonical nodes over ``rows x cols`` of its data."""

    def __init__(self, bindings: Mapping[relax.Var, relax.Expr], data: relax.Var, cols: int) -> None:
        self.bindings = bindings
        self.data = data
        self.cols = cols
        size = math.prod(_float_tensor(data))
        if size % cols:
            raise alg.NotRowwise(f"rows of {cols} elements do not tile the data of {size}")
        self.rows = size // cols
        self.params: dict[str, tuple[np.ndarray, Along]] = {}
        self.memo: dict[relax.Expr, alg.Node] = {}

    def node(self, expr: relax.Expr) -> alg.Node:
        if expr.same_as(self.data):
            return alg.X
        if expr in self.memo:
            return self.memo[expr]
        call = self.bindings.get(expr) if isinstance(expr, relax.Var) else expr
        if not isinstance(call, relax.Call):
            raise alg.NotRowwise(f"{expr} is neither the data nor computed in the subgraph")
        self.memo[expr] = n = self._call(call)
        return n

    def _call(self, call: relax.Call) -> alg.Node:
        op = call.op.name
        out = _float_tensor(call)
        if op in REDUCTIONS:
            if _reduced_cols(call) != self.cols:
                raise alg.NotRowwise(f"reductions over rows of {_reduced_cols(call)} and {self.cols} elements")
            a = self._full(call.args[0])
            reduce = {"relax.sum": alg.rsum, "relax.max": alg.rmax, "relax.min": alg.rmin,
                      "relax.mean": lambda v: alg.mean(v, self.cols),
                      "relax.variance": lambda v: alg.variance(v, self.cols)}[op]
            return reduce(a)
        if op == "relax.reshape":
            return self.node(call.args[0])  # row-major order is unchanged: the same rows
        if op == "relax.broadcast_to":  # (ONNX Expand) a value per row over its row, or nothing
            return self._operand(call.args[0], out, call)
        if op == "relax.clip":
            lo, hi = (self._scalar(a, "a clip bound") for a in call.args[1:])
            return alg.minimum(alg.maximum(self.node(call.args[0]), alg.const(lo)), alg.const(hi))
        if op in _UNARY:
            return _UNARY[op](self.node(call.args[0]))
        if op == "relax.power":
            p = self._scalar(call.args[1], "an exponent")
            return alg.power(self.node(call.args[0]), p)
        if op in _BINARY:
            a, b = (self._operand(x, out, call.args[1 - i]) for i, x in enumerate(call.args))
            return _BINARY[op](a, b)
        raise alg.NotRowwise(f"{op} is not an elementwise operator or a row reduction")

    def _full(self, expr: relax.Expr) -> alg.Node:
        n = self.node(expr)
        if math.prod(_float_tensor(expr)) != self.rows * self.cols:
            raise alg.NotRowwise("a reduction of a value with fewer elements than the data")
        return n

    def _scalar(self, expr: relax.Expr, what: str) -> float:
        if isinstance(expr, _IMM):
            return float(expr.value)
        if not isinstance(expr, GenericConst) or const_array(expr).size != 1:
            raise alg.NotRowwise(f"{what} must be one constant")
        return float(const_array(expr).reshape(()))

    def _operand(self, expr: relax.Expr, out: tuple[int, ...], other: relax.Expr) -> alg.Node:
        """A binary operator's operand: a constant classified against the output, or a value whose shape
        lines up with the output (the same, or one value per row of it)."""
        if isinstance(expr, GenericConst):
            lined_up = isinstance(other, GenericConst) or _float_tensor(other) == out or \
                self._per_row(_float_tensor(other), out)
            if not lined_up:
                raise alg.NotRowwise(f"a constant broadcasts the value {_float_tensor(other)} to {out}")
            return self._constant(const_array(expr), out)
        shape = _float_tensor(expr)
        if shape != out and not self._per_row(shape, out):
            raise alg.NotRowwise(f"a value of shape {list(shape)} broadcast to {list(out)} is not one per row")
        return self.node(expr)

    def _per_row(self, shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
        """``shape`` is ``out`` with its trailing axes of ``cols`` elements kept as ones."""
        if len(shape) != len(out) or math.prod(out) != self.rows * self.cols:
            return False
        k = len(shape)
        while k > 0 and shape[k - 1] == 1:
            k -= 1
        return shape[:k] == out[:k] and math.prod(out[k:]) == self.cols

    def _constant(self, arr: np.ndarray, out: tuple[int, ...]) -> alg.Node:
        try:
            full = np.broadcast_to(np.asarray(arr, np.float32), out)
        except ValueError:
            raise alg.NotRowwise(f"a constant of shape {list(arr.shape)} does not broadcast to {list(out)}") from None
        size = math.prod(out)
        if size == self.rows:
            m = full.reshape(self.rows, 1)
        elif size == self.rows * self.cols:
            m = full.reshape(self.rows, self.cols)
        else:
            raise alg.NotRowwise(f"a value of {size} elements in a program over {self.rows} rows of {self.cols}")
        if (m == m.flat[0]).all():
            return alg.const(float(m.flat[0]))
        if (m == m[:1]).all():
            return self._param(m[0], Along.COLS)
        if (m == m[:, :1]).all():
            return self._param(m[:, 0], Along.ROWS)
        return self._param(m, Along.FULL)

    def _param(self, values: np.ndarray, along: Along) -> alg.Node:
        values = np.ascontiguousarray(values, np.float32)
        key = hashlib.sha1(along.value.encode() + values.tobytes()).hexdigest()[:16]
        self.params.setdefault(key, (values, along))
        return alg.param(along, key)


def _row_length(bindings: Mapping[relax.Var, relax.Expr]) -> int:
    lengths = {_reduced_cols(c) for c in bindings.values() if isinstance(c, relax.Call) and c.op.name in REDUCTIONS}
    if not lengths:
        raise alg.NotRowwise("no row reduction")
    if len(lengths) > 1:
        raise alg.NotRowwise(f"reductions over rows of different lengths {sorted(lengths)}")
    return lengths.pop()


def _data_of(bindings: Mapping[relax.Var, relax.Expr]) -> relax.Var:
    """The one tensor the subgraph reads from outside (constants aside; a reshape's target shape passed in
    as a shape value, as a symbolic build's composite functions get it, is not data)."""
    leaves = []
    for call in bindings.values():
        for a in call.args if isinstance(call, relax.Call) else ():
            if isinstance(a, relax.Var) and a not in bindings and not any(a.same_as(v) for v in leaves) \
                    and isinstance(a.ty, relax.TensorType):
                leaves.append(a)
    if len(leaves) != 1:
        raise alg.NotRowwise(f"a row program reads one tensor, this subgraph {len(leaves)}")
    return leaves[0]


def recognise(root: relax.Expr, bindings: Mapping[relax.Var, relax.Expr]) -> RowProgram:
    """The row program ``root`` computes from the subgraph ``bindings`` (:class:`NotRowwise` with the
    reason when it is none)."""
    data = _data_of(bindings)
    canon = _Canon(bindings, data, _row_length(bindings))
    expr = canon.node(root)
    size = math.prod(_float_tensor(root))
    per_element = size == canon.rows * canon.cols and alg.level(expr) == 2
    if not per_element and not (size == canon.rows and alg.level(expr) == 1):
        raise alg.NotRowwise("the subgraph's result is neither one value per element of its data nor one per row")
    if not per_element and _global_pool(bindings):
        raise alg.NotRowwise("a mean over H and W of a 4-D tensor: the NPU's global average pool")
    return RowProgram(data, canon.rows, canon.cols, expr, canon.params)


def _global_pool(bindings: Mapping[relax.Var, relax.Expr]) -> bool:
    """The subgraph is one mean over the spatial axes of NCHW or NHWC (the pattern table's global average
    pool, which keeps that form), with nothing else but reshapes."""
    calls = [c for c in bindings.values() if isinstance(c, relax.Call) and c.op.name != "relax.reshape"]
    if len(calls) != 1 or calls[0].op.name != "relax.mean" or calls[0].attrs.axis is None:
        return False
    # by rank and axes, not by static sizes: a symbolic build judges the same mean at its probe size
    ndim = getattr(calls[0].args[0].ty, "ndim", -1)
    return ndim == 4 and tuple(sorted(int(a) % 4 for a in calls[0].attrs.axis)) in SPATIAL_AXES


def _constants(node: alg.Node) -> set[float]:
    """The scalar constants of a canonical expression."""
    if node[0] == "c":
        return {node[1]}
    return set().union(*(_constants(c) for c in node if isinstance(c, tuple)))


def _layer_norm_form(n: int, eps: float, gamma: str | None, beta: str | None) -> alg.Node:
    """``(x - mean) / sqrt(mean((x - mean)^2) + eps) [* gamma] [+ beta]`` over rows of ``n``, canonical."""
    d = alg.sub(alg.X, alg.mean(alg.X, n))
    y = alg.mul(d, alg.rsqrt(alg.add(alg.mean(alg.mul(d, d), n), alg.const(eps))))
    if gamma is not None:
        y = alg.mul(y, alg.param(Along.COLS, gamma))
    return y if beta is None else alg.add(y, alg.param(Along.COLS, beta))


def layer_norm_of(prog: RowProgram) -> tuple[float, np.ndarray, np.ndarray] | None:
    """(eps, gamma, beta) when ``prog`` is a layer norm over the last axis (its canonical form is a layer norm's
    for one of its constants and per-position vectors), else None."""
    if prog.cols != _float_tensor(prog.data)[-1]:
        return None
    vectors = [None, *(k for k, (_, along) in prog.params.items() if along == Along.COLS)]
    for eps in sorted(v for v in _constants(prog.expr) | {0.0} if v >= 0.0):
        for g in vectors:
            for b in vectors:
                if _layer_norm_form(prog.cols, eps, g, b) == prog.expr:
                    gamma = prog.params[g][0] if g is not None else np.ones(prog.cols, np.float32)
                    beta = prog.params[b][0] if b is not None else np.zeros(prog.cols, np.float32)
                    return eps, gamma, beta
    return None


def row_program_spec(prog: RowProgram, out: TensorRef, data_name: str,
                     const_name: Callable[[int], str]) -> tuple[RowwiseSpec, dict[str, np.ndarray]]:
    """The row-wise operator of ``prog`` (its constants named ``const_name(k)``) and the constants."""
    names = {key: param_name(k) for k, key in enumerate(prog.params)}
    steps = alg.program(prog.expr, names)
    shape = _float_tensor(prog.data)
    if prog.cols < 2:
        raise alg.NotRowwise("rows of one element (its reductions are trivial) stay on the host")
    consts, params = {}, []
    for k, (values, along) in enumerate(prog.params.values()):
        consts[const_name(k)] = values
        params.append(RowParam(TensorRef(const_name(k), values.shape, DType.FP32), along))
    spec = RowwiseSpec("row_program", out, data=TensorRef(data_name, shape, DType.FP32), kind=RowKind.PROGRAM,
                       row_length=0 if prog.cols == shape[-1] else prog.cols, params=tuple(params), program=steps)
    return spec, consts


def extract_row_program(func: relax.Function, arg_names: Sequence[str], out_name: str,
                        const_prefix: str) -> ExtractedOp:
    """The operator of an ``npu.row_program`` composite function (as :func:`~.extract.extract_op`)."""
    body = func.body
    bindings = {b.var: b.value for block in body.blocks for b in block.bindings}
    names = dict(zip(func.params, arg_names, strict=True))
    prog = recognise(body.body, bindings)
    if prog.data not in names:
        raise ValueError(f"the data of a row program is not a parameter of {func}")
    out = TensorRef(out_name, _float_tensor(body.body), DType.FP32)
    spec, consts = row_program_spec(prog, out, names[prog.data], lambda k: f"{const_prefix}_{k}")
    return ExtractedOp(spec, consts)


# ----------------------------------------------------------------------------- finding them
def _uses(func: relax.Function) -> dict[relax.Var, set]:
    """Who reads each variable: the variables bound to its readers (``None`` for the function's result)."""
    uses: dict[relax.Var, set] = {}

    def visit(expr: relax.Expr, user: relax.Var | None) -> None:
        if isinstance(expr, relax.Var):
            uses.setdefault(expr, set()).add(user)
        elif isinstance(expr, relax.Call):
            for a in expr.args:
                visit(a, user)
        elif isinstance(expr, relax.Tuple):
            for f in expr.fields:
                visit(f, user)

    for block in func.body.blocks:
        for b in block.bindings:
            visit(b.value, b.var)
    visit(func.body.body, None)
    return uses


def _grow(data: relax.Var, calls: Mapping[relax.Var, relax.Call]) -> list[relax.Var]:
    """Every binding computed from ``data`` and constants alone by the operators a program may hold."""
    inside = {data}
    grown = []
    for var, call in calls.items():
        if call.op.name not in _OPS:
            continue
        tensors = [a for a in call.args if isinstance(a, relax.Var)]
        rest = [a for a in call.args if not isinstance(a, (relax.Var, GenericConst, relax.ShapeExpr, *_IMM))]
        if tensors and not rest and all(a in inside for a in tensors):
            inside.add(var)
            grown.append(var)
    return grown


def _closure(out: relax.Var, calls: Mapping[relax.Var, relax.Call], region: set) -> dict[relax.Var, relax.Call]:
    """The bindings of ``region`` that ``out`` is computed from (``out`` included)."""
    todo, seen = [out], {}
    while todo:
        v = todo.pop()
        if v in seen or v not in region:
            continue
        seen[v] = calls[v]
        todo += [a for a in calls[v].args if isinstance(a, relax.Var)]
    return seen


def find_row_programs(func: relax.Function, accept: Callable[[relax.Var, dict], object] | None = None,
                      ) -> list[tuple[relax.Var, dict[relax.Var, relax.Call]]]:
    """The subgraphs of ``func`` that are row programs, as (result, bindings in program order): for each tensor
    read by a reduction, the largest program computed from it whose intermediate values nothing else reads
    and that ``accept`` takes (default :func:`recognise`; it raises :class:`NotRowwise` to refuse). Programs
    with one value per element of their data are found first, then, over what is left, those with one value
    per row (a plain reduction), so a normalisation is never cut at its per-row statistics."""
    calls = {b.var: b.value for block in func.body.blocks for b in block.bindings
             if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)}
    uses = _uses(func)
    found, taken = [], set()
    chains = [_chain(c.args[0], calls) for c in calls.values() if c.op.name in REDUCTIONS]
    for per_row in (False, True):  # a reduction's own program from its furthest data: its prologue fused in
        for data in dict.fromkeys(a for chain in chains for a in (reversed(chain) if per_row else chain)):
            hit = _largest(data, calls, uses, taken, per_row, accept or recognise)
            if hit is not None:
                found.append(hit)
                taken |= set(hit[1])
    return found


def _elements(expr: relax.Expr) -> int | None:
    try:
        return math.prod(tensor_type(expr)[0])
    except ValueError:
        return None


def _largest(data: relax.Var, calls: Mapping[relax.Var, relax.Call], uses: Mapping[relax.Var, set], taken: set,
             per_row: bool, accept: Callable[[relax.Var, dict], object],
             ) -> tuple[relax.Var, dict[relax.Var, relax.Call]] | None:
    """The largest program computed from ``data`` that takes nothing in ``taken`` (with ``per_row`` False, only one
    whose result has ``data``'s element count)."""
    region = _grow(data, calls)
    members = set(region)
    for out in reversed(region):
        if not per_row and _elements(out) != _elements(data):
            continue
        closure = _closure(out, calls, members)
        sub = {v: calls[v] for v in region if v in closure}  # (in program order)
        if out in taken or any(v in taken for v in sub):
            continue
        if any(u not in sub for v in sub if v is not out for u in uses.get(v, ())):
            continue  # an intermediate value is read elsewhere: not one operator
        try:
            accept(out, sub)
        except (alg.NotRowwise, ValueError):
            continue
        return out, sub
    return None


def _chain(expr: relax.Expr, calls: Mapping[relax.Var, relax.Call]) -> list[relax.Var]:
    """A reduction's argument and the values it is computed from through operators of one tensor each:
    the candidates for the data of the program around the reduction."""
    out = []
    while isinstance(expr, relax.Var):
        out.append(expr)
        call = calls.get(expr)
        if call is None or call.op.name not in _OPS:
            break
        tensors = list(dict.fromkeys(a for a in call.args if isinstance(a, relax.Var)))
        if len(tensors) != 1:
            break
        expr = tensors[0]
    return out


def _pattern(sub: Mapping[relax.Var, relax.Call], out: relax.Var, data: relax.Var) -> DFPattern:
    """The subgraph's own structure as a pattern (the data a wildcard, constants any constant)."""
    memo: dict[relax.Var, DFPattern] = {data: wildcard()}

    def pat(expr: relax.Expr) -> DFPattern:
        if isinstance(expr, GenericConst):
            return is_const()
        if not isinstance(expr, relax.Var):
            return wildcard()
        if expr not in memo:
            call = sub[expr]
            memo[expr] = is_op(call.op.name)(*(pat(a) for a in call.args))
        return memo[expr]

    return pat(out)


def _check(target: NpuTarget) -> Callable[[PatternCheckContext], bool]:
    """Accept a match that is a row program, no value of which is read outside it, and that fits."""

    def check(ctx: PatternCheckContext) -> bool:
        inside = set(ctx.matched_bindings.keys())
        root = ctx.value_to_bound_var.get(ctx.matched_expr)
        if any(u not in inside for v in inside if not v.same_as(root) for u in ctx.var_usages.get(v, [])):
            return False
        try:
            prog = recognise(ctx.matched_expr, dict(ctx.matched_bindings.items()))
            out = TensorRef(root.name if root is not None else "out", _float_tensor(ctx.matched_expr), DType.FP32)
            spec, _ = row_program_spec(prog, out, prog.data.name, lambda k: f"const_{k}")
        except (alg.NotRowwise, ValueError):
            return False
        return fits(spec, target.hw, target.options)

    return check


def _signature(sub: Mapping[relax.Var, relax.Call], out: relax.Var, data: relax.Var) -> str:
    """The subgraph's structure as text (values numbered, constants ``c``): equal for every instance of one
    structure, which one pattern matches."""
    ids: dict[relax.Var, int] = {data: 0}
    parts: list[str] = []

    def sig(expr: relax.Expr) -> str:
        if isinstance(expr, GenericConst):
            return "c"
        if not isinstance(expr, relax.Var):
            return "_"
        if expr not in ids:
            call = sub[expr]
            args = ",".join(sig(a) for a in call.args)
            ids[expr] = len(ids)
            parts.append(f"%{ids[expr]}={call.op.name}({args})")
        return f"%{ids[expr]}"

    sig(out)
    return ";".join(parts)


def row_program_entries(mod: tvm.IRModule, target: NpuTarget) -> list[tuple]:
    """``(name, pattern, annotations, check)`` entries for ``FuseOpsByPattern``, one per distinct structure
    of the row programs in ``mod``'s functions (highest priority: put them first)."""
    entries, seen = [], set()
    check = _check(target)
    for func in mod.functions.values():
        if not isinstance(func, relax.Function) or (func.attrs and "Codegen" in func.attrs):
            continue
        for out, sub in find_row_programs(func):
            data = _data_of(sub)
            key = _signature(sub, out, data)
            if key not in seen:
                seen.add(key)
                entries.append((ROW_PROGRAM, _pattern(sub, out, data), {}, check))
    return entries
