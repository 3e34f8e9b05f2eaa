"""Issue 13's Python side: end-to-end latency (NPU simulated + host measured), the host target,
``partition_for_npu`` (TVM's BYOC convention) and two threads running NPU builds at once.

The models are small Relax modules with a host operator (a log-softmax stays on
the host), so every check builds in about a second.
"""

from __future__ import annotations

import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import relax as R

import tvm_npu
from tvm_npu.compiler.driver import host_target
from tvm_npu.models.light import tiny_convnet
from tvm_npu.tools.bench import (
    bench,
    end_to_end,
    host_latency,
    onnxruntime_column,
    onnxruntime_threads,
    runnable_host,
    to_numpy,
)

AARCH64 = {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}
EM_AARCH64 = 183  # ELF e_machine


def conv_then_sine(channels: int = 8, seed: int = 0) -> tvm.IRModule:
    """conv2d (NPU) -> sine (host: the NPU has no sine; log-softmax, this model's host operator until the
    vector engine got a log, runs on the NPU now)."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, channels, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            w = relax.const(rng.normal(0, 0.3, (channels, channels, 3, 3)).astype("float32"))
            y = bb.emit(R.nn.conv2d(x, w, padding=1))
            out = bb.emit_output(bb.emit(R.sin(y)))
        bb.emit_func_output(out)
    return bb.get()


def run(ex: relax.VMExecutable | tvm.runtime.Module, x: np.ndarray) -> np.ndarray:
    return to_numpy(relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)))[0]


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((1, 8, 8, 8)).astype("float32")


# ------------------------------------------------------------------------ end-to-end latency
def test_host_part_excludes_the_simulator_and_names_the_host_operators(x: np.ndarray) -> None:
    ex, info = tvm_npu.build_with_info(conv_then_sine())
    assert info.host_ops == {"relax.sin": 1} and info.partitions == 1
    outputs, prof, sim_s, host_s = host_latency(ex, [x], repeat=3)
    np.testing.assert_allclose(outputs[0], run(tvm_npu.build_reference(conv_then_sine()), x), rtol=1e-4, atol=1e-5)
    assert len(prof.runs) == 1 and prof.runs[0].wall_s > 0 and sim_s == prof.npu_call_seconds
    assert 0 < host_s < sim_s  # a 512-element log-softmax is far cheaper than simulating the conv
    e2e = end_to_end(prof, info, host_s, 3)
    assert e2e.total_s == pytest.approx(prof.total_cycles / 1e9 + host_s)
    text = "\n".join(e2e.lines())
    assert text.startswith("end-to-end") and "sin x1" in text and "median of 3" in text


def test_bench_leads_with_end_to_end_and_gives_references(x: np.ndarray) -> None:
    result = bench("conv_then_sine", conv_then_sine(), "npu", [x], repeat=2)
    assert result.e2e_latency_s == pytest.approx(result.npu_latency_s + result.host_latency_s)
    assert result.speedup == pytest.approx(result.llvm_latency_s / result.e2e_latency_s)
    assert result.npu_only_speedup == pytest.approx(result.llvm_latency_s / result.npu_latency_s)
    assert result.host_op_counts == {"relax.sin": 1}
    lines = result.lines()
    assert lines[1].startswith("end-to-end") and lines[2].startswith("NPU part") and lines[3].startswith("host part")
    assert "TVM's untuned default llvm build" in lines[4]
    assert result.onnxruntime_latency_s == {} and "n/a" in lines[5]  # a Relax module has no ONNX to run


def test_onnxruntime_column_states_its_thread_counts() -> None:
    pytest.importorskip("onnxruntime")
    model = tiny_convnet()
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype("float32")
    column, note = onnxruntime_column(model, [x], repeat=1)
    assert note.startswith("onnxruntime ")
    assert set(column) == {str(t) for t in onnxruntime_threads()} and "1" in column
    assert all(s > 0 for s in column.values())


# ------------------------------------------------------------------------------- host target
def test_host_target_forms_and_errors() -> None:
    assert host_target(None).kind.name == "llvm"
    for form in ({"kind": "llvm", "num-cores": 2}, '{"kind": "llvm", "num-cores": 2}', "llvm -num-cores=2"):
        assert int(host_target(form).attrs["num-cores"]) == 2
    for bad, words in ((AARCH64 | {"mcpu": "no-such-cpu"}, "no-such-cpu"), ("llvm -foo=1", "foo"),
                       ({"kind": "c"}, "llvm only"), ("llvm mcpu", "-key=value"), (3, "llvm target")):
        with pytest.raises((ValueError, TypeError), match=words):
            host_target(bad)


def test_build_honours_the_host_target(x: np.ndarray) -> None:
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    ex = tvm_npu.build(conv_then_sine(), host={"kind": "llvm", "mcpu": cpu, "num-cores": 1})
    expected = run(tvm_npu.build_reference(conv_then_sine(), host={"kind": "llvm", "mcpu": cpu}), x)
    np.testing.assert_allclose(run(ex, x), expected, rtol=1e-4, atol=1e-5)


def test_an_aarch64_host_cross_compiles_and_refuses_to_run_here(tmp_path: Path) -> None:
    ex = tvm_npu.build(conv_then_sine(), host=AARCH64)
    ex.export_library(str(tmp_path / "cross.tar"))  # object files: linked on the aarch64 machine
    with tarfile.open(tmp_path / "cross.tar") as tar:
        objects = [tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".o")]
    assert objects and all(o[:4] == b"\x7fELF" and int.from_bytes(o[18:20], "little") == EM_AARCH64 for o in objects)
    if tvm.target.codegen.llvm_get_system_triple().startswith("aarch64"):
        pytest.skip("this machine is aarch64: the build runs here")
    with pytest.raises(ValueError, match="cannot run on this"):
        runnable_host(AARCH64)


# --------------------------------------------------------------------------- partition_for_npu
def test_partition_for_npu_then_relax_build_matches_tvm_npu_build(x: np.ndarray) -> None:
    mod = tvm_npu.partition_for_npu(conv_then_sine(), target="npu -max-sram-bytes=65536")
    assert mod.attrs["external_mods"]  # the NPU partitions are compiled already
    ours = run(relax.build(mod, target="llvm"), x)
    np.testing.assert_array_equal(ours, run(tvm_npu.build(conv_then_sine(), "npu -max-sram-bytes=65536"), x))
    np.testing.assert_allclose(ours, run(tvm_npu.build_reference(conv_then_sine()), x), rtol=1e-4, atol=1e-5)


def test_partition_for_npu_without_codegen_is_the_cutlass_convention(x: np.ndarray) -> None:
    """Planned partitions (``Codegen="npu"``) that the user compiles with RunCodegen, then relax.build; with
    ``params`` binding the weight, as ``relay.build(..., params=...)`` did."""
    w = np.random.default_rng(2).normal(0, 0.3, (8, 8, 3, 3)).astype("float32")
    bb = relax.BlockBuilder()
    xv, wv = relax.Var("x", relax.TensorType((1, 8, 8, 8), "float32")), relax.Var("w", relax.TensorType(w.shape,
                                                                                                        "float32"))
    with bb.function("main", [xv, wv]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(R.nn.relu(bb.emit(R.nn.conv2d(xv, wv, padding=1)))))
        bb.emit_func_output(out)
    mod = tvm_npu.partition_for_npu(bb.get(), params={"w": w}, codegen=False)
    npu_funcs = [f for f in mod.functions.values() if f.attrs and f.attrs.get("Codegen") == "npu"]
    assert len(npu_funcs) == 1 and "npu.plan" in npu_funcs[0].attrs
    mod = relax.transform.RunCodegen(target_options={"npu": {"target": "npu"}})(mod)
    got = run(relax.build(mod, target="llvm"), x)
    np.testing.assert_array_equal(got, run(tvm_npu.build(bb.get(), params={"w": w}), x))
    np.testing.assert_allclose(got, run(tvm_npu.build_reference(bb.get(), params={"w": w}), x), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------- concurrency
def test_two_threads_run_npu_builds_with_their_own_profiles() -> None:
    """Each thread runs its own VM (different models, so different NPU programs) several times under its
    own ``profile()``: outputs match llvm and each profile holds exactly its thread's partition runs."""
    models = {8: conv_then_sine(8, seed=3), 16: conv_then_sine(16, seed=4)}
    builds = {c: tvm_npu.build(m) for c, m in models.items()}
    inputs = {c: np.random.default_rng(c).standard_normal((1, c, 8, 8)).astype("float32") for c in models}
    expected = {c: run(tvm_npu.build_reference(m), inputs[c]) for c, m in models.items()}
    alone: dict[int, list[int]] = {}  # cycles of each partition run of one inference, run alone
    for c, ex in builds.items():
        with tvm_npu.profile() as prof:
            run(ex, inputs[c])
        alone[c] = [r.stats.total_cycles for r in prof.runs]
    assert alone[8] != alone[16]  # so a run landing in the other thread's profile would show
    repeats = 6
    results: dict[int, tuple[list[np.ndarray], tvm_npu.Profile]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(models))

    def worker(c: int) -> None:
        try:
            vm = relax.VirtualMachine(builds[c], tvm.cpu())
            barrier.wait()
            with tvm_npu.profile() as prof:
                outs = [vm["main"](tvm.runtime.tensor(inputs[c])).numpy() for _ in range(repeats)]
            results[c] = (outs, prof)
        except BaseException as e:  # re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(c,)) for c in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for c, (outs, prof) in results.items():
        for out in outs:
            np.testing.assert_allclose(out, expected[c], rtol=1e-4, atol=1e-5)
        assert [r.stats.total_cycles for r in prof.runs] == alone[c] * repeats
