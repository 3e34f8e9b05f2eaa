"""The Relax BYOC convention: ``partition_for_npu`` returns a module the user builds for llvm themselves.

TVM's own backends (``tvm.relax.backend.cuda.cutlass.partition_for_cutlass``, ``partition_for_cublas``)
return the module with their subgraphs split off as functions marked ``Codegen="<backend>"``; the
user then runs ``relax.transform.RunCodegen`` and ``relax.build(mod, target="llvm")`` within their own
pipeline. :func:`partition_for_npu` does the same with the stages of :func:`tvm_npu.build` up to the
NPU code generation, so both routes compile the same partitions with the same plans.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tvm

from tvm_npu.compiler.driver import Model, enabled_stages, load_model, stages, with_switches
from tvm_npu.compiler.shapes import Shapes
from tvm_npu.config import NpuTarget, parse_target


def partition_for_npu(mod: Model, target: str | NpuTarget = "npu", params: Mapping[str, Any] | None = None, *,
                      codegen: bool = True, shapes: Shapes | None = None) -> tvm.IRModule:
    """Partition ``mod`` (a Relax module, an ONNX model or path, or a bundled name) for the NPU.

    The result holds ``main`` calling one function per NPU partition. With ``codegen`` (the default)
    those partitions are already compiled: ``relax.build(result, target="llvm")`` gives the same
    executable as ``tvm_npu.build(mod, target, params=params)``. With ``codegen=False`` they are
    planned functions (attribute ``Codegen="npu"``, their plan in ``npu.plan`` and constants in
    ``npu.constants``), which the user compiles with
    ``relax.transform.RunCodegen(target_options={"npu": {"target": str(target)}})`` before
    ``relax.build``, as after ``partition_for_cutlass``. ``params`` binds ``main``'s named
    parameters as constants (weights must be constants for the NPU to hold them); ``shapes`` binds
    symbolic input dimensions (:func:`tvm_npu.load_model`). The current ``PassContext``'s switches apply
    as in :func:`tvm_npu.build`.
    """
    npu = with_switches(parse_target(target))
    mod = load_model(mod, shapes)
    for stage in enabled_stages(stages(npu, params)):
        if stage.name == "codegen" and not codegen:
            break
        mod = stage.run(mod)
    return mod
