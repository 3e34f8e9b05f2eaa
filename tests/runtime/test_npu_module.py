"""Tests for the ``npu`` runtime module: direct calls, Relax VM, BYOC, export/load, corruption.

Anything that could crash the interpreter (loading damaged data, fresh-process loads)
runs in a subprocess so a segfault shows up as a failed test, not a dead pytest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.dpl import is_op, wildcard
from tvm.script import relax as R

import tvm_npu.runtime.npu_module as rm

# Directory holding the ``tvm_npu`` package actually imported, for child processes.
PKG_ROOT = Path(rm.__file__).resolve().parents[2]
THIS_FILE = Path(__file__).resolve()
SHAPE = (2, 3)


# ---------------------------------------------------------------------------
# Toy "program" format and simulator used as the invoke handler.
# blob = JSON {symbol: {"op": "add", "consts": [[...], ...]}}; operands are the input
# tensors followed by the embedded constants; the last DPS argument is the output.
# ---------------------------------------------------------------------------


def toy_handler(blob: bytes, symbol: str, args: list[Any]) -> None:
    program = json.loads(blob.decode())[symbol]
    arrays = [np.from_dlpack(a) for a in args]
    *inputs, out = arrays
    operands = inputs + [np.asarray(c, dtype=out.dtype) for c in program.get("consts", [])]
    assert program["op"] == "add" and len(operands) == 2, program
    out[...] = operands[0] + operands[1]


def toy_blob(symbols: list[str]) -> bytes:
    return json.dumps({s: {"op": "add"} for s in symbols}).encode()


def toy_codegen(functions: list[Any], options: dict, constant_names: dict) -> list[tvm.runtime.Module]:
    """``relax.ext.npu_test``: one npu module for all partitioned functions."""
    programs = {}
    for func in functions:
        symbol = str(func.attrs["global_symbol"])
        consts = [c.value.numpy().tolist() for c, name in constant_names.items() if str(name).startswith(symbol + "_")]
        programs[symbol] = {"op": "add", "consts": consts}
    return [rm.create_module(json.dumps(programs).encode(), list(programs))]


@pytest.fixture(autouse=True)
def _toy_handler():
    previous = rm.set_invoke_handler(toy_handler)
    yield
    rm.set_invoke_handler(previous)


# Child-process preamble: make the package and the toy handler from this file importable.
CHILD_SETUP = f"""
import sys, importlib.util
sys.path.insert(0, {str(PKG_ROOT)!r})
import numpy as np, tvm
from tvm import relax
import tvm_npu.runtime.npu_module as rm
_spec = importlib.util.spec_from_file_location("_rt_test", {str(THIS_FILE)!r})
_t = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_t)
rm.set_invoke_handler(_t.toy_handler)
"""


def run_python(code: str, *, import_package: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter, after ``CHILD_SETUP`` unless told otherwise."""
    source = (CHILD_SETUP if import_package else "") + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-P", "-c", source], capture_output=True, text=True, timeout=timeout)


def inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal(SHAPE).astype("float32"), rng.standard_normal(SHAPE).astype("float32")


def vm_run(ex_or_lib: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(ex_or_lib, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y)).numpy()


def dps_module() -> tvm.IRModule:
    @tvm.script.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((2, 3), "float32"), y: R.Tensor((2, 3), "float32")):
            z = R.call_dps_packed("npu_add", (x, y), out_ty=R.Tensor((2, 3), "float32"))
            return z

    return Mod


def build_dps_executable() -> relax.Executable:
    npu_mod = rm.create_module(toy_blob(["npu_add"]), ["npu_add"])
    mod = dps_module().with_attr("external_mods", [npu_mod])
    return relax.build(mod, target=tvm.target.Target({"kind": "llvm"}))


# ---------------------------------------------------------------------------
# Direct use
# ---------------------------------------------------------------------------


def test_load_extension_is_idempotent():
    assert rm.load_extension() is rm.load_extension()


def test_create_and_call_directly():
    mod = rm.create_module(toy_blob(["npu_add", "npu_other"]), ["npu_add", "npu_other"])
    assert isinstance(mod, tvm.runtime.Module)
    assert mod.kind == "npu"
    assert mod.is_binary_serializable()
    assert rm.module_symbols(mod) == ["npu_add", "npu_other"]
    assert rm.module_blob(mod) == toy_blob(["npu_add", "npu_other"])
    assert mod.implements_function("npu_add")
    assert not mod.implements_function("missing")

    x, y = inputs()
    out = tvm.runtime.empty(SHAPE, "float32")
    mod["npu_add"](tvm.runtime.tensor(x), tvm.runtime.tensor(y), out)
    np.testing.assert_array_equal(out.numpy(), x + y)


def test_handler_sees_blob_symbol_and_tensors():
    seen = []

    def handler(blob: bytes, symbol: str, args: list[Any]) -> None:
        seen.append((blob, symbol, [tuple(a.shape) for a in args], [type(a) for a in args]))

    rm.set_invoke_handler(handler)
    mod = rm.create_module(b"\x00\xffraw", ["f"])
    a = tvm.runtime.tensor(np.zeros((4,), "int8"))
    mod["f"](a, a)
    assert seen[0][:3] == (b"\x00\xffraw", "f", [(4,), (4,)])
    assert all(issubclass(t, tvm_ffi.Tensor) for t in seen[0][3])


def test_handler_exception_reaches_caller():
    def handler(blob: bytes, symbol: str, args: list[Any]) -> None:
        raise ValueError("simulator exploded")

    rm.set_invoke_handler(handler)
    mod = rm.create_module(b"x", ["f"])
    with pytest.raises(ValueError, match="simulator exploded"):
        mod["f"]()


def test_no_handler_is_a_clear_error():
    rm.set_invoke_handler(None)
    mod = rm.create_module(b"x", ["f"])
    with pytest.raises(RuntimeError, match="invoke handler"):
        mod["f"]()


def test_create_module_rejects_bad_symbols():
    with pytest.raises(ValueError, match="duplicate symbol"):
        rm.create_module(b"x", ["f", "f"])
    with pytest.raises(ValueError, match="empty symbol"):
        rm.create_module(b"x", [""])
    with pytest.raises(TypeError):
        rm.create_module(b"x", "f")


def test_factory_global_is_registered():
    create = tvm_ffi.get_global_func("tvm_npu.runtime.create_module")
    mod = create(b"blob", ["g"])
    assert mod.kind == "npu" and rm.module_symbols(mod) == ["g"]


def test_blobs_reach_python_at_the_first_call_and_identical_ones_share_a_handle():
    before = len(rm._blobs)
    a = rm.create_module(b"same-blob-for-dedup", ["a"])
    b = rm.create_module(b"same-blob-for-dedup", ["b"])
    assert len(rm._blobs) == before  # building (and exporting) keeps no Python copy of a program
    seen = []
    old = rm.set_invoke_handler(lambda blob, symbol, args: seen.append((blob, symbol)))
    try:
        a.get_function("a")()
        b.get_function("b")()
        a.get_function("a")()
    finally:
        rm.set_invoke_handler(old)
    assert len(rm._blobs) == before + 1
    assert seen == [(b"same-blob-for-dedup", s) for s in "aba"]


def test_bytes_roundtrip():
    mod = rm.create_module(toy_blob(["npu_add"]), ["npu_add"])
    data = rm.save_to_bytes(mod)
    assert data.startswith(b"TVMNPUM1")
    again = rm.load_from_bytes(data)
    assert rm.module_blob(again) == rm.module_blob(mod)
    assert rm.module_symbols(again) == ["npu_add"]
    assert rm.save_to_bytes(again) == data


def test_corrupted_bytes_raise_value_error_never_crash():
    # Every truncation and a byte flip at every position must raise ValueError.
    result = run_python(
        """
        data = rm.save_to_bytes(rm.create_module(b"program-bytes", ["sym_a", "sym_b"]))
        bad = [data[:n] for n in range(len(data))] + [data + b"x"]
        for i in range(len(data)):
            flipped = bytearray(data)
            flipped[i] ^= 0x5A
            bad.append(bytes(flipped))
        messages = set()
        for blob in bad:
            try:
                rm.load_from_bytes(blob)
            except ValueError as err:
                messages.add(str(err).split(":")[0])
            else:
                raise SystemExit(f"accepted corrupted data {blob!r}")
        print(sorted(messages))
        """
    )
    assert result.returncode == 0, result.stderr
    assert "Corrupted tvm_npu module" in result.stdout


def test_missing_python_globals_mention_import_tvm_npu():
    # The C++ library without its Python half must say how to fix it.
    result = run_python(
        """
        import tvm_ffi
        mod = rm.create_module(b"x", ["f"])
        tvm_ffi.registry.remove_global_func("tvm_npu.runtime.invoke")
        try:
            mod["f"]()
        except RuntimeError as err:
            print("INVOKE:", err)
        tvm_ffi.registry.remove_global_func("tvm_npu.runtime.register_blob")
        try:
            rm._create_fn(b"y", ["g"])["g"]()  # the blob reaches Python at the first call
        except RuntimeError as err:
            print("REGISTER:", err)
        """
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("INVOKE:") and "import tvm_npu" in line for line in lines), result.stdout
    assert any(line.startswith("REGISTER:") and "import tvm_npu" in line for line in lines), result.stdout


# ---------------------------------------------------------------------------
# Relax VM and export_library
# ---------------------------------------------------------------------------


def test_vm_finds_symbol_in_external_mods():
    ex = build_dps_executable()
    assert "npu" in [m.kind for m in ex.mod.imports]
    x, y = inputs()
    np.testing.assert_array_equal(vm_run(ex, x, y), x + y)


def test_export_library_roundtrip_in_fresh_process(tmp_path: Path):
    ex = build_dps_executable()
    x, y = inputs()
    expected = vm_run(ex, x, y)
    lib_path = tmp_path / "npu_dps.so"
    ex.export_library(str(lib_path))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)

    result = run_python(
        f"""
        d = {str(tmp_path)!r}
        lib = tvm.runtime.load_module(d + "/npu_dps.so")
        print("IMPORTS", sorted(m.kind for m in lib.imports))
        vm = relax.VirtualMachine(lib, tvm.cpu())
        x, y = np.load(d + "/x.npy"), np.load(d + "/y.npy")
        np.save(d + "/out.npy", vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y)).numpy())
        """
    )
    assert result.returncode == 0, result.stderr
    assert "'npu'" in result.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)


def test_loading_without_tvm_npu_is_a_clear_error(tmp_path: Path):
    ex = build_dps_executable()
    ex.export_library(str(tmp_path / "npu_dps.so"))
    result = run_python(
        f"""
        import tvm
        try:
            tvm.runtime.load_module({str(tmp_path / "npu_dps.so")!r})
        except Exception as err:
            print(type(err).__name__, err)
        """,
        import_package=False,
    )
    assert result.returncode == 0, result.stderr
    assert "ffi.Module.load_from_bytes.npu" in result.stdout


def test_corrupted_blob_inside_so_is_a_clear_error(tmp_path: Path):
    ex = build_dps_executable()
    good = tmp_path / "good.so"
    ex.export_library(str(good))
    data = bytearray(good.read_bytes())
    start = data.find(b"TVMNPUM1")
    assert start >= 0, "serialized npu module not embedded verbatim"
    data[start + 40] ^= 0xFF  # inside the checksummed payload
    (tmp_path / "flipped.so").write_bytes(bytes(data))

    result = run_python(
        f"""
        try:
            tvm.runtime.load_module({str(tmp_path / "flipped.so")!r})
        except ValueError as err:
            print("ERR", err)
        """
    )
    assert result.returncode == 0, f"rc={result.returncode}\n{result.stderr}"
    assert "checksum mismatch" in result.stdout


def test_truncated_so_is_a_clear_error(tmp_path: Path):
    # Plain dlopen of a truncated .so dies of SIGBUS; rm.load_module checks first.
    ex = build_dps_executable()
    good = tmp_path / "good.so"
    ex.export_library(str(good))
    data = good.read_bytes()
    (tmp_path / "cut.so").write_bytes(data[: len(data) // 2])
    result = run_python(
        f"""
        try:
            rm.load_module({str(tmp_path / "cut.so")!r})
        except ValueError as err:
            print("ERR", err)
        lib = rm.load_module({str(good)!r})
        print("OK", lib.kind)
        """
    )
    assert result.returncode == 0, f"rc={result.returncode}\n{result.stderr}"
    assert "truncated shared library" in result.stdout
    assert "OK relax.VMExecutable" in result.stdout


# ---------------------------------------------------------------------------
# Full BYOC path: partition -> RunCodegen(relax.ext.npu_test) -> build -> VM -> export
# ---------------------------------------------------------------------------


CONST = np.arange(6, dtype="float32").reshape(SHAPE)


def byoc_module(drop_const_attr: bool) -> tvm.IRModule:
    @tvm.script.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((2, 3), "float32"), y: R.Tensor((2, 3), "float32")):
            with R.dataflow():
                z = R.add(x, y)
                w = R.multiply(z, z)
                v = R.add(w, R.const(CONST))
                R.output(v)
            return v

    tvm_ffi.register_global_func("relax.ext.npu_test", toy_codegen, override=True)
    pattern = is_op("relax.add")(wildcard(), wildcard())
    mod = relax.transform.FuseOpsByPattern([("npu_test.add", pattern)], bind_constants=True)(Mod)
    mod = relax.transform.MergeCompositeFunctions()(mod)
    codegen_funcs = [f for f in mod.functions.values() if f.attrs and "Codegen" in f.attrs]
    assert len(codegen_funcs) == 2 and all(f.attrs["Codegen"] == "npu_test" for f in codegen_funcs)
    mod = relax.transform.RunCodegen()(mod)
    if drop_const_attr:
        # Constants are already inside the npu blob; keep them out of a const_loader.
        mod = mod.without_attr("const_name_to_constant")
    return mod


@pytest.mark.parametrize("drop_const_attr", [True, False])
def test_byoc_runcodegen_end_to_end(tmp_path: Path, drop_const_attr: bool):
    mod = byoc_module(drop_const_attr)
    assert "call_dps_packed" in mod.script()
    external = list(mod.attrs["external_mods"])
    assert [m.kind for m in external] == ["npu"]

    ex = relax.build(mod, target=tvm.target.Target({"kind": "llvm"}))
    top = [m.kind for m in ex.mod.imports]
    if drop_const_attr:
        assert "npu" in top and "const_loader" not in top
    else:
        # The field-notes warning: constants get packed again in a const_loader that
        # wraps the host lib and the npu module (harmless here, but duplicated data).
        assert top == ["const_loader"]
        assert sorted(m.kind for m in ex.mod.imports[0].imports) == ["llvm", "npu"]

    x, y = inputs()
    expected = (x + y) * (x + y) + CONST
    got = vm_run(ex, x, y)
    np.testing.assert_allclose(got, expected, rtol=1e-6)

    ex.export_library(str(tmp_path / "byoc.so"))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    result = run_python(
        f"""
        d = {str(tmp_path)!r}
        vm = relax.VirtualMachine(tvm.runtime.load_module(d + "/byoc.so"), tvm.cpu())
        x, y = np.load(d + "/x.npy"), np.load(d + "/y.npy")
        np.save(d + "/out.npy", vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y)).numpy())
        """
    )
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), got)
