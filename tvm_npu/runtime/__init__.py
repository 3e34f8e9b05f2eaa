"""The NPU runtime: the ``npu`` runtime module (with its loader, so exported libraries load) and the
simulator callback that runs NPU functions and records their statistics. Imports neither TVM nor the
compiler (TVM is loaded when a module is created or loaded), so ``import tvm_npu`` stays light."""

from tvm_npu.runtime.execute import PartitionRun, Profile, collect, last_runs
from tvm_npu.runtime.jit import JitCache  # installs the invoke handler (JIT programs too)

__all__ = ["JitCache", "PartitionRun", "Profile", "collect", "last_runs"]
