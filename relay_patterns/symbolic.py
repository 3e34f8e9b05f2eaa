"""Symbolic dimensions while partitioning: the pattern checks judge a match at a probe size.

A model built once for every input size (:mod:`tvm_npu.compiler.dynamic`) is partitioned with its
symbolic dimensions (``W``, ``W // 2``) in place. Whether the NPU takes an operator depends on its
spec, which needs sizes; inside :func:`probing` the spec extraction
(:func:`~tvm_npu.relay_patterns.extract.tensor_type`) reads a symbolic dimension at the probe value of its
variables, so a match is accepted when the operator is supported at a representative size. The
partition functions keep the symbolic shapes: each is compiled for the concrete sizes of a call.
Outside :func:`probing` a symbolic dimension stays an error, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

import tvm

_probe: ContextVar[Mapping[str, int] | None] = ContextVar("npu_symbolic_probe", default=None)

_BINARY: dict[type, Callable[[int, int], int]] = {
    tvm.tirx.Add: lambda a, b: a + b,
    tvm.tirx.Sub: lambda a, b: a - b,
    tvm.tirx.Mul: lambda a, b: a * b,
    tvm.tirx.FloorDiv: lambda a, b: a // b,
    tvm.tirx.FloorMod: lambda a, b: a % b,
    tvm.tirx.Max: max,
    tvm.tirx.Min: min,
}


@contextmanager
def probing(values: Mapping[str, int]) -> Iterator[None]:
    """While active, a symbolic dimension reads as its value with each variable at ``values[name]``."""
    token = _probe.set(dict(values))
    try:
        yield
    finally:
        _probe.reset(token)


def evaluate(expr: tvm.tirx.Expr, values: Mapping[str, int]) -> int:
    """The integer value of a shape expression with its variables at ``values`` (by name); a ``ValueError``
    naming what is not a plain integer expression (``+ - * // % max min`` of variables and constants)."""
    if isinstance(expr, tvm.tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, tvm.tirx.Var):
        if expr.name not in values:
            raise ValueError(f"symbolic dimension {expr.name!r} has no value (known: {sorted(values)})")
        return int(values[expr.name])
    if isinstance(expr, tvm.tirx.Cast):
        return evaluate(expr.value, values)
    op = _BINARY.get(type(expr))
    if op is None:
        raise ValueError(f"shape expression {expr} is not an integer expression of +, -, *, //, %, max, min")
    return op(evaluate(expr.a, values), evaluate(expr.b, values))


def probe_dim(expr: tvm.tirx.Expr) -> int | None:
    """``expr`` at the active probe sizes (None outside :func:`probing`, or when it cannot be evaluated)."""
    values = _probe.get()
    if values is None:
        return None
    try:
        value = evaluate(expr, values)
    except ValueError:
        return None
    return value if value > 0 else None
