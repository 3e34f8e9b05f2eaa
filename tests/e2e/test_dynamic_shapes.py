"""One executable for every input size: models with symbolic dimensions built once, NPU partitions compiled per
shape on first call (or ahead of time), against llvm built for each shape and onnxruntime.

Small ONNX models in the exporters' styles (``onnx.helper``): a recogniser stem of width ``W``
(paddle2onnx-style name), a detector ``[N, 3, H, W]``, a classifier declared ``[-1, 3, '?', '?']``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import tvm
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm import relax

import tvm_npu
from tvm_npu.runtime import jit
from tvm_npu.runtime.npu_module import module_blob

RTOL, ATOL = 1e-4, 1e-5
WIDTH = "p2o.DynamicDimension.0"


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path) -> Iterator[jit.JitCache]:
    """Each test compiles into its own cache (memory and a temporary directory)."""
    with jit.use_cache(jit.JitCache(jit.DiskCache(tmp_path / "cache"))) as cache:
        yield cache


def _stem(in_shape: list, out_shape: list) -> onnx.ModelProto:
    """Conv -> ReLU -> MaxPool 2x2 -> Conv -> ReLU: the stem of a text recogniser."""
    net = OnnxNet()
    y = net.conv("x", 3, 8, 3)
    y = net.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = net.conv(y, 8, 8, 3)
    return net.model(y, in_shape, out_shape)


def _run(ex: relax.VMExecutable, x: np.ndarray) -> np.ndarray:
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def _check(model: onnx.ModelProto, ex: relax.VMExecutable, shape: tuple[int, ...]) -> None:
    """The executable at ``shape`` == llvm built for ``shape`` and onnxruntime."""
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    out = _run(ex, x)
    ref = _run(tvm_npu.build_reference(model, shapes={"x": shape}), x)
    ort = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = ort.run(None, {"x": x})
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


def test_symbolic_width_one_build_three_widths(private_cache: jit.JitCache) -> None:
    """Built once without shapes=: each new width compiles once, a repeated one not at all; the host part
    stays shape-generic and the whole stem is one NPU partition."""
    model = _stem([1, 3, 48, WIDTH], [1, 8, 24, "w2"])
    ex, info = tvm_npu.build_with_info(model)
    assert info.host_ops == {} and info.partitions == 1
    for n, width in enumerate((64, 96, 130), start=1):
        _check(model, ex, (1, 3, 48, width))
        assert private_cache.compiles == n
    _check(model, ex, (1, 3, 48, 96))
    assert private_cache.compiles == 3 and private_cache.memory_hits == 1


@pytest.mark.parametrize("dims", [["N", 3, "H", "W"], [-1, 3, "?", "?"]])
def test_symbolic_batch_and_spatial_dims(dims: list, private_cache: jit.JitCache) -> None:
    """[N, 3, H, W] and the anonymous [-1, 3, ?, ?] (each ? its own dimension) build once and run any shape."""
    model = _stem(dims, ["n", 8, "h", "w"])
    ex, info = tvm_npu.build_with_info(model)
    assert info.host_ops == {} and info.partitions == 1
    for shape in ((1, 3, 16, 24), (2, 3, 20, 12)):
        _check(model, ex, shape)
    assert private_cache.compiles == 2


def test_listed_shapes_are_compiled_ahead(private_cache: jit.JitCache) -> None:
    """shapes= with a list compiles each listed shape at build time: running them compiles nothing."""
    model = _stem([1, 3, 48, WIDTH], [1, 8, 24, "w2"])
    ex = tvm_npu.build(model, shapes={"x": [(1, 3, 48, 32), (1, 3, 48, 40)]})
    for width in (32, 40):
        _check(model, ex, (1, 3, 48, width))
    assert private_cache.compiles == 0
    _check(model, ex, (1, 3, 48, 48))
    assert private_cache.compiles == 1


def test_jit_off_refuses_a_shape_not_compiled(private_cache: jit.JitCache) -> None:
    model = _stem([1, 3, 48, WIDTH], [1, 8, 24, "w2"])
    ex = tvm_npu.build(model, shapes={"x": [(1, 3, 48, 32), (1, 3, 48, 40)]}, jit="off")
    _check(model, ex, (1, 3, 48, 40))
    with pytest.raises(ValueError, match=r"x=\(1, 3, 48, 56\) was not compiled and the model was built with "
                                         r"jit='off'; compiled shapes: x=\(1, 3, 48, 32\); x=\(1, 3, 48, 40\)"):
        _run(ex, np.zeros((1, 3, 48, 56), np.float32))
    assert private_cache.compiles == 0
    with pytest.raises(ValueError, match="jit='off' compiles only the shapes listed ahead of time"):
        tvm_npu.build(model, jit="off")
    with pytest.raises(ValueError, match="jit='sometimes'; accepted: 'on', 'off'"):
        tvm_npu.build(model, jit="sometimes")


def test_profile_compiles_opt_and_bounds_every_call(private_cache: jit.JitCache) -> None:
    model = _stem([1, 3, 48, WIDTH], [1, 8, 24, "w2"])
    profile = {"min": (1, 3, 48, 16), "opt": (1, 3, 48, 32), "max": (1, 3, 48, 64)}
    ex = tvm_npu.build(model, shapes={"x": profile})
    _check(model, ex, (1, 3, 48, 32))
    _check(model, ex, (1, 3, 48, 64))
    assert private_cache.compiles == 1  # opt was compiled at build time
    with pytest.raises(ValueError, match=r"input 'x' dimension 3 \('p2o.DynamicDimension.0'\) is 80, outside the "
                                         r"bounds 16..64 of the model's shape profile"):
        _run(ex, np.zeros((1, 3, 48, 80), np.float32))
    with pytest.raises(ValueError, match="min <= opt <= max"):
        tvm_npu.build(model, shapes={"x": {**profile, "min": (1, 3, 48, 40)}})


def test_static_models_do_not_take_the_jit_route() -> None:
    """A static model, and a symbolic batch alone, build as before: compiled programs, no JIT program."""
    for dims in ([1, 3, 16, 24], ["N", 3, 16, 24]):
        with pytest.warns(tvm_npu.SymbolicShapeWarning) if dims[0] == "N" else nullcontext():
            _, info = tvm_npu.build_with_info(_stem(dims, [1, 8, 8, 12]))
        (mod,) = info.compiled.attrs["external_mods"]
        assert not module_blob(mod).startswith(jit.MAGIC)


def test_exported_library_compiles_a_new_shape_in_a_fresh_process(tmp_path: Path) -> None:
    """export_library keeps the JIT program: a fresh process loads it, compiles a new width once and finds it
    on disk in a second process."""
    model = _stem([1, 3, 48, WIDTH], [1, 8, 24, "w2"])
    lib = tmp_path / "stem.so"
    tvm_npu.build(model, shapes={"x": [(1, 3, 48, 32)]}).export_library(str(lib))
    x = np.random.default_rng(0).standard_normal((1, 3, 48, 72)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import numpy as np, tvm, tvm_npu
        from tvm import relax
        from tvm_npu.runtime import jit
        vm = relax.VirtualMachine(tvm_npu.runtime.npu_module.load_module({str(lib)!r}), tvm.cpu())
        out = vm["main"](tvm.runtime.tensor(np.load({str(tmp_path / 'x.npy')!r}))).numpy()
        np.save({str(tmp_path / 'out.npy')!r}, out)
        print(jit.cache().compiles, jit.cache().disk_hits)
    """)
    env = {"TVM_NPU_CACHE": str(tmp_path / "shared"), "PATH": "/usr/bin:/bin"}
    # -P: from a source checkout the working directory would shadow the installed package
    runs = [subprocess.run([sys.executable, "-P", "-c", script], capture_output=True, text=True, env=env, timeout=300)
            for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr[-2000:] + runs[1].stderr[-2000:]
    assert [r.stdout.split() for r in runs] == [["1", "0"], ["0", "1"]]
    ref = _run(tvm_npu.build_reference(model, shapes={"x": (1, 3, 48, 72)}), x)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(("shape", "dtype", "why"), [
    ((1, 3, 48), np.float32, "rank 3, the input has rank 4"),
    ((1, 3, 50, 64), np.float32, "dimension 2 is 50; it is static: 48"),
    ((2, 3, 48, 64), np.float32, "dimension 0 is 2; it is static: 1"),
    ((1, 3, 48, 64), np.float64, "dtype float64; accepted: float32"),
])
def test_a_bad_input_is_one_line_naming_it(shape: tuple, dtype: type, why: str) -> None:
    """tvm_npu.run turns the VM's match_cast failure into a ValueError naming the input, its declared shape and
    what was given."""
    ex = tvm_npu.build(_stem([1, 3, 48, WIDTH], [1, 8, 24, "w2"]))
    with pytest.raises(ValueError) as caught:
        tvm_npu.run(ex, np.zeros(shape, dtype))
    text = str(caught.value)
    printed = WIDTH.replace(".", "_")  # as TVM prints the variable
    assert text == f"input 'x' of shape (1, 3, 48, {printed}) float32: given {shape} {np.dtype(dtype).name}: {why}"
    assert tvm_npu.run(ex, np.zeros((1, 3, 48, 8), np.float32)).shape == (1, 8, 24, 4)


def test_static_only_options_are_refused_on_the_jit_route(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"dump_dir= applies to static builds; this model is built for every input"):
        tvm_npu.build(_stem([1, 3, 48, WIDTH], [1, 8, 24, "w2"]), dump_dir=tmp_path)


def test_a_size_no_tile_fits_runs_on_the_host(private_cache: jit.JitCache) -> None:
    """Conv -> Softmax over a width W: at W=8192 no softmax row fits 64 KiB of SRAM, so that size runs the
    partition on the host (llvm), with a HostFallbackWarning, once; smaller widths run on the NPU."""
    net = OnnxNet()
    y = net.node("Softmax", [net.conv("x", 3, 16, 3)], axis=-1)
    model = net.model(y, [1, 3, 2, "W"], [1, 16, 2, "W"])
    ex = tvm_npu.build(model, "npu -max-sram-bytes=65536")
    _check(model, ex, (1, 3, 2, 32))
    with pytest.warns(tvm_npu.HostFallbackWarning, match=r"at W=8192 runs on the host \(llvm\): softmax.*: no tile"):
        _check(model, ex, (1, 3, 2, 8192))
    _check(model, ex, (1, 3, 2, 8192))
    assert private_cache.compiles == 2 and private_cache.memory_hits == 1
    assert len(list(private_cache.disk.directory.glob("*.npu"))) == 1  # the host fallback is not stored on disk
