"""Row programs over leading axes, made programs over rows by a transposing view.

A row program (:mod:`.rowwise_region`) reduces over trailing axes: those are consecutive elements, a
row. A normalisation over other contiguous axes (an L2 normalisation over the channels of NCHW, as
SSD's L2Norm and ONNX ``LpNormalization(axis=1)`` compute it; a norm over axis 1 of (N, C, L)) is
rewritten onto ``permute_dims(x, p)`` with ``p`` moving those axes to the end: the same operators with
their constants transposed alike and their reductions over the trailing axes, then the inverse
``permute_dims`` (none for a result without the reduced axes: a reduction without ``keepdims`` gives
the kept axes in their order, as the original did, e.g. a ViT head's mean over the tokens of
``[N, T, C]``). Inside a partition both transposes are views, so the one row-wise operator reads
its rows and writes its result through strides. Only where the rewritten subgraph is a row program
(float32, static shapes, every value but a reduced result of the data's rank), so no transpose is left on the host for
nothing.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from . import rowwise_algebra as alg
from .extract import GenericConst, const_array, tensor_type
from .rowwise_region import REDUCTIONS, find_row_programs, recognise

_REDUCE = {"relax.sum": relax.op.sum, "relax.mean": relax.op.mean, "relax.max": relax.op.max,
           "relax.min": relax.op.min, "relax.variance": relax.op.variance}


def _moved_axes(sub: dict[relax.Var, relax.Call], rank: int) -> list[int]:
    """The permutation moving the one set of contiguous axes every reduction of ``sub`` reduces to the end
    (:class:`NotRowwise` when they are already last, differ, or are not contiguous). Only the result may drop
    the reduced axes (a reduction without ``keepdims``: one value per row, in the kept axes' order)."""
    sets = set()
    result = next(reversed(sub))
    for var, call in sub.items():
        dropped = var is result and call.op.name in REDUCTIONS and not call.attrs.keepdims
        if len(tensor_type(call)[0]) != rank and not dropped:
            raise alg.NotRowwise("a value of another rank than the data's")
        if call.op.name in REDUCTIONS:
            if (not call.attrs.keepdims and not dropped) or call.attrs.axis is None:
                raise alg.NotRowwise("a reduction without keepdims inside the program")
            sets.add(tuple(sorted(int(a) % rank for a in call.attrs.axis)))
        elif call.op.name in ("relax.reshape", "relax.broadcast_to"):
            raise alg.NotRowwise("a reshape inside a program over leading axes")
    if len(sets) != 1:
        raise alg.NotRowwise(f"reductions over {sorted(sets)}; a program has one row")
    (axes,) = sets
    if list(axes) != list(range(axes[0], axes[-1] + 1)) or axes[-1] == rank - 1:
        raise alg.NotRowwise(f"axes {list(axes)} are not contiguous leading axes")
    return [a for a in range(rank) if a not in axes] + list(axes)


def _permuted(sub: dict[relax.Var, relax.Call], data: relax.Var, perm: list[int],
              dataflow: bool) -> tuple[list[tuple[relax.Var, relax.Expr]], relax.Var]:
    """``sub`` rebuilt on ``permute_dims(data, perm)``: its new bindings (the transpose first) and result."""
    bb = relax.BlockBuilder()
    rank = len(perm)
    var_type = relax.DataflowVar if dataflow else relax.Var
    bindings: list[tuple[relax.Var, relax.Expr]] = []

    def bind(name: str, value: relax.Expr) -> relax.Var:
        value = bb.normalize(value)
        v = var_type(name, value.ty)
        bindings.append((v, value))
        return v

    new = {data: bind("rows", relax.op.permute_dims(data, perm))}

    def arg(a: relax.Expr) -> relax.Expr:
        if isinstance(a, relax.Var):
            return new[a]
        if isinstance(a, GenericConst) and const_array(a).ndim:
            c = const_array(a)
            return relax.const(np.ascontiguousarray(c.reshape((1,) * (rank - c.ndim) + c.shape).transpose(perm)))
        return a

    for var, call in sub.items():
        if call.op.name in REDUCTIONS:
            moved = len(call.attrs.axis)
            value = _REDUCE[call.op.name](new[call.args[0]], list(range(rank - moved, rank)),
                                          keepdims=bool(call.attrs.keepdims))
        else:
            value = relax.Call(call.op, [arg(a) for a in call.args], call.attrs)
        new[var] = bind(var.name, value)
    return bindings, new[next(reversed(sub))]


def _plan(out: relax.Var, sub: dict[relax.Var, relax.Call], dataflow: bool) -> list[tuple[relax.Var, relax.Expr]]:
    """The bindings replacing ``out``'s (the permuted program, then ``out`` bound to the inverse transpose)."""
    data = next(a for c in sub.values() for a in c.args if isinstance(a, relax.Var) and a not in sub)
    perm = _moved_axes(sub, len(tensor_type(data)[0]))
    bindings, result = _permuted(sub, data, perm, dataflow)
    recognise(result, dict(bindings[1:]))  # the rebuilt subgraph is a row program over the transposed data
    if len(tensor_type(result)[0]) < len(perm):  # the kept axes, in their order: the result as it is
        return [*bindings[:-1], (out, bindings[-1][1])]
    inverse = [perm.index(a) for a in range(len(perm))]
    return [*bindings, (out, relax.BlockBuilder().normalize(relax.op.permute_dims(result, inverse)))]


def rows_last(func: relax.Function) -> relax.Function:
    """Every row program over contiguous leading axes -> the same over the transposed data (module docstring)."""
    plans: dict[relax.Var, list] = {}

    def accept(out: relax.Var, sub: dict) -> None:
        plans[out] = _plan(out, sub, isinstance(out, relax.DataflowVar))

    found = {out for out, _ in find_row_programs(func, accept)}
    if not found:
        return func
    blocks = []
    for block in func.body.blocks:
        bindings = []
        for b in block.bindings:
            bindings += [relax.VarBinding(v, e) for v, e in plans[b.var]] if b.var in found else [b]
        blocks.append(type(block)(bindings))
    return relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty, func.is_pure, func.attrs,
                          func.span)
