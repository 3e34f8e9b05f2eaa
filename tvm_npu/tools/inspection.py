"""``tvm-npu inspect``: a model's inputs and outputs, where each operator runs and why, its device memory.

The build stages up to and including the codegen run with the pattern check functions'
refusals recorded (:func:`~tvm_npu.relay_patterns.patterns.collect_refusals`), so a host
operator carries the reason the NPU refused it: the extraction's message (an unsupported
dtype, layout or attribute), the SRAM budget no tile fits, or no NPU pattern for the
operator at all. The host part is not compiled (no llvm build), so inspecting is quicker
than compiling.

Deployment memory is :mod:`tvm_npu.report.memory`'s model of what the device holds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import onnx
import tvm
from tvm import relax

from tvm_npu.compiler.driver import (
    Model,
    _call_macs,  # partition_info's MACs of a host call
    load_model,
    stages,
)
from tvm_npu.compiler.shapes import Shapes, type_dims
from tvm_npu.config import NpuTarget, parse_target
from tvm_npu.core.ops import ElementwiseSpec
from tvm_npu.core.plan import PartitionPlan
from tvm_npu.models.inputs import TensorSpec, shape_text
from tvm_npu.models.registry import load_onnx
from tvm_npu.relay_patterns.layout import is_layout_transform
from tvm_npu.relay_patterns.patterns import collect_refusals
from tvm_npu.report.layers import DeploymentMemory
from tvm_npu.report.memory import (  # noqa: F401  (build_memory, largest_op: re-exported, their old home)
    PartitionSummary,
    build_memory,
    deployment_memory,
    largest_op,
    main_calls,
    npu_partitions,
    npu_symbol,
)
from tvm_npu.report.text import columns, kib
from tvm_npu.tools.bench import model_inputs


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
    for var, call in main_calls(partitioned["main"]):
        symbol = npu_symbol(partitioned, call)
        if symbol is not None:
            operators += [OperatorPlacement("NPU", _npu_op(op.spec), _result(op.spec.out.shape,
                                            op.spec.out.dtype.np.name), int(op.spec.macs), label_of[symbol])
                          for op in plan_of[symbol].ops]
        elif isinstance(call.op, tvm.ir.Op):
            operators.append(OperatorPlacement("host", call.op.name.removeprefix("relax."), _type_text(var.ty),
                                               _call_macs(call), reason=_host_reason(call, refusals.get(var))))
    return Inspection(name or _name(model), str(npu), inputs, outputs, tuple(operators), partitions,
                      deployment_memory(partitioned, partitions, npu))


# ------------------------------------------------------------------------------ helpers
def _onnx_of(model: Model) -> onnx.ModelProto | None:
    """The ONNX model behind ``model`` (its output names are kept), None for a Relax module."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, tvm.IRModule):
        return None
    return load_onnx(model)


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
    return tuple(TensorSpec(n, type_dims(t), str(getattr(t, "dtype", "?"))) for n, t in zip(names, fields, strict=True))


def _result(shape: Sequence[int], dtype: str) -> str:
    return f"{dtype} {shape_text(shape)}"


def _type_text(ty: Any) -> str:
    if isinstance(ty, relax.TupleType):
        return ", ".join(_type_text(f) for f in ty.fields)
    return _result(type_dims(ty), str(getattr(ty, "dtype", "?")))


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


def _macs(macs: int) -> str:
    return f"{macs / 1e6:.1f}M" if macs else "-"


def _short(symbol: str, keep: int = 60) -> str:
    return symbol if len(symbol) <= keep else f"{symbol[:keep - 3]}..."

