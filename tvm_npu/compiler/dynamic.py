"""One executable for every input size: the build side of the NPU's just-in-time partitions.

``tvm_npu.build(model)`` of a model with a symbolic dimension other than a batch (``[1, 3, 48, 'W']``,
``[N, 3, H, W]``), or with ``shapes=`` listing several shapes (``{'x': [(1, 3, 48, 320), (1, 3, 48, 640)]}``)
or a profile (``{'x': {'min': ..., 'opt': ..., 'max': ...}}``), keeps the symbolic dimensions:

* the model is imported with them (anonymous ones, ``?`` or ``-1``, get a name each; sizes that must agree
  but that TVM cannot prove equal related, :mod:`tvm_npu.compiler.shape_relations`) and goes through
  the front-end stages as it is; the pattern checks judge each match at a probe size (the first listed
  shape, a profile's ``opt``, else a batch of 1 and :data:`~tvm_npu.compiler.shapes.EXAMPLE_DIM`;
  :mod:`tvm_npu.relay_patterns.symbolic`); layout planning, which needs sizes, keeps the model's layout
  here and votes per shape when a partition is compiled (:mod:`tvm_npu.compiler.relayout`);
* each NPU partition stays a Relax function, stored (``tvm.ir.save_json``) in a JIT program
  (:mod:`tvm_npu.runtime.jit`) that the host calls like a compiled partition (``R.call_dps_packed``, the
  output shape computed by Relax), and the host part is built shape-generic by ``relax.build``;
* the listed shapes (a profile's ``opt``) are compiled now; others on their first call (``jit="on"``), or
  never (``jit="off"``: a one-line error naming the compiled shapes). A profile's ``min`` / ``max`` bound
  every call.

:func:`compile_partition` is the compile step of one partition for concrete sizes (the existing plan and
codegen stages: ``relayout`` -> ``partition_graph`` -> ``schedule_partition`` -> ``lower_plan``); importing this module
installs it in the runtime (:func:`tvm_npu.runtime.jit.set_compiler`). Padding an input up to a compiled
shape is not done: no operator is assumed to allow it.
"""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import onnx
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_npu.codegen.partition import lower_plan
from tvm_npu.compiler.relayout import relayout
from tvm_npu.compiler.shapes import EXAMPLE_DIM, check_shapes, resolve_shapes
from tvm_npu.config import NpuTarget, parse_target
from tvm_npu.core.plan import PlanChoice
from tvm_npu.core.tiles import tile_from_json, tile_to_json
from tvm_npu.relay_patterns import HostFallbackWarning
from tvm_npu.relay_patterns.graph import partition_graph
from tvm_npu.runtime import jit as runtime_jit
from tvm_npu.runtime.npu_module import create_module
from tvm_npu.tir_schedules.scheduler import schedule_partition
from tvm_npu.tir_schedules.tile_search import NoTileFits
from tvm_npu.tuning.database import best_tiles, load_choices, partition_key

#: The ``Codegen`` name of a partition compiled at run time (``relax.ext.npu_jit``).
JIT_CODEGEN = "npu_jit"
#: ``jit=`` policies: compile a new shape on its first call, or refuse it.
POLICIES = ("on", "off")
_PROFILE_KEYS = ("min", "opt", "max")

#: Sizes of symbolic variables, by name.
Values = dict[str, int]


def as_model(model: object) -> object:
    """A path or bundled name as its ONNX model (one-line errors); anything else unchanged."""
    if isinstance(model, str | os.PathLike):
        from tvm_npu.models.registry import load_onnx

        return load_onnx(model)
    return model


def declared_inputs(model: object) -> dict[str, tuple[int | str | None, ...]]:
    """The inputs' declared dimensions (static int, a name, or None: anonymous) of an ONNX model or a Relax
    module (its ``main``); {} for anything else."""
    if isinstance(model, onnx.ModelProto):
        from tvm_npu.compiler.onnx_import import _declared
        from tvm_npu.models.inputs import input_values

        return {vi.name: _declared(vi) for vi in input_values(model)
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")}
    if isinstance(model, tvm.IRModule) and "main" in [gv.name_hint for gv in model.get_global_vars()]:
        return {p.name: _dims(p.ty.shape.values) for p in model["main"].params
                if isinstance(p.ty, relax.TensorType) and isinstance(p.ty.shape, relax.ShapeExpr)}
    return {}


def _dims(values: Sequence[tvm.tirx.Expr]) -> tuple[int | str | None, ...]:
    """Relax dimensions as a size, a variable's own name (not its printed form), or None for an expression."""
    return tuple(int(d) if isinstance(d, tvm.tirx.IntImm) else d.name if isinstance(d, tvm.tirx.Var) else None
                 for d in values)


def _is_shape(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str) and \
        all(isinstance(d, int) and not isinstance(d, bool) for d in value)


def _several(value: object) -> bool:
    """Whether one input's ``shapes=`` entry is a profile or a list of shapes (not one shape)."""
    return isinstance(value, Mapping) or (isinstance(value, Sequence) and not isinstance(value, str) and bool(value)
                                          and all(isinstance(v, Sequence) and not isinstance(v, str) for v in value))


def for_every_shape(model: object, shapes: object, jit: str = "on") -> bool:
    """Whether ``build`` takes the JIT route: ``shapes`` lists several shapes or a profile, or no shape is
    given and an input has a symbolic dimension that is not a batch (dimension 0 of rank >= 2)."""
    if jit not in POLICIES:
        raise ValueError(f"jit={jit!r}; accepted: {', '.join(map(repr, POLICIES))}")
    if isinstance(shapes, Mapping) and any(map(_several, shapes.values())):
        return True
    if shapes:
        return False
    return any(not isinstance(d, int) and not (i == 0 and len(dims) >= 2)
               for dims in declared_inputs(as_model(model)).values() for i, d in enumerate(dims))


def named_onnx(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every anonymous input dimension (``?``, empty, ``-1``, ``0``) named after its input and
    position (``x_dim3``), so that each is its own symbolic variable; ``model`` itself when none is."""
    from tvm_npu.compiler.onnx_import import _declared

    inputs = {vi.name: _declared(vi) for vi in model.graph.input if vi.type.HasField("tensor_type")}
    if all(d is not None for dims in inputs.values() for d in dims):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in out.graph.input:
        for i, (d, dim) in enumerate(zip(inputs.get(vi.name, ()), vi.type.tensor_type.shape.dim, strict=False)):
            if d is None:
                dim.Clear()
                dim.dim_param = f"{vi.name}_dim{i}"
    del out.graph.value_info[:]  # described the anonymous dimensions
    return out


def load_symbolic(model: object) -> tvm.IRModule:
    """``model`` imported into Relax with its symbolic input dimensions kept (anonymous ones named)."""
    if isinstance(model, tvm.IRModule):
        return model
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"model must be a tvm.IRModule, an onnx.ModelProto or a path, not {type(model).__name__}")
    from tvm_npu.compiler.onnx_import import check_operators, frontend_error, prepare
    from tvm_npu.compiler.qoperator import to_qdq
    from tvm_npu.compiler.shape_relations import import_related

    model = prepare(to_qdq(named_onnx(model)))
    check_operators(model)
    try:
        return import_related(model)  # sizes TVM cannot prove equal are checked at run time
    except NotImplementedError as e:
        raise frontend_error(e) from None


def _listed(name: str, value: object) -> tuple[list[Sequence[int]], tuple[Sequence[int], Sequence[int]] | None]:
    """One input's ``shapes=`` entry as (shapes to compile ahead, (min, max) of a profile or None)."""
    if isinstance(value, Mapping):
        if set(value) != set(_PROFILE_KEYS):
            raise ValueError(f"shapes[{name!r}]: a profile has exactly the keys 'min', 'opt', 'max', e.g. "
                             f"{{'min': (1, 3, 48, 32), 'opt': (1, 3, 48, 320), 'max': (1, 3, 48, 1024)}}; "
                             f"got {sorted(map(str, value))}")
        lo, opt, hi = (value[k] for k in _PROFILE_KEYS)
        if not all(map(_is_shape, (lo, opt, hi))) or not len(lo) == len(opt) == len(hi) or \
                not all(a <= b <= c for a, b, c in zip(lo, opt, hi, strict=True)):
            raise ValueError(f"shapes[{name!r}]: profile {dict(value)} must hold three shapes of one rank "
                             f"with min <= opt <= max in every dimension")
        return [opt], (lo, hi)
    if _is_shape(value):
        return [value], None
    if isinstance(value, Sequence) and not isinstance(value, str) and value and all(map(_is_shape, value)):
        return list(value), None
    raise ValueError(f"shapes[{name!r}]={value!r}: expected a shape, a list of shapes or a profile "
                     f"{{'min': ..., 'opt': ..., 'max': ...}}")


def _values(declared: Mapping[str, Sequence[object]], static: Mapping[str, Sequence[int]]) -> Values:
    return {d: int(n) for name, dims in declared.items() for d, n in zip(dims, static[name], strict=True)
            if isinstance(d, str)}


def plan_shapes(declared: Mapping[str, Sequence[object]], shapes: Mapping[str, object] | None
                ) -> tuple[list[Values], dict[str, tuple[int, int]]]:
    """(the sizes to compile ahead of time, one dict per listed shape; a profile's bounds by variable)."""
    if not shapes:
        return [], {}
    listed = {name: _listed(name, value) for name, value in shapes.items()}
    counts = {len(aot) for aot, _ in listed.values()} - {1}
    if len(counts) > 1:
        numbers = {n: len(a) for n, (a, _) in listed.items()}
        raise ValueError(f"shapes: inputs list different numbers of shapes ({numbers}); list the same number "
                         f"for each (the k-th shapes are compiled together)")
    aot = []
    for k in range(max(counts, default=1)):
        given = {name: tuple(a[min(k, len(a) - 1)]) for name, (a, _) in listed.items()}
        aot.append(_values(declared, resolve_shapes(declared, given)))
    bounds: dict[str, tuple[int, int]] = {}
    for name, (_, profile) in listed.items():
        if profile is not None:
            check_shapes(declared, {name: tuple(profile[0])})
            check_shapes(declared, {name: tuple(profile[1])})
            for d, lo, hi in zip(declared[name], *profile, strict=True):
                if isinstance(d, str):
                    bounds[d] = (max(lo, bounds.get(d, (lo, hi))[0]), min(hi, bounds.get(d, (lo, hi))[1]))
    return aot, bounds


def probe_values(declared: Mapping[str, Sequence[object]], aot: Sequence[Values]) -> Values:
    """The sizes the pattern checks judge matches at: the first shape compiled ahead of time, else a batch of 1
    and :data:`EXAMPLE_DIM` for every other symbolic dimension."""
    if aot:
        return dict(aot[0])
    values: Values = {}
    for dims in declared.values():
        for i, d in enumerate(dims):
            if isinstance(d, str):
                values.setdefault(d, 1 if i == 0 and len(dims) >= 2 else EXAMPLE_DIM)
    return values


@mutator
class _DropShapeParams(PyExprMutator):
    """Once every size is bound, the shape parameters Relax adds to carry symbolic sizes into a function
    (``R.Shape([W])``) carry nothing: dropped from every function and call, so the partition graph sees tensors."""

    def visit_function_(self, op: relax.Function) -> relax.Expr:
        shapes = {p: relax.ShapeExpr(p.ty.values) for p in op.params if isinstance(p.ty, relax.ShapeType)
                  and p.ty.values is not None and all(isinstance(d, tvm.tirx.IntImm) for d in p.ty.values)}
        if shapes:  # its value in the body (a broadcast_to's result has that shape, not the parameter's)
            op = op.bind_params(shapes)
        func = super().visit_function_(op)
        keep = [p for p in func.params if not isinstance(p.ty, relax.ShapeType)]
        if len(keep) == len(func.params):
            return func
        return relax.Function(keep, func.body, func.ret_ty, func.is_pure, func.attrs)

    def visit_call_(self, op: relax.Call) -> relax.Expr:
        if not isinstance(op.op, tvm.ir.Op):
            args = [a for a in op.args if not isinstance(a.ty, relax.ShapeType)]
            if len(args) != len(op.args):
                op = relax.Call(op.op, args, op.attrs, op.ty_args)
        return super().visit_call_(op)


@lru_cache(maxsize=64)
def _function(func_json: str) -> relax.Function:
    return tvm.ir.load_json(func_json)


def bind_partition(func: relax.Function, values: Mapping[str, int]) -> relax.Function:
    """``func`` (a partition with symbolic sizes) at ``values``: every variable of a name bound (the composite
    functions inside hold copies of the model's variables), shape parameters dropped."""
    variables = relax.analysis.defined_symbolic_vars(func)
    missing = sorted({v.name for v in variables} - set(values))
    if missing:
        raise ValueError(f"{func.attrs.get('global_symbol', '?')}: no size for symbolic dimension(s) {missing}")
    try:
        return _DropShapeParams().visit_expr(func.bind_symbolic_vars({v: int(values[v.name]) for v in variables}))
    except ValueError as e:  # sizes that must agree (shape_relations) do not at these values
        if "Reshape expects" not in str(e):
            raise
        sizes = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
        raise ValueError(f"input sizes {sizes}: two tensors the model combines (an elementwise operator or a concat) "
                         f"do not agree in size there ({str(e).strip().splitlines()[0][:160]}); accepted: sizes at "
                         f"which they agree, as onnxruntime requires") from None


def compile_partition(func_json: str, values: Mapping[str, int], target: str, symbol: str,
                      tuning: Mapping[str, Any] | None = None) -> bytes | runtime_jit.HostRun:
    """The artifact of one NPU partition (its Relax function as TVM JSON) at ``values``: the plan and codegen
    stages of a static build on the bound function (:data:`tvm_npu.runtime.jit.Compiler`), with the tiles and
    plan choices of ``tuning`` (:func:`tuning_records`) where they name its operators and partition, as
    ``build(..., database=)`` applies them to a static build.

    Where no tile of one of its operators fits the SRAM at these sizes (the pattern checks judged it at the
    probe size), the partition runs on the host instead, as a static build would run that operator: built for
    llvm at these sizes, with a :class:`~tvm_npu.relay_patterns.HostFallbackWarning`."""
    npu = parse_target(target)
    func = relayout(bind_partition(_function(func_json), values), npu)  # the static build's layout vote
    graph = partition_graph(func, symbol)
    tiles = {k: tile_from_json(t) for k, t in (tuning or {}).get("tiles", {}).items()}
    choices = (tuning or {}).get("plans", {})
    choice = choices.get(partition_key(graph, npu)) if choices else None
    try:
        plan = schedule_partition(graph, npu, tiles, PlanChoice.from_dict(choice) if choice else None)
    except NoTileFits as e:
        sizes = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
        warnings.warn(f"NPU partition {symbol} at {sizes} runs on the host (llvm): {e}", HostFallbackWarning,
                      stacklevel=2)
        return host_partition(func)
    return bytes(lower_plan(plan, graph.constants, npu.hw))


def host_partition(func: relax.Function) -> runtime_jit.HostRun:
    """``func`` (a partition bound to static sizes) built for llvm, as a DPS callable: inputs, then outputs."""
    mod = relax.transform.LambdaLift()(tvm.IRModule({"main": func.without_attr("Codegen")
                                                     .with_attr("global_symbol", "main")}))
    vm = relax.VirtualMachine(relax.build(mod, target=tvm.target.Target({"kind": "llvm"})), tvm.cpu())
    inputs = len(func.params)

    def run(args: list) -> None:
        out = vm["main"](*args[:inputs])
        for dst, value in zip(args[inputs:], [out] if hasattr(out, "numpy") else list(out), strict=True):
            np.copyto(np.from_dlpack(dst), value.numpy())

    return run


def tuning_records(database: str | os.PathLike, target: NpuTarget) -> dict[str, Any]:
    """What a JIT program keeps of a tuning work directory for ``target`` (:attr:`~tvm_npu.runtime.jit.Program.tuning`):
    the best tile per operator signature and the winning plan per partition key, as JSON. Kept in the program
    (and so in an exported library), every run-time compile applies them: a new shape's operators that tuning
    measured (``tvm-npu tune --input-shape``) get their tuned tiles."""
    return {"tiles": {k: tile_to_json(t) for k, t in sorted(best_tiles(database, target).items())},
            "plans": {k: c.to_dict() for k, c in sorted(load_choices(database, target).items())}}


def _params(func: relax.Function) -> tuple[runtime_jit.Param, ...]:
    """A partition's signature: per parameter its kind and dims (a size, a variable's name, or None)."""
    return tuple(("shape", _dims(p.ty.values)) if isinstance(p.ty, relax.ShapeType) else
                 ("tensor", _dims(p.ty.shape.values)) for p in func.params)


def jit_program(functions: Sequence[relax.Function], target: NpuTarget, aot: Sequence[Values], *,
                jit: str = "on", inputs: Mapping[str, Sequence[object]] | None = None,
                bounds: Mapping[str, tuple[int, int]] | None = None,
                tuning: Mapping[str, Any] | None = None) -> runtime_jit.Program:
    """The JIT program of ``functions`` (the model's NPU partitions), each compiled ahead for every ``aot``
    (with ``tuning``'s records, which the program keeps for its run-time compiles)."""
    parts: dict[str, runtime_jit.Partition] = {}
    compiled: dict[tuple[str, tuple[tuple[str, int], ...]], bytes] = {}
    for func in functions:
        symbol = str(func.attrs["global_symbol"])
        text = tvm.ir.save_json(func.without_attr("Codegen") if func.attrs.get("Codegen") else func)
        part = runtime_jit.Partition(symbol, text, _params(func), hashlib.sha256(text.encode()).hexdigest())
        parts[symbol] = part
        names = {d for _, dims in part.params for d in dims if isinstance(d, str)}
        for values in aot:
            mine = {k: v for k, v in values.items() if k in names}
            if (symbol, runtime_jit.values_key(mine)) not in compiled:
                program = compile_partition(text, mine, str(target), symbol, tuning)
                if isinstance(program, bytes):  # (a host fallback is rebuilt at run time: jit="on" only)
                    compiled[(symbol, runtime_jit.values_key(mine))] = program
    return runtime_jit.Program(str(target), parts, jit, {k: list(v) for k, v in (inputs or {}).items()},
                               dict(bounds or {}), compiled, dict(tuning or {}))


_pending: dict[str, runtime_jit.Program] = {}
_pending_lock = threading.Lock()


def _npu_jit_codegen(functions, options, constant_names) -> list[tvm.runtime.Module]:
    """``relax.ext.npu_jit``: one ``npu`` module holding the JIT program that :func:`jit_codegen` prepared."""
    del functions, constant_names
    with _pending_lock:
        prog = _pending.pop(str(options["program"]))
    return [create_module(prog.encode(), list(prog.partitions))]


def _derivable(func: relax.Function) -> dict[relax.Var, relax.ShapeExpr]:
    """The shape parameters of ``func`` whose sizes its tensor parameters' shapes already define (Relax adds one
    ``R.Shape([W])`` per composite that uses ``W``), each as its value."""
    defined = [d for p in func.params if isinstance(p.ty, relax.TensorType) and isinstance(p.ty.shape, relax.ShapeExpr)
               for d in p.ty.shape.values if isinstance(d, tvm.tirx.Var)]
    return {p: relax.ShapeExpr(p.ty.values) for p in func.params
            if isinstance(p.ty, relax.ShapeType) and p.ty.values is not None
            and not any(tvm.tirx.analysis.undefined_vars(v, defined) for v in p.ty.values)}


@mutator
class _DropArgs(PyExprMutator):
    """Calls of the functions ``renamed`` to their new global variables, without the arguments ``drop`` lists."""

    def __init__(self, drop: Mapping[relax.GlobalVar, set[int]],
                 renamed: Mapping[relax.GlobalVar, relax.GlobalVar]) -> None:
        super().__init__()
        self.drop, self.renamed = drop, renamed

    def visit_call_(self, op: relax.Call) -> relax.Expr:
        new = self.renamed.get(op.op) if isinstance(op.op, relax.GlobalVar) else None
        if new is None:
            return super().visit_call_(op)
        args = [self.visit_expr(a) for i, a in enumerate(op.args) if i not in self.drop[new]]
        return relax.Call(new, args, op.attrs, op.ty_args)


def _derived_shapes_inlined(mod: tvm.IRModule, npu: Mapping[relax.GlobalVar, relax.Function]
                            ) -> tuple[tvm.IRModule, dict[relax.GlobalVar, relax.Function]]:
    """``mod`` with each NPU partition's derivable shape parameters (:func:`_derivable`) bound to their values and
    dropped from its calls: a call passes its tensors alone (19 ``R.Shape([W])`` arguments of the recogniser cost
    the host ~2 us each to convert and the dispatch to key)."""
    drop: dict[relax.GlobalVar, set[int]] = {}
    out: dict[relax.GlobalVar, relax.Function] = {}
    for gv, f in npu.items():
        shapes = _derivable(f)
        drop[gv] = {i for i, p in enumerate(f.params) if p in shapes}
        out[gv] = f.bind_params(shapes) if shapes else f
    if not any(drop.values()):
        return mod, dict(npu)
    bb = relax.BlockBuilder()  # new global vars: a call's type is read from its function's new signature
    renamed = {gv: bb.add_func(func, gv.name_hint) for gv, func in out.items()}
    mutator = _DropArgs({renamed[gv]: gone for gv, gone in drop.items()}, renamed)
    functions = {gv: mutator.visit_expr(f) if isinstance(f, relax.Function) else f
                 for gv, f in mod.functions.items() if gv not in out}
    new = tvm.IRModule({**functions, **{renamed[gv]: f for gv, f in out.items()}}, attrs=mod.attrs)
    return new, {renamed[gv]: f for gv, f in out.items()}


def jit_codegen(mod: tvm.IRModule, target: NpuTarget, aot: Sequence[Values], *, jit: str = "on",
                inputs: Mapping[str, Sequence[object]] | None = None,
                bounds: Mapping[str, tuple[int, int]] | None = None,
                tuning: Mapping[str, Any] | None = None) -> tvm.IRModule:
    """``mod`` (partitioned) with its NPU partitions called through one JIT program (``RunCodegen`` with
    :data:`JIT_CODEGEN`): the host calls each as ``R.call_dps_packed(symbol, ...)``."""
    npu = {gv: f for gv, f in mod.functions.items()
           if isinstance(f, relax.Function) and f.attrs and f.attrs.get("Codegen") == "npu"}
    if not npu:
        return mod
    mod, npu = _derived_shapes_inlined(mod, npu)
    prog = jit_program(list(npu.values()), target, aot, jit=jit, inputs=inputs, bounds=bounds, tuning=tuning)
    key = f"{id(prog)}:{threading.get_ident()}"
    with _pending_lock:
        _pending[key] = prog
    for gv, f in npu.items():
        mod[gv] = f.with_attr("Codegen", JIT_CODEGEN)
    try:
        mod = relax.transform.RunCodegen(target_options={JIT_CODEGEN: {"program": key}})(mod)
    finally:
        with _pending_lock:
            _pending.pop(key, None)
    return mod.without_attr("const_name_to_constant") if "const_name_to_constant" in (mod.attrs or {}) else mod


tvm_ffi.register_global_func(f"relax.ext.{JIT_CODEGEN}", _npu_jit_codegen, override=True)
runtime_jit.set_compiler(compile_partition)
