"""``tvm_npu.build``: the single build driver, an explicit list of named stages.

    import      ONNX model or file -> Relax (tvm.relax.frontend.onnx)
    bind        user parameters -> constants (relax.transform.BindParams)
    canonicalize  QDQ regions -> integer operators, constant folding, batch-norm folding, ONNX Sum -> add
    precision   fp16 operators accumulate in fp32; -precision=fp16 converts an fp32 model (ToMixedPrecision)
    layout      activation layout planning (relay_patterns.layout): ConvertLayout
    fold-layout transforms next to conv2d / pooling folded into them (DMA through strides)
    partition   FuseOpsByPattern(npu pattern table) + MergeCompositeFunctions; host operators
                that kept a folded layout transform get it back as a transpose
    schedule    per NPU partition: fusion, on-chip intermediates, SRAM budgets, tiles
                (tir_schedules.scheduler), attached to the partition function as ``npu.plan``
    codegen     RunCodegen: relax.ext.npu lowers each partition's plan into an ``npu`` module
    host        relax.build of what remains, for llvm

Switches, in TVM's own way: every stage and every named rewrite has a stable name, and
``with tvm.transform.PassContext(disabled_pass=[name, ...]): tvm_npu.build(...)`` turns it off
(an unknown name is ignored, as TVM does; ``required_pass`` wins over ``disabled_pass``):

    ================================  =========================================================
    name                              what disabling it does
    ================================  =========================================================
    npu.canonicalize                  skips the whole canonicalize stage
    npu.precision                     skips fp16 accumulation and -precision=fp16 conversion
    npu.layout                        skips layout planning (operators keep the model's layout)
    npu.fold-layout                   leaves layout transforms next to conv2d / pooling
    npu.partition                     nothing is partitioned: the whole model runs on the host
    npu.bind, npu.schedule,           required: disabling one is a ValueError
    npu.codegen
    npu.import.fold-shapes            ONNX shape subgraphs stay (onnx_import.IMPORT_REWRITES)
    npu.import.recurrent              ONNX LSTM / GRU / RNN are not unrolled (TVM cannot import them)
    npu.import.upsample               ONNX Upsample is imported as it is (opset 9: not at all)
    npu.import.fold-pads              an ONNX Pad before a conv / pool stays a host pad
    npu.import.clip-as-max-min        ONNX Clip with min / max inputs is imported as it is
    npu.import.lp-norm                ONNX LpNormalization stays (TVM cannot import it)
    npu.canonicalize.reduce-of-stack  the importer's Sum / Max / Min of a stack stays
    npu.canonicalize.activations      exporter forms of ReLU6, swish, hard sigmoid / swish stay
    npu.canonicalize.pad              the importer's constant Pad stays a call_tir (on the host)
    npu.canonicalize.split            a split stays a tuple (on the host)
    npu.canonicalize.resize           resize2d stays (on the host)
    npu.canonicalize.conv-transpose   conv2d_transpose stays one operator (on the host)
    npu.canonicalize.qdq              QDQ regions stay fp32 emulation
    npu.canonicalize.fold-constants   no constant folding in canonicalize
    npu.canonicalize.dropout          dropout stays
    npu.canonicalize.batch-norm       batch-norm is not folded into the conv2d before it
    npu.canonicalize.decompose        no DecomposeOpsForInference
    npu.canonicalize.log-softmax      log_softmax / log(softmax) stay single operators (on the host)
    npu.canonicalize.transformer-ops  decomposed layer norms and GELUs stay decomposed
    npu.canonicalize.dequantize-views  a lone dequantize / quantize stays on its side of a transpose
    npu.canonicalize.lrn              LRN stays the importer's avg_pool3d form (on the host)
    npu.canonicalize.spatial-mean     a mean over H, W without keepdims stays (on the host)
    npu.canonicalize.pool-chains      max pools of one map are not chained (SPP stays SPP)
    npu.canonicalize.negative         -x stays a negation (on the host)
    npu.canonicalize.reciprocal-divide  x / c stays a division
    npu.canonicalize.broadcast-operands  a float outer product (no operand of the result's shape) stays
                                      on the host
    npu.canonicalize.bindings         no CanonicalizeBindings / DeadCodeElimination
    npu.schedule.depthwise-vector     depthwise conv2d on the tensor engine only (the target
                                      option ``-depthwise-engine=tensor``, which it sets)
    ================================  =========================================================

:data:`SWITCHES` lists them. The stage list itself can be replaced: ``build(..., pipeline=f)``
runs ``f(default stages)`` (a list of :class:`Stage`; e.g. one stage swapped for your own), and
:func:`run_stages` runs a list of stages on a module the same way.

Every stage's output can be dumped (``dump_dir=`` or ``TVM_NPU_DUMP``): Relax IR
as text after each Relax stage, each partition's plan as JSON and text, and per
operator its spec, scheduled TIR, schedule trace, lowered TIR and the program's
disassembly from the codegen.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import tvm
from tvm import relax

from tvm_npu.compiler.dynamic import (
    as_model,
    declared_inputs,
    for_every_shape,
    jit_codegen,
    load_symbolic,
    plan_shapes,
    probe_values,
    tuning_records,
)
from tvm_npu.compiler.onnx_import import IMPORT_REWRITES
from tvm_npu.compiler.relax_ext import attach  # (also registers relax.ext.npu)
from tvm_npu.compiler.relayout import fold_layout_passes, partition_passes
from tvm_npu.compiler.shapes import Shapes, bind_relax_shapes
from tvm_npu.config import DepthwiseEngine, NpuTarget, parse_target
from tvm_npu.core.ops import spec_key
from tvm_npu.core.plan import PartitionPlan, PlanChoice
from tvm_npu.core.tiles import TileParams
from tvm_npu.relay_patterns import (
    CANONICALIZE_REWRITES,
    canonicalize_passes,
    precision_passes,
    semantic_passes,
)
from tvm_npu.relay_patterns.conv_transpose import transposed_conv_macs
from tvm_npu.relay_patterns.graph import partition_graph
from tvm_npu.relay_patterns.layout import (
    choose_layouts,
    count_transforms,
    is_layout_transform,
)
from tvm_npu.relay_patterns.symbolic import probing
from tvm_npu.tir_schedules.scheduler import schedule_partition
from tvm_npu.tuning.database import best_tiles, load_choices, partition_key

Model = tvm.IRModule | onnx.ModelProto | str | os.PathLike
#: What ``host=`` takes: an llvm target as TVM's dict (or its JSON text), ``"llvm -key=value ..."``, or a Target.
HostTarget = str | Mapping[str, Any] | tvm.target.Target | None


@dataclass(frozen=True)
class Stage:
    """One named step of the pipeline: Relax module in, Relax module out."""

    name: str
    run: Callable[[tvm.IRModule], tvm.IRModule]

    @property
    def pass_name(self) -> str:
        """The name ``PassContext(disabled_pass=[...])`` skips this stage with: ``npu.<name>``."""
        return f"npu.{self.name}"


#: A replacement of the stage list: the default stages in, the stages to run out (``build(..., pipeline=)``).
Pipeline = Callable[[list[Stage]], list[Stage]]

#: Stages a build cannot do without: disabling one (or leaving it out of a pipeline) is a ValueError.
REQUIRED_STAGES = ("bind", "schedule", "codegen")
#: The stages that may be disabled.
OPTIONAL_STAGES = ("canonicalize", "precision", "layout", "fold-layout", "partition")
#: ``disabled_pass=[DEPTHWISE_VECTOR]``: depthwise conv2d on the tensor engine only (``-depthwise-engine=tensor``).
DEPTHWISE_VECTOR = "npu.schedule.depthwise-vector"

#: Every name ``PassContext(disabled_pass=[...])`` acts on (module docstring), with what it names.
SWITCHES: dict[str, str] = {
    **{f"npu.{s}": "stage (may be disabled)" for s in OPTIONAL_STAGES},
    **{f"npu.{s}": "stage (required)" for s in REQUIRED_STAGES},
    **IMPORT_REWRITES,
    **CANONICALIZE_REWRITES,
    DEPTHWISE_VECTOR: "depthwise conv2d may run on the vector engine (disabled: tensor engine only)",
}


def disabled_switches() -> frozenset[str]:
    """The names the current ``tvm.transform.PassContext`` disables (``disabled_pass`` less ``required_pass``)."""
    ctx = tvm.transform.PassContext.current()
    return frozenset(str(n) for n in ctx.disabled_pass) - {str(n) for n in ctx.required_pass}


def with_switches(target: NpuTarget) -> NpuTarget:
    """``target`` with the current context's target-level switches applied (:data:`DEPTHWISE_VECTOR`);
    unchanged (the same string) when none is disabled."""
    if DEPTHWISE_VECTOR in disabled_switches() and target.options.depthwise_engine != DepthwiseEngine.TENSOR:
        return replace(target, options=replace(target.options, depthwise_engine=DepthwiseEngine.TENSOR))
    return target


def enabled_stages(stage_list: list[Stage]) -> list[Stage]:
    """The stages of ``stage_list`` the current ``PassContext`` does not disable; a ``ValueError`` naming the
    stage when a required one (:data:`REQUIRED_STAGES`) is disabled or missing, or a name repeats."""
    names = [s.name for s in stage_list]
    if len(set(names)) != len(names):
        raise ValueError(f"stage names must be unique, got {names}")
    may = ", ".join(f"npu.{s}" for s in OPTIONAL_STAGES)
    missing = [s for s in REQUIRED_STAGES if s not in names]
    if missing:
        raise ValueError(f"the stage list has no {missing[0]!r} stage, which every build needs "
                         f"(required: {', '.join(REQUIRED_STAGES)}; given: {', '.join(names)})")
    disabled = disabled_switches()
    for s in stage_list:
        if s.name in REQUIRED_STAGES and s.pass_name in disabled:
            raise ValueError(f"stage {s.pass_name!r} cannot be disabled: the build needs it; "
                             f"stages that may be disabled: {may}")
    return [s for s in stage_list if s.pass_name not in disabled]


def run_stages(mod: tvm.IRModule, stage_list: list[Stage]) -> tvm.IRModule:
    """``mod`` through the enabled stages of ``stage_list`` (:func:`enabled_stages`), in order."""
    for stage in enabled_stages(stage_list):
        mod = stage.run(mod)
    return mod


def load_model(model: Model, shapes: Shapes | None = None) -> tvm.IRModule:
    """A Relax module from a Relax module, an ``onnx.ModelProto``, a path to a ``.onnx`` file
    or the name of a bundled model (``"mobilenet_v2"``; an existing file of that name wins).

    ``shapes`` (input name -> full static shape) binds the inputs' symbolic dimensions; without it a
    symbolic batch dimension is 1 (with a ``SymbolicShapeWarning``) and any other is a ``ValueError``
    (:mod:`tvm_npu.compiler.shapes`). A Relax module's symbolic parameters are bound by TVM's ``BindSymbolicVars``.
    """
    if isinstance(model, tvm.IRModule):
        return bind_relax_shapes(model, shapes)
    if isinstance(model, str | os.PathLike):
        from tvm_npu.models.registry import load_onnx  # a path or a bundled name, with one-line errors

        model = load_onnx(model, lean=True)  # a file's weights stay in it until TVM's constants take them
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"model must be a tvm.IRModule, an onnx.ModelProto or a path, not {type(model).__name__}")
    if not model.graph.node:
        raise ValueError("the ONNX model has an empty graph")
    from tvm_npu.compiler.onnx_import import (  # symbolic dims; shape arithmetic, Clip, pads; what TVM cannot import
        bind_input_shapes,
        check_operators,
        frontend_error,
        prepare,
    )
    from tvm_npu.compiler.qoperator import to_qdq  # QOperator nodes (QLinearConv, ...) become QDQ, which TVM imports
    from tvm_npu.compiler.weights import import_onnx  # TVM's from_onnx; external weights read once

    model = prepare(to_qdq(bind_input_shapes(model, shapes)))
    check_operators(model)
    try:
        return import_onnx(model)
    except NotImplementedError as e:  # tvm.error.OpNotImplemented and the importer's own
        raise frontend_error(e) from None


def _bind(params: Mapping[str, Any] | None) -> Callable[[tvm.IRModule], tvm.IRModule]:
    def run(mod: tvm.IRModule) -> tvm.IRModule:
        if not params:
            return mod
        arrays = {k: tvm.runtime.tensor(np.asarray(v)) for k, v in params.items()}
        return relax.transform.BindParams("main", arrays)(mod)

    return run


def _context() -> tvm.transform.PassContext:
    """opt_level 3 with the current context's ``disabled_pass``, ``required_pass`` and ``config``
    (a user's ``with PassContext(disabled_pass=[...])`` reaches every pass of the build)."""
    cur = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(opt_level=3, required_pass=[str(n) for n in cur.required_pass],
                                     disabled_pass=[str(n) for n in cur.disabled_pass],
                                     config=dict(cur.config.items()) if cur.config else None)


def _seq(passes: list[tvm.transform.Pass]) -> Callable[[tvm.IRModule], tvm.IRModule]:
    def run(mod: tvm.IRModule) -> tvm.IRModule:
        with _context():
            return tvm.transform.Sequential(passes)(mod)

    return run


def is_npu_function(func: object) -> bool:
    """Whether ``func`` is a partition the NPU compiles (``Codegen="npu"``)."""
    return isinstance(func, relax.Function) and bool(func.attrs) and func.attrs.get("Codegen") == "npu"


def schedule_pass(target: NpuTarget, tiles: Mapping[str, TileParams] | None = None, dump_dir: Path | None = None,
               plans: list[PartitionPlan] | None = None,
               choices: Mapping[str, PlanChoice] | None = None, chosen: list[str] | None = None,
               ) -> tvm.transform.Pass:
    """The plan stage as a pass: plans every NPU partition and attaches the plan (``npu.plan``);
    each plan is also appended to ``plans`` and, with ``dump_dir``, written as JSON and text.
    ``choices`` (the plan search's winners, by :func:`~tvm_npu.tuning.group_search.partition_key`) fix the
    fusion level and layer groups of the partitions they name; their symbols go to ``chosen``."""

    @relax.transform.function_pass(opt_level=0, name="tvm_npu.Plan")
    def plan_pass(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
        if not is_npu_function(func):
            return func
        graph = partition_graph(func, str(func.attrs["global_symbol"]))
        choice = choices.get(partition_key(graph, target)) if choices else None
        plan = schedule_partition(graph, target, tiles, choice)
        if choice is not None and chosen is not None:
            chosen.append(plan.symbol)
        if plans is not None:
            plans.append(plan)
        if dump_dir is not None:
            (dump_dir / f"{plan.dump_stem}.plan.json").write_text(plan.to_json())
            (dump_dir / f"{plan.dump_stem}.plan.txt").write_text(plan.text())
        return attach(func, plan, graph.constants)

    return plan_pass


def stages(target: NpuTarget, params: Mapping[str, Any] | None = None, dump_dir: Path | None = None,
           tiles: Mapping[str, TileParams] | None = None, plans: list[PartitionPlan] | None = None,
           choices: Mapping[str, PlanChoice] | None = None, chosen: list[str] | None = None) -> list[Stage]:
    """The pipeline, in order, for one target (see the module docstring); the plan stage
    appends every partition's plan to ``plans`` and applies the recorded plan ``choices`` (listing
    the partitions it applied them to in ``chosen``)."""
    options = {"target": str(target)}
    if dump_dir is not None:
        options["dump_dir"] = str(dump_dir)

    def codegen(mod: tvm.IRModule) -> tvm.IRModule:
        mod = relax.transform.RunCodegen(target_options={"npu": options})(mod)
        # constants live inside the NPU programs; without this they would be packed twice
        return mod.without_attr("const_name_to_constant") if "const_name_to_constant" in (mod.attrs or {}) else mod

    return [
        Stage("bind", _bind(params)),
        Stage("canonicalize", _seq(canonicalize_passes(target))),
        Stage("precision", _seq(precision_passes(target.options.precision))),
        Stage("layout", lambda mod: choose_layouts(mod, target)),
        Stage("fold-layout", _seq(fold_layout_passes())),
        Stage("partition", _seq(partition_passes(target))),  # (also a JIT partition's, after its layout vote)
        Stage("schedule", _seq([schedule_pass(target, tiles, dump_dir, plans, choices, chosen)])),
        Stage("codegen", codegen),
    ]


@dataclass(frozen=True)
class BuildInfo:
    """What the partitioner decided: operators on the NPU and on the host, and time per stage."""

    npu_ops: dict[str, int]
    host_ops: dict[str, int]
    npu_macs: int
    host_macs: int
    layout_transforms: int  # left on the host
    transforms_inserted: int  # by layout planning, before folding
    partitions: int
    stage_seconds: dict[str, float]
    plans: tuple[PartitionPlan, ...] = ()
    io_bytes: int = 0  # the model's own inputs and outputs (for the model-level bound)
    tuned_ops: int = 0  # NPU operators compiled with a tile from the tuning database
    tuned_plans: int = 0  # partitions planned as the tuning database's plan search chose
    # what tvm_npu.tools.inspection reads the deployment memory from (tvm_npu.tools.inspection.build_memory): the
    # target, the module after partitioning (host operators, calls of NPU functions) and after codegen (the NPU
    # programs)
    target: str = ""
    partitioned: tvm.IRModule | None = field(default=None, repr=False, compare=False)
    compiled: tvm.IRModule | None = field(default=None, repr=False, compare=False)


def io_bytes(mod: tvm.IRModule) -> int:
    """Bytes of ``main``'s tensor parameters and results (static shapes; others count 0)."""

    def nbytes(ty: object) -> int:
        if isinstance(ty, relax.TupleType):
            return sum(nbytes(f) for f in ty.fields)
        if isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr) and \
                all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values):
            return int(np.prod([int(d) for d in ty.shape.values])) * np.dtype(str(ty.dtype)).itemsize
        return 0

    main = mod["main"]
    return sum(nbytes(p.ty) for p in main.params) + nbytes(main.ret_ty if hasattr(main, "ret_ty") else main.body.ty)


_DIRECT_CONVS = ("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d")
_TRANSPOSED_CONVS = ("relax.nn.conv1d_transpose", "relax.nn.conv2d_transpose", "relax.nn.conv3d_transpose")


def _call_macs(call: relax.Call) -> int:
    """MACs of a host convolution (1-D to 3-D, transposed ones too) / matmul call (0 for other operators)."""
    name = call.op.name
    if name not in (*_DIRECT_CONVS, *_TRANSPOSED_CONVS, "relax.matmul") or not all(
            isinstance(d, tvm.tirx.IntImm) for a in (call, *call.args[:2]) for d in a.ty.shape.values):
        return 0  # (a symbolic shape: the MACs depend on the call)
    out = [int(d) for d in call.ty.shape]
    if name == "relax.matmul":
        return int(np.prod(out)) * int(call.args[0].ty.shape[-1])
    if name in _TRANSPOSED_CONVS:  # the taps on the stride lattice, as its NPU phase convolutions do them
        return transposed_conv_macs(call)
    w = [int(d) for d in call.args[1].ty.shape]
    return int(np.prod(out)) * int(np.prod(w)) // w[str(call.attrs.kernel_layout).index("O")]


def partition_info(mod: tvm.IRModule) -> tuple[dict[str, int], dict[str, int], int, int, int, int]:
    """(NPU op counts, host op counts, NPU MACs, host MACs, layout transforms on the host, partitions).

    Operators are counted per execution from ``main``: a composite or partition function
    called several times (partitioning reuses one definition for identical operators,
    e.g. the repeated blocks of a ResNet with equal weights) counts once per call.
    """
    counts: dict[str, dict[str, int]] = {"npu": {}, "host": {}}
    macs = {"npu": 0, "host": 0}
    transforms = 0
    npu_funcs = {gv.name_hint for gv, f in mod.functions.items() if is_npu_function(f)}

    def call(e: relax.Call, where: str, local: dict[relax.Var, relax.Function]) -> None:
        nonlocal transforms
        if isinstance(e.op, tvm.ir.Op):
            counts[where][e.op.name] = counts[where].get(e.op.name, 0) + 1
            macs[where] += _call_macs(e)
            transforms += where == "host" and is_layout_transform(e)
        elif isinstance(e.op, relax.GlobalVar) and isinstance(mod[e.op], relax.Function):
            run(mod[e.op], "npu" if e.op.name_hint in npu_funcs else where)
        elif isinstance(e.op, relax.Var) and e.op in local:
            run(local[e.op], where)
        for arg in e.args:
            expr(arg, where, local)

    def expr(e: relax.Expr, where: str, local: dict[relax.Var, relax.Function]) -> None:
        if isinstance(e, relax.Call):
            call(e, where, local)
        elif isinstance(e, relax.Tuple):
            for f in e.fields:
                expr(f, where, local)
        elif isinstance(e, relax.If):  # both branches: an upper bound of what one run executes
            for branch in (e.true_branch, e.false_branch):
                expr(branch, where, local)
        elif isinstance(e, relax.SeqExpr):
            for block in e.blocks:
                for b in block.bindings:
                    if isinstance(b.value, relax.Function):  # a local definition runs only when called
                        local[b.var] = b.value
                    else:
                        expr(b.value, where, local)
            expr(e.body, where, local)

    def run(func: relax.Function, where: str) -> None:
        expr(func.body, where, {})

    run(mod["main"], "host")
    return counts["npu"], counts["host"], macs["npu"], macs["host"], transforms, len(npu_funcs)


def _dump(dump_dir: Path | None, index: int, name: str, mod: tvm.IRModule) -> None:
    if dump_dir is not None:
        (dump_dir / f"{index:02d}_{name}.relax.txt").write_text(mod.script(show_meta=False))


def partition_plans(model: Model, target: str | NpuTarget = "npu", *,
               params: Mapping[str, Any] | None = None, shapes: Shapes | None = None) -> list[PartitionPlan]:
    """The plans of ``model``'s NPU partitions: every stage up to and including ``schedule``
    (``shapes``: as for :func:`load_model`; the current ``PassContext``'s switches apply)."""
    npu = with_switches(parse_target(target))
    mod = load_model(model, shapes)
    plans: list[PartitionPlan] = []
    for stage in enabled_stages(stages(npu, params, plans=plans)):
        if stage.name == "codegen":
            break
        mod = stage.run(mod)
    return plans


def build(
    model: Model,
    target: str | NpuTarget = "npu",
    *,
    params: Mapping[str, Any] | None = None,
    dump_dir: str | os.PathLike | None = None,
    tiles: Mapping[str, TileParams] | None = None,
    database: str | os.PathLike | None = None,
    host: HostTarget = None,
    shapes: Shapes | None = None,
    pipeline: Pipeline | None = None,
    jit: str = "on",
) -> relax.VMExecutable:
    """Compile ``model`` for the NPU: NPU partitions run on the simulator, the rest on llvm.

    ``target`` is ``"npu -key=value ..."`` (see ``tvm_npu.config``); ``params`` binds
    named function parameters as constants; ``dump_dir`` (or ``$TVM_NPU_DUMP``) receives
    every intermediate form; ``database`` (a work directory of :func:`tvm_npu.tune`) applies what tuning
    measured for this target: the best tile of every operator and the best plan of every partition;
    ``tiles`` overrides the tile choice per operator signature directly; ``host`` is the llvm target of
    the host part (:func:`host_target`: a ``-mcpu``, ``-num-cores``, or an ``-mtriple`` to cross-compile);
    ``shapes`` (input name -> static shape, e.g. ``{"input": (1, 224, 224, 3)}``) binds symbolic input
    dimensions, without it a symbolic batch dimension is 1 with a warning (:func:`load_model`);
    ``pipeline`` replaces the stage list: it gets the default :class:`Stage` list and returns the one to run.

    One executable for every input size (:mod:`tvm_npu.compiler.dynamic`): a model with a symbolic dimension
    other than a batch and no ``shapes``, or ``shapes`` listing several shapes per input
    (``{"x": [(1, 3, 48, 320), (1, 3, 48, 640)]}``) or a profile (``{"x": {"min": ..., "opt": ..., "max": ...}}``),
    keeps its symbolic dimensions: the listed shapes (a profile's ``opt``) are compiled now, others on their
    first call with ``jit="on"`` (then cached in memory and on disk, :mod:`tvm_npu.runtime.jit`) or refused
    with ``jit="off"``.

    Stages and rewrites are switched off with ``tvm.transform.PassContext(disabled_pass=[...])``
    (:data:`SWITCHES`, the module docstring).
    """
    return build_with_info(model, target, params=params, dump_dir=dump_dir, tiles=tiles, database=database,
                           host=host, shapes=shapes, pipeline=pipeline, jit=jit)[0]


def build_with_info(
    model: Model,
    target: str | NpuTarget = "npu",
    *,
    params: Mapping[str, Any] | None = None,
    dump_dir: str | os.PathLike | None = None,
    tiles: Mapping[str, TileParams] | None = None,
    database: str | os.PathLike | None = None,
    host: HostTarget = None,
    shapes: Shapes | None = None,
    pipeline: Pipeline | None = None, jit: str = "on",
) -> tuple[relax.VMExecutable, BuildInfo]:
    """:func:`build`, also returning what went to the NPU and the host and the time per stage
    (of the stages that ran)."""
    npu = with_switches(parse_target(target))
    llvm = host_target(host)  # checked before any work
    if for_every_shape(model, shapes, jit):  # one executable for every input size
        return _build_for_every_shape(model, npu, llvm, params, shapes, jit, (dump_dir, tiles, database, pipeline))
    choices = None
    if database is not None:
        tiles = {**best_tiles(database, npu), **(tiles or {})}
        choices = load_choices(database, npu)
    dump = dump_dir if dump_dir is not None else os.environ.get("TVM_NPU_DUMP")
    dump_path = Path(dump) if dump else None
    if dump_path is not None:
        dump_path.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    mod = load_model(model, shapes)
    seconds["import"] = time.perf_counter() - t0
    _dump(dump_path, 0, "import", mod)
    info = partitioned = None
    inserted = model_io = 0
    before = count_transforms(mod)
    plans: list[PartitionPlan] = []
    chosen: list[str] = []
    stage_list = stages(npu, params, dump_path, tiles, plans, choices, chosen)
    if pipeline is not None:
        stage_list = list(pipeline(list(stage_list)))
    enabled = {id(s) for s in enabled_stages(stage_list)}  # checked before any work
    for i, stage in enumerate(stage_list, start=1):
        if id(stage) not in enabled:
            continue
        if info is None and stage.name in ("schedule", "codegen"):  # partition disabled or replaced
            info, partitioned = partition_info(mod), mod
        t0 = time.perf_counter()
        mod = stage.run(mod)
        seconds[stage.name] = time.perf_counter() - t0
        _dump(dump_path, i, stage.name, mod)
        if stage.name == "bind":
            model_io = io_bytes(mod)
        if stage.name == "layout":
            inserted = count_transforms(mod)
        if stage.name == "partition":
            info, partitioned = partition_info(mod), mod
    t0 = time.perf_counter()
    ex = relax.build(mod, target=llvm)
    seconds["host"] = time.perf_counter() - t0
    if info is None:
        info, partitioned = partition_info(mod), mod
    return ex, BuildInfo(*info[:5], transforms_inserted=max(0, inserted - before), partitions=info[5],
                         stage_seconds=seconds, plans=tuple(plans), io_bytes=model_io, target=str(npu),
                         partitioned=partitioned, compiled=mod,
                         tuned_ops=_tuned(plans, tiles) if database is not None else 0, tuned_plans=len(chosen))


def _build_for_every_shape(model: Model, npu: NpuTarget, llvm: tvm.target.Target, params: Mapping[str, Any] | None,
                           shapes: Mapping[str, Any] | None, jit: str, static_only: tuple[object, ...]
                           ) -> tuple[relax.VMExecutable, BuildInfo]:
    """The JIT route of :func:`build_with_info` (:mod:`tvm_npu.compiler.dynamic`): the front-end stages on the
    symbolic model (matches judged at a probe size), NPU partitions kept as functions for run-time compiles
    (the listed shapes compiled now), the host part built shape-generic. ``static_only`` (``dump_dir``, ``tiles``,
    ``database``, ``pipeline``) act on the plan and codegen stages of a static build: given here, an error, except
    ``database``, whose records the JIT program keeps for every compile (:func:`tuning_records`)."""
    names = ("dump_dir", "tiles", "database", "pipeline")
    given = [n for n, v in zip(names, static_only, strict=True) if v is not None and n != "database"]
    if given:
        raise ValueError(f"{given[0]}= applies to static builds; this model is built for every input size (its NPU "
                         f"partitions compile at run time): give shapes={{name: shape}} with one shape per input")
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    mod = load_symbolic(as_model(model))
    seconds["import"] = time.perf_counter() - t0
    declared = declared_inputs(mod)
    aot, bounds = plan_shapes(declared, shapes)
    if jit == "off" and not aot:
        raise ValueError("jit='off' compiles only the shapes listed ahead of time, and none is: give them, e.g. "
                         "shapes={'x': [(1, 3, 48, 320), (1, 3, 48, 640)]}, or build with jit='on'")
    front = [s for s in enabled_stages(stages(npu, params)) if s.name not in ("schedule", "codegen")]
    with probing(probe_values(declared, aot)):
        for stage in front:
            t0 = time.perf_counter()
            mod = stage.run(mod)
            seconds[stage.name] = time.perf_counter() - t0
    info, partitioned = partition_info(mod), mod
    t0 = time.perf_counter()
    tuning = tuning_records(static_only[2], npu) if static_only[2] is not None else None
    mod = jit_codegen(mod, npu, aot, jit=jit, inputs=declared, bounds=bounds, tuning=tuning)
    seconds["codegen"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ex = relax.build(mod, target=llvm)
    seconds["host"] = time.perf_counter() - t0
    return ex, BuildInfo(*info[:5], transforms_inserted=0, partitions=info[5], stage_seconds=seconds,
                         target=str(npu), partitioned=partitioned, compiled=mod)


def _tuned(plans: list[PartitionPlan], tiles: Mapping[str, TileParams] | None) -> int:
    """How many operators of ``plans`` run with the tile ``tiles`` gives their signature."""
    return sum(1 for p in plans for op in p.ops if tiles and tiles.get(spec_key(op.spec)) == op.tile)


def host_target(host: HostTarget = None) -> tvm.target.Target:
    """The llvm target every non-NPU operator is compiled for; ``None`` is a generic ``{"kind": "llvm"}``.

    ``host`` is TVM's dict form (``{"kind": "llvm", "mcpu": "znver3", "num-cores": 2}``, or
    ``{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}`` to cross-compile), its JSON text, or the
    ``"llvm -mcpu=znver3 -num-cores=2"`` string older TVM releases took (TVM 0.27 parses only the dict,
    so the string is split here). An unknown option, another kind than llvm or a CPU LLVM does not
    know for the triple is a ``ValueError`` naming it.
    """
    if host is None:
        return tvm.target.Target({"kind": "llvm"})
    if isinstance(host, str):
        text = host.strip()
        if text.startswith("{"):
            try:
                host = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"host target {host!r} is not valid JSON ({e.msg})") from None
        else:
            kind, *options = text.split()
            bad = [o for o in options if not o.startswith("-") or "=" not in o]
            if bad:
                raise ValueError(f"host target {host!r}: {bad[0]!r} is not -key=value; accepted: "
                                 "'llvm -mcpu=CPU -mtriple=TRIPLE -num-cores=N ...' or TVM's dict form")
            host = {"kind": kind, **{k.lstrip("-"): int(v) if v.isdigit() else v
                                     for k, v in (o.split("=", 1) for o in options)}}
    if isinstance(host, Mapping):
        try:
            host = tvm.target.Target(dict(host))
        except Exception as e:  # TVM lists the known options in a multi-line message
            raise ValueError(f"host target {dict(host)}: {str(e).strip().splitlines()[-1]}") from None
    if not isinstance(host, tvm.target.Target):
        raise TypeError(f"host must be an llvm target (a dict, a string or a tvm.target.Target), "
                        f"not {type(host).__name__}")
    if host.kind.name != "llvm":
        raise ValueError(f"host target {host}: kind {host.kind.name!r}; the host part is compiled for llvm only")
    mcpu = host.attrs.get("mcpu")
    triple = str(host.attrs.get("mtriple", "")) or tvm.target.codegen.llvm_get_system_triple()
    if mcpu and not tvm.target.codegen.llvm_is_valid_cpu(str(mcpu), triple):
        raise ValueError(f"host target: LLVM knows no CPU {str(mcpu)!r} for {triple} "
                         f"(e.g. {tvm.target.codegen.llvm_get_system_cpu()!r} is this machine's)")
    return host


def build_reference(model: Model, *, params: Mapping[str, Any] | None = None,
                    host: HostTarget = None, shapes: Shapes | None = None) -> relax.VMExecutable:
    """The same model built for llvm only: the numerical reference and the speed baseline.

    It computes what the NPU build computes: QDQ regions as integer kernels (the semantics of
    onnxruntime's quantized operators, not TVM's fp32 emulation of them) and fp16 operators
    with fp32 accumulation (:func:`~tvm_npu.relay_patterns.semantic_passes`). An fp32 model
    compiled with ``-precision=fp16`` is compared with this fp32 reference. ``host``, ``shapes``: as for
    :func:`build`.
    """
    llvm = host_target(host)
    mod = _seq(semantic_passes())(_bind(params)(load_model(model, shapes)))
    return relax.build(mod, target=llvm)
