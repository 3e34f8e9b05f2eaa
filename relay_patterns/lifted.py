"""Pattern rewrites with the constants out of the way.

TVM's ``rewrite_call`` iterates to a fixed point: after every round that changed something it
canonicalises bindings, eliminates common subexpressions and compares the whole function with the
previous round, which hashes and compares every constant's bytes. On a model with 100-500 MB of
weights that is 0.5-5 s per rewrite that fires, whatever the rewrite. :func:`with_lifted_constants`
runs rewrites on the function with its constants turned into parameters (vars of the same type,
compared by identity) and binds them back afterwards; rewriters that need a constant's value look
it up with :meth:`Lifted.value`, and put new constants in with :meth:`Lifted.add`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tvm import relax
from tvm.ir.expr import GenericConst


def _view(const: GenericConst) -> np.ndarray:
    return np.from_dlpack(const.value)  # no copy: only compared


def _shared_vars(func: relax.Function) -> dict[GenericConst, relax.Var]:
    """A var per distinct constant value: equal constants share one, as TVM's common subexpression
    elimination (part of every ``rewrite_call``) treats them alike. Only constants of one type are
    compared."""
    groups: dict[tuple[str, str], list[GenericConst]] = {}

    def visit(e: relax.Expr) -> None:
        if isinstance(e, GenericConst):
            group = groups.setdefault((str(e.ty), str(e.value.dtype)), [])
            if not any(c.same_as(e) for c in group):
                group.append(e)

    relax.analysis.post_order_visit(func.body, visit)
    out: dict[GenericConst, relax.Var] = {}
    for group in groups.values():
        seen: list[tuple[GenericConst, relax.Var]] = []
        for const in group:
            var = next((v for other, v in seen if np.array_equal(_view(other), _view(const))), None)
            if var is None:
                var = relax.Var(f"lifted_const{len(out)}", const.ty)
                seen.append((const, var))
            out[const] = var
    return out


@relax.expr_functor.mutator
class _Lift(relax.PyExprMutator):
    """Every constant -> its var."""

    def __init__(self, vars_: dict[GenericConst, relax.Var]) -> None:
        super().__init__()
        self.vars = vars_

    def visit_generic_const_(self, const: GenericConst) -> relax.Expr:
        return self.vars[const]


class Lifted:
    """The lifted constants of one function: the constant each var stands for."""

    def __init__(self, consts: dict[relax.Var, GenericConst]) -> None:
        self._consts = consts

    def const(self, expr: relax.Expr) -> GenericConst | None:
        """The constant ``expr`` is or stands for (None: not a constant)."""
        if isinstance(expr, GenericConst):
            return expr
        return self._consts.get(expr) if isinstance(expr, relax.Var) else None

    def value(self, expr: relax.Expr) -> np.ndarray | None:
        """The numpy value of the constant ``expr`` is or stands for (None: not a constant)."""
        const = self.const(expr)
        return None if const is None else np.asarray(const.value.numpy())

    def add(self, value: np.ndarray) -> relax.Var:
        """A new constant, as a var bound to it when the function is closed again."""
        const = relax.const(value)
        var = relax.Var(f"lifted_const{len(self._consts)}", const.ty)
        self._consts[var] = const
        return var

    def bind(self, func: relax.Function) -> relax.Function:
        """``func`` (the lifted function, rewritten) with the constants back in place of their vars."""
        added = [v for v in self._consts if not any(v.same_as(p) for p in func.params)]
        if added:  # constants a rewriter added are free vars of the body: parameters to bind like the others
            func = relax.Function([*func.params, *added], func.body, func.ret_ty, func.is_pure, func.attrs,
                                  func.span)
        return func.bind_params(self._consts)


def with_lifted_constants(func: relax.Function,
                          transform: Callable[[relax.Function, Lifted], relax.Function]) -> relax.Function:
    """``transform(lifted_func, lifted)`` on ``func`` with its constants lifted to parameters, the
    constants bound back into the result (``func`` itself when nothing changed). Patterns must match
    constants with ``wildcard()`` (``is_const()`` no longer matches) and rewriters find their values
    through ``lifted``."""
    shared = _shared_vars(func)
    consts: dict[relax.Var, GenericConst] = {}
    for const, var in shared.items():
        consts.setdefault(var, const)  # the first of equal constants stands for all, as after CSE
    body = _Lift(shared).visit_expr(func.body) if shared else func.body
    open_func = relax.Function([*func.params, *consts], body, func.ret_ty, func.is_pure, func.attrs, func.span)
    lifted = Lifted(consts)
    out = transform(open_func, lifted)
    return func if out.same_as(open_func) else lifted.bind(out)
