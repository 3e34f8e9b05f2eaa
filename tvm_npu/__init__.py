"""tvm-npu: compile TVM Relax models for a simulated NPU and run them on its simulator."""

from .config import CompilerOptions, DType, HardwareConfig, NpuTarget, parse_target

__all__ = ["CompilerOptions", "DType", "HardwareConfig", "NpuTarget", "parse_target"]
