"""Issue 13 on the command line, as typed: ``bench`` and ``profile`` lead with the end-to-end
latency (NPU simulated + host measured) and give llvm and onnxruntime references; ``--host-target``
takes an llvm target for the host part, and a cross target compiles but does not run here.
(``demo`` prints ``bench``'s lines: tests/tools/test_cli.py checks it leads with end-to-end.)"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_cli import cli, in_process, ok, one_line_error  # the same helpers (tests/tools is on sys.path)

pytestmark = pytest.mark.slow  # the CLI building, benchmarking and profiling models: the quick tier leaves it out

AARCH64 = '{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}'


@pytest.fixture(scope="module")
def host_op_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Conv (NPU) -> Sin (host: no NPU instruction computes a sine)."""
    w = np.random.default_rng(0).normal(0, 0.3, (8, 8, 3, 3)).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
         helper.make_node("Sin", ["y"], ["z"])],
        "conv_sin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8, 8, 8])],
        [numpy_helper.from_array(w, "w")])
    path = tmp_path_factory.mktemp("model") / "conv_sin.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_bench_leads_with_end_to_end_then_references(model: Path, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    out = tmp_path / "bench.json"
    lines = ok(cli("bench", model, "--repeat", "2", "--host-target", "llvm -num-cores=1", "--json", out)).splitlines()
    heads = [line.split()[0] for line in lines[:6]]
    assert heads == ["model", "end-to-end", "NPU", "host", "vs", "vs"], lines[:6]
    assert "host part" in lines[3] and "-num-cores=1" in lines[3] and "median of 2" in lines[3]
    assert "TVM's untuned default llvm build" in lines[4]
    cores = os.cpu_count() or 1
    assert "1 thread " in lines[5] and (cores == 1 or f"{cores} threads" in lines[5]), lines[5]
    data = json.loads(out.read_text())
    assert data["e2e_latency_s"] == pytest.approx(data["npu_latency_s"] + data["host_latency_s"])
    assert data["host_latency_s"] > 0 and data["host_op_counts"] == {}  # tiny_convnet runs wholly on the NPU
    assert set(data["onnxruntime_latency_s"]) == {"1", str(cores)}
    assert data["host_target"].startswith("llvm") and "num-cores=1" in data["host_target"]


def test_profile_leads_with_end_to_end(model: Path) -> None:
    lines = ok(cli("profile", model, "--timing-only", "--repeat", "2")).splitlines()
    assert lines[1].startswith("end-to-end") and lines[2].startswith("NPU part") and lines[3].startswith("host part")
    assert lines[4] == "per-layer report at input=(1, 3, 64, 64)"  # then the per-layer table, naming its shape
    assert lines[5].startswith("layer")


def test_host_target_errors_are_one_line(model: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    one_line_error(in_process(capfd, "profile", model, "--host-target", AARCH64), "aarch64", "cannot run", ".tar")
    for args, words in ((["bench", model, "--host-target", "llvm -mcpu=no-such-cpu"], ("--host-target", "no-such-cpu")),
                        (["compile", model, "--host-target", AARCH64, "-o", tmp_path / "x.so"], ("x.tar",))):
        line = one_line_error(in_process(capfd, *args))
        assert all(w in line for w in words), line  # case-sensitive: the option and file names as typed


def test_compile_cross_target_writes_aarch64_objects(host_op_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "cross.tar"
    stdout = ok(cli("compile", host_op_model, "--host-target", AARCH64, "-o", out))
    assert "cross-compiled" in stdout and "host: sin x1" in stdout
    with tarfile.open(out) as tar:
        objects = [tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".o")]
    assert objects and all(int.from_bytes(o[18:20], "little") == 183 for o in objects)  # EM_AARCH64
