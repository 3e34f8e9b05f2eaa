"""tvm-npu: compile TVM Relax models for a simulated NPU and run them on its simulator.

``import tvm_npu`` registers the ``npu`` runtime module's loader and the simulator
callback, so ``tvm.runtime.load_module`` of an exported NPU model works afterwards.
"""

from .config import CompilerOptions, DType, HardwareConfig, NpuTarget, parse_target
from .driver import build, build_reference, load_model
from .runtime import PartitionRun, Profile, last_runs, profile

__all__ = [
    "CompilerOptions",
    "DType",
    "HardwareConfig",
    "NpuTarget",
    "PartitionRun",
    "Profile",
    "build",
    "build_reference",
    "last_runs",
    "load_model",
    "parse_target",
    "profile",
]
