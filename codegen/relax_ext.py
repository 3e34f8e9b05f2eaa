"""The external codegen ``relax.ext.npu`` that ``relax.transform.RunCodegen`` calls."""

from __future__ import annotations

from pathlib import Path

import tvm
import tvm_ffi
from tvm import relax
from tvm_npu.relay_patterns.graph import partition_graph
from tvm_npu.tir_schedules.plan import plan_partition

from tvm_npu.config import NpuTarget, parse_target
from tvm_npu.plan import PLAN_ATTR, PartitionGraph, PartitionPlan
from tvm_npu.runtime_module import create_module

from .operator import precompile
from .partition import lower_plan, plan_operators


def function_plan(func: relax.Function, target: NpuTarget) -> tuple[PartitionPlan, PartitionGraph]:
    """The plan the plan stage attached to a ``Codegen="npu"`` function (``npu.plan``), or one made here
    when the function comes from a pipeline of the user's own; and the function's partition graph."""
    symbol = str(func.attrs["global_symbol"])
    graph = partition_graph(func, symbol)
    attached = (func.attrs or {}).get(PLAN_ATTR)
    plan = PartitionPlan.from_json(str(attached)) if attached is not None else plan_partition(graph, target)
    if plan.target != str(target):
        raise ValueError(f"{symbol}: the attached plan was made for target {plan.target!r}, not {str(target)!r}")
    return plan, graph


def compile_function(func: relax.Function, target: NpuTarget, dump_dir: Path | None = None) -> bytearray:
    """One ``Codegen="npu"`` function -> encoded artifact (:func:`function_plan`, lowered)."""
    plan, graph = function_plan(func, target)
    return lower_plan(plan, graph.constants, target.hw, dump_dir)


def npu_codegen(functions, options, constant_names) -> list[tvm.runtime.Module]:
    """Compile every ``Codegen="npu"`` function into one ``npu`` runtime module each.

    ``options`` (strings only: it crosses the FFI) carries the canonical target string
    (``str(NpuTarget)``) and an optional dump directory. Constants are embedded in the
    programs, so ``constant_names`` is unused. The operators of all partitions are compiled
    first, in worker processes when there are many (:func:`~.operator.precompile`;
    ``TVM_NPU_CODEGEN_WORKERS=0`` keeps everything in this process).
    """
    del constant_names
    opts = dict(options.items()) if options is not None else {}
    target = parse_target(str(opts.get("target", "npu")))
    dump = Path(str(opts["dump_dir"])) if opts.get("dump_dir") else None
    planned = [function_plan(func, target) for func in functions]
    if dump is None:  # (dumping compiles each operator under its own names, in this process)
        precompile(op for plan, _ in planned for op in plan_operators(plan))
    modules = []
    for func, (plan, graph) in zip(functions, planned, strict=True):
        blob = lower_plan(plan, graph.constants, target.hw, dump)
        modules.append(create_module(blob, [str(func.attrs["global_symbol"])]))
        del blob  # the module holds the program (a model's weights) now
    return modules


tvm_ffi.register_global_func("relax.ext.npu", npu_codegen, override=True)
