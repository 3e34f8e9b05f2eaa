"""Symbolic input dimensions: the rules that turn a model's declared input shapes into static ones.

Exported models name their variable dimensions (torch's dynamic axes ``"batch_size"``, tf2onnx's
``unk__612``); the NPU compiles static shapes only. The rules, shared by ONNX models
(:func:`tvm_npu.compiler.onnx_import.bind_input_shapes`), Relax modules (:func:`bind_relax_shapes`) and the
command line (``--input-shape NAME=D0,D1,...``):

* ``shapes`` (input name -> full shape) fixes an input's symbolic dimensions; it must name an
  input, have its rank, agree with its static dimensions and hold positive integers.
* Inputs that share a dimension name share its value (ONNX's meaning of ``dim_param``).
* Without a value, a symbolic batch dimension (dimension 0 of an input of rank >= 2) is 1, with a
  :class:`SymbolicShapeWarning` saying how to choose another; any other symbolic dimension is a
  one-line ``ValueError`` naming the input, the dimension and how to give it.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import tvm
from tvm import relax

#: A declared dimension: static (``int``), symbolic by name (``str``) or symbolic without a name (``None``).
Dim = int | str | None
#: What ``shapes=`` takes: a full static shape per input name.
Shapes = Mapping[str, Sequence[int]]


class SymbolicShapeWarning(UserWarning):
    """A symbolic batch dimension was bound to 1 because no shape was given for its input."""


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``"NAME=1,3,224,224"`` -> ``("NAME", (1, 3, 224, 224))`` (the ``--input-shape`` option)."""
    name, sep, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or min(shape) < 1:
        raise ValueError(f"--input-shape {text!r}: expected NAME=d0,d1,... with positive integers, "
                         f"e.g. input=1,3,224,224")
    return name, shape


def parse_input_shapes(texts: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Every ``--input-shape`` option by input name; an input given twice is an error."""
    shapes: dict[str, tuple[int, ...]] = {}
    for text in texts:
        name, shape = parse_input_shape(text)
        if name in shapes:
            raise ValueError(f"--input-shape {name}: given twice; give each input's shape once")
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


def how_to_give(name: str, dims: Sequence[Dim]) -> str:
    """``shapes={'x': (1, 3, H, W)} or --input-shape x=1,3,H,W``: the fix, spelt with the input's own dimensions
    (a symbolic batch as 1)."""
    example = [1 if i == 0 and not isinstance(d, int) and len(dims) >= 2 else d for i, d in enumerate(dims)]
    return (f"shapes={{{name!r}: {_shape_text(example)}}} (Python) or --input-shape "
            f"{name}={','.join(map(_dim_text, example))} (command line)")


def check_shapes(declared: Mapping[str, Sequence[Dim]], shapes: Shapes | None,
                 option: str = "shapes") -> dict[str, tuple[int, ...]]:
    """``shapes`` checked against the inputs' ``declared`` shapes, as tuples of ``int``.

    Each error is one line naming the input and what it accepts; ``option`` (``"shapes"`` or
    ``"--input-shape"``) is how the message spells what the user gave.
    """
    if shapes is None:
        return {}
    if not isinstance(shapes, Mapping):
        raise TypeError(f"{option} must map input names to shapes, e.g. {{'input': (1, 3, 224, 224)}}; "
                        f"not {type(shapes).__name__}")
    out: dict[str, tuple[int, ...]] = {}
    for name, dims in shapes.items():
        if name not in declared:
            raise ValueError(f"{option}: the model has no input {name!r} (its inputs: {list(declared)})")
        want = declared[name]
        given = _given(name, dims, option)
        if isinstance(dims, str) or not isinstance(dims, Sequence) or \
                not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in dims):
            raise ValueError(f"{given}: expected a sequence of positive integers, e.g. (1, 3, 224, 224)")
        shape = tuple(int(d) for d in dims)
        if any(d < 1 for d in shape):
            raise ValueError(f"{given}: dimensions must be positive integers")
        if len(shape) != len(want):
            raise ValueError(f"{given} does not fit input {name!r} of shape {_shape_text(want)}: "
                             f"rank {len(shape)}, the input has rank {len(want)}")
        for i, (d, w) in enumerate(zip(shape, want, strict=True)):
            if isinstance(w, int) and d != w:
                raise ValueError(f"{given} does not fit input {name!r} of shape {_shape_text(want)}: "
                                 f"dimension {i} is static {w}, not {d}")
        out[name] = shape
    return out


def resolve_shapes(declared: Mapping[str, Sequence[Dim]], shapes: Shapes | None = None,
                   option: str = "shapes") -> dict[str, tuple[int, ...]]:
    """The static shape of every input under the module docstring's rules (warns, or raises ``ValueError``)."""
    given = check_shapes(declared, shapes, option)
    values: dict[str, int] = {}  # symbolic dimension name -> its value, shared across inputs
    for name, shape in given.items():
        for d, v in zip(declared[name], shape, strict=True):
            if isinstance(d, str) and values.setdefault(d, v) != v:
                raise ValueError(f"{_given(name, shape, option)}: dimension {d!r} is {values[d]} in another "
                                 f"input; inputs sharing a dimension name must agree on its size")
    out: dict[str, tuple[int, ...]] = {}
    defaulted: list[tuple[str, Dim]] = []  # warned about once every input is known to bind: an error comes alone
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
                raise ValueError(f"input {name!r} of shape {_shape_text(dims)}: dimension {i} ({_dim_text(d)!r}) "
                                 f"is symbolic and only a batch dimension is bound by default; give its size "
                                 f"with {how_to_give(name, dims)}")
        out[name] = tuple(shape)
    for name, d in defaulted:
        warnings.warn(SymbolicShapeWarning(f"input {name!r}: symbolic batch dimension {_dim_text(d)!r} bound to 1; "
                                           f"choose another size with {how_to_give(name, out[name])}"), stacklevel=3)
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
