"""What users call keeps working after the package moved into floors: the facade's names, the module
paths of release 0.1 (kept one release, with a DeprecationWarning), and libraries exported by 0.1."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import tvm_npu
from tvm_npu._moved import MOVED

DATA = Path(__file__).resolve().parent / "runtime" / "data"

FACADE = ("build", "build_with_info", "build_reference", "partition_for_npu", "profile", "tune", "load_model",
          "parse_target", "BuildInfo", "CompilerOptions", "DType", "HardwareConfig", "NpuTarget", "Profile",
          "PartitionRun", "last_runs", "HostFallbackWarning", "SymbolicShapeWarning", "UnsupportedOperatorError",
          "run")


@pytest.mark.parametrize("name", FACADE)
def test_the_facade_names_resolve(name: str) -> None:
    assert getattr(tvm_npu, name) is not None
    assert name in dir(tvm_npu)


def test_an_unknown_facade_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = tvm_npu.nothing_here


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_is_the_new_module_with_a_warning(old: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {MOVED[old]}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])


def test_the_readme_entry_points_at_their_old_paths() -> None:
    """``tvm_npu.quantize.quantize_model``, ``tvm_npu.bench.bench``, ``tvm_npu.inspect.inspect_model``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from tvm_npu.bench import bench, host_latency
        from tvm_npu.inspect import inspect_model
        from tvm_npu.quantize import quantize_model
    from tvm_npu.tools.bench import bench as new_bench
    from tvm_npu.tools.inspection import inspect_model as new_inspect
    from tvm_npu.tools.quantize import quantize_model as new_quantize

    assert (bench, inspect_model, quantize_model) == (new_bench, new_inspect, new_quantize)
    assert callable(host_latency)


@pytest.mark.slow
def test_an_old_module_path_runs_as_a_script() -> None:
    """``python -m tvm_npu.rpc_server`` (README of 0.1) still starts the RPC server's command line."""
    out = subprocess.run([sys.executable, "-P", "-m", "tvm_npu.rpc_server", "--help"], capture_output=True,
                         text=True, check=True, cwd=Path(__file__).resolve().parents[2])
    assert "--tracker" in out.stdout
    assert "tvm_npu.rpc_server moved to tvm_npu.tuning.rpc_server" in out.stderr


def test_a_library_exported_by_release_0_1_loads_and_runs() -> None:
    """tiny_convnet exported by the code before the move (its npu module, its simulator callback names)."""
    import tvm
    from tvm import relax

    from tvm_npu.runtime.npu_module import load_module

    ref = np.load(DATA / "tiny_convnet_v0.1.npz")
    vm = relax.VirtualMachine(load_module(DATA / "tiny_convnet_v0.1.so"), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(ref["x"]))
    got = got.numpy() if hasattr(got, "numpy") else got[0].numpy()
    np.testing.assert_array_equal(got, ref["y"])
