"""Large ONNX files: weights read once, external-data models (``.onnx`` + data file), one-line errors.

A model from a file is loaded lean (:func:`tvm_npu.models.onnx_file.load_lean`: every initializer of at
least 1 KiB stays in the file as an external-data reference) and its weights are read straight into TVM's
constants (:mod:`tvm_npu.compiler.weights`). These tests check that this gives the Relax module and the
build an inline load gives, that external-data models build and match llvm and onnxruntime, that broken
files fail on one line naming the file and the tensor, and (in a fresh process) that importing a model
holds its weights about once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import tvm
from onnx import numpy_helper
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm import relax

import tvm_npu
from tvm_npu.compiler import driver
from tvm_npu.compiler.weights import pretranspose_gemm_weights
from tvm_npu.models import onnx_file
from tvm_npu.models.onnx_file import INLINE_BYTES, ModelFileError, array, is_external, load_lean
from tvm_npu.tools.cli import main as cli
from tvm_npu.tools.export import exports_natively, pack_imports

RTOL, ATOL = 1e-4, 1e-5
SHAPE = (1, 3, 16, 16)


def _model(fc: int = 256, seed: int = 0) -> onnx.ModelProto:
    """Two convolutions, a max pool and two fully connected layers (a 4096 x ``fc`` weight: 4 MB at 256),
    with real initializers; a Reshape by a small constant shape keeps a tensor below 1 KiB in the graph."""
    net = OnnxNet(seed)
    y = net.conv("x", 3, 32, 3)
    y = net.conv(y, 32, 64, 3)
    y = net.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = net.node("Reshape", [y, net.const(np.array([1, 64 * 8 * 8]), np.int64)])
    w1 = net.const(net.rng.standard_normal((fc, 64 * 8 * 8)) / 64)
    y = net.node("Relu", [net.node("Gemm", [y, w1, net.const(net.rng.standard_normal(fc))], transB=1)])
    w2 = net.const(net.rng.standard_normal((10, fc)) / np.sqrt(fc))
    y = net.node("Gemm", [y, w2, net.const(net.rng.standard_normal(10))], transB=1)
    return net.model(y, list(SHAPE), [1, 10])


def _x() -> np.ndarray:
    return np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)


def _run(executable: relax.VMExecutable | tvm.runtime.Module) -> np.ndarray:
    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(_x())).numpy()


def _constants(mod: tvm.IRModule) -> list[np.ndarray]:
    """The constants of ``main``, in the order a post-order walk meets them."""
    found: list[np.ndarray] = []

    def visit(e: relax.Expr) -> None:
        if isinstance(e, tvm.ir.expr.GenericConst):
            found.append(e.value.numpy())

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[onnx.ModelProto, Path, Path]:
    """The model, its inline file and its external-data file (all tensors in one ``weights.bin``)."""
    model = _model()
    root = tmp_path_factory.mktemp("large")
    inline = root / "inline.onnx"
    onnx.save(model, str(inline))
    (root / "ext").mkdir()
    external = root / "ext" / "model.onnx"
    onnx.save(onnx.ModelProto.FromString(model.SerializeToString()), str(external),  # (save converts its model)
              save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    return model, inline, external


# ---------------------------------------------------------------------------------------- the lean load
def test_lean_load_leaves_weights_in_the_file(saved: tuple[onnx.ModelProto, Path, Path]) -> None:
    """Initializers of >= 1 KiB become references into the file itself (absolute location, the raw_data
    offset and length), smaller ones stay inline; every value is the one onnx.load reads."""
    model, inline, _ = saved
    lean = load_lean(inline)
    originals = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    external = [t for t in lean.graph.initializer if is_external(t)]
    assert {t.name for t in external} == {n for n, v in originals.items() if v.nbytes >= INLINE_BYTES}
    assert len(external) >= 5
    data = inline.read_bytes()
    for t in external:
        info = {e.key: e.value for e in t.external_data}
        assert info["location"] == str(inline.resolve())
        start, length = int(info["offset"]), int(info["length"])
        assert data[start:start + length] == originals[t.name].tobytes()
    for t in lean.graph.initializer:
        np.testing.assert_array_equal(array(t), originals[t.name])
    assert lean.ByteSize() < 8 * 1024 < inline.stat().st_size // 100  # the weights are not in the proto


def _canonical(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` after the build's ``bind`` and ``canonicalize`` stages (constants folded)."""
    for stage in driver.stages(tvm_npu.parse_target("npu"))[:2]:
        mod = stage.run(mod)
    return mod


def test_file_gives_the_relax_module_of_the_proto(saved: tuple[onnx.ModelProto, Path, Path]) -> None:
    """The Relax module imported from the file (weights read from it into TVM's constants, a Gemm's
    ``transB`` weight read transposed) is, once canonicalised, the one from the in-memory proto (TVM's
    from_onnx reading the initializers, the transpose folded), constants included."""
    model, inline, external = saved
    from_proto = _canonical(driver.load_model(model))
    for path in (inline, external):
        imported = driver.load_model(path)
        assert "permute_dims" not in imported.script()  # both transB weights were read transposed
        from_file = _canonical(imported)
        tvm.ir.assert_structural_equal(from_file, from_proto)
        a, b = _constants(from_file), _constants(from_proto)
        assert len(a) == len(b) >= 8
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)


def test_transposed_read_in_row_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A weight read transposed from its file in several row blocks (the last one short) is the transpose."""
    value = np.random.default_rng(0).standard_normal((37, 50)).astype(np.float32)
    net = OnnxNet(0)
    w = net.const(value)
    y = net.node("Gemm", ["x", w], transB=1)
    path = tmp_path / "gemm.onnx"
    onnx.save(net.model(y, [2, 50], [2, 37]), str(path))
    model = load_lean(path)
    assert pretranspose_gemm_weights(model) == 1
    (tensor,) = model.graph.initializer
    assert list(tensor.dims) == [50, 37]
    monkeypatch.setattr(onnx_file, "TRANSPOSE_BLOCK_BYTES", 8 * 50 * 4)  # 8 rows a block: 5 blocks
    out = np.empty((50, 37), np.float32)
    onnx_file.read_transposed_into(tensor, out)
    np.testing.assert_array_equal(out, value.T)
    with pytest.raises(ValueError, match="cannot take"):
        onnx_file.read_transposed_into(tensor, np.empty((37, 49), np.float32))


def test_shared_or_input_gemm_weights_are_not_pretransposed(tmp_path: Path) -> None:
    """A ``transB`` weight another node also reads, or that a graph input may override, keeps its layout."""
    net = OnnxNet(0)
    w = net.const(np.random.default_rng(0).standard_normal((50, 50)))
    y = net.node("Add", [net.node("Gemm", ["x", w], transB=1), net.node("MatMul", ["x", w])])
    path = tmp_path / "shared.onnx"
    onnx.save(net.model(y, [2, 50], [2, 50]), str(path))
    assert pretranspose_gemm_weights(load_lean(path)) == 0
    net = OnnxNet(0)
    w = net.const(np.random.default_rng(0).standard_normal((50, 50)))
    model = net.model(net.node("Gemm", ["x", w], transB=1), [2, 50], [2, 50])
    model.graph.input.append(onnx.helper.make_tensor_value_info(w, onnx.TensorProto.FLOAT, [50, 50]))
    onnx.save(model, str(path))
    assert pretranspose_gemm_weights(load_lean(path)) == 0


def test_file_builds_what_the_proto_builds(saved: tuple[onnx.ModelProto, Path, Path]) -> None:
    """Same NPU outputs (bit for bit) from the file and from the proto, within the fp32 standard of llvm
    and onnxruntime; all on the NPU, one partition."""
    model, inline, _ = saved
    ex, info = tvm_npu.build_with_info(inline, "npu")
    out = _run(ex)
    np.testing.assert_array_equal(out, _run(tvm_npu.build(model, "npu")))
    np.testing.assert_allclose(out, _run(tvm_npu.build_reference(model)), rtol=RTOL, atol=ATOL)
    (expected,) = onnxruntime.InferenceSession(str(inline), providers=["CPUExecutionProvider"]).run(None, {"x": _x()})
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
    assert info.host_ops == {} and info.partitions == 1, (info.host_ops, info.partitions)


def test_a_model_proto_given_by_the_user_is_not_modified(saved: tuple[onnx.ModelProto, Path, Path]) -> None:
    model = saved[0]
    before = model.SerializeToString()
    tvm_npu.build(model, "npu")
    assert model.SerializeToString() == before


# ---------------------------------------------------------------------------------------- external data
def test_external_data_model_builds_and_matches(saved: tuple[onnx.ModelProto, Path, Path], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """``model.onnx`` + ``weights.bin`` (every tensor, even the 8-byte Reshape shape, at its own offset in the
    one file; the location relative to the model) builds from another directory, from Python and the CLI,
    and matches llvm and onnxruntime."""
    model, _, external = saved
    header = onnx.load(str(external), load_external_data=False)
    offsets = [int({e.key: e.value for e in t.external_data}["offset"]) for t in header.graph.initializer]
    assert all(is_external(t) for t in header.graph.initializer) and len(set(offsets)) == len(offsets) >= 9
    assert {e.value for t in header.graph.initializer for e in t.external_data if e.key == "location"} == \
        {"weights.bin"}
    monkeypatch.chdir(tmp_path)  # the location is relative to the model, not to the current directory
    ex, info = tvm_npu.build_with_info(str(external), "npu")
    out = _run(ex)
    np.testing.assert_allclose(out, _run(tvm_npu.build_reference(model)), rtol=RTOL, atol=ATOL)
    # (onnxruntime itself cannot shape-infer a Reshape whose shape is external data: it runs the inline file)
    (expected,) = onnxruntime.InferenceSession(str(saved[1]), providers=["CPUExecutionProvider"]).run(
        None, {"x": _x()})
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
    assert info.host_ops == {} and info.partitions == 1
    library = tmp_path / "model.so"  # (its weights' blob included by the assembler: tvm_npu.tools.export)
    assert cli(["compile", str(external), "-o", str(library)]) == 0
    np.testing.assert_array_equal(_run(tvm.runtime.load_module(str(library))), out)


def test_external_data_proto_loaded_without_its_data(saved: tuple[onnx.ModelProto, Path, Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A proto from ``onnx.load(path, load_external_data=False)`` reads its data relative to the current
    directory, as ``onnx.numpy_helper.to_array`` does; the proto itself is left as it was."""
    model, _, external = saved
    header = onnx.load(str(external), load_external_data=False)
    before = header.SerializeToString()
    monkeypatch.chdir(external.parent)
    out = _run(tvm_npu.build(header, "npu"))
    np.testing.assert_allclose(out, _run(tvm_npu.build_reference(model)), rtol=RTOL, atol=ATOL)
    assert header.SerializeToString() == before


def test_library_packer_refuses_a_system_library(tmp_path: Path) -> None:
    """The CLI's packer (the blob included by the assembler) is for shared libraries: a system library,
    whose blob TVM also registers under a prefix, is a clear error (export it with TVM's own packer)."""
    with pytest.raises(ValueError, match="shared library only"):
        pack_imports(tvm.runtime.Module.__new__(tvm.runtime.Module), True, "", str(tmp_path))
    assert exports_natively("m.so") == sys.platform.startswith("linux") and not exports_natively("m.tar")


# ---------------------------------------------------------------------------------------- broken files
def _external_copy(saved: tuple[onnx.ModelProto, Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    src = saved[2]
    (tmp_path / "model.onnx").write_bytes(src.read_bytes())
    (tmp_path / "weights.bin").write_bytes((src.parent / "weights.bin").read_bytes())
    return tmp_path / "model.onnx", tmp_path / "weights.bin"


def _one_line_error(model: object, *words: str) -> str:
    with pytest.raises(ValueError) as info:
        tvm_npu.build(model, "npu")  # type: ignore[arg-type]
    text = str(info.value)
    assert "\n" not in text and all(w in text for w in words), text
    return text


def test_missing_external_data_file(saved: tuple[onnx.ModelProto, Path, Path], tmp_path: Path) -> None:
    model, data = _external_copy(saved, tmp_path)
    data.unlink()
    _one_line_error(model, "weights.bin", "does not exist", "tensor 'w")


def test_external_data_file_too_short(saved: tuple[onnx.ModelProto, Path, Path], tmp_path: Path) -> None:
    model, data = _external_copy(saved, tmp_path)
    size = data.stat().st_size
    with open(data, "r+b") as f:
        f.truncate(size - 100)
    text = _one_line_error(model, "weights.bin", "too short", "tensor '")
    assert f"{size - 100} bytes" in text


def test_external_data_outside_the_model_directory(saved: tuple[onnx.ModelProto, Path, Path],
                                                   tmp_path: Path) -> None:
    header = onnx.load(str(saved[2]), load_external_data=False)
    header.graph.initializer[0].external_data[0].value = "../elsewhere/weights.bin"
    onnx.save(header, str(tmp_path / "model.onnx"))
    _one_line_error(tmp_path / "model.onnx", "'../elsewhere/weights.bin'", "inside the model's directory")


def test_truncated_model_file_names_the_cut_initializer(saved: tuple[onnx.ModelProto, Path, Path],
                                                        tmp_path: Path) -> None:
    """A file cut inside a weight: a one-line error naming the file and that initializer."""
    _, inline, _ = saved
    lean = load_lean(inline)
    big = max(lean.graph.initializer, key=lambda t: int({e.key: e.value for e in t.external_data}.get("length", 0)))
    cut = int({e.key: e.value for e in big.external_data}["offset"]) + 1000
    (tmp_path / "cut.onnx").write_bytes(inline.read_bytes()[:cut])
    _one_line_error(tmp_path / "cut.onnx", "cut.onnx", "truncated", f"initializer {big.name!r}")


def test_corrupt_and_empty_model_files(tmp_path: Path) -> None:
    (tmp_path / "empty.onnx").write_bytes(b"")
    _one_line_error(tmp_path / "empty.onnx", "empty.onnx", "not an ONNX model")
    (tmp_path / "junk.onnx").write_bytes(b"\x0f" * 64)  # wire type 7: no protobuf field
    _one_line_error(tmp_path / "junk.onnx", "junk.onnx", "not an ONNX model")
    with pytest.raises(ModelFileError):
        load_lean(tmp_path / "junk.onnx")


# ---------------------------------------------------------------------------------------- memory
_CHILD = r"""
import json, re, sys
import tvm_npu
from tvm_npu.compiler import driver
def status(key):
    return int(re.search(key + r":\s+(\d+)", open("/proc/self/status").read()).group(1))
open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) starts again from what is resident now
idle = status("VmRSS")
mod = driver.load_model(sys.argv[1])
print(json.dumps({"idle_kib": idle, "peak_kib": status("VmHWM")}))
"""


def test_import_holds_each_weight_about_once(tmp_path: Path) -> None:
    """Importing a 64 MB model file into Relax in a fresh process: peak resident memory above the idle
    ``import tvm_npu`` at most 1.5x the weight bytes (onnx.load, two model copies for the shape passes and
    TVM's numpy-then-tensor reading made it about 6x)."""
    model = _model(fc=3840)
    path = tmp_path / "big.onnx"
    onnx.save(model, str(path))
    weights = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    del model
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    ratio = (r["peak_kib"] - r["idle_kib"]) * 1024 / weights
    assert weights > 60e6 and ratio <= 1.5, f"peak above idle = {ratio:.2f}x the {weights / 1e6:.0f} MB of weights"


_COMPILE_CHILD = r"""
import json, re, sys
from tvm_npu.compiler import driver
from tvm_npu.tools.cli import main
def status(key):
    return int(re.search(key + r":\s+(\d+)", open("/proc/self/status").read()).group(1))
before = []
def reset_then(run):
    def wrapped(mod):
        open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) starts again from here
        before.append(status("VmRSS"))
        return run(mod)
    return wrapped
stage_list = driver.stages
driver.stages = lambda *a, **k: [driver.Stage(s.name, reset_then(s.run) if s.name == "codegen" else s.run)
                                 for s in stage_list(*a, **k)]
assert main(["compile", sys.argv[1], "-o", sys.argv[1] + ".so"]) == 0
print(json.dumps({"before_kib": before[0], "peak_kib": status("VmHWM")}))
"""


@pytest.mark.slow  # a fresh process compiling a 64 MB model: about 25 s
def test_codegen_and_export_do_not_copy_the_weights(tmp_path: Path) -> None:
    """``tvm-npu compile`` of a 64 MB model file in a fresh process: from the code generation to the written
    library, peak resident memory grows by at most 1x the weight bytes over what the Relax module holds
    (issue 26; about 0.5x here: the code generation's fixed costs). The NPU programs read the weights from
    the Relax constants' memory and the library's blob is written piece by piece; programs copied into one
    buffer, their serialised bytes built twice and TVM's in-memory packer of the imports added about 3x."""
    model = _model(fc=3840)
    path = tmp_path / "big.onnx"
    onnx.save(model, str(path))
    weights = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    del model
    proc = subprocess.run([sys.executable, "-c", _COMPILE_CHILD, str(path)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    ratio = (r["peak_kib"] - r["before_kib"]) * 1024 / weights
    assert weights > 60e6 and ratio <= 1.0, f"codegen + export added {ratio:.2f}x the {weights / 1e6:.0f} MB of weights"
    assert (tmp_path / "big.onnx.so").stat().st_size > weights
