"""The ``tvm-npu`` command line, run as a user runs it: ``python -m tvm_npu`` in a subprocess.

The model is ``tiny_convnet()`` saved to a temporary ``.onnx`` file (it builds in about a
second). Every command is checked for what it writes, and every error for a single
line on stderr, a non-zero exit status and no traceback. Help texts and errors call the
same entry point (:func:`tvm_npu.tools.cli.main`) in this process, which saves the ~3 s import of
TVM per command; the console script and ``python -m tvm_npu`` themselves are run as
subprocesses by a test each.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax

import tvm_npu
from tvm_npu.config import target_help
from tvm_npu.core.ops import spec_key
from tvm_npu.models.inputs import backend_inputs
from tvm_npu.tools.bench import to_numpy
from tvm_npu.tools.cli import main
from tvm_npu.tuning.tuner import best_tiles

COMMANDS = ("compile", "inspect", "run", "profile", "bench", "tune", "demo")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def cli(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -P -m tvm_npu ...``: ``-P`` keeps a source checkout in the working directory
    from shadowing the installed package (its stage folders are only subpackages once installed)."""
    return subprocess.run([sys.executable, "-P", "-m", "tvm_npu", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def in_process(capfd: pytest.CaptureFixture[str], *args: str | Path) -> subprocess.CompletedProcess:
    """``tvm-npu ARGS`` through :func:`tvm_npu.tools.cli.main` in this process, as a finished process for :func:`ok` and
    :func:`one_line_error`. ``capfd`` (not ``capsys``) also catches what TVM writes to the file descriptors
    directly, as a subprocess's pipes would."""
    argv = [str(a) for a in args]
    capfd.readouterr()  # this command's output only
    with warnings.catch_warnings():  # main installs its one-line warning printer: keep it to this command
        try:
            status = main(argv)
        except SystemExit as e:  # argparse exits for --help (0) and usage errors (2)
            status = e.code
    out = capfd.readouterr()
    return subprocess.CompletedProcess(["tvm-npu", *argv], status, out.out, out.err)


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def one_line_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    """The error line of a failed command, after checking it is the only line of stderr."""
    assert proc.returncode == 1, f"expected exit status 1, got {proc.returncode}\n{proc.stderr[-3000:]}"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr:\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("tvm-npu "), lines[0]
    assert all(w.lower() in lines[0].lower() for w in words), f"unclear error message: {lines[0]!r}"
    return lines[0]


@pytest.fixture(scope="module")
def inputs(model: Path) -> dict[str, np.ndarray]:
    return backend_inputs(onnx.load(str(model)))


@pytest.fixture(scope="module")
def expected(model: Path, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The llvm-only build's output, computed in this process."""
    vm = relax.VirtualMachine(tvm_npu.build_reference(str(model)), tvm.cpu())
    (out,) = to_numpy(vm["main"](*(tvm.runtime.tensor(a) for a in inputs.values())))
    return out


def test_compile_lists_where_operators_run(compiled: tuple[Path, str]) -> None:
    out, stdout = compiled
    assert out.is_file() and out.stat().st_size > 0
    assert "conv2d x4" in stdout and "softmax x1" in stdout  # NPU and host operators are both listed
    assert "100.0%" in stdout  # every MAC of tiny_convnet is on the NPU


# ------------------------------------------------------------------------------------ help
@pytest.mark.parametrize("command", COMMANDS)
def test_help_explains_every_option(command: str, capfd: pytest.CaptureFixture[str]) -> None:
    text = ok(in_process(capfd, command, "--help"))
    parser_options = {
        "compile": ["--target", "--randomize-weights", "--output", "--database", "--dump-dir", "--verbose"],
        "inspect": ["--target", "--randomize-weights", "--json", "--verbose"],
        "run": ["--inputs", "--random-inputs", "--output", "--stats", "--verbose"],
        "profile": ["--target", "--inputs", "--trace", "--plot", "--json", "--timing-only", "--randomize-weights"],
        "bench": ["--target", "--inputs", "--repeat", "--json", "--randomize-weights"],
        "tune": ["--target", "--work-dir", "--trials", "--rpc", "--key", "--workers", "--no-plans",
                 "--randomize-weights"],
        "demo": ["--target", "--repeat"],
    }[command]
    for option in parser_options:
        assert option in text, option
    if command != "run":  # the library carries its target
        for key, default, meaning in target_help():
            assert f"{meaning} (default {default})" in text and key in text, key


def test_top_level_help_lists_the_commands(capfd: pytest.CaptureFixture[str]) -> None:
    text = ok(in_process(capfd, "--help"))
    assert all(c in text for c in COMMANDS)


@pytest.mark.slow
def test_console_script_is_installed() -> None:
    """The README runs ``tvm-npu``; it is the same program as ``python -m tvm_npu``."""
    script = Path(sys.executable).with_name("tvm-npu")
    assert script.is_file(), f"no console script beside {sys.executable}"
    proc = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and all(c in proc.stdout for c in COMMANDS)


# ---------------------------------------------------------------------------------- compile
@pytest.mark.slow
def test_compile_with_target_options_and_dump_dir(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "tiny_small.so"
    stdout = ok(cli("compile", model, "--target", "npu -max-sram-bytes=65536 -pipeline-stages=1", "-o", out,
                    "--dump-dir", tmp_path / "dump"))
    assert "-max-sram-bytes=65536" in stdout and out.is_file()
    dumped = {p.name for p in (tmp_path / "dump").iterdir()}
    assert any(n.endswith("_codegen.relax.txt") for n in dumped), sorted(dumped)


# -------------------------------------------------------------------------------------- run
@pytest.mark.slow
@pytest.mark.parametrize("positional", [False, True])
def test_run_matches_llvm(library: Path, inputs: dict[str, np.ndarray], expected: np.ndarray, tmp_path: Path,
                          positional: bool) -> None:
    npz = tmp_path / "x.npz"
    if positional:
        np.savez(npz, *inputs.values())
    else:
        np.savez(npz, **inputs)
    out = tmp_path / "out.npz"
    stdout = ok(cli("run", library, "--inputs", npz, "-o", out, "--stats"))
    with np.load(out) as result:
        np.testing.assert_allclose(result["output_0"], expected, rtol=1e-4, atol=1e-5)
    assert "output_0: float32 (1, 10)" in stdout
    assert "1 NPU partition runs" in stdout  # the flatten before the dense layer is a view, not a host call
    stats_rows = [line for line in stdout.splitlines() if re.match(r"\S+\s+[\d,]+\s+[\d,]+\s+\d\.\d{3}\s", line)]
    assert len(stats_rows) == 1, stdout  # one --stats row per partition run


def test_run_with_wrong_inputs_fails_cleanly(library: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    npz = tmp_path / "bad.npz"
    np.savez(npz, nonsense=np.zeros(3, np.float32))
    one_line_error(in_process(capfd, "run", library, "--inputs", npz), "input")


# ---------------------------------------------------------------------------------- profile
@pytest.mark.slow
def test_profile_writes_report_trace_and_plot(model: Path, tmp_path: Path) -> None:
    report, trace, plot = tmp_path / "r.json", tmp_path / "t.json", tmp_path / "roof.png"
    stdout = ok(cli("profile", model, "--json", report, "--trace", trace, "--plot", plot))
    assert "conv2d_0" in stdout and "efficiency" in stdout

    data = json.loads(report.read_text())
    assert {"cycles", "bound_cycles", "efficiency", "dram_bytes", "npu_macs", "host_macs"} <= set(data["model"])
    assert data["layers"], "no NPU layers reported"
    keys = {"name", "op", "macs", "dram_bytes", "sram_peak_bytes", "cycles", "bound_cycles", "efficiency", "bound_by"}
    for layer in data["layers"]:
        assert keys <= set(layer), keys - set(layer)
        assert layer["cycles"] >= layer["bound_cycles"] > 0, layer  # nothing beats the datasheet's bound
    model_ = data["model"]
    assert 0 < model_["efficiency"] <= 1
    assert model_["npu_macs"] == sum(x["macs"] for x in data["layers"]) > 0

    events = json.loads(trace.read_text())["traceEvents"]
    processes = [e for e in events if e["name"] == "process_name"]
    assert len(processes) == 1  # tiny_convnet is one NPU partition (its flatten is a view), run once
    assert {e["pid"] for e in events} == {0}
    spans = [e for e in events if e.get("ph") == "X"]
    assert spans and all(e["dur"] > 0 for e in spans)
    end_us = max(e["ts"] + e.get("dur", 0) for e in events if "ts" in e)
    assert end_us == pytest.approx(model_["cycles"] / 1000, rel=1e-3)  # the runs follow each other at 1000 MHz

    head = plot.read_bytes()
    assert head.startswith(PNG_MAGIC)
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    assert width >= 400 and height >= 300


@pytest.mark.slow
def test_profile_with_inputs_and_timing_only(model: Path, inputs: dict[str, np.ndarray], tmp_path: Path) -> None:
    npz = tmp_path / "x.npz"
    np.savez(npz, **inputs)
    ok(cli("profile", model, "--inputs", npz, "--json", tmp_path / "full.json"))
    ok(cli("profile", model, "--timing-only", "--json", tmp_path / "fast.json"))
    full, fast = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("full", "fast"))
    assert fast["model"]["cycles"] == full["model"]["cycles"]  # timing-only mode times exactly the same


# ------------------------------------------------------------------------------------ bench
@pytest.mark.slow
def test_bench_compares_with_llvm(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    stdout = ok(cli("bench", model, "--repeat", "2", "--json", out))
    for word in ("end-to-end", "vs llvm", "build", "latency", "error", "MACs on NPU", "simulator", "roofline"):
        assert word in stdout, word
    data = json.loads(out.read_text())
    assert data["max_abs_error"] < 1e-4
    assert data["npu_mac_share"] == 1.0 and data["repeat"] == 2
    assert data["npu_latency_s"] == pytest.approx(data["npu_cycles"] / 1e9)
    assert data["speedup"] == pytest.approx(data["llvm_latency_s"] / data["e2e_latency_s"])  # end to end
    assert 0 < data["efficiency"] <= 1


# ------------------------------------------------------------------------------------- demo
@pytest.mark.slow
def test_demo_compares_the_bundled_model_with_llvm() -> None:
    stdout = ok(cli("demo", "--repeat", "1"))
    assert stdout.startswith("tiny_convnet")  # which model, before its table
    assert stdout.index("end-to-end") < stdout.index("vs llvm") < stdout.index("bound by")  # end to end first
    assert " ms wall per inference" in stdout  # a sub-second simulation in ms, not "0.00 s"
    for word in ("tiny_convnet", "latency", "max |NPU - llvm|", "MACs on NPU", "efficiency", "bound by"):
        assert word in stdout, word
    assert stdout.strip().splitlines()[-1].startswith("outputs match llvm within rtol")


# ------------------------------------------------------------------------------------- tune
@pytest.mark.benchmark  # the tuning itself (4 trials, 2 measuring processes) and 3 commands: ~18 s
def test_tune_records_in_a_work_dir_and_compile_applies_them(model: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    stdout = ok(cli("tune", model, "--work-dir", work, "--trials", "4", "--workers", "2"))
    assert (work / "database_tuning_record.json").is_file() and (work / "npu_plans.json").is_file()
    assert "geomean" in stdout and f"compile {model} --target 'npu' --database {work}" in stdout
    out = ok(cli("compile", model, "--database", work, "-o", tmp_path / "tuned.so"))
    # every operator outside a layer group runs the database's best tile for its signature (a searched
    # plan's groups slice their members' tiles themselves), and compile counts those that do
    _, info = tvm_npu.build_with_info(model, database=work)
    best = best_tiles(work, "npu")
    ops = [op for plan in info.plans for op in plan.ops]
    grouped = [plan.ops[k] for plan in info.plans for g in plan.groups for k in g.members]
    free = [op for op in ops if not any(op is g for g in grouped)]
    assert free and all(op.tile == best[spec_key(op.spec)] for op in free)
    tuned = sum(op.tile == best.get(spec_key(op.spec)) for op in ops)
    assert f"tuning: {tuned} of {len(ops)} NPU operators use a tile tuned in" in out
    assert (tmp_path / "tuned.so").is_file()
    other = ok(cli("compile", model, "--target", "npu -max-sram-bytes=65536", "--database", work, "-o",
                   tmp_path / "other.so"))
    assert "tuning: 0 of" in other


def test_an_old_records_file_is_rejected(model: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    records = tmp_path / "records.jsonl"
    records.write_text('{"version": 1}\n')
    one_line_error(in_process(capfd, "compile", model, "--database", records, "-o", tmp_path / "x.so"),
                   "old one-file format")


# ----------------------------------------------------------------------------------- errors
def test_bad_model_path(tmp_path: Path) -> None:
    """Run as typed (``python -m tvm_npu``, a subprocess): the exit status and the lone stderr line are the
    process's own, not only :func:`main`'s return value."""
    one_line_error(cli("compile", tmp_path / "missing.onnx", "-o", tmp_path / "x.so"), "does not exist")


def test_not_an_onnx_file(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\xffnot a model" * 10)
    one_line_error(in_process(capfd, "profile", bad), "not an onnx model")


@pytest.mark.parametrize("target", ["npu -bogus=1", "npu -max-sram-bytes=12", "gpu", "npu max-sram-bytes"])
def test_bad_target(model: Path, tmp_path: Path, target: str, capfd: pytest.CaptureFixture[str]) -> None:
    one_line_error(in_process(capfd, "compile", model, "--target", target, "-o", tmp_path / "x.so"), "--target")
    assert not (tmp_path / "x.so").exists()


@pytest.mark.parametrize("damage", ["truncated", "flipped", "garbage"])
def test_corrupted_library(library: Path, inputs: dict[str, np.ndarray], tmp_path: Path, damage: str,
                           capfd: pytest.CaptureFixture[str]) -> None:
    data = library.read_bytes()
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "flipped":  # inside the checksummed NPU module
        at = data.index(b"NPUA") + 100
        data = data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]
    else:
        data = b"this is not a shared library\n" * 100
    bad = tmp_path / "bad.so"
    bad.write_bytes(data)
    npz = tmp_path / "x.npz"
    np.savez(npz, **inputs)
    line = one_line_error(in_process(capfd, "run", bad, "--inputs", npz))
    assert any(w in line.lower() for w in ("truncated", "corrupt", "invalid elf")), line


def test_host_fallback_is_a_one_line_warning(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A 3x3 conv of 64 channels needs 9 KiB of weights per smallest tile: with 8 KiB it stays on the host."""
    w = onnx.numpy_helper.from_array(np.full((64, 64, 3, 3), 0.01, np.float32), "w")
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv3x3",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64, 6, 6])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64, 6, 6])], [w])
    path = tmp_path / "conv3x3.onnx"
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)]), str(path))
    proc = in_process(capfd, "compile", path, "--target", "npu -max-sram-bytes=8192", "-o", tmp_path / "c.so")
    assert ok(proc) and "host: conv2d x1" in proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("tvm-npu compile: warning: conv2d") and "-max-sram-bytes=8192" in line, line


def test_verbose_shows_the_traceback(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    proc = in_process(capfd, "compile", tmp_path / "missing.onnx", "-o", tmp_path / "x.so", "--verbose")
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("tvm-npu compile: error")


def test_bad_repeat_is_an_error(model: Path, capfd: pytest.CaptureFixture[str]) -> None:
    one_line_error(in_process(capfd, "bench", model, "--repeat", "0"), "repeat")


# ------------------------------------------------------------------------------- quantized
@pytest.fixture(scope="module")
def int8_model(model: Path) -> Path:
    """tiny_convnet quantized from the command line, as a user would."""
    out = model.with_name("tiny_int8.onnx")
    stdout = ok(cli("quantize", model, "-o", out, "--random", "4", "--seed", "1"))
    assert "QuantizeLinear" in stdout and out.is_file()
    return out


@pytest.mark.slow
def test_bench_and_profile_a_quantized_model(int8_model: Path, tmp_path: Path) -> None:
    bench_json, profile_json = tmp_path / "bench.json", tmp_path / "profile.json"
    ok(cli("bench", int8_model, "--repeat", "1", "--json", bench_json))
    bench = json.loads(bench_json.read_text())
    assert bench["max_abs_error"] == 0.0  # the llvm reference computes the same integer kernels
    assert bench["npu_mac_share"] == 1.0
    stdout = ok(cli("profile", int8_model, "--json", profile_json))
    assert "int8" in stdout  # the report's dtype column
    layers = json.loads(profile_json.read_text())["layers"]
    convs = [x for x in layers if x["op"] in ("conv2d", "matmul")]
    assert convs and all(x["dtype"] == "int8" for x in convs)
    assert all(x["cycles"] >= x["bound_cycles"] > 0 for x in layers)  # bounds at the int8 peak still hold


def test_unsupported_qoperator_op_is_a_one_line_error(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A QOperator model with an operator that has no QDQ equivalent here (com.microsoft QLinearSoftmax)."""
    from onnx import TensorProto, helper

    scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.1])
    zp = helper.make_tensor("z", TensorProto.UINT8, [], [128])
    node = helper.make_node("QLinearSoftmax", ["x", "s", "z", "s", "z"], ["y"], domain="com.microsoft", axis=1,
                            opset=13, name="softmax_q")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 10])], [scale, zp])
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    proto = helper.make_model(graph, opset_imports=opsets)
    path = tmp_path / "qop.onnx"
    onnx.save(proto, str(path))
    one_line_error(in_process(capfd, "compile", path, "-o", tmp_path / "x.so"), "QLinearSoftmax", "softmax_q")
