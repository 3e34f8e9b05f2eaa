"""Failures inside onnxruntime's quantizer, as ``quantize_model`` and ``tvm-npu quantize`` report them.

Every exception raised inside onnxruntime's ``quant_pre_process``/``quantize_static`` becomes one
:class:`~tvm_npu.tools.quantize.QuantizationError` (a ValueError) of one line: what failed, the node it
concerns when it can be found, and which options to try; the user's files are left as they were. The
``'140_scale'``-style KeyError is injected (the installed onnxruntime quantizes every small graph tried
here); a graph input that is also a graph output is a real failure of onnxruntime's ``quantize_static``.
"""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime.quantization
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_npu.tools.cli import main
from tvm_npu.tools.quantize import QuantizationError, quantize_model

SHAPE = (1, 3, 8, 8)


def conv_model(*, input_is_output: bool = False) -> onnx.ModelProto:
    """x -> Conv 'conv_140' (output '140') -> Relu 'relu' -> Conv 'conv_b' -> y; ``input_is_output`` also lists x as
    a graph output, which onnxruntime's quantize_static fails on ("Graph is not a DAG")."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w_a"),
             numpy_helper.from_array(rng.normal(0, 0.3, (4, 4, 3, 3)).astype(np.float32), "w_b")]
    nodes = [helper.make_node("Conv", ["x", "w_a"], ["140"], name="conv_140", pads=[1] * 4),
             helper.make_node("Relu", ["140"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w_b"], ["y"], name="conv_b", pads=[1] * 4)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])]
    if input_is_output:
        outputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE)))
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture
def fp32(tmp_path: Path) -> Path:
    path = tmp_path / "model.onnx"
    onnx.save(conv_model(), str(path))
    return path


@pytest.fixture
def key_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime's quantize_static failing as it does on some models: an unwrapped KeyError of a scale's name."""
    def fail(*_args: object, **_kwargs: object) -> None:
        raise KeyError("140_scale")

    monkeypatch.setattr(onnxruntime.quantization, "quantize_static", fail)


def check_one_line(e: pytest.ExceptionInfo[QuantizationError], *words: str) -> str:
    message = str(e.value)
    assert isinstance(e.value, ValueError) and "\n" not in message, message
    assert all(w in message for w in words), message
    return message


def in_process(capfd: pytest.CaptureFixture[str], *args: str | Path) -> subprocess.CompletedProcess:
    """``tvm-npu ARGS`` through :func:`tvm_npu.tools.cli.main` in this process (as ``test_cli.in_process``)."""
    argv = [str(a) for a in args]
    capfd.readouterr()
    with warnings.catch_warnings():
        status = main(argv)
    out = capfd.readouterr()
    return subprocess.CompletedProcess(["tvm-npu", *argv], status, out.out, out.err)


def one_line_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 1, f"expected exit status 1, got {proc.returncode}\n{proc.stderr[-3000:]}"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[0].startswith("tvm-npu quantize: error: "), lines[0]
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


# ------------------------------------------------------------------------------- errors
@pytest.mark.usefixtures("key_error")
def test_key_error_names_the_node_and_what_to_try(fp32: Path, tmp_path: Path) -> None:
    with pytest.raises(QuantizationError) as e:
        quantize_model(fp32, tmp_path / "out" / "q.onnx", random=1)
    check_one_line(e, "quantize_static", "KeyError", "'140_scale'", "Conv node 'conv_140'", "--exclude conv_140",
                   "--per-tensor", "--activations uint8")
    assert isinstance(e.value.__cause__, KeyError)  # onnxruntime's own exception, for --verbose
    with pytest.raises(QuantizationError) as e:
        quantize_model(fp32, tmp_path / "q.onnx", random=1, per_channel=False, activations="uint8")
    message = check_one_line(e, "--exclude conv_140", "--activations int8")
    assert "--per-tensor" not in message


def test_a_real_onnxruntime_failure_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(QuantizationError) as e:
        quantize_model(conv_model(input_is_output=True), tmp_path / "q.onnx", random=1)
    check_one_line(e, "onnxruntime's quantize_static failed", "not a DAG", "--exclude", "--per-tensor")
    assert e.value.__cause__ is not None
    assert list(tmp_path.iterdir()) == []  # no output, no partial file


@pytest.mark.usefixtures("key_error")
def test_the_users_files_are_untouched(fp32: Path, tmp_path: Path) -> None:
    before = fp32.read_bytes()
    out_dir = tmp_path / "out"
    with pytest.raises(QuantizationError):
        quantize_model(fp32, out_dir / "q.onnx", random=1)
    assert list(out_dir.iterdir()) == []  # no output, no partial file left behind
    existing = out_dir / "q.onnx"
    existing.write_bytes(b"an earlier quantized model")
    with pytest.raises(QuantizationError):
        quantize_model(fp32, existing, random=1)
    assert existing.read_bytes() == b"an earlier quantized model"
    assert sorted(out_dir.iterdir()) == [existing]
    assert fp32.read_bytes() == before


def test_a_real_failure_leaves_an_existing_output_and_the_input(tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    onnx.save(conv_model(input_is_output=True), str(model))
    before = model.read_bytes()
    existing = tmp_path / "q.onnx"
    existing.write_bytes(b"an earlier quantized model")
    with pytest.raises(QuantizationError):
        quantize_model(model, existing, random=1)
    assert existing.read_bytes() == b"an earlier quantized model" and model.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "q.onnx"]


@pytest.mark.usefixtures("key_error")
def test_cli_prints_one_error_line(fp32: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "q.onnx"
    one_line_error(in_process(capfd, "quantize", fp32, "-o", out, "--random", "1"),
                   "Conv node 'conv_140'", "'140_scale'", "--exclude conv_140", "--per-tensor")
    assert not out.exists()


def test_cli_real_failure(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "model.onnx"
    onnx.save(conv_model(input_is_output=True), str(model))
    one_line_error(in_process(capfd, "quantize", model, "-o", tmp_path / "q.onnx", "--random", "1"),
                   "quantize_static failed", "not a DAG")
    assert not (tmp_path / "q.onnx").exists()


# ------------------------------------------------------------------------------ exclude
def float_convs(model: onnx.ModelProto) -> set[str]:
    """The Conv nodes whose weight is a float initializer, not a DequantizeLinear output."""
    inits = {t.name: t for t in model.graph.initializer}
    return {n.name for n in model.graph.node if n.op_type == "Conv" and n.input[1] in inits
            and inits[n.input[1]].data_type == TensorProto.FLOAT}


def test_exclude_keeps_the_node_in_float(fp32: Path, tmp_path: Path) -> None:
    assert float_convs(onnx.load(str(quantize_model(fp32, tmp_path / "all.onnx", random=2)))) == set()
    out = quantize_model(fp32, tmp_path / "q.onnx", random=2, exclude=["conv_b"])
    assert float_convs(onnx.load(str(out))) == {"conv_b"}


def test_exclude_an_unnamed_node_by_its_output(tmp_path: Path) -> None:
    model = conv_model()
    for node in model.graph.node:
        node.name = ""
    out = quantize_model(model, tmp_path / "q.onnx", random=2, exclude=["140"])
    assert float_convs(onnx.load(str(out))) == {"140"}


def test_cli_exclude(fp32: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "q.onnx"
    proc = in_process(capfd, "quantize", fp32, "-o", out, "--random", "2", "--exclude", "conv_b",
                      "--exclude", "conv_140")
    assert proc.returncode == 0, proc.stderr
    assert "left in float: conv_b, conv_140" in proc.stdout
    assert float_convs(onnx.load(str(out))) == {"conv_b", "conv_140"}
    one_line_error(in_process(capfd, "quantize", fp32, "-o", tmp_path / "r.onnx", "--random", "2",
                              "--exclude", "conv9"), "--exclude 'conv9'", "no node", "conv_140")
    assert not (tmp_path / "r.onnx").exists()
