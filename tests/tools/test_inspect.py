"""``tvm-npu inspect``, ``run``'s input help and errors, and the report's readability, as a user types them.

The model is the bundled ``tiny_convnet`` (it builds in about a second); a tight SRAM budget
(``-max-sram-bytes=8192``) sends three of its convolutions to the host, so both placements appear.
A few commands run in a subprocess exactly as typed; the rest call the same entry point
(:func:`tvm_npu.tools.cli.main`) in this process, which saves the ~3 s import of TVM per command.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from test_cli import PNG_MAGIC, cli, in_process, ok, one_line_error  # this folder is on sys.path (prepend import)
from tvm import relax

import tvm_npu
from tvm_npu.models.light import tiny_convnet
from tvm_npu.report.layers import LayerReport, ModelReport

SMALL = "npu -max-sram-bytes=8192"


# ---------------------------------------------------------------------------------- inspect
@pytest.mark.slow
def test_inspect_lists_inputs_placements_and_memory(tmp_path: Path) -> None:
    out = tmp_path / "inspect.json"
    proc = cli("inspect", "tiny_convnet", "--target", SMALL, "--json", out)
    stdout = ok(proc)
    assert proc.stderr == ""  # the host fallbacks are in the table, not repeated as warnings
    assert "input: float32 (1, 3, 64, 64)" in stdout and "probs: float32 (1, 10)" in stdout
    data = json.loads(out.read_text())
    assert data["inputs"] == [{"name": "input", "shape": [1, 3, 64, 64], "dtype": "float32"}]
    host = [o for o in data["operators"] if o["where"] == "host"]
    assert [o["op"] for o in host] == ["nn.conv2d"] * 3
    assert all("-max-sram-bytes=8192" in o["reason"] for o in host)
    npu = [o for o in data["operators"] if o["where"] == "NPU"]
    assert npu[0]["op"] == "conv2d+bias+relu" and npu[0]["partition"] == "p0"
    assert {o["partition"] for o in npu} == {p["label"] for p in data["partitions"]} == {"p0", "p1", "p2", "p3"}
    # on the NPU: the first conv (32 x 32 x 32 outputs of 3 x 3 x 3) and the dense layer; on the host the other convs
    assert data["npu_macs"] == 32 * 32 * 32 * 27 + 64 * 10
    assert data["host_macs"] == 2 * 16 * 16 * 32 * 32 * 9 + 8 * 8 * 64 * 32 * 9
    memory = data["memory"]
    assert memory["host_weight_bytes"] == 2 * 32 * 32 * 9 * 4 + 64 * 32 * 9 * 4  # the three host convs' weights
    assert memory["dram_bytes"] == sum(memory[k] for k in ("npu_weight_bytes", "host_weight_bytes",
                                                          "peak_activation_bytes", "program_bytes"))
    assert 0 < memory["sram_largest_op"] <= memory["sram_high_water"] <= 8192


def test_inspect_figures_agree_with_a_run(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Weights are what the NPU programs carry, and the SRAM high-water is the simulator's own figure."""
    out = tmp_path / "inspect.json"
    ok(in_process(capfd, "inspect", "tiny_convnet", "--json", out))
    data = json.loads(out.read_text())
    assert all(o["where"] == "NPU" for o in data["operators"]) and data["host_macs"] == 0
    vm = relax.VirtualMachine(tvm_npu.build("tiny_convnet"), tvm.cpu())
    with tvm_npu.profile(trace=True, timing_only=True) as prof:
        vm["main"](tvm.runtime.tensor(np.zeros((1, 3, 64, 64), np.float32)))
    assert data["memory"]["sram_high_water"] == max(r.stats.sram_high_water for r in prof.runs)
    report = prof.report()  # the profile's device-memory line: the same programs, loaded from the executable
    assert (report.weight_bytes, report.program_bytes, report.sram_high_water) == tuple(
        data["memory"][k] for k in ("npu_weight_bytes", "program_bytes", "sram_high_water"))
    weights = sum(int(np.prod(i.dims)) * 4 for i in tiny_convnet().graph.initializer if len(i.dims) > 1)
    assert data["memory"]["npu_weight_bytes"] >= weights  # every conv / dense weight is on the NPU
    # one partition: its input, its output and its DRAM intermediates (the four conv and pool outputs at least)
    (part,) = data["partitions"]
    assert part["scratch_bytes"] >= (32 * 32 * 32 + 3 * 32 * 16 * 16 + 64 * 8 * 8) * 4
    assert data["memory"]["peak_activation_bytes"] == (3 * 64 * 64 + 10) * 4 + part["scratch_bytes"]


def test_inspect_names_an_unsupported_operator(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A Sin (no NPU instruction computes it) and an Exp (alone, not in a row program): the reason says which
    and why."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Sin", ["x"], ["s"]), helper.make_node("Exp", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3, 3])])
    path = tmp_path / "sin_exp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    out = tmp_path / "i.json"
    ok(in_process(capfd, "inspect", path, "--json", out))
    host = {o["op"]: o["reason"] for o in json.loads(out.read_text())["operators"] if o["where"] == "host"}
    assert host["sin"] == "no NPU pattern for relax.sin", host
    assert host["exp"] == "no NPU pattern for relax.exp", host


# -------------------------------------------------------------------------------------- run
def test_run_without_inputs_says_what_it_needs(library: Path, capfd: pytest.CaptureFixture[str]) -> None:
    one_line_error(in_process(capfd, "run", library), "input: float32 (1, 3, 64, 64)", "--inputs", "--random-inputs")


def test_run_with_random_inputs(library: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "a.npz", tmp_path / "b.npz"
    stdout = ok(in_process(capfd, "run", library, "--random-inputs", "7", "-o", first, "--stats"))
    ok(in_process(capfd, "run", library, "--random-inputs", "7", "-o", second))
    assert "output_0: float32 (1, 10)" in stdout and " ms wall" in stdout  # a sub-second run in ms, not "0.00 s"
    with np.load(first) as a, np.load(second) as b:
        np.testing.assert_array_equal(a["output_0"], b["output_0"])  # seeded
        assert abs(float(a["output_0"].sum()) - 1.0) < 1e-5  # a softmax of real numbers, not of zeros
    (row,) = [line for line in stdout.splitlines() if line.startswith("p0 ")]
    assert "conv2d x4" in row  # the partition by label and by its layers


@pytest.mark.parametrize(("case", "words"), [
    ("float64", ("input 'input'", "float32 (1, 3, 64, 64)", "given float64")),
    ("shape", ("input 'input'", "float32 (1, 3, 64, 64)", "given float32 (1, 3, 32, 64)")),
    ("text", ("not an .npz",)),
    ("onnx", ("is an onnx model", "compile it first")),
])
def test_run_input_errors_are_one_clear_line(library: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                             case: str, words: tuple[str, ...]) -> None:
    lib, npz = library, tmp_path / "x.npz"
    if case == "float64":
        np.savez(npz, input=np.zeros((1, 3, 64, 64)))
    elif case == "shape":
        np.savez(npz, input=np.zeros((1, 3, 32, 64), np.float32))
    elif case == "text":
        npz = tmp_path / "x.txt"
        npz.write_text("1 2 3\n")
    else:
        lib = tmp_path / "tiny.onnx"
        onnx.save(tiny_convnet(), str(lib))
        np.savez(npz, input=np.zeros((1, 3, 64, 64), np.float32))
    line = one_line_error(in_process(capfd, "run", lib, "--inputs", npz), *words)
    assert "ErrorContext" not in line and "Check failed" not in line


def test_output_in_a_missing_directory_is_refused(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "missing" / "x.so"
    one_line_error(in_process(capfd, "compile", "tiny_convnet", "-o", out), "does not exist", str(out.parent))
    assert not out.parent.exists()


# ------------------------------------------------------------------------- report and Python
def test_profile_report_is_readable(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Layer names carry their partition; the op column keeps the whole epilogue; the plot has every layer."""
    report, plot = tmp_path / "r.json", tmp_path / "roof.png"
    stdout = ok(in_process(capfd, "profile", "tiny_convnet", "--target", SMALL, "--json", report, "--plot", plot))
    layers = json.loads(report.read_text())["layers"]
    labels = [x["label"] for x in layers]
    assert len(set(labels)) == len(labels) and labels[0] == "p0/conv2d_0"
    assert {x["name"] for x in layers if x["label"].startswith("p1/")} and "p3/" in stdout
    assert "conv3x3/s2 (1, 3, 64, 64)->(1, 32, 32, 32) +bias+relu" in stdout  # not cut at 48 characters
    assert f"wrote {plot} ({len(layers)} layers" in stdout  # pooling and elementwise layers are plotted too
    assert "peak live activations" in stdout  # the device memory as inspect shows it
    assert plot.read_bytes().startswith(PNG_MAGIC)


def test_profile_shows_the_memory_inspect_shows(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Same model, same target: profile's deployment memory (JSON and text) is inspect's, host weights and peak
    live activations included; its run-time figures agree with it."""
    profiled, inspected = tmp_path / "profile.json", tmp_path / "inspect.json"
    profile_out = ok(in_process(capfd, "profile", "tiny_convnet", "--target", SMALL, "--json", profiled,
                                   "--timing-only", "--repeat", "1"))
    inspect_out = ok(in_process(capfd, "inspect", "tiny_convnet", "--target", SMALL, "--json", inspected))
    memory = json.loads(inspected.read_text())["memory"]
    model = json.loads(profiled.read_text())["model"]
    assert model["memory"] == memory
    assert memory["host_weight_bytes"] > 0 and memory["peak_activation_bytes"] > 0  # three convs on the host
    assert (model["weight_bytes"], model["program_bytes"], model["sram_high_water"]) == (
        memory["npu_weight_bytes"], memory["program_bytes"], memory["sram_high_water"])
    lines = [line for line in inspect_out.splitlines() if line.startswith(("device DRAM:", "SRAM high-water:"))]
    assert len(lines) == 2 and set(lines) <= set(profile_out.splitlines()), lines


def test_waste_is_part_of_the_dram_column() -> None:
    """A layer moving 1 KiB it asked for and 3 KiB of partial bursts shows 4 KiB over the channel."""
    layer = LayerReport(partition="f", name="add_0", op="elementwise", dtype="float32", description="add", layout_in="",
                        layout_out="", tile={}, macs=0, input_bytes=512, weight_bytes=0, output_bytes=512,
                        dram_bytes=1024, wasted_bytes=3072, sram_peak_bytes=0, cycles=100, bound_cycles=64.0,
                        efficiency=0.64, bound_by="dma", predicted_cycles=90.0, fused=(), label="p0/add_0")
    rep = ModelReport(layers=(layer,), cycles=100, bound_cycles=64.0, dram_bytes=1024, compulsory_bytes=1024,
                      npu_macs=0, host_macs=0, layout_transforms=0)
    row = next(line for line in rep.table().splitlines() if line.startswith("p0/add_0"))
    assert row.split()[5:7] == ["4", "3"], row  # DRAM KiB, waste KiB (the tile column is empty)


@pytest.mark.slow
def test_python_api_takes_bundled_names_and_writes_trace_and_plot(tmp_path: Path) -> None:
    from tvm_npu.tools.bench import bench

    result = bench("tiny_convnet", repeat=1, progress=False)
    assert result.model == "tiny_convnet" and result.max_abs_error < 1e-4
    vm = relax.VirtualMachine(tvm_npu.build("tiny_convnet"), tvm.cpu())
    with tvm_npu.profile(trace=True) as prof:
        vm["main"](tvm.runtime.tensor(np.ones((1, 3, 64, 64), np.float32)))
    trace = prof.write_trace(tmp_path / "t.json")
    assert json.loads(trace.read_text())["traceEvents"][0]["args"]["name"].startswith("p0: ")
    assert prof.plot_roofline(tmp_path / "roof.png") == len(prof.report().layers) == 8
    assert (tmp_path / "roof.png").read_bytes().startswith(PNG_MAGIC)
    with tvm_npu.profile() as untraced:
        vm["main"](tvm.runtime.tensor(np.ones((1, 3, 64, 64), np.float32)))
    with pytest.raises(ValueError, match="trace=True"):
        untraced.write_trace(tmp_path / "u.json")
