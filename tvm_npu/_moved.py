"""The module paths of release 0.1, kept for one release: ``import tvm_npu.bench`` still works and gives
the module at its new path (the same module object), with a ``DeprecationWarning`` naming it.

A finder on ``sys.meta_path`` answers for the old names only, so nothing is imported until an old path
is used. ``python -m tvm_npu.rpc_server`` (an old path run as a script) works too: the loader hands
``runpy`` the new module's code, with the notice as a ``FutureWarning``, which Python shows a command's user.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import CodeType, ModuleType

#: old module -> new module (docs/architecture.md, "Floors")
MOVED = {
    "tvm_npu.analysis": "tvm_npu.report.layers",
    "tvm_npu.artifact": "tvm_npu.core.artifact",
    "tvm_npu.bench": "tvm_npu.tools.bench",
    "tvm_npu.byoc": "tvm_npu.compiler.byoc",
    "tvm_npu.cli": "tvm_npu.tools.cli",
    "tvm_npu.codegen.relax_ext": "tvm_npu.compiler.relax_ext",
    "tvm_npu.compare": "tvm_npu.tools.quant_error",
    "tvm_npu.driver": "tvm_npu.compiler.driver",
    "tvm_npu.epilogue": "tvm_npu.core.epilogue",
    "tvm_npu.inspect": "tvm_npu.tools.inspection",
    "tvm_npu.measure": "tvm_npu.tuning.measure",
    "tvm_npu.onnx_import": "tvm_npu.compiler.onnx_import",
    "tvm_npu.ops": "tvm_npu.core.ops",
    "tvm_npu.plan": "tvm_npu.core.plan",
    "tvm_npu.plan_search": "tvm_npu.tuning.group_search",
    "tvm_npu.qoperator": "tvm_npu.compiler.qoperator",
    "tvm_npu.quantize": "tvm_npu.tools.quantize",
    "tvm_npu.rpc_server": "tvm_npu.tuning.rpc_server",
    "tvm_npu.runtime_module": "tvm_npu.runtime.npu_module",
    "tvm_npu.shapes": "tvm_npu.compiler.shapes",
    "tvm_npu.tiles": "tvm_npu.core.tiles",
    "tvm_npu.tir_schedules.plan": "tvm_npu.tir_schedules.scheduler",
    "tvm_npu.tir_schedules.planner": "tvm_npu.tir_schedules.tile_search",
    "tvm_npu.views": "tvm_npu.core.views",
    "tvm_npu.zoo": "tvm_npu.models.registry",  # the table; its generators and random_inputs imported there
}


def _warn(old: str, new: str, category: type[Warning] = DeprecationWarning) -> None:
    warnings.warn(f"{old} moved to {new}; the old path goes in the next release", category, stacklevel=3)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old names and loads each as the module at its new name."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        _warn(spec.name, MOVED[spec.name])
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new path has run already."""

    def get_code(self, fullname: str) -> CodeType | None:
        """For ``python -m <old path>``: the new module's code, run as ``__main__``. A command's user sees the
        notice (a FutureWarning: Python hides a DeprecationWarning outside ``__main__``)."""
        _warn(fullname, MOVED[fullname], FutureWarning)
        spec = importlib.util.find_spec(MOVED[fullname])
        return spec.loader.get_code(MOVED[fullname]) if spec and spec.loader else None

    def is_package(self, fullname: str) -> bool:
        return False


if not any(isinstance(f, _Alias) for f in sys.meta_path):
    sys.meta_path.insert(0, _Alias())
