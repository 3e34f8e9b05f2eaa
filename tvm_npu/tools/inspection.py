"""``tvm-npu inspect``: a model's inputs and outputs, where each operator runs and why, its device memory.

The build stages up to and including the codegen run with the pattern check functions'
refusals recorded (:func:`~tvm_npu.relay_patterns.patterns.collect_refusals`), so a host
operator carries the reason the NPU refused it: the extraction's message (an unsupported
dtype, layout or attribute), the SRAM budget no tile fits, or no NPU pattern for the
operator at all. The host part is not compiled (no llvm build), so inspecting is quicker
than compiling.

Deployment memory is what the device's DRAM holds: the NPU programs' constants (weights)
and the constants left to host operators, the peak of the tensors live at once between
operators (every tensor of ``main`` from the binding that computes it to its last use,
plus the scratch tensors inside the NPU partition running at that point; TVM's memory
planner reuses storage, and liveness is the least any reuse needs), and the NPU programs
themselves. The SRAM high-water is the highest SRAM byte a program touches (the simulator's
own figure, from validating the program); beside it the plans' largest operator footprint
(an operator's own buffers or the intermediates kept on chip around it): the difference is
where the codegen places consecutive operators' buffers apart so that they overlap.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import tvm
from tvm import relax

from tvm_npu.compiler.driver import (
    BuildInfo,
    Model,
    _call_macs,  # partition_info's MACs of a host call
    is_npu_function,
    load_model,
    stages,
)
from tvm_npu.compiler.shapes import Shapes
from tvm_npu.config import NpuTarget, parse_target
from tvm_npu.core.artifact import Artifact
from tvm_npu.core.ops import ElementwiseSpec
from tvm_npu.core.plan import PartitionPlan
from tvm_npu.relay_patterns.layout import is_layout_transform
from tvm_npu.relay_patterns.patterns import collect_refusals
from tvm_npu.report.layers import DeploymentMemory, columns, kib, program_memory
from tvm_npu.runtime.npu_module import module_blob
from tvm_npu.simulator import decode_program
from tvm_npu.simulator.validate import validate
from tvm_npu.tools.bench import TensorSpec, model_inputs, resolve_model, shape_text


@dataclass(frozen=True)
class OperatorPlacement:
    """One operator: where it runs (``"NPU"`` or ``"host"``), in which partition, and for the host why."""

    where: str
    op: str  # the Relax operator (host) or the NPU operator with its fused epilogue
    output: str  # shape and element type of its result
    macs: int
    partition: str = ""  # "p0", "p1", ... in call order (NPU operators only)
    reason: str = ""  # why it stays on the host


@dataclass(frozen=True)
class PartitionSummary:
    """One NPU partition: its operators, MACs, program and constants, SRAM high-water."""

    label: str
    symbol: str
    calls: int
    operators: int
    macs: int  # per call
    program_bytes: int  # instructions and metadata, constants excluded
    weight_bytes: int  # the constants the program carries
    scratch_bytes: int  # DRAM intermediates inside the partition
    sram_high_water: int  # the highest SRAM byte the program touches (the simulator's figure)
    sram_largest_op: int  # the plan's largest operator footprint (own buffers, or on-chip intermediates around it)


@dataclass(frozen=True)
class Inspection:
    """Everything ``tvm-npu inspect`` prints, also as JSON (:meth:`to_json`)."""

    model: str
    target: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    operators: tuple[OperatorPlacement, ...]
    partitions: tuple[PartitionSummary, ...]
    memory: DeploymentMemory

    @property
    def npu_macs(self) -> int:
        return sum(o.macs for o in self.operators if o.where == "NPU")

    @property
    def host_macs(self) -> int:
        return sum(o.macs for o in self.operators if o.where == "host")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "npu_macs": self.npu_macs, "host_macs": self.host_macs,
                "memory": self.memory.to_json()}

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))

    def text(self) -> str:
        """The human-readable form: inputs, outputs, operators, partitions, memory."""
        npu = [o for o in self.operators if o.where == "NPU"]
        host = [o for o in self.operators if o.where == "host"]
        total = self.npu_macs + self.host_macs
        lines = [f"model {self.model}   target: {self.target}", "inputs:"]
        lines += [f"  {t.text()}" for t in self.inputs] or ["  none"]
        lines += ["outputs:", *(f"  {t.text()}" for t in self.outputs)]
        lines += ["", f"operators: {len(npu)} on the NPU in {len(self.partitions)} partitions, {len(host)} on the "
                  f"host (llvm)"]
        rows = [(o.where, o.partition or "-", o.op, o.output, _macs(o.macs), o.reason) for o in self.operators]
        lines += ["  " + line for line in columns(("where", "part", "operator", "output", "MACs", "host because"),
                                                   rows)]
        lines += [f"MACs: {self.npu_macs / 1e6:,.1f} M on the NPU ({self.npu_macs / total if total else 0:.1%}), "
                  f"{self.host_macs / 1e6:,.1f} M on the host"]
        if self.partitions:
            rows = [(p.label, str(p.calls), str(p.operators), _macs(p.macs), kib(p.program_bytes),
                     kib(p.weight_bytes), kib(p.scratch_bytes), kib(p.sram_high_water), _short(p.symbol))
                    for p in self.partitions]
            lines += ["", "partitions:"]
            lines += ["  " + line for line in columns(("part", "calls", "ops", "MACs", "program KiB", "weights KiB",
                                                        "scratch KiB", "SRAM KiB", "symbol"), rows)]
        lines += ["", *self.memory.lines()]
        return "\n".join(lines)


def inspect_model(model: Model, target: str | NpuTarget = "npu", name: str | None = None, *,
                  shapes: Shapes | None = None) -> Inspection:
    """Inspect ``model`` (anything :func:`tvm_npu.build` takes) for ``target``; see the module docstring.
    ``shapes`` binds symbolic input dimensions (:func:`tvm_npu.load_model`)."""
    npu = parse_target(target)
    onnx_model = _onnx_of(model)
    mod = load_model(onnx_model if onnx_model is not None else model, shapes)
    inputs, outputs = tuple(model_inputs(mod)), _outputs(mod["main"], onnx_model)
    plans: list[PartitionPlan] = []
    partitioned = None
    with collect_refusals() as refusals:
        for stage in stages(npu, plans=plans):
            mod = stage.run(mod)
            if stage.name == "partition":
                partitioned = mod
    assert partitioned is not None
    partitions = npu_partitions(partitioned, mod, plans)
    label_of = {p.symbol: p.label for p in partitions}
    plan_of = {p.symbol: p for p in plans}
    operators: list[OperatorPlacement] = []
    for var, call in _calls(partitioned["main"]):
        symbol = _npu_symbol(partitioned, call)
        if symbol is not None:
            operators += [OperatorPlacement("NPU", _npu_op(op.spec), _result(op.spec.out.shape,
                                            op.spec.out.dtype.np.name), int(op.spec.macs), label_of[symbol])
                          for op in plan_of[symbol].ops]
        elif isinstance(call.op, tvm.ir.Op):
            operators.append(OperatorPlacement("host", call.op.name.removeprefix("relax."), _type_text(var.ty),
                                               _call_macs(call), reason=_host_reason(call, refusals.get(var))))
    return Inspection(name or _name(model), str(npu), inputs, outputs, tuple(operators), partitions,
                      deployment_memory(partitioned, partitions, npu))


def npu_partitions(partitioned: tvm.IRModule, compiled: tvm.IRModule,
                   plans: Sequence[PartitionPlan]) -> tuple[PartitionSummary, ...]:
    """The NPU partitions ``main`` of ``partitioned`` (the module after the partition stage) calls, labelled
    ``p0``, ``p1``, ... in order of first call as the profile's report labels them; ``compiled``: the module
    after codegen (its external modules hold the programs); ``plans``: the plan stage's."""
    modules = compiled.attrs["external_mods"] if compiled.attrs and "external_mods" in compiled.attrs else []
    artifacts = {a.symbol: a for a in (Artifact.decode(module_blob(m)) for m in modules)}
    plan_of = {p.symbol: p for p in plans}
    calls: dict[str, int] = {}  # in order of first call
    for _, call in _calls(partitioned["main"]):
        symbol = _npu_symbol(partitioned, call)
        if symbol is not None:
            calls[symbol] = calls.get(symbol, 0) + 1
    return tuple(_partition(f"p{i}", s, n, plan_of[s], artifacts[s]) for i, (s, n) in enumerate(calls.items()))


def deployment_memory(partitioned: tvm.IRModule, partitions: Sequence[PartitionSummary],
                      target: NpuTarget) -> DeploymentMemory:
    """What the device holds for the model (see the module docstring): ``partitions`` as :func:`npu_partitions`
    gives them for ``partitioned``, the module after the partition stage."""
    host_weights = {c: None for _, call in _calls(partitioned["main"]) if isinstance(call.op, tvm.ir.Op)
                    for c in call.args if isinstance(c, tvm.ir.expr.GenericConst)}
    return DeploymentMemory(
        npu_weight_bytes=sum(p.weight_bytes for p in partitions),
        host_weight_bytes=sum(c.value.numpy().nbytes for c in host_weights),
        peak_activation_bytes=_peak_live(partitioned, {p.symbol: p.scratch_bytes for p in partitions}),
        program_bytes=sum(p.program_bytes for p in partitions),
        sram_high_water=max((p.sram_high_water for p in partitions), default=0),
        sram_largest_op=max((p.sram_largest_op for p in partitions), default=0),
        sram_bytes=target.hw.max_sram_bytes)


def build_memory(info: BuildInfo) -> DeploymentMemory:
    """The deployment memory of a build from what :func:`tvm_npu.build_with_info` returns with it: the
    figures ``tvm-npu inspect`` shows for the same model and target (``tvm-npu profile`` prints them)."""
    if info.partitioned is None or info.compiled is None:
        raise ValueError("this BuildInfo holds no partitioned and compiled modules; accepted: the BuildInfo "
                         "tvm_npu.build_with_info returns")
    partitions = npu_partitions(info.partitioned, info.compiled, info.plans)
    return deployment_memory(info.partitioned, partitions, parse_target(info.target))


# ------------------------------------------------------------------------------ helpers
def _onnx_of(model: Model) -> onnx.ModelProto | None:
    """The ONNX model behind ``model`` (its output names are kept), None for a Relax module."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, tvm.IRModule):
        return None
    return resolve_model(str(model))[1]


def _name(model: Model) -> str:
    if isinstance(model, onnx.ModelProto):
        return model.graph.name or "model"
    if isinstance(model, tvm.IRModule):
        return "module"
    return Path(model).stem


def _outputs(main: relax.Function, proto: onnx.ModelProto | None) -> tuple[TensorSpec, ...]:
    """What ``main`` returns, named after the ONNX graph's outputs (``output_0``, ... without them)."""
    ret = main.ret_ty if hasattr(main, "ret_ty") else main.body.ty
    fields = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    names = [o.name for o in proto.graph.output] if proto is not None else []
    if len(names) != len(fields):
        names = [f"output_{i}" for i in range(len(fields))]
    return tuple(TensorSpec(n, _dims(t), str(getattr(t, "dtype", "?"))) for n, t in zip(names, fields, strict=True))


def _dims(ty: Any) -> tuple[int | str, ...]:
    shape = getattr(ty, "shape", None)
    if not isinstance(shape, relax.ShapeExpr):
        return ()
    return tuple(int(d) if isinstance(d, tvm.tirx.IntImm) else str(d) for d in shape.values)


def _result(shape: Sequence[int], dtype: str) -> str:
    return f"{dtype} {shape_text(shape)}"


def _type_text(ty: Any) -> str:
    if isinstance(ty, relax.TupleType):
        return ", ".join(_type_text(f) for f in ty.fields)
    return _result(_dims(ty), str(getattr(ty, "dtype", "?")))


def _nbytes(ty: Any) -> int:
    """Bytes of a (tuple of) static-shape tensor type; 0 for anything else."""
    if isinstance(ty, relax.TupleType):
        return sum(_nbytes(f) for f in ty.fields)
    dims = _dims(ty)
    if not isinstance(ty, relax.TensorType) or not all(isinstance(d, int) for d in dims) or ty.dtype == "void":
        return 0
    return int(np.prod(dims, dtype=np.int64)) * np.dtype(str(ty.dtype)).itemsize


def _npu_symbol(mod: tvm.IRModule, call: relax.Call) -> str | None:
    """The global symbol of the NPU partition ``call`` calls; None for any other call."""
    if isinstance(call.op, relax.GlobalVar) and is_npu_function(mod[call.op]):
        return str(mod[call.op].attrs["global_symbol"])
    return None


def _calls(func: relax.Function) -> Iterator[tuple[relax.Var, relax.Call]]:
    """The calls ``func`` binds, in program order."""
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b.value, relax.Call):
                yield b.var, b.value


def _npu_op(spec: ElementwiseSpec | Any) -> str:
    """``conv2d+bias+relu``: the operator (its spec's name without the index) and the epilogue fused into it."""
    steps = [e.kind.value for e in spec.epilogue]
    if isinstance(spec, ElementwiseSpec):  # its first step is the operator itself
        steps = steps[1:]
    return "+".join([re.sub(r"_\d+$", "", spec.name), *steps])


def _host_reason(call: relax.Call, refusal: str | None) -> str:
    if refusal is not None:
        return refusal
    if is_layout_transform(call):
        return "layout transform not folded into an NPU operator's DMA"
    return f"no NPU pattern for {call.op.name}"


def _partition(label: str, symbol: str, calls: int, plan: PartitionPlan, artifact: Artifact) -> PartitionSummary:
    program = decode_program(artifact.program)
    memory = program_memory(artifact, program)
    return PartitionSummary(
        label=label, symbol=symbol, calls=calls, operators=len(plan.ops),
        macs=sum(int(op.spec.macs) for op in plan.ops), program_bytes=memory.program_bytes,
        weight_bytes=memory.weight_bytes, scratch_bytes=memory.scratch_bytes,
        sram_high_water=validate(parse_target(artifact.target).hw, program), sram_largest_op=largest_op(plan))


def largest_op(plan: PartitionPlan) -> int:
    """The largest SRAM footprint of an operator of ``plan``: its own buffers (a layer group's buffers and
    steps), or the end of an intermediate kept on chip while it runs."""
    peak = 0
    for i, op in enumerate(plan.ops):
        group = plan.group_of(i)
        own = op.sram_bytes if group is None else max(group.sram_bytes, max(
            (a + b.nbytes for b in group.buffers for a in b.addrs), default=0))
        peak = max(peak, own, *(r.addr + r.nbytes for r in plan.resident if r.live_at(i)))
    return peak


def _peak_live(mod: tvm.IRModule, scratch: dict[str, int]) -> int:
    """The largest sum of ``main``'s tensors live at one binding, plus the scratch of a partition running there.

    A binding that is not a call (a tuple, a tuple item, an alias) holds no storage of its own: a use of it
    keeps the storage it refers to alive.
    """
    main = mod["main"]
    bindings = [b for block in main.body.blocks for b in block.bindings]
    size: dict[relax.Var, int] = {p: _nbytes(p.ty) for p in main.params}
    born: dict[relax.Var, int] = dict.fromkeys(main.params, -1)
    last: dict[relax.Var, int] = dict.fromkeys(main.params, -1)
    owners: dict[relax.Var, set[relax.Var]] = {p: {p} for p in main.params}
    extra = [0] * len(bindings)

    def use(expr: relax.Expr, i: int) -> set[relax.Var]:
        found = {o for v in relax.analysis.free_vars(expr) for o in owners.get(v, ())}
        for o in found:
            last[o] = i
        return found

    for i, b in enumerate(bindings):
        used = use(b.value, i)
        if isinstance(b.value, relax.Call):
            size[b.var], born[b.var], last[b.var], owners[b.var] = _nbytes(b.var.ty), i, i, {b.var}
            if isinstance(b.value.op, relax.GlobalVar) and is_npu_function(mod[b.value.op]):
                extra[i] = scratch.get(str(mod[b.value.op].attrs["global_symbol"]), 0)
        else:
            owners[b.var] = used
    use(main.body.body, len(bindings))
    return max((sum(size[v] for v in size if born[v] <= i <= last[v]) + extra[i] for i in range(len(bindings))),
               default=sum(size.values()))


def _macs(macs: int) -> str:
    return f"{macs / 1e6:.1f}M" if macs else "-"


def _short(symbol: str, keep: int = 60) -> str:
    return symbol if len(symbol) <= keep else f"{symbol[:keep - 3]}..."

