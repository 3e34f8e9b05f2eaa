"""Deployment memory: what the device holds for a model (the figures ``tvm-npu inspect`` and ``tvm-npu profile``
print, :class:`~tvm_npu.report.layers.DeploymentMemory`).

The device's DRAM holds the NPU programs' constants (weights) and the constants left to host operators,
the peak of the tensors live at once between operators (every tensor of ``main`` from the binding that
computes it to its last use, plus the scratch tensors inside the NPU partition running at that point; TVM's
memory planner reuses storage, and liveness is the least any reuse needs), and the NPU programs themselves.
The SRAM high-water is the highest SRAM byte a program touches (the simulator's own figure, from validating
the program); beside it the plans' largest operator footprint (an operator's own buffers or the
intermediates kept on chip around it): the difference is where the codegen places consecutive operators'
buffers apart so that they overlap.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import tvm
from tvm import relax

from tvm_npu.compiler.driver import BuildInfo, is_npu_function
from tvm_npu.compiler.shapes import tensor_bytes
from tvm_npu.config import NpuTarget, parse_target
from tvm_npu.core.artifact import Artifact
from tvm_npu.core.plan import PartitionPlan
from tvm_npu.report.layers import DeploymentMemory, program_memory
from tvm_npu.runtime.npu_module import module_blob
from tvm_npu.simulator import decode_program
from tvm_npu.simulator.validate import validate


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


def npu_partitions(partitioned: tvm.IRModule, compiled: tvm.IRModule,
                   plans: Sequence[PartitionPlan]) -> tuple[PartitionSummary, ...]:
    """The NPU partitions ``main`` of ``partitioned`` (the module after the partition stage) calls, labelled
    ``p0``, ``p1``, ... in order of first call as the profile's report labels them; ``compiled``: the module
    after codegen (its external modules hold the programs); ``plans``: the plan stage's."""
    modules = compiled.attrs["external_mods"] if compiled.attrs and "external_mods" in compiled.attrs else []
    artifacts = {a.symbol: a for a in (Artifact.decode(module_blob(m)) for m in modules)}
    plan_of = {p.symbol: p for p in plans}
    calls: dict[str, int] = {}  # in order of first call
    for _, call in main_calls(partitioned["main"]):
        symbol = npu_symbol(partitioned, call)
        if symbol is not None:
            calls[symbol] = calls.get(symbol, 0) + 1
    return tuple(_partition(f"p{i}", s, n, plan_of[s], artifacts[s]) for i, (s, n) in enumerate(calls.items()))


def deployment_memory(partitioned: tvm.IRModule, partitions: Sequence[PartitionSummary],
                      target: NpuTarget) -> DeploymentMemory:
    """What the device holds for the model (see the module docstring): ``partitions`` as :func:`npu_partitions`
    gives them for ``partitioned``, the module after the partition stage."""
    host_weights = {c: None for _, call in main_calls(partitioned["main"]) if isinstance(call.op, tvm.ir.Op)
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


def npu_symbol(mod: tvm.IRModule, call: relax.Call) -> str | None:
    """The global symbol of the NPU partition ``call`` calls; None for any other call."""
    if isinstance(call.op, relax.GlobalVar) and is_npu_function(mod[call.op]):
        return str(mod[call.op].attrs["global_symbol"])
    return None


def main_calls(func: relax.Function) -> Iterator[tuple[relax.Var, relax.Call]]:
    """The calls ``func`` binds, in program order."""
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b.value, relax.Call):
                yield b.var, b.value


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
    size: dict[relax.Var, int] = {p: tensor_bytes(p.ty) for p in main.params}
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
            size[b.var], born[b.var], last[b.var], owners[b.var] = tensor_bytes(b.var.ty), i, i, {b.var}
            if isinstance(b.value.op, relax.GlobalVar) and is_npu_function(mod[b.value.op]):
                extra[i] = scratch.get(str(mod[b.value.op].attrs["global_symbol"]), 0)
        else:
            owners[b.var] = used
    use(main.body.body, len(bindings))
    return max((sum(size[v] for v in size if born[v] <= i <= last[v]) + extra[i] for i in range(len(bindings))),
               default=sum(size.values()))
