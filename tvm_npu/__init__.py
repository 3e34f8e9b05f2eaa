"""tvm-npu: compile TVM Relax models for a simulated NPU and run them on its simulator.

``import tvm_npu`` registers the ``npu`` runtime module's loader and the simulator
callback, so ``tvm.runtime.load_module`` of an exported NPU model works afterwards.
"""

from .byoc import partition_for_npu
from .config import CompilerOptions, DType, HardwareConfig, NpuTarget, parse_target
from .driver import BuildInfo, build, build_reference, build_with_info, load_model, tune
from .relay_patterns import HostFallbackWarning
from .runtime import PartitionRun, Profile, last_runs, profile
from .shapes import SymbolicShapeWarning

__all__ = [
    "BuildInfo",
    "CompilerOptions",
    "DType",
    "HardwareConfig",
    "HostFallbackWarning",
    "NpuTarget",
    "PartitionRun",
    "Profile",
    "SymbolicShapeWarning",
    "build",
    "build_reference",
    "build_with_info",
    "last_runs",
    "load_model",
    "parse_target",
    "partition_for_npu",
    "profile",
    "tune",
]
