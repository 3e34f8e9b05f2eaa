"""Exported NPU models in fresh processes, damaged exports, and bad user input.

Anything that could crash the interpreter (loading a damaged library) runs in a subprocess,
so that a segfault or SIGBUS shows up as a failed test with a negative return code.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import relax_models as rm
import tvm
from helpers import ATOL, RTOL
from tvm import relax

import tvm_npu
from tvm_npu.config import parse_target
from tvm_npu.core.artifact import MAGIC as ARTIFACT_MAGIC
from tvm_npu.models.light import tiny_convnet

MODULE_MAGIC = b"TVMNPUM1"
MODULE_HEADER = struct.Struct("<8sIIQQ")  # magic, version, reserved, payload length, FNV-1a 64

CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tvm
    from tvm import relax
    import tvm_npu
    from tvm_npu.runtime.npu_module import load_module

    lib = load_module(sys.argv[1])
    vm = relax.VirtualMachine(lib, tvm.cpu())
    with tvm_npu.profile() as prof:
        out = vm["main"](tvm.runtime.tensor(np.load(sys.argv[2]))).numpy()
    np.save(sys.argv[3], out)
    print("npu runs:", len(prof.runs))
    """
)


def run_child(tmp_path: Path, library: Path, x: np.ndarray) -> tuple[subprocess.CompletedProcess, Path]:
    """Load ``library`` in a fresh interpreter and run ``main`` on ``x``; the output goes to a .npy file."""
    (tmp_path / "child.py").write_text(CHILD)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npy"
    proc = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(library), str(tmp_path / "x.npy"),
                           str(out)], capture_output=True, text=True, timeout=300)
    return proc, out


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, np.ndarray, int]:
    """convnet (NCHW) built for the NPU, exported; its input, in-process output and NPU partition runs."""
    mod = rm.convnet("NCHW")
    (x,) = rm.inputs_for(mod)
    executable = tvm_npu.build(mod, "npu")
    path = tmp_path_factory.mktemp("export") / "convnet.so"
    executable.export_library(str(path))
    with tvm_npu.profile() as prof:
        out = rm.run(executable, [x])
    return path, x, out, len(prof.runs)


def _assert_clean_failure(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode > 0, f"expected a Python error, got rc={proc.returncode} (negative = killed by a signal)\n" \
                                f"{proc.stderr[-2000:]}"
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    assert any(w in last.lower() for w in words), f"unclear error message: {last!r}"


# ---------------------------------------------------------------------------------- export
def test_export_and_load_in_a_fresh_process(exported: tuple[Path, np.ndarray, np.ndarray, int], tmp_path: Path) -> None:
    path, x, expected, runs = exported
    assert runs >= 1
    proc, out = run_child(tmp_path, path, x)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"npu runs: {runs}" in proc.stdout  # every NPU partition ran in the child, on the simulator
    np.testing.assert_array_equal(np.load(out), expected)


def test_tvm_load_module_after_import_tvm_npu(exported: tuple[Path, np.ndarray, np.ndarray, int],
                                              tmp_path: Path) -> None:
    """The plain TVM loader works too once ``import tvm_npu`` registered the ``npu`` module kind."""
    path, x, expected, _ = exported
    script = CHILD.replace("lib = load_module(sys.argv[1])", "lib = tvm.runtime.load_module(sys.argv[1])")
    (tmp_path / "child.py").write_text(script)
    np.save(tmp_path / "x.npy", x)
    proc = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(path), str(tmp_path / "x.npy"),
                           str(tmp_path / "out.npy")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)


# ---------------------------------------------------------------------------- damaged files
def _fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _module_span(data: bytes) -> tuple[int, int]:
    """Start of the first embedded npu module and the end of its payload."""
    start = data.find(MODULE_MAGIC)
    assert start >= 0, "the serialized npu module is not embedded verbatim in the library"
    _, _, _, length, _ = MODULE_HEADER.unpack_from(data, start)
    return start, start + MODULE_HEADER.size + length


def test_flipped_byte_in_the_npu_module_is_a_clear_error(exported: tuple[Path, np.ndarray, np.ndarray, int],
                                                         tmp_path: Path) -> None:
    path, x, _, _ = exported
    data = bytearray(path.read_bytes())
    start, end = _module_span(bytes(data))
    data[(start + MODULE_HEADER.size + end) // 2] ^= 0x5A  # middle of the payload: program bytes
    bad = tmp_path / "flipped.so"
    bad.write_bytes(bytes(data))
    proc, _ = run_child(tmp_path, bad, x)
    _assert_clean_failure(proc, "corrupt", "checksum")


def test_corrupted_artifact_inside_a_valid_module_is_a_clear_error(
        exported: tuple[Path, np.ndarray, np.ndarray, int], tmp_path: Path) -> None:
    """A damaged NPU artifact whose module envelope was re-sealed (valid length and checksum):
    the artifact's own crc32 must still catch it, as an error, when the partition is called."""
    path, x, _, _ = exported
    data = bytearray(path.read_bytes())
    start, end = _module_span(bytes(data))
    art = data.find(ARTIFACT_MAGIC, start, end)
    assert art > 0
    data[(art + end) // 2] ^= 0x5A
    payload = bytes(data[start + MODULE_HEADER.size:end])
    magic, version, reserved, length, _ = MODULE_HEADER.unpack_from(data, start)
    MODULE_HEADER.pack_into(data, start, magic, version, reserved, length, _fnv1a64(payload))
    bad = tmp_path / "resealed.so"
    bad.write_bytes(bytes(data))
    proc, _ = run_child(tmp_path, bad, x)
    _assert_clean_failure(proc, "corrupt", "checksum")


@pytest.mark.parametrize("keep", [63, 4096, 0.5])
def test_truncated_library_is_a_clear_error(exported: tuple[Path, np.ndarray, np.ndarray, int], tmp_path: Path,
                                            keep: float) -> None:
    path, x, _, _ = exported
    data = path.read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else keep
    bad = tmp_path / "cut.so"
    bad.write_bytes(data[:n])
    proc, _ = run_child(tmp_path, bad, x)
    _assert_clean_failure(proc, "truncated", "corrupt", "too short", "invalid elf", "file too short")


def test_library_with_a_broken_elf_header_is_a_clear_error(exported: tuple[Path, np.ndarray, np.ndarray, int],
                                                          tmp_path: Path) -> None:
    path, x, _, _ = exported
    data = bytearray(path.read_bytes())
    data[1:4] = b"BAD"
    bad = tmp_path / "notelf.so"
    bad.write_bytes(bytes(data))
    proc, _ = run_child(tmp_path, bad, x)
    _assert_clean_failure(proc, "elf", "invalid", "cannot", "not")


# ------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(("target", "words"), [
    ("npu -frobnicate=1", ["unknown target key -frobnicate"]),
    ("llvm", ["target kind 'llvm'", "npu"]),
    ("cuda -max-sram-bytes=65536", ["target kind 'cuda'"]),
    ("", ["<empty>"]),
    ("npu -pipeline-stages=4", ["-pipeline-stages=4", "1..3"]),
    ("npu -max-sram-bytes=lots", ["invalid value 'lots'", "-max-sram-bytes"]),
    ("npu -max-sram-bytes=1000", ["-max-sram-bytes=1000"]),
    ("npu max-sram-bytes", ["malformed target option"]),
    ("npu -fusion=1 -fusion=0", ["-fusion is given twice"]),
    ("npu -layout-pref=NCWH", ["-layout-pref", "NCHW|NHWC|auto"]),
])
def test_bad_target_is_a_clear_value_error(target: str, words: list[str]) -> None:
    mod = rm.conv1x1(4, 8, 6)
    with pytest.raises(ValueError) as info:
        tvm_npu.build(mod, target)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def _two_convs(first: bool = True) -> tvm.IRModule:
    """A small 1x1 conv (+bias+relu) feeding a 3x3 conv of 64 channels whose smallest tile needs
    16 x 16 x 3 x 3 fp32 weights (9 KiB) alone: with 8 KiB of SRAM only the first fits the NPU.
    ``first=False``: the 3x3 conv alone."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64, 6, 6), "float32"))
    rng = np.random.default_rng(0)
    with bb.function("main", [x]):
        with bb.dataflow():
            a = x
            if first:
                w1 = relax.const((rng.standard_normal((64, 64, 1, 1)) / 8).astype("float32"))
                b1 = relax.const(rng.standard_normal((1, 64, 1, 1)).astype("float32"))
                a = bb.emit(relax.op.nn.relu(relax.op.add(relax.op.nn.conv2d(x, w1), b1)))
            w2 = relax.const((rng.standard_normal((64, 64, 3, 3)) / 24).astype("float32"))
            gv = bb.emit_output(bb.emit(relax.op.nn.conv2d(a, w2, padding=1)))
        bb.emit_func_output(gv)
    return bb.get()


def test_sram_too_small_for_an_operator_falls_back_to_the_host() -> None:
    mod = _two_convs()
    args = rm.inputs_for(mod)
    expected = rm.run(tvm_npu.build_reference(mod), args)
    layers = {}
    for target in ("npu", "npu -max-sram-bytes=8192"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ex = tvm_npu.build(mod, target)
        fallbacks = [str(w.message) for w in caught if issubclass(w.category, tvm_npu.HostFallbackWarning)]
        if target == "npu":
            assert fallbacks == []
        else:  # one warning, for the 3x3 conv, naming the budget
            assert len(fallbacks) == 1 and "conv2d" in fallbacks[0] and "[1, 64, 6, 6]" in fallbacks[0]
            assert "-max-sram-bytes=8192" in fallbacks[0] and "host" in fallbacks[0]
        with tvm_npu.profile() as prof:
            out = rm.run(ex, args)
        np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
        budget = parse_target(target).hw.max_sram_bytes
        assert all(r.stats.sram_high_water <= budget for r in prof.runs)
        layers[target] = [layer.op for r in prof.runs for layer in r.artifact.layers]
    assert layers["npu"] == ["conv2d", "conv2d"]
    assert layers["npu -max-sram-bytes=8192"] == ["conv2d"]  # the 3x3 conv ran on the host


def test_sram_too_small_for_every_operator_runs_everything_on_the_host() -> None:
    mod = _two_convs(first=False)
    args = rm.inputs_for(mod)
    with pytest.warns(tvm_npu.HostFallbackWarning, match="-max-sram-bytes=8192"):
        ex = tvm_npu.build(mod, "npu -max-sram-bytes=8192")
    with tvm_npu.profile() as prof:
        out = rm.run(ex, args)
    np.testing.assert_allclose(out, rm.run(tvm_npu.build_reference(mod), args), rtol=RTOL, atol=ATOL)
    assert prof.runs == []


def test_file_that_is_not_an_onnx_model(tmp_path: Path) -> None:
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08\x07this is not a protobuf \xff\xfe" * 10)
    with pytest.raises(ValueError, match="is not an ONNX model") as info:
        tvm_npu.build(str(bad))
    assert str(bad) in str(info.value)


def test_text_file_posing_as_onnx(tmp_path: Path) -> None:
    bad = tmp_path / "notes.onnx"
    bad.write_text("just some notes\n")
    with pytest.raises(ValueError, match="ONNX") as info:
        tvm_npu.build(bad)
    assert "notes.onnx" in str(info.value)


def test_missing_model_file(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "model.onnx"
    with pytest.raises(FileNotFoundError) as info:
        tvm_npu.build(str(missing))
    assert str(missing) in str(info.value)


def test_directory_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises((FileNotFoundError, ValueError)) as info:
        tvm_npu.build(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_onnx_model_with_an_empty_graph() -> None:
    model = tiny_convnet()
    del model.graph.node[:]
    with pytest.raises(ValueError, match="empty graph"):
        tvm_npu.build(model)


def test_model_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match="not int"):
        tvm_npu.build(42)  # type: ignore[arg-type]


def test_onnx_proto_and_file_give_the_same_result(tmp_path: Path) -> None:
    """The documented ways to pass a model are equivalent (guards the error paths above against
    rejecting valid input)."""
    model = tiny_convnet(seed=3)
    path = tmp_path / "tiny.onnx"
    onnx.save(model, str(path))
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    a = rm.run(tvm_npu.build(model), [x])
    b = rm.run(tvm_npu.build(path), [x])
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, rm.run(tvm_npu.build_reference(model), [x]), rtol=RTOL, atol=ATOL)
