"""Row-wise expressions by their algebra: a canonical form, and the vector-step program it runs as.

A normalisation reaches us in whatever form its exporter wrote: torch's ``(x - mean) / sqrt(var +
eps) * g + b``, tf2onnx's ``x * (r * g) + (b - mean * (r * g))`` with ``r = 1 / sqrt(var + eps)``,
``pow(d, 2)`` or ``d * d``, ``rsqrt`` or ``1 / sqrt``. Two forms are the same operator when their
canonical forms are equal, and the program is made from the canonical form alone, so every form
of one operator becomes the same program.

The canonical form (nested tuples, hashable and ordered by ``repr``) is built by the constructors
below, which apply the rules as they go:

* ``a - b = a + (-1) * b``, ``-a = (-1) * a``, ``a / b = a * recip(b)``, ``rsqrt = recip(sqrt)``,
  ``pow(a, 2) = a * a`` (and the other small exponents: 1, 3, 1/2, -1/2, -1);
* sums and products are flat, their operands sorted; a product carries one constant coefficient, a
  sum one constant term, and equal monomials are merged (``x + x = 2 * x``);
* a product with exactly one sum among its factors is distributed over it (so
  ``(x - m) * r * g`` and ``x * (r * g) - m * (r * g)`` agree), a product of two sums (a square) is not
  (so the variance keeps its numerically sound ``mean((x - m)^2)`` form);
* row reductions: ``mean(a) = rsum(a) / n``, ``min(a) = -rmax(-a)``, ``variance(a) = mean((a -
  mean(a))^2)``; constant coefficients move out of a reduction;
* constants are folded, and rounded to float32 (the exporters' type).

Leaves: ``("x",)`` the data, ``("c", v)`` a scalar, ``("p", along, key)`` a constant tensor that lines
up with the rows as ``along`` (:class:`~tvm_npu.core.ops.Along`), ``key`` naming its values.

The program (:func:`program`): one vector step per distinct sub-expression (shared ones computed once),
sums factored back (the factor shared by most terms first, per-position constants outermost, so
``(x - m) * r * g + b`` is computed as written), ``a + (-k) * b`` as the subtraction of ``k * b``, ``k * a + c`` as
one ``VSCALE``, ``recip(sqrt(a))`` as one ``VRSQRT``, a maximum or minimum with a constant as one
``VCLIP``. The vector engine's instructions are the vocabulary: ``VRSUM``, ``VRMAX``, ``VADD``,
``VSUB``, ``VMUL``, ``VMAX``, ``VMIN``, ``VSCALE``, ``VEXP``, ``VLOG``, ``VRECIP``, ``VRSQRT``, ``VPOW``,
``VCLIP``. A log splits over products (``log(exp(u) * v) = u + log(v)``, ``log(v / s) = log(v) - log(s)`` for
a positive ``s``), so ``log(softmax(x))`` and ``x - m - log(sum(exp(x - m)))`` are one form, and a sum some
of whose terms are also a sum inside another term (log-softmax's ``x - m``) starts from that sum.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tvm_npu.simulator import isa

from tvm_npu.core.ops import Along, RowStep

Node = tuple
X: Node = ("x",)
_OP = isa.Opcode


class NotRowwise(ValueError):
    """The expression is not one row-wise operator the vector engine can run (the reason says why)."""


def _f32(v: float) -> float:
    return float(np.float32(v))


def const(v: float) -> Node:
    return ("c", _f32(v))


def param(along: Along, key: str) -> Node:
    return ("p", along.value, key)


def level(n: Node) -> int:
    """0: a scalar constant; 1: one value per row; 2: one value per element."""
    tag = n[0]
    if tag == "c":
        return 0
    if tag == "x":
        return 2
    if tag == "p":
        return 1 if n[1] == Along.ROWS.value else 2
    if tag in ("rsum", "rmax"):
        return 1
    return max(level(c) for c in _children(n))


def _children(n: Node) -> tuple[Node, ...]:
    tag = n[0]
    if tag == "add":
        return n[1]
    if tag == "mul":
        return n[2]
    if tag in ("max", "min"):
        return n[1:]
    if tag == "pow":
        return (n[2],)
    return (n[1],)


def _monomial(coeff: float, factors: Sequence[Node]) -> Node:
    """``coeff * prod(factors)`` in canonical form (no sum among the factors)."""
    if coeff == 0.0:
        return const(0.0)
    if not factors:
        return const(coeff)
    if coeff == 1.0 and len(factors) == 1:
        return factors[0]
    return ("mul", _f32(coeff), tuple(sorted(factors, key=repr)))


def _split(n: Node) -> tuple[float, tuple[Node, ...]]:
    """(coefficient, factors) of a term."""
    if n[0] == "mul":
        return n[1], n[2]
    if n[0] == "c":
        return n[1], ()
    return 1.0, (n,)


def mul(*operands: Node) -> Node:
    coeff, factors = 1.0, []
    for f in operands:
        k, fs = _split(f)
        coeff *= k
        factors += fs
    sums = [i for i, f in enumerate(factors) if f[0] == "add"]
    if len(sums) == 1 and coeff != 0.0:
        others = factors[: sums[0]] + factors[sums[0] + 1 :]
        return add(*(mul(const(coeff), *others, t) for t in factors[sums[0]][1]))
    return _monomial(_f32(coeff), factors)


def add(*operands: Node) -> Node:
    terms: dict[tuple[Node, ...], float] = {}
    constant = 0.0
    for t in operands:
        for term in t[1] if t[0] == "add" else (t,):
            k, fs = _split(term)
            if not fs:
                constant += k
                continue
            key = tuple(sorted(fs, key=repr))
            terms[key] = terms.get(key, 0.0) + k
    out = [_monomial(_f32(k), fs) for fs, k in terms.items() if _f32(k) != 0.0]
    if _f32(constant) != 0.0:
        out.append(const(constant))
    if not out:
        return const(0.0)
    return out[0] if len(out) == 1 else ("add", tuple(sorted(out, key=repr)))


def neg(a: Node) -> Node:
    return mul(const(-1.0), a)


def sub(a: Node, b: Node) -> Node:
    return add(a, neg(b))


def recip(a: Node) -> Node:
    if a[0] == "c":
        return const(1.0 / a[1]) if a[1] != 0.0 else ("recip", a)
    if a[0] == "recip":
        return a[1]
    k, fs = _split(a)
    if k != 1.0 and fs:
        return mul(const(1.0 / k), recip(_monomial(1.0, fs)))
    return ("recip", a)


def div(a: Node, b: Node) -> Node:
    return mul(a, recip(b))


def sqrt(a: Node) -> Node:
    if a[0] == "c" and a[1] >= 0.0:
        return const(math.sqrt(a[1]))
    return ("sqrt", a)


def rsqrt(a: Node) -> Node:
    return recip(sqrt(a))


def exp(a: Node) -> Node:
    return const(math.exp(a[1])) if a[0] == "c" else ("exp", a)


def _positive(n: Node) -> bool:
    """``n`` is > 0 wherever it is defined, whatever the data (an exp, a sum or product of such)."""
    tag = n[0]
    if tag == "c":
        return n[1] > 0.0
    if tag in ("exp", "recip", "rsum", "sqrt"):
        return _positive(n[1]) or tag == "exp"
    if tag == "mul":
        return n[1] > 0.0 and all(_positive(f) for f in n[2])
    if tag == "add":
        return all(_positive(t) for t in n[1])
    return False


def log(a: Node) -> Node:
    """``ln(a)``: ``log(exp(u) * v) = u + log(v)`` for any ``v``, ``log(v / s) = log(v) - log(s)`` for a positive
    ``s`` (both exact identities, nan and -inf alike), so ``log(softmax(x))`` and ``x - m - log(sum(exp(x - m)))``
    are one form."""
    if a[0] == "c":
        return const(math.log(a[1])) if a[1] > 0.0 else ("log", a)
    if a[0] == "exp":
        return a[1]
    if a[0] == "recip" and _positive(a[1]):
        return neg(log(a[1]))
    k, fs = _split(a)
    out = [f[1] if f[0] == "exp" else neg(log(f[1])) for f in fs
           if f[0] == "exp" or (f[0] == "recip" and _positive(f[1]))]
    if not out:
        return ("log", a)
    rest = _monomial(k, [f for f in fs if not (f[0] == "exp" or (f[0] == "recip" and _positive(f[1])))])
    return add(*out) if rest == const(1.0) else add(log(rest), *out)


def power(a: Node, p: float) -> Node:
    small = {1.0: lambda: a, 2.0: lambda: mul(a, a), 3.0: lambda: mul(a, a, a), 0.5: lambda: sqrt(a),
             -0.5: lambda: rsqrt(a), -1.0: lambda: recip(a)}
    if p in small:
        return small[p]()
    if a[0] == "c" and a[1] > 0.0:
        return const(a[1] ** p)
    return ("pow", _f32(p), a)


def maximum(a: Node, b: Node) -> Node:
    if a[0] == "c" and b[0] == "c":
        return const(max(a[1], b[1]))
    if (a[0] == "c" and a[1] == -math.inf) or (b[0] == "c" and b[1] == -math.inf):
        return b if a[0] == "c" else a  # (a clip's missing bound)
    return ("max", *sorted((a, b), key=repr))


def minimum(a: Node, b: Node) -> Node:
    if a[0] == "c" and b[0] == "c":
        return const(min(a[1], b[1]))
    if (a[0] == "c" and a[1] == math.inf) or (b[0] == "c" and b[1] == math.inf):
        return b if a[0] == "c" else a
    return ("min", *sorted((a, b), key=repr))


def _reduced(a: Node, what: str) -> Node:
    if level(a) != 2:
        raise NotRowwise(f"a row {what} of a value that does not vary along the row")
    return a


def rsum(a: Node) -> Node:
    k, fs = _split(_reduced(a, "sum"))
    if k != 1.0:
        return mul(const(k), rsum(_monomial(1.0, fs)))
    return ("rsum", a)


def rmax(a: Node) -> Node:
    k, fs = _split(_reduced(a, "max"))
    if k > 0.0 and k != 1.0:
        return mul(const(k), rmax(_monomial(1.0, fs)))
    return ("rmax", a)


def rmin(a: Node) -> Node:
    return neg(rmax(neg(a)))


def mean(a: Node, n: int) -> Node:
    return mul(const(1.0 / n), rsum(a))


def variance(a: Node, n: int) -> Node:
    d = sub(a, mean(a, n))
    return mean(mul(d, d), n)


# ------------------------------------------------------------------------------ the program
@dataclass
class _Emitter:
    """Turns canonical nodes into steps, each distinct node once."""

    params: dict[str, str]  # param key -> its name in the step table
    steps: list[RowStep] = field(default_factory=list)
    memo: dict[Node, str] = field(default_factory=dict)

    def step(self, node: Node | None, st: RowStep) -> str:
        """Append ``st``; its result (``rw<k>``) holds ``node`` when given."""
        self.steps.append(st)
        name = f"rw{len(self.steps) - 1}"
        if node is not None:
            self.memo[node] = name
        return name

    def value(self, n: Node) -> str:
        """The step-table name holding node ``n``'s value (emitting its steps first)."""
        if n in self.memo:
            return self.memo[n]
        tag = n[0]
        if tag == "x":
            return "x"
        if tag == "p":
            return self.params[n[2]]
        if tag == "c":
            raise NotRowwise("a constant where the program needs a computed value")
        row = level(n) < 2
        if tag in ("rsum", "rmax"):
            return self.step(n, RowStep(_OP.VRSUM if tag == "rsum" else _OP.VRMAX, self.value(n[1]), row=True))
        if tag == "add":
            return self._sum(n)
        if tag == "mul":
            return self._product(n, n[1], n[2])
        if tag in ("max", "min"):
            return self._extremum(n)
        if tag == "recip" and n[1][0] == "sqrt":
            return self.step(n, RowStep(_OP.VRSQRT, self.value(n[1][1]), row=row))
        if tag == "sqrt":
            return self.step(n, RowStep(_OP.VPOW, self.value(n[1]), row=row, scale=0.5))
        if tag == "pow":
            return self.step(n, RowStep(_OP.VPOW, self.value(n[2]), row=row, scale=n[1]))
        unary = {"recip": _OP.VRECIP, "exp": _OP.VEXP, "log": _OP.VLOG}
        if tag not in unary:
            raise NotRowwise(f"no vector instruction computes {tag}")
        return self.step(n, RowStep(unary[tag], self.value(n[1]), row=row))

    def _extremum(self, n: Node) -> str:
        a, b = n[1], n[2]
        row = level(n) < 2
        if b[0] == "c":
            a, b = b, a
        if a[0] == "c":  # with a constant: one clip (a clip of a max with a constant: one clip too)
            lo, hi = (a[1], math.inf) if n[0] == "max" else (-math.inf, a[1])
            inner = [c for c in b[1:] if c[0] == "c"] if b[0] == "max" else []
            if n[0] == "min" and inner and inner[0][1] <= hi:
                lo, b = inner[0][1], next(c for c in b[1:] if c is not inner[0])
            return self.step(n, RowStep(_OP.VCLIP, self.value(b), row=row, scale=lo, shift=hi))
        opcode = _OP.VMAX if n[0] == "max" else _OP.VMIN
        return self.step(n, RowStep(opcode, self.value(a), self.value(b), row=row))

    def _product(self, n: Node, coeff: float, factors: Sequence[Node]) -> str:
        """``coeff * prod(factors)``: the per-row factors first, scaled by the coefficient while they are one
        value per row, then the per-element ones."""
        acc = None
        for full in (False, True):
            for f in sorted((f for f in factors if (level(f) == 2) == full), key=repr):
                if acc is None:
                    acc = self.value(f)
                    continue
                # the per-element source first, the per-row one broadcast as the other
                a, b = (self.value(f), acc) if full else (acc, self.value(f))
                acc = self.step(None, RowStep(_OP.VMUL, a, b, row=not full))
            if coeff != 1.0 and acc is not None:
                acc, coeff = self.step(None, RowStep(_OP.VSCALE, acc, row=not full, scale=coeff)), 1.0
        self.memo[n] = acc
        return acc

    def _sum(self, n: Node) -> str:
        """A sum: common factors taken out first (:func:`factor`), ``a + (-1) b`` as ``a - b``, a constant
        term folded into the scale of a lone ``k * a`` term."""
        shared = _shared_sum(n)
        if shared is not None:
            return self._extend(n, shared)
        constant = sum(t[1] for t in n[1] if t[0] == "c")
        terms = [t for t in n[1] if t[0] != "c"]
        row = level(n) < 2
        if len(terms) == 1:
            k, fs = _split(terms[0])
            acc = self.step(None, RowStep(_OP.VSCALE, self.value(_monomial(1.0, fs)), row=row, scale=k,
                                          shift=constant))
        else:
            parts = sorted(factor(terms), key=_negative)  # (stable) the subtracted terms last
            acc = self._part(parts[0])
            for p in parts[1:]:
                if _negative(p):  # a - k * b (exactly a + (-k) * b: IEEE negation is exact)
                    acc = self.step(None, RowStep(_OP.VSUB, acc, self.value(_monomial(-p[1], p[2])), row=row))
                else:
                    acc = self.step(None, RowStep(_OP.VADD, acc, self._part(p), row=row))
            if constant:
                acc = self.step(None, RowStep(_OP.VSCALE, acc, row=row, shift=constant))
        self.memo[n] = acc
        return acc

    def _extend(self, n: Node, shared: Node) -> str:
        """``n`` as the sum ``shared`` (computed once, as another step needs it too) plus its other terms, the
        subtracted ones last (``x - m - log(s)`` as ``(x - m) - log(s)``, as onnxruntime computes it)."""
        acc = self.value(shared)
        row = level(n) < 2
        for t in sorted((t for t in n[1] if t not in shared[1]), key=lambda t: (_negative(t), t[0] == "c")):
            if t[0] == "c":
                acc = self.step(None, RowStep(_OP.VSCALE, acc, row=row, shift=t[1]))
            elif _negative(t):
                acc = self.step(None, RowStep(_OP.VSUB, acc, self.value(_monomial(-t[1], t[2])), row=row))
            else:
                acc = self.step(None, RowStep(_OP.VADD, acc, self.value(t), row=row))
        self.memo[n] = acc
        return acc

    def _part(self, p: tuple) -> str:
        """A term of a factored sum: ``("factored", f, rest)`` is ``rest * f``."""
        if p[0] != "factored":
            return self.value(p)
        _, f, inner = p
        rows = level(inner) < 2 and level(f) < 2
        return self.step(None, RowStep(_OP.VMUL, self.value(inner), self.value(f), row=rows))


def _shared_sum(n: Node) -> Node | None:
    """The largest sum of some of ``n``'s terms that also occurs inside one of its terms (log-softmax's ``x - m``
    in ``x - m - log(sum(exp(x - m)))``), of ``n``'s shape (a full tile stays the first source), else None."""
    found: list[Node] = []

    def walk(m: Node) -> None:
        if m[0] == "add" and len(m[1]) < len(n[1]) and level(m) == level(n) and all(t in n[1] for t in m[1]):
            found.append(m)
        if m[0] not in ("x", "c", "p"):
            for c in _children(m):
                walk(c)

    for t in n[1]:
        if t[0] not in ("x", "c", "p"):
            for c in _children(t):
                walk(c)
    return max(found, key=lambda m: (len(m[1]), repr(m)), default=None)


def _negative(p: tuple) -> bool:
    """A term with a negative coefficient (computed as the subtraction of its negation)."""
    return p[0] == "mul" and p[1] < 0.0


def factor(terms: Sequence[Node]) -> list:
    """A sum's terms with common factors taken out, repeatedly: the factor shared by the most terms first
    (ties: per-element factors, then by order), leaving ``("factored", f, rest)`` for ``f * rest``."""
    terms = list(terms)
    while True:
        counts = Counter(f for t in terms if not _is_factored(t) for f in set(_split(t)[1]))
        shared = [f for f, c in counts.items() if c >= 2]
        if not shared:
            return terms
        f = max(shared, key=lambda g: (counts[g], level(g), g[0] == "p", repr(g)))
        having = [t for t in terms if not _is_factored(t) and f in _split(t)[1]]
        rest = [t for t in terms if _is_factored(t) or f not in _split(t)[1]]
        inner = add(*(_without(t, f) for t in having))
        terms = [("factored", f, inner), *rest]


def _is_factored(t: Node) -> bool:
    return t[0] == "factored"


def _without(t: Node, f: Node) -> Node:
    k, fs = _split(t)
    fs = list(fs)
    fs.remove(f)
    return _monomial(k, fs)


def program(out: Node, params: dict[str, str]) -> tuple[RowStep, ...]:
    """The vector steps computing ``out`` (one value per element, or one per row: a reduction's result, the
    last step then a per-row one) over one tile of rows."""
    if level(out) == 0 or out[0] in ("x", "p"):
        raise NotRowwise("the expression computes no new value per element or per row")
    em = _Emitter(params)
    last = em.value(out)
    if last != f"rw{len(em.steps) - 1}":
        raise NotRowwise("the result is not the program's last step")
    return tuple(em.steps)
