"""The Relax side of the NPU codegen: what the schedule stage attaches to each partition function, and the
external codegen ``relax.ext.npu`` that ``relax.transform.RunCodegen`` calls with those functions.

The schedule stage hands the codegen everything it lowers as attributes of the ``Codegen="npu"``
function: its plan (``npu.plan``, the typed :class:`~tvm_npu.core.plan.PartitionPlan` as JSON, the only
form an IR attribute can hold) and its constants in the plan's layouts (``npu.constants``, name ->
tensor). The codegen lowers those (:func:`tvm_npu.codegen.partition.lower_plan_parts`) and never looks at the
function's body again, so the graph is extracted once, by the front end, and ``codegen/`` imports no
front-end module.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from tvm_npu.codegen.operator import precompile
from tvm_npu.codegen.partition import compile_tasks, lower_plan_parts
from tvm_npu.config import parse_target
from tvm_npu.core.plan import CONSTANTS_ATTR, PLAN_ATTR, PartitionPlan
from tvm_npu.runtime.npu_module import create_module_from_parts


def attach(func: relax.Function, plan: PartitionPlan, constants: Mapping[str, np.ndarray]) -> relax.Function:
    """``func`` carrying its plan and constants for the codegen (the schedule stage's output)."""
    arrays = {name: _tensor(value) for name, value in constants.items()}
    return func.with_attr(PLAN_ATTR, plan.to_json()).with_attr(CONSTANTS_ATTR, arrays)


def _tensor(value: np.ndarray) -> tvm.runtime.Tensor:
    """``value`` as a TVM tensor sharing its memory when TVM can (C-contiguous, 64-byte aligned: a constant the
    front end passes through is a view of the Relax constant's own memory), else a copy: a model's weights are
    not held twice while the partition waits for the codegen."""
    value = np.ascontiguousarray(value)
    if value.ctypes.data % 64 == 0:
        try:  # a versioned capsule signals read-only arrays (the front end's views are)
            return tvm.runtime.from_dlpack(value.__dlpack__(max_version=(1, 0)))
        except (BufferError, TypeError, ValueError, RuntimeError):  # a dtype or layout DLPack cannot carry
            pass
    return tvm.runtime.tensor(value)


def _view(tensor: tvm.runtime.Tensor) -> np.ndarray:
    """A read-only numpy view of ``tensor``'s memory (the codegen only reads its constants)."""
    arr = np.from_dlpack(tensor)
    arr.flags.writeable = False
    return arr


def attached(func: relax.Function) -> tuple[PartitionPlan, dict[str, np.ndarray]]:
    """The plan and constants :func:`attach` put on a ``Codegen="npu"`` function; a ``ValueError`` for a
    function that did not go through the schedule stage."""
    attrs = func.attrs or {}
    symbol = str(attrs.get("global_symbol", "?"))
    if PLAN_ATTR not in attrs or CONSTANTS_ATTR not in attrs:
        raise ValueError(f"{symbol}: an NPU function without its plan ({PLAN_ATTR}) and constants "
                         f"({CONSTANTS_ATTR}); accepted: functions from tvm_npu.partition_for_npu(..., "
                         f"codegen=False) or tvm_npu.build's stages up to 'schedule'")
    plan = PartitionPlan.from_json(str(attrs[PLAN_ATTR]))
    return plan, {str(k): _view(v) for k, v in attrs[CONSTANTS_ATTR].items()}


def npu_codegen(functions, options, constant_names) -> list[tvm.runtime.Module]:
    """Compile every ``Codegen="npu"`` function into one ``npu`` runtime module each.

    ``options`` (strings only: it crosses the FFI) carries the canonical target string
    (``str(NpuTarget)``) and an optional dump directory. Constants are embedded in the
    programs, so ``constant_names`` is unused. The operators of all partitions are compiled
    first, in worker processes when there are many (:func:`~tvm_npu.codegen.operator.precompile`;
    ``TVM_NPU_CODEGEN_WORKERS=0`` keeps everything in this process).
    """
    del constant_names
    opts = dict(options.items()) if options is not None else {}
    target = parse_target(str(opts.get("target", "npu")))
    dump = Path(str(opts["dump_dir"])) if opts.get("dump_dir") else None
    planned = [attached(func) for func in functions]
    for func, (plan, _) in zip(functions, planned, strict=True):
        if plan.target != str(target):
            raise ValueError(f"{func.attrs['global_symbol']}: the attached plan was made for target "
                             f"{plan.target!r}, not {str(target)!r}")
    if dump is None:  # (dumping compiles each operator under its own names, in this process)
        precompile(op for plan, _ in planned for op in compile_tasks(plan))
    modules = []
    for func, (plan, constants) in zip(functions, planned, strict=True):
        parts = lower_plan_parts(plan, constants, target.hw, dump)  # the weights: the constants' own arrays
        modules.append(create_module_from_parts(parts, [str(func.attrs["global_symbol"])]))
        del parts  # the module holds the program and the constants' arrays now
    return modules


tvm_ffi.register_global_func("relax.ext.npu", npu_codegen, override=True)
