"""Symbolic input dimensions: the rules that turn a model's declared input shapes into static ones.

Exported models mark their variable dimensions in two ways: by name (torch's dynamic axes
``"batch_size"``, tf2onnx's ``unk__612``, ultralytics' ``batch`` / ``height`` / ``width``,
paddle2onnx's ``p2o.DynamicDimension.0``) or anonymously (``?``, an empty ``dim_param``, a
dimension with neither value nor name, and paddle2onnx's ``dim_value`` of ``-1`` or ``0``); the NPU
compiles static shapes only. The rules, shared by ONNX models
(:func:`tvm_npu.compiler.onnx_import.bind_input_shapes`), Relax modules (:func:`bind_relax_shapes`) and the
command line (``--input-shape NAME=D0,D1,...``):

* ``shapes`` (input name -> full shape) fixes an input's symbolic dimensions; it must name an
  input, have its rank, agree with its static dimensions and hold positive integers (the shape to
  compile is concrete: ``-1`` means nothing there).
* A named dimension is one dimension wherever it appears: inputs (or positions) sharing a name share
  its value (ONNX's meaning of ``dim_param``). An anonymous dimension is its own, shared with nothing.
* Without a value, a symbolic batch dimension (dimension 0 of an input of rank >= 2, named or
  anonymous) is 1, with a :class:`SymbolicShapeWarning` saying how to choose another; any other
  symbolic dimension is a one-line ``ValueError`` naming the input and the dimensions.
* Every message's fix can be pasted: a ``shapes={...}`` that is valid Python and an ``--input-shape``
  that parses, with the model's static sizes, the sizes already known and, where a size must be chosen,
  an example (:data:`EXAMPLE_DIM`) that the message says to replace.
"""

from __future__ import annotations

import numbers
import shlex
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import tvm
from tvm import relax

#: A declared dimension: static (``int``), symbolic by name (``str``) or anonymous (``None``).
Dim = int | str | None
#: What ``shapes=`` takes: a full static shape per input name.
Shapes = Mapping[str, Sequence[int]]
#: Names that exporters write for a dimension they do not name: anonymous, not one shared dimension.
ANONYMOUS_NAMES = frozenset({"", "?"})
#: The example size a suggested shape shows for a dimension the user must choose (the message says so).
EXAMPLE_DIM = 224


class SymbolicShapeWarning(UserWarning):
    """A symbolic batch dimension was bound to 1 because no shape was given for its input."""


def declared_dim(d: object) -> Dim:
    """A dimension as an exporter wrote it, under the rules: a positive integer is static; a name is a
    shared symbolic dimension; ``None``, ``"?"``, ``""`` and an integer below 1 (paddle2onnx's ``-1``,
    a ``dim_value`` of ``0``) are anonymous (``None``)."""
    if isinstance(d, numbers.Integral) and not isinstance(d, bool):
        return int(d) if d > 0 else None
    if isinstance(d, str):
        return None if d.strip() in ANONYMOUS_NAMES else d
    return None


def _declared(declared: Mapping[str, Sequence[object]]) -> dict[str, tuple[Dim, ...]]:
    return {name: tuple(map(declared_dim, dims)) for name, dims in declared.items()}


def _positive(d: object) -> bool:
    return isinstance(d, numbers.Integral) and not isinstance(d, bool) and d > 0


def _tuple_text(shape: Sequence[int]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def paste(shapes: Mapping[str, Sequence[int]]) -> str:
    """``shapes={'x': (1, 3, 224, 224)} (Python) or --input-shape x=1,3,224,224 (command line)``: static
    ``shapes`` in both forms, each one that can be pasted (valid Python; shell-quoted options)."""
    python = "shapes={" + ", ".join(f"{name!r}: {_tuple_text(s)}" for name, s in shapes.items()) + "}"
    cli = " ".join("--input-shape " + shlex.quote(f"{name}={','.join(map(str, s))}") for name, s in shapes.items())
    return f"{python} (Python) or {cli} (command line)"


def _example(declared: Mapping[str, Sequence[Dim]], known: Mapping[str, int] | None = None,
             given: Mapping[str, Sequence[object]] | None = None
             ) -> tuple[dict[str, tuple[int, ...]], list[tuple[str, int, Dim]]]:
    """Static example shapes for ``declared`` and the dimensions shown as :data:`EXAMPLE_DIM` (input, index,
    declared dimension). A dimension is its static size, else its name's size in ``known``, else the user's
    positive size from ``given`` (when the rank fits), else 1 for a batch, else the example; a name gets
    one size everywhere, so the example itself obeys the rules."""
    values = dict(known or {})
    shapes: dict[str, tuple[int, ...]] = {}
    placeholders: list[tuple[str, int, Dim]] = []
    for name, dims in declared.items():
        user = (given or {}).get(name)
        user = list(user) if isinstance(user, Sequence) and not isinstance(user, str) and len(user) == len(dims) \
            else []
        shape = []
        for i, d in enumerate(dims):
            if isinstance(d, int):
                v = d
            elif d is not None and d in values:
                v = values[d]
            elif user and _positive(user[i]):
                v = int(user[i])
            elif i == 0 and len(dims) >= 2:
                v = 1
            else:
                v = EXAMPLE_DIM
                placeholders.append((name, i, d))
            if d is not None and not isinstance(d, int):
                values.setdefault(d, v)
            shape.append(v)
        shapes[name] = tuple(shape)
    return shapes, placeholders


def _replace_note(placeholders: Sequence[tuple[str, int, Dim]]) -> str:
    if not placeholders:
        return ""
    by_input: dict[str, list[str]] = {}
    for name, i, _ in placeholders:
        by_input.setdefault(name, []).append(str(i))
    where = "; ".join(f"dimension{'s' if len(ix) > 1 else ''} {', '.join(ix)} of {name!r}"
                      for name, ix in by_input.items())
    return f", putting your sizes in place of the example {EXAMPLE_DIM} ({where})"


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``"NAME=1,3,224,224"`` (or ``"NAME:1,3,224,224"``) -> ``("NAME", (1, 3, 224, 224))`` (the
    ``--input-shape`` option). The shape to compile is concrete: ``-1``, ``0`` or ``?`` is a ``ValueError``
    whose suggestion parses."""
    name, sep, dims = text.rpartition("=") if "=" in text else text.rpartition(":")
    if not sep or not name or not dims.strip():
        raise ValueError(f"--input-shape {text!r}: expected NAME=D0,D1,... with positive integers, "
                         f"e.g. --input-shape input=1,3,224,224")
    parts = [p.strip() for p in dims.split(",")]
    shape: list[int | None] = []
    for p in parts:
        try:
            shape.append(int(p))
        except ValueError:
            shape.append(None)
    bad = [i for i, d in enumerate(shape) if d is None or d < 1]
    if bad:
        example, placeholders = _example({name: [d if d is not None and d > 0 else None for d in shape]})
        which = ", ".join(f"{i} ({parts[i] or 'empty'})" for i in bad)
        raise ValueError(f"--input-shape {text}: dimension{'s' if len(bad) > 1 else ''} {which} "
                         f"{'are not positive integers' if len(bad) > 1 else 'is not a positive integer'}; "
                         f"the shape to compile is concrete "
                         f"(-1 or ? does not mean 'any size'): e.g. --input-shape "
                         f"{shlex.quote(name + '=' + ','.join(map(str, example[name])))}"
                         f"{_replace_note(placeholders)}")
    return name, tuple(int(d) for d in shape if d is not None)


def parse_input_shapes(texts: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Every ``--input-shape`` option by input name; an input given twice is an error."""
    shapes: dict[str, tuple[int, ...]] = {}
    for text in texts:
        name, shape = parse_input_shape(text)
        if name in shapes:
            raise ValueError(f"--input-shape {name}: given twice ({','.join(map(str, shapes[name]))} and "
                             f"{','.join(map(str, shape))}); give each input's shape once")
        shapes[name] = shape
    return shapes


def _dim_text(d: Dim) -> str:
    return "?" if d is None else str(d)


def _shape_text(dims: Sequence[Dim]) -> str:
    return "(" + ", ".join(map(_dim_text, dims)) + ("," if len(dims) == 1 else "") + ")"


def _given(name: str, dims: object, option: str) -> str:
    """How the user wrote one input's shape, in the form they wrote it."""
    if option == "--input-shape" and isinstance(dims, Sequence) and not isinstance(dims, str):
        return f"--input-shape {name}={','.join(map(str, dims))}"
    return f"shapes[{name!r}]={tuple(dims) if isinstance(dims, Sequence) and not isinstance(dims, str) else dims!r}"


def how_to_give(name: str, dims: Sequence[object], known: Mapping[str, int] | None = None) -> str:
    """``shapes={'x': (1, 3, 224, 224)} (Python) or --input-shape x=1,3,224,224 (command line), putting your
    sizes in place of the example 224 (...)``: the fix for one input, spelt with its own static dimensions,
    the sizes of names in ``known``, a symbolic batch as 1 and any other symbolic dimension as
    :data:`EXAMPLE_DIM` (which the text says to replace)."""
    shapes, placeholders = _example({name: tuple(map(declared_dim, dims))}, known)
    return paste(shapes) + _replace_note(placeholders)


def _suggest(declared: Mapping[str, Sequence[Dim]], shapes: Mapping[str, Sequence[object]],
             known: Mapping[str, int] | None = None) -> str:
    """The fix for ``shapes`` (what the user gave, keeping its valid sizes) over the ``declared`` inputs."""
    example, placeholders = _example(declared, known, shapes)
    return paste(example) + _replace_note(placeholders)


def check_shapes(declared: Mapping[str, Sequence[object]], shapes: Shapes | None,
                 option: str = "shapes") -> dict[str, tuple[int, ...]]:
    """``shapes`` checked against the inputs' ``declared`` shapes, as tuples of ``int``.

    Each error is one line naming the input and what it accepts, with a fix that can be pasted;
    ``option`` (``"shapes"`` or ``"--input-shape"``) is how the message spells what the user gave.
    """
    if shapes is None:
        return {}
    declared = _declared(declared)
    symbolic = {n: dims for n, dims in declared.items() if not all(isinstance(d, int) for d in dims)}
    if not isinstance(shapes, Mapping):
        fix = _suggest(symbolic or dict(list(declared.items())[:1]), {}) if declared else \
            paste({"input": (1, 3, EXAMPLE_DIM, EXAMPLE_DIM)})
        raise TypeError(f"{option} must map input names to shapes, e.g. {fix}; not {type(shapes).__name__}")
    out: dict[str, tuple[int, ...]] = {}
    for name, dims in shapes.items():
        if name not in declared:
            others = [n for n in declared if n not in shapes] or list(declared)
            fix = _suggest({others[0]: declared[others[0]]}, {others[0]: dims}) if others else ""
            raise ValueError(f"{option}: the model has no input {name!r} (its inputs: {list(declared)})"
                             + (f"; e.g. {fix}" if fix else ""))
        want = declared[name]
        given = _given(name, dims, option)
        fix = _suggest({name: want}, {name: dims})
        if isinstance(dims, str) or not isinstance(dims, Sequence) or \
                not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in dims):
            raise ValueError(f"{given}: expected a sequence of positive integers, e.g. {fix}")
        shape = tuple(int(d) for d in dims)
        if any(d < 1 for d in shape):
            raise ValueError(f"{given}: dimensions must be positive integers (the shape to compile is concrete: "
                             f"-1 does not mean 'any size'), e.g. {fix}")
        if len(shape) != len(want):
            raise ValueError(f"{given} does not fit input {name!r} of shape {_shape_text(want)}: "
                             f"rank {len(shape)}, the input has rank {len(want)}; e.g. {fix}")
        for i, (d, w) in enumerate(zip(shape, want, strict=True)):
            if isinstance(w, int) and d != w:
                raise ValueError(f"{given} does not fit input {name!r} of shape {_shape_text(want)}: "
                                 f"dimension {i} is static {w}, not {d}; e.g. {fix}")
        out[name] = shape
    return out


def resolve_shapes(declared: Mapping[str, Sequence[object]], shapes: Shapes | None = None,
                   option: str = "shapes") -> dict[str, tuple[int, ...]]:
    """The static shape of every input under the module docstring's rules (warns, or raises ``ValueError``)."""
    declared = _declared(declared)
    given = check_shapes(declared, shapes, option)
    values: dict[str, int] = {}  # symbolic dimension name -> its value, shared across inputs
    source: dict[str, tuple[str, int]] = {}  # ... and where it was first given
    for name, shape in given.items():
        for i, (d, v) in enumerate(zip(declared[name], shape, strict=True)):
            if isinstance(d, str) and values.setdefault(d, v) != v:
                src, j = source[d]
                fix = _suggest({n: declared[n] for n in given}, given, {d: values[d]})
                raise ValueError(f"{_given(name, shape, option)}: dimension {i} ({d!r}) is {v}, but {d!r} is "
                                 f"{values[d]} at dimension {j} of input {src!r}; dimensions sharing a name must "
                                 f"agree on its size (only anonymous ones, ? or -1, are independent), e.g. {fix}")
            if isinstance(d, str):
                source.setdefault(d, (name, i))
    out: dict[str, tuple[int, ...]] = {}
    defaulted: list[tuple[str, Dim]] = []  # warned about once every input is known to bind: an error comes alone
    missing: dict[str, list[int]] = {}  # input -> its symbolic dimensions nobody gave
    for name, dims in declared.items():
        if name in given:
            out[name] = given[name]
            continue
        shape = []
        for i, d in enumerate(dims):
            if isinstance(d, int):
                shape.append(d)
            elif d is not None and d in values:
                shape.append(values[d])
            elif i == 0 and len(dims) >= 2:
                defaulted.append((name, d))
                if d is not None:
                    values[d] = 1
                shape.append(1)
            else:
                missing.setdefault(name, []).append(i)
                shape.append(EXAMPLE_DIM)
        out[name] = tuple(shape)
    if missing:
        name, where = next(iter(missing.items()))
        dims = declared[name]
        which = " and ".join(f"{i} ({_dim_text(dims[i])!r})" for i in where)
        what = f"dimension{'s' if len(where) > 1 else ''} {which} {'are' if len(where) > 1 else 'is'}"
        others = [n for n in missing if n != name]
        also = f" (and those of input{'s' if len(others) > 1 else ''} {', '.join(map(repr, others))})" if others else ""
        fix = _suggest({n: declared[n] for n in (*given, *missing)}, given, values)
        raise ValueError(f"input {name!r} of shape {_shape_text(dims)}: {what} symbolic and only a batch dimension "
                         f"(dimension 0) is bound by default; give {'them' if len(where) > 1 else 'its size'}"
                         f"{also}, e.g. {fix}")
    for name, d in defaulted:
        warnings.warn(SymbolicShapeWarning(f"input {name!r}: symbolic batch dimension {_dim_text(d)!r} bound to 1; "
                                           f"choose another size with {paste({name: out[name]})}, your batch size "
                                           f"in place of the 1"), stacklevel=3)
    return out


def _relax_dims(param: relax.Var) -> tuple[Dim, ...] | None:
    """A tensor parameter's declared dimensions (a ``tirx.Var`` by its name); None for other parameters."""
    ty = param.ty
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    dims: list[Dim] = []
    for d in ty.shape.values:
        if isinstance(d, tvm.tirx.IntImm):
            dims.append(int(d))
        elif isinstance(d, tvm.tirx.Var):
            dims.append(d.name)
        else:
            raise ValueError(f"input {param.name!r}: dimension {len(dims)} is the expression {d}; the NPU compiles "
                             f"static shapes: declare the input with a static shape or a plain symbolic variable")
    return tuple(dims)


def bind_relax_shapes(mod: tvm.IRModule, shapes: Shapes | None = None) -> tvm.IRModule:
    """``mod`` with the symbolic dimensions of ``main``'s tensor parameters bound (TVM's ``BindSymbolicVars``)
    under the module docstring's rules; ``mod`` itself when nothing is symbolic and no shape is given."""
    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        if shapes:
            raise ValueError("shapes: the Relax module has no 'main' function whose inputs they could bind")
        return mod
    params = mod["main"].params
    declared = {p.name: dims for p in params if (dims := _relax_dims(p)) is not None}
    if not shapes and all(isinstance(d, int) for dims in declared.values() for d in dims):
        return mod
    static = resolve_shapes(declared, shapes)
    binding: dict[tvm.tirx.Var, int] = {}
    for p in params:
        if p.name in static:
            for d, v in zip(p.ty.shape.values, static[p.name], strict=True):
                if isinstance(d, tvm.tirx.Var):
                    binding[d] = v
    return relax.transform.BindSymbolicVars(binding, "main")(mod) if binding else mod


def type_dims(ty: object) -> tuple[int | str, ...]:
    """A Relax tensor type's dimensions (a symbolic one as its text); () for a type without a shape."""
    shape = getattr(ty, "shape", None)
    if not isinstance(shape, relax.ShapeExpr):
        return ()
    return tuple(int(d) if isinstance(d, tvm.tirx.IntImm) else str(d) for d in shape.values)


def tensor_bytes(ty: object) -> int:
    """Bytes of a (tuple of) static-shape Relax tensor type; 0 for anything else."""
    if isinstance(ty, relax.TupleType):
        return sum(tensor_bytes(f) for f in ty.fields)
    dims = type_dims(ty)
    if not isinstance(ty, relax.TensorType) or not all(isinstance(d, int) for d in dims) or ty.dtype == "void":
        return 0
    return int(np.prod(dims, dtype=np.int64)) * np.dtype(str(ty.dtype)).itemsize
