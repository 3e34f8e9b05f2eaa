"""tvm-npu: compile TVM Relax models for a simulated NPU and run them on its simulator.

``import tvm_npu`` loads the runtime only (:mod:`tvm_npu.runtime`: the ``npu`` module's loader and the
simulator callback), so ``tvm.runtime.load_module`` of an exported NPU model works afterwards; it does
not import TVM or the compiler. Everything else is imported on first use (PEP 562), so
``import tvm_npu.simulator`` stays a numpy program. The floors of the package and which may import
which are in docs/architecture.md ("Floors").
"""

from __future__ import annotations

import importlib
from typing import Any

from tvm_npu import _moved, runtime  # noqa: F401  (the runtime registers the npu module's loader)

# a model built for every input size compiles its NPU partitions on first call; the runtime may not import the
# compiler, so the facade tells it where the compiler is (imported only when a compile is needed)
runtime.jit.set_compiler_loader(lambda: importlib.import_module("tvm_npu.compiler.dynamic"))

#: Public name -> the module that defines it, imported when the name is first used.
_LAZY = {
    "CompilerOptions": "tvm_npu.config",
    "DType": "tvm_npu.config",
    "HardwareConfig": "tvm_npu.config",
    "NpuTarget": "tvm_npu.config",
    "parse_target": "tvm_npu.config",
    "PartitionRun": "tvm_npu.runtime.execute",
    "last_runs": "tvm_npu.runtime.execute",
    "run": "tvm_npu.runtime.call",
    "BuildInfo": "tvm_npu.compiler.driver",
    "build": "tvm_npu.compiler.driver",
    "build_reference": "tvm_npu.compiler.driver",
    "build_with_info": "tvm_npu.compiler.driver",
    "load_model": "tvm_npu.compiler.driver",
    "partition_for_npu": "tvm_npu.compiler.byoc",
    "SymbolicShapeWarning": "tvm_npu.compiler.shapes",
    "UnsupportedOperatorError": "tvm_npu.compiler.onnx_import",
    "HostFallbackWarning": "tvm_npu.relay_patterns",
    "profile": "tvm_npu.report.profiling",
    "tune": "tvm_npu.tuning.tuner",
}
#: Names whose object lives under another name in its module.
_RENAMED = {"Profile": ("tvm_npu.report.profiling", "ReportedProfile")}

__all__ = sorted([*_LAZY, *_RENAMED])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _RENAMED:
        module, attr = _RENAMED[name]
        value = getattr(importlib.import_module(module), attr)
    else:
        raise AttributeError(f"module 'tvm_npu' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
