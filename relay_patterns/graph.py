"""The partition stage's hand-over: a ``Codegen="npu"`` Relax function as a :class:`PartitionGraph`.

The function's bindings are calls to composite functions, one per matched pattern;
each becomes an operator spec (``extract.py``), named in program order. Tensors get
DRAM names: ``in{i}_<param>`` for the function's parameters, ``t{k}_<var>`` for what
operator ``k`` computes, ``k{k}_{j}`` for the constants operator ``k`` names.

Data movement is not an operator here. An ``npu.view`` (reshape, flatten, squeeze,
expand_dims, a transpose keeping the innermost axis) names a tensor ``v{n}_<var>`` that
is a :class:`~tvm_npu.core.ops.View` of its input (so is a static strided slice or a gather of
constant evenly spaced indices); an ``npu.concat`` declares its output ``c{n}_<var>`` as a
DRAM buffer and turns each input computed in the partition (or a reshape / transpose of
one) into a view of its slice, so the producer stores straight into the concat. An input
that cannot be aliased (a partition input, a constant, a partition output, a slice or a
tensor in another concat) is copied into its slice by a 1x1 max pool (an exact copy
through SRAM); a slice of a concat filled only by copies is copied from that concat's
members instead (a roll along two axes). Chains of views are composed at the end (``tvm_npu/views.py``) and every
operand of every spec carries the view of the DRAM tensor it really reads or writes.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable
from dataclasses import replace

import numpy as np
from tvm import relax

import tvm_npu.core.views as views
from tvm_npu.config import DType
from tvm_npu.core.ops import OpSpec, PoolKind, PoolSpec, TensorRef, View
from tvm_npu.core.plan import GraphOp, PartitionGraph

from .extract import GenericConst, const_array, extract_op, tensor_type
from .rowwise_region import ROW_PROGRAM, extract_row_program

VIEW = "npu.view"  # the prefix of the view patterns (npu.view_reshape, ...)
CONCAT = "npu.concat"
#: What a copy that cannot be avoided is written as: a 1x1 max pool moves data unchanged.
COPY_PATTERN = "npu.copy"


class PartitionError(ValueError):
    """A function handed to the NPU is not a chain of ``npu.*`` composite calls (reported with its symbol)."""


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _inner_call(func: relax.Function) -> relax.Call:
    """The one operator call a view / concat composite function wraps."""
    body = func.body
    value = body.body
    bindings = {b.var: b.value for block in body.blocks for b in block.bindings}
    while isinstance(value, relax.Var) and value in bindings:
        value = bindings[value]
    if not isinstance(value, relax.Call):
        raise PartitionError(f"a {func.attrs['Composite']} composite does not end in a call")
    return value


def _ints(values: relax.Expr) -> list[int]:
    """A Relax tuple / shape of static integers (prim values or ``IntImm`` fields) as Python ints;
    ``TypeError`` for a symbolic one."""
    out = []
    for v in getattr(values, "values", values):
        while not isinstance(v, int):
            if not hasattr(v, "value"):
                raise TypeError(f"{v} is not a static integer")
            v = v.value
        out.append(v)
    return out


Selection = tuple[list[int], list[int], list[int], list[bool]]


def selection(call: relax.Call) -> Selection | None:
    """A ``strided_slice`` with static bounds and positive steps, or a ``take`` of constant evenly spaced
    indices along one axis, as (begin, step, extent, keep) per axis of its input (``views.strided``);
    None for anything else (it stays a host operator)."""
    shape = tensor_type(call.args[0])[0]
    begin, step, extent, keep = [0] * len(shape), [1] * len(shape), list(shape), [True] * len(shape)
    try:
        if call.op.name == "relax.strided_slice":
            axes, starts, ends, steps = (_ints(a) for a in call.args[1:5])
            if len(call.args) > 5 or not len(axes) == len(starts) == len(ends) == len(steps):
                return None
            for a, b, e, k in zip(axes, starts, ends, steps, strict=True):
                a %= len(shape)
                n = shape[a]
                if k < 1:
                    return None
                b, e = (min(max(x + n if x < 0 else x, 0), n) for x in (b, e))
                begin[a], step[a], extent[a] = b, k, max(0, -(-(e - b) // k))
        elif call.op.name == "relax.take":
            index = call.args[1]
            if call.attrs.axis is None or not isinstance(index, GenericConst):
                return None
            a = int(call.attrs.axis) % len(shape)
            idx = const_array(index).astype(np.int64)
            if idx.ndim > 1 or idx.size == 0:
                return None
            idx = np.where(idx < 0, idx + shape[a], idx).reshape(-1)
            steps = np.diff(idx)
            if len(steps) and (steps[0] < 1 or np.any(steps != steps[0])):
                return None
            begin[a], step[a], extent[a] = int(idx[0]), int(steps[0]) if len(steps) else 1, len(idx)
            keep[a] = const_array(index).ndim == 1
        else:
            return None
    except (TypeError, ValueError):
        return None
    if any(e < 1 or b < 0 or b + (e - 1) * k >= n for b, k, e, n in zip(begin, step, extent, shape, strict=True)):
        return None
    if tuple(e for e, kd in zip(extent, keep, strict=True) if kd) != tensor_type(call)[0]:
        return None
    return begin, step, extent, keep


class _Graph:
    """The partition being read: operators, tensor types, views relative to their source."""

    def __init__(self, symbol: str, outputs: set[relax.Var]) -> None:
        self.symbol = symbol
        self.output_vars = outputs
        self.ops: list[GraphOp] = []
        self.constants: dict[str, np.ndarray] = {}
        self.types: dict[str, tuple[tuple[int, ...], DType]] = {}
        self.rel: dict[str, View] = {}  # name -> view of another logical tensor
        self.produced: set[str] = set()  # written whole by an operator of the partition
        self.buffers: dict[str, TensorRef] = {}
        self.output_names: set[str] = set()  # filled as the bindings are read
        self.selected: dict[str, tuple[str, Selection]] = {}  # a slice / gather: its source and selection
        # a concat whose members were all copied in: its axis, (start, member) and the copies' names
        self.copied: dict[str, tuple[int, list[tuple[int, str]], list[str]]] = {}

    # ------------------------------------------------------------------ views
    def resolve(self, name: str, memo: dict[str, View | None] | None = None) -> View | None:
        """The view of a DRAM tensor that ``name`` is (None: ``name`` is stored on its own); ``memo``
        keeps the views resolved so far while ``rel`` does not change."""
        if memo is not None and name in memo:
            return memo[name]
        view = self.rel.get(name)
        if view is not None:
            outer = self.resolve(view.base, memo)
            view = view if outer is None else views.compose(view, outer)
        if memo is not None:
            memo[name] = view
        return view

    def add_view(self, name: str, view: View) -> None:
        """Record ``name`` as ``view``; when the chain cannot be composed, view a copy of the source instead."""
        self.rel[name] = view
        try:
            self.resolve(name)
        except views.NotAView:
            src = view.base
            if self.store_in_order(src):
                return
            copied = f"{src}_copy"
            self.copy(src, copied, store=True)
            self.rel[name] = replace(view, base=copied)

    def store_in_order(self, src: str) -> bool:
        """Store ``src``, a reshape / transpose of a whole tensor computed here (Swin's window reverse),
        on its own, its producer writing in ``src``'s order, when the views of ``src`` then compose (a
        slice of it that crosses its windows); saves copying ``src``. False: nothing changed."""
        if src not in self.rel:
            return False
        full = self.resolve(src)
        root = full.base
        if root not in self.produced or root in self.rel or root in self.output_names:
            return False
        inverse = views.invert(full, self.types[root][0], src)
        if inverse is None:
            return False
        saved = dict(self.rel)
        del self.rel[src]
        self.rel[root] = inverse
        if self._composable():
            shape, dtype = self.types[src]
            self.buffers[src] = TensorRef(src, shape, dtype)
            return True
        self.rel = saved
        return False

    def copy(self, src: str, dst: str, store: bool = False) -> None:
        """Append an operator copying ``src`` to ``dst`` (same shape; ``dst`` may be a view). ``store``:
        ``dst`` is a new DRAM tensor of its own."""
        shape, dtype = self.types[src]
        self.types[dst] = (shape, dtype)
        if dst not in self.rel and (store or len(shape) != 4):
            self.buffers[dst] = TensorRef(dst, shape, dtype)
        if len(shape) == 4:
            src4, dst4 = src, dst
        else:  # the pool works on 4-D tensors: read and write both under a 4-D shape
            flat = (*(1,) * (4 - len(shape)), *shape) if len(shape) < 4 else (math.prod(shape[:-3]), *shape[-3:])
            src4, dst4 = f"{src}_4d", f"{dst}_4d"
            for name, base in ((src4, src), (dst4, dst)):
                self.types[name] = (flat, dtype)
                self.rel[name] = views.reshape(base, flat)
            shape = flat
        spec = PoolSpec("copy", TensorRef(dst4, shape, dtype, "NCHW"), data=TensorRef(src4, shape, dtype, "NCHW"),
                        kind=PoolKind.MAX, kernel=(1, 1))
        self.ops.append(GraphOp(replace(spec, name=f"copy_{len(self.ops)}"), (COPY_PATTERN,)))

    def _composable(self, names: Iterable[str] | None = None) -> bool:
        memo: dict[str, View | None] = {}
        try:
            for other in list(self.rel if names is None else names):
                self.resolve(other, memo)
        except views.NotAView:
            return False
        return True

    def _named(self) -> set[str]:
        """Every tensor name an operator reads or writes."""
        names: set[str] = set()

        def note(t: TensorRef) -> TensorRef:
            names.add(t.name)
            return t

        for g in self.ops:
            views.map_refs(g.spec, note)
        return names

    def store_shuffled(self) -> None:
        """A strided view (a channel shuffle) read by operators, of a tensor computed here that nothing
        else reads, is turned around: the producer stores in the view's order (once per element) and
        the readers load plain tiles (a load per tile, often several per element, and the split axis
        would cost them extra DMA descriptors)."""
        # in the order the operators read them (not a set's, which depends on PYTHONHASHSEED): the
        # buffers are declared, so the program's tensor table is laid out, in this order
        read = dict.fromkeys(t.name for g in self.ops for t in g.spec.inputs)
        for name in [n for n in read if n in self.rel]:
            full = self.resolve(name)
            root = full.base
            if full.contiguous or root not in self.produced or root in read or root in self.output_names \
                    or any(n != name and n in self.rel and self.resolve(n).base == root for n in read):
                continue
            inverse = views.invert(full, self.types[root][0], name)
            if inverse is None:
                continue
            saved = dict(self.rel)
            del self.rel[name]
            self.rel[root] = inverse
            if self._composable(self._named()):
                shape, dtype = self.types[name]
                self.buffers[name] = TensorRef(name, shape, dtype)
            else:
                self.rel = saved

    def try_alias(self, name: str, view: View) -> bool:
        """Make ``name`` (written by an operator here) a view of a concat slice, unless a view already
        reading it could then not be composed."""
        self.rel[name] = view
        if not self._composable():
            del self.rel[name]
            return False
        return True

    def alias_root(self, name: str, view: View) -> bool:
        """Make ``name``, a reshape / transpose of a whole tensor computed here (ViT's tokens), a view of
        a concat slice by turning the chain around: the tensor becomes a view of ``name``, so its producer
        stores into the slice in the member's order. False (nothing changed) where that is not possible."""
        full = self.resolve(name)
        root = full.base
        if root not in self.produced or root in self.rel or root in self.output_names:
            return False
        inverse = views.invert(full, self.types[root][0], name)
        if inverse is None:
            return False
        saved = dict(self.rel)
        self.rel[name] = view
        self.rel[root] = inverse
        if self._composable():
            return True
        self.rel = saved
        return False

    # --------------------------------------------------------------- bindings
    def view(self, call: relax.Call, src: str, out: str) -> None:
        shape, _ = self.types[out]
        if call.op.name == "relax.permute_dims":
            src_shape = self.types[src][0]
            axes = call.attrs.axes
            order = [int(a) % len(src_shape) for a in axes] if axes is not None else \
                list(range(len(src_shape)))[::-1]
            self.add_view(out, views.permute(src, src_shape, order))
        elif call.op.name in ("relax.strided_slice", "relax.take"):
            picked = selection(call)
            if picked is None:
                raise PartitionError(f"{self.symbol}: {call.op.name} to {out} is not a static strided selection")
            self.add_view(out, views.strided(src, self.types[src][0], *picked))
            if self.rel[out].base == src:
                self.selected[out] = (src, picked)
        elif call.op.name == "relax.broadcast_to":  # read-only: stride 0 along the repeated axes
            self.add_view(out, views.broadcast(src, self.types[src][0], shape))
        else:  # reshape, flatten, squeeze, expand_dims: the row-major order is unchanged
            self.add_view(out, views.reshape(src, shape))

    def concat(self, call: relax.Call, members: list[tuple[relax.Var | None, str]], out: str) -> None:
        shape, dtype = self.types[out]
        self.buffers[out] = TensorRef(out, shape, dtype)
        axis = int(call.attrs.axis) % len(shape)
        start = 0
        spans: list[tuple[int, str]] = []
        copies: list[str] | None = []
        split = self.alias_split_members(members, out, axis)
        for i, (var, name) in enumerate(members):
            part = self.types[name][0]
            view = views.slice_of(out, shape, part, axis, start)
            spans.append((start, name))
            start += part[axis]
            if i in split:
                copies = None
                continue
            aliasable = name in self.produced and name not in self.rel and var not in self.output_vars
            if (aliasable and self.try_alias(name, view)) or (
                    name in self.rel and var is not None and var not in self.output_vars
                    and self.alias_root(name, view)):
                copies = None
                continue
            dst = f"{out}_in{i}"
            self.types[dst] = (part, dtype)
            self.rel[dst] = view
            first = len(self.ops)
            if not self.copy_pieces(name, dst):
                self.copy(name, dst)
            if copies is not None:
                copies.extend(g.spec.name for g in self.ops[first:])
        if copies is not None:
            self.copied[out] = (axis, spans, copies)

    def alias_split_members(self, members: list[tuple[relax.Var | None, str]], out: str, axis: int) -> set[int]:
        """Indices of concat members that are consecutive slices, along the concat's axis, covering a whole
        tensor computed here (YOLOv8's C2f: ``concat(split(x)..., m(x_k))``): that tensor becomes a view of
        the concat (its producer stores straight into it) and the slices read it there, no copy."""
        shape = self.types[out][0]
        found: set[int] = set()
        i = 0
        while i < len(members):
            src = self.selected.get(members[i][1], (None,))[0]
            src_shape = self.types[src][0] if src is not None else ()
            j, edge = i, 0
            while j < len(members) and self.selected.get(members[j][1], (None,))[0] == src and src is not None:
                begin, step, extent, keep = self.selected[members[j][1]][1]
                whole = all(b == 0 and e == n for d, (b, e, n) in enumerate(zip(begin, extent, src_shape,
                                                                                strict=True)) if d != axis)
                if not (whole and all(keep) and begin[axis] == edge and step[axis] == 1):
                    break
                edge, j = edge + extent[axis], j + 1
            start = sum(self.types[name][0][axis] for _, name in members[:i])
            if (j > i and edge == src_shape[axis] and src in self.produced and src not in self.rel
                    and src not in self.output_names
                    and self.try_alias(src, views.slice_of(out, shape, src_shape, axis, start))):
                found.update(range(i, j))
            i = max(j, i + 1)
        return found

    def copy_pieces(self, name: str, dst: str) -> bool:
        """Copy ``name``, a slice of a concat whose members were all copied in, into ``dst`` straight
        from those members, one piece per member it overlaps (a roll along two axes, Swin's cyclic
        shift: the first concat is then read by nothing and dropped, ``drop_unread_concats``)."""
        if name not in self.selected:
            return False
        src, (begin, step, extent, keep) = self.selected[name]
        if src not in self.copied or not all(keep):
            return False
        axis, spans, _ = self.copied[src]
        b, k, e = begin[axis], step[axis], extent[axis]
        part, dtype = self.types[dst]
        for i, (s, member) in enumerate(spans):
            shape = self.types[member][0]
            j0, j1 = max(0, -(-(s - b) // k)), min(e - 1, (s + shape[axis] - 1 - b) // k)
            if j0 > j1:
                continue
            first = [*begin[:axis], b + j0 * k - s, *begin[axis + 1:]]
            count = [*extent[:axis], j1 - j0 + 1, *extent[axis + 1:]]
            piece, into = f"{dst}_from{i}", f"{dst}_{i}"
            self.types[piece] = self.types[into] = (tuple(count), dtype)
            self.add_view(piece, views.strided(member, shape, first, step, count))
            self.rel[into] = views.strided(dst, part, [j0 if d == axis else 0 for d in range(len(part))],
                                           [1] * len(part), count)
            self.copy(piece, into)
        return True

    def drop_unread_concats(self, outputs: list[str]) -> None:
        """Remove a concat filled only by copies that nothing reads any more (``copy_pieces``)."""
        for buffer, (_, _, copies) in self.copied.items():
            if buffer in self.rel or buffer not in self.buffers:  # turned around into a result: it is one
                continue
            keep = [g for g in self.ops if g.spec.name not in copies]
            memo: dict[str, View | None] = {}
            names = set(outputs) | {t.name for g in keep for t in (*g.spec.inputs, g.spec.out)}
            if all((self.resolve(n, memo) or View(n, 0, ())).base != buffer for n in names):
                self.ops = keep
                del self.buffers[buffer]

    def finish_output(self, name: str) -> str:
        """The DRAM name of a partition output: a view output is stored on its own (module docstring)."""
        if name not in self.rel:
            return name
        full = self.resolve(name)
        root = full.base
        shape, dtype = self.types[name]
        inverse = views.invert(full, self.types[root][0], name)
        if inverse is not None and (root in self.produced or root in self.buffers) and root not in self.output_names:
            # a reshape / transpose of a whole tensor computed here: its writers store into the output instead
            saved = dict(self.rel)
            del self.rel[name]
            self.rel[root] = inverse
            if self._composable() and self._writers_keep_runs(name):
                buffer = self.buffers.pop(root, None)
                self.buffers[name] = TensorRef(name, shape, dtype)
                if buffer is None and root not in self.produced:
                    raise PartitionError(f"{self.symbol}: {root} has no writer")
                return name
            self.rel = saved
        stored = f"{name}_out"
        self.copy(name, stored, store=True)
        return stored

    def _writers_keep_runs(self, base: str) -> bool:
        """Whether every operator that would store into ``base`` still has a run of consecutive elements there.
        One that has none (the phases of an interleave, a transposed convolution's) would store element by
        element, a DRAM burst each; a copy of the result reads and writes in runs instead."""
        for g in self.ops:
            view = self.resolve(g.spec.out.name) if g.spec.out.name in self.rel else None
            if view is not None and view.base == base and math.prod(views.shape_of(view)) > 1 \
                    and not any(e > 1 and st == 1 for dim in view.dims for e, st in dim):
                return False
        return True

    def specs_with_views(self) -> list[GraphOp]:
        memo: dict[str, View | None] = {}
        resolved = {name: self.resolve(name, memo) for name in self._named() if name in self.rel}

        def ref(t: TensorRef) -> TensorRef:
            return replace(t, view=resolved[t.name]) if t.name in resolved else t

        return [replace(g, spec=views.map_refs(g.spec, ref)) for g in self.ops]


def _declared_views(spec: OpSpec) -> dict[str, View]:
    """Views the extraction itself introduced (a per-channel operand read from a ``[1, C, 1, 1]`` tensor)."""
    refs = [getattr(spec, f.name) for f in dataclasses.fields(spec)] + [e.operand for e in spec.epilogue]
    return {t.name: t.view for t in refs if isinstance(t, TensorRef) and t.view is not None}


def _concat_members(func: relax.Function, call: relax.Call, args: list[tuple[relax.Var, str]], prefix: str,
                    g: _Graph) -> list[tuple[relax.Var | None, str]]:
    """The members of the concat ``call`` inside composite ``func`` (called with ``args``) as (variable,
    tensor name); a constant member becomes a constant of the partition (no variable)."""
    bindings = {b.var: b.value for block in func.body.blocks for b in block.bindings}
    fields = call.args[0]
    while isinstance(fields, relax.Var) and fields in bindings:
        fields = bindings[fields]
    params = dict(zip(func.params, args, strict=True))
    members: list[tuple[relax.Var | None, str]] = []
    for i, f in enumerate(fields.fields):
        if isinstance(f, GenericConst):
            name = f"{prefix}_{i}"
            g.constants[name] = const_array(f)
            g.types[name] = tensor_type(f)
            members.append((None, name))
        elif f in params:
            members.append(params[f])
        else:
            raise PartitionError(f"{g.symbol}: concat member {f} is neither a parameter nor a constant")
    return members


def _result_fields(func: relax.Function) -> list[relax.Expr]:
    """What the partition returns: the fields of a returned tuple, or the one returned expression."""
    ret = func.body.body
    return list(ret.fields) if isinstance(ret, relax.Tuple) else [ret]


def _read_params(func: relax.Function, g: _Graph) -> tuple[dict[relax.Var, str], list[TensorRef]]:
    """Name the parameters ``in{i}_<param>``: the partition's DRAM inputs, in order. Returns the names by
    variable (the bindings add theirs) and the inputs."""
    names: dict[relax.Var, str] = {}
    inputs = []
    for i, p in enumerate(func.params):
        names[p] = f"in{i}_{_safe(p.name)}"
        shape, dtype = tensor_type(p)
        g.types[names[p]] = (shape, dtype)
        inputs.append(TensorRef(names[p], shape, dtype))
    return names, inputs


def _composite_callee(binding: relax.VarBinding, local: dict[relax.Var, relax.Function],
                      symbol: str) -> relax.Function:
    """The composite function ``binding`` calls (a local function or a global one): a partition is a
    chain of ``npu.*`` composite calls, anything else is a :class:`PartitionError`."""
    value = binding.value
    if not isinstance(value, relax.Call):
        raise PartitionError(f"{symbol}: unexpected binding in an NPU partition: {value}")
    callee = local.get(value.op) if isinstance(value.op, relax.Var) else value.op
    if not isinstance(callee, relax.Function) or "Composite" not in (callee.attrs or {}):
        raise PartitionError(f"{symbol}: binding {binding.var.name} is not a call to an npu.* composite function")
    return callee


def _arg_names(call: relax.Call, var: relax.Var, names: dict[relax.Var, str], symbol: str) -> list[str]:
    """The tensor names of ``call``'s arguments; each must be a tensor the partition already named."""
    arg_names = []
    for a in call.args:
        if not isinstance(a, relax.Var) or a not in names:
            raise PartitionError(f"{symbol}: argument {a} of {var.name} is not a tensor of the partition")
        arg_names.append(names[a])
    return arg_names


def _tensor_name(composite: str, var: relax.Var, names: dict[relax.Var, str], g: _Graph) -> str:
    """The DRAM name of what ``var`` computes (module docstring): ``v{n}_`` for a view, ``c{n}_`` for a
    concat (``n``: tensors named so far), ``t{k}_`` for the result of operator ``k``."""
    prefix = {VIEW: "v", CONCAT: "c"}.get(composite, "t")
    count = len(g.ops) if prefix == "t" else len(names)
    return f"{prefix}{count}_{_safe(var.name)}"


def _add_operator(g: _Graph, callee: relax.Function, composite: str, arg_names: list[str], out: str) -> None:
    """Append the operator a (non-view, non-concat) composite computes into ``out``, with its constants
    and the views its extraction declared."""
    extract = extract_row_program if composite == ROW_PROGRAM else extract_op  # (a recognised normalisation)
    extracted = extract(callee, arg_names, out, f"k{len(g.ops)}")
    g.constants.update(extracted.constants)
    for name, view in _declared_views(extracted.spec).items():
        g.types.setdefault(name, (views.shape_of(view), g.types[view.base][1]))
        g.rel[name] = view
    g.ops.append(GraphOp(replace(extracted.spec, name=f"{extracted.spec.name}_{len(g.ops)}"), (composite,)))
    g.produced.add(out)


def _read_binding(g: _Graph, var: relax.Var, call: relax.Call, callee: relax.Function,
                  names: dict[relax.Var, str]) -> None:
    """Name what ``var = call`` (a call to composite ``callee``) computes and add it to ``g`` as a view,
    a concat or an operator."""
    arg_names = _arg_names(call, var, names, g.symbol)
    composite = str(callee.attrs["Composite"])
    if composite.startswith(VIEW):
        composite = VIEW
    out = _tensor_name(composite, var, names, g)
    names[var] = out
    if var in g.output_vars:  # known before any concat that reads it (alias_root)
        g.output_names.add(out)
    g.types[out] = tensor_type(var)
    if composite == VIEW:
        g.view(_inner_call(callee), arg_names[0], out)
    elif composite == CONCAT:
        inner = _inner_call(callee)
        g.concat(inner, _concat_members(callee, inner, list(zip(call.args, arg_names, strict=True)),
                                        f"k{len(g.ops)}_cat{len(names)}", g), out)
    else:
        _add_operator(g, callee, composite, arg_names, out)


def _read_bindings(func: relax.Function, g: _Graph, names: dict[relax.Var, str]) -> None:
    """Read the partition's bindings in program order: a local function is kept for the calls that
    follow, every other binding is a composite call (:func:`_read_binding`)."""
    local: dict[relax.Var, relax.Function] = {}
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b.value, relax.Function):
                local[b.var] = b.value
                continue
            _read_binding(g, b.var, b.value, _composite_callee(b, local, g.symbol), names)


def _finish_outputs(g: _Graph, fields: list[relax.Expr], names: dict[relax.Var, str],
                    inputs: list[TensorRef]) -> list[str]:
    """The DRAM names of the partition's results, once the whole partition is read: shuffled views are
    turned around first, a result that is a view is stored on its own, unread concats are dropped."""
    for f in fields:
        if not isinstance(f, relax.Var) or f not in names:
            raise PartitionError(f"{g.symbol}: partition result {f} is not a tensor computed in the partition")
    g.output_names = {names[f] for f in fields}
    g.store_shuffled()
    outputs: list[str] = []
    for f in fields:
        name = names[f]
        if name in {t.name for t in inputs}:
            raise PartitionError(f"{g.symbol}: partition result {f} is one of its inputs")
        outputs.append(g.finish_output(name))
    g.drop_unread_concats(outputs)
    return outputs


def partition_graph(func: relax.Function, symbol: str) -> PartitionGraph:
    """The operators, DRAM inputs/outputs and constants of one NPU partition function."""
    fields = _result_fields(func)
    g = _Graph(symbol, {f for f in fields if isinstance(f, relax.Var)})
    names, inputs = _read_params(func, g)
    _read_bindings(func, g, names)
    outputs = _finish_outputs(g, fields, names, inputs)
    if not g.ops:
        raise PartitionError(f"{symbol}: the partition computes nothing")
    return PartitionGraph(symbol, tuple(inputs), tuple(outputs), tuple(g.specs_with_views()), g.constants,
                          tuple(g.buffers.values()))
