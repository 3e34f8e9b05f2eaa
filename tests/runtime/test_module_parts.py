"""NPU programs held in parts and exported piece by piece (issue 26: a model's weights in memory once).

The build's ``npu`` modules read the program from its parts (the header and code in one buffer, every
constant's array where it is: the Relax constants' memory), and ``tvm-npu compile`` writes the library's
blob of imports to a file piece by piece (:mod:`tvm_npu.tools.pack_stream`). Both must give TVM's bytes
exactly: the blob is compared byte for byte with TVM's own packer, the parts with the one-buffer encoding.
"""

from __future__ import annotations

import gc

import numpy as np
import onnx
import pytest
import tvm
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm import relax
from tvm.runtime import _ffi_api
from tvm_npu.simulator import ProgramBuilder, isa
from tvm_npu.simulator.encoding import encode_program, encode_program_parts, join_parts

import tvm_npu
from tvm_npu.config import DType, parse_target
from tvm_npu.core.artifact import Artifact
from tvm_npu.runtime import npu_module
from tvm_npu.tools.export import export_library
from tvm_npu.tools.pack_stream import write_imports_blob

SHAPE = [1, 3, 8, 8]


def _npu_modules(mod: tvm.runtime.Module) -> list[tvm.runtime.Module]:
    found, stack = [], [mod]
    while stack:
        m = stack.pop()
        stack.extend(m.imports)
        found += [m] if m.kind == npu_module.MODULE_KIND else []
    return found


def _model(host_op: bool) -> onnx.ModelProto:
    """conv -> conv -> Gemm (one NPU partition), or with a host ``Cos`` between the convs (two partitions and
    an llvm module beside the VM executable)."""
    net = OnnxNet(3)
    y = net.conv("x", 3, 8, 3)
    y = net.node("Cos", [y]) if host_op else y
    y = net.conv(y, 8, 16, 3)
    y = net.node("Reshape", [y, net.const(np.array([1, 16 * 64]), np.int64)])
    w = net.const(net.rng.standard_normal((32, 16 * 64)) / 32)
    y = net.node("Gemm", [y, w, net.const(net.rng.standard_normal(32))], transB=1)
    return net.model(y, SHAPE, [1, 32])


@pytest.fixture(scope="module", params=[False, True], ids=["one-partition", "host-op-between"])
def built(request: pytest.FixtureRequest) -> tuple[onnx.ModelProto, relax.VMExecutable]:
    model = _model(request.param)
    return model, tvm_npu.build(model, "npu")


def test_streamed_blob_is_tvms_packed_imports(built: tuple[onnx.ModelProto, relax.VMExecutable],
                                              tmp_path) -> None:
    """``write_imports_blob`` writes what ``runtime.ModulePackImportsToTensor`` returns, byte for byte."""
    _, ex = built
    expected = _ffi_api.ModulePackImportsToTensor(ex.mod).numpy().tobytes()
    size = write_imports_blob(ex.mod, tmp_path / "blob.bin")
    assert size == len(expected)
    assert (tmp_path / "blob.bin").read_bytes() == expected


def test_exported_library_runs_as_built(built: tuple[onnx.ModelProto, relax.VMExecutable], tmp_path) -> None:
    """The library written through the streamed blob loads and computes what the build computes (and what
    llvm computes, within the fp32 standard)."""
    model, ex = built
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    lib = tmp_path / "net.so"
    export_library(ex, lib)
    run = [relax.VirtualMachine(e, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
           for e in (ex, npu_module.load_module(lib), tvm_npu.build_reference(model))]
    np.testing.assert_array_equal(run[0], run[1])
    np.testing.assert_allclose(run[0], run[2], rtol=1e-4, atol=1e-5)


def test_build_modules_hold_the_constants_in_parts(built: tuple[onnx.ModelProto, relax.VMExecutable]) -> None:
    """A built ``npu`` module is made of parts (the weights not copied into one blob); its program, its
    serialised form and its head agree with each other and with a reload."""
    for mod in _npu_modules(built[1].mod):
        assert " parts" in mod.inspect_source() and " in 1 parts" not in mod.inspect_source()
        blob = npu_module.module_blob(mod)
        Artifact.decode(blob)  # checksums over the parts as one program
        saved = npu_module.save_to_bytes(mod)
        assert npu_module.serialized_size(mod) == len(saved)
        assert npu_module.module_blob(npu_module.load_from_bytes(saved)) == blob
        assert npu_module.program_head(mod, 6) == blob[:6]
        assert npu_module.program_head(mod, len(blob) + 10) == blob


def test_module_keeps_its_parts_alive() -> None:
    """The module owns its parts: the arrays may go out of scope on the Python side."""
    rng = np.random.default_rng(0)
    parts = [bytearray(b"head"), rng.standard_normal((3, 5)).astype(np.float32), b"", np.arange(7, dtype=np.int8)]
    expected = bytes(join_parts(parts))
    parts[1].flags.writeable = False  # read-only arrays (the Relax constants' views) are taken as they are
    mod = npu_module.create_module_from_parts(parts, ["f"])
    del parts
    gc.collect()
    assert npu_module.module_blob(mod) == expected
    assert npu_module.module_blob(npu_module.load_from_bytes(npu_module.save_to_bytes(mod))) == expected


def test_module_from_parts_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="C-contiguous"):
        npu_module.create_module_from_parts([np.zeros((4, 4), np.float32)[:, ::2]], ["f"])
    with pytest.raises(TypeError, match="sequence of names"):
        npu_module.create_module_from_parts([b"x"], "f")


def test_program_parts_are_the_one_buffer_encoding() -> None:
    """The parts of a program (and of an artifact) joined are the single-buffer encoding, byte for byte;
    constants are parts of their own, not copies."""
    asm = ProgramBuilder(parse_target("npu").hw)
    w = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    asm.declare("x", (2, 3, 4), DType.FP32, isa.TensorKind.INPUT)
    asm.declare("w", w.shape, DType.FP32, isa.TensorKind.CONSTANT, w)
    asm.declare("b", (5,), DType.INT8, isa.TensorKind.CONSTANT, np.arange(5, dtype=np.int8))
    program = asm.build()
    parts = encode_program_parts(program, reserve=3)
    assert bytes(join_parts(parts)) == bytes(encode_program(program, reserve=3))
    assert any(isinstance(p, np.ndarray) and np.shares_memory(p, w) for p in parts)
    packed = Artifact.pack("f", "npu", ["x"], [], [], program)
    assert bytes(join_parts(Artifact.pack_parts("f", "npu", ["x"], [], [], program))) == bytes(packed)
    assert Artifact.decode(packed).symbol == "f"
