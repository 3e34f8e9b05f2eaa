"""``tvm-npu quantize`` and ``tvm-npu compare`` (:mod:`tvm_npu.tools.quantize`, :mod:`tvm_npu.tools.quant_error`).

The models are small fp32 graphs built with onnx.helper (conv+relu, conv, matmul, gemm
on a 1x3x16x16 input), quantized with onnxruntime. The commands run in this process
through ``cli.main`` (the console script's entry point) so that a missing onnxruntime
can be simulated; ``test_cli.py`` covers the ``python -m tvm_npu`` wrapper itself.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_npu.tools.cli import main
from tvm_npu.tools.quant_error import compare_models, match_tensors
from tvm_npu.tools.quantize import calibration_samples, qdq_counts, quantize_model

SHAPE = (1, 3, 16, 16)
CONV_OUT = 8


def fp32_model(opset: int = 17, batch: int | str = 1) -> onnx.ModelProto:
    """x -> Conv+Relu -> Conv -> Flatten -> MatMul+Relu -> Gemm: every kind the quantizer handles here."""
    rng = np.random.default_rng(0)

    def const(name: str, shape: tuple[int, ...], std: float) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.normal(0, std, shape).astype(np.float32), name)

    inits = [const("w1", (CONV_OUT, 3, 3, 3), 1 / np.sqrt(27)), const("b1", (CONV_OUT,), 0.1),
             const("w2", (CONV_OUT, CONV_OUT, 3, 3), 1 / np.sqrt(CONV_OUT * 9)),
             const("wm", (CONV_OUT * 8 * 8, 16), 1 / np.sqrt(CONV_OUT * 8 * 8)),
             const("wg", (10, 16), 1 / np.sqrt(16)), const("bg", (10,), 0.1)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1] * 4),
        helper.make_node("Flatten", ["c2"], ["f"]),
        helper.make_node("MatMul", ["f", "wm"], ["m"]),
        helper.make_node("Relu", ["m"], ["rm"]),
        helper.make_node("Gemm", ["rm", "wg", "bg"], ["y"], transB=1),
    ]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              [batch, *SHAPE[1:]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def sample(seed: int = 100) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)}


def run_ort(model: onnx.ModelProto | Path, feeds: dict[str, np.ndarray], *, basic: bool = False) -> np.ndarray:
    """The first output on onnxruntime. ``basic``: without its fused integer kernels, whose u8s8
    path saturates on AVX2 CPUs without VNNI (the model is right, that kernel is not)."""
    options = ort.SessionOptions()
    if basic:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def initializer(model: onnx.ModelProto, name: str) -> np.ndarray:
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name)


def dq_of_weight(model: onnx.ModelProto, weight: str) -> onnx.NodeProto:
    """The DequantizeLinear that restores the fp32 weight ``weight``."""
    return next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == f"{weight}_quantized")


def activation_zero_points(model: onnx.ModelProto) -> set[np.dtype]:
    """The dtypes of the zero points of the QuantizeLinear nodes (activations)."""
    return {initializer(model, n.input[2]).dtype for n in model.graph.node if n.op_type == "QuantizeLinear"}


def close_to_fp32(quantized: Path, reference: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    want = run_ort(reference, feeds)
    got = run_ort(quantized, feeds, basic=True)
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max(), (got, want)


@pytest.fixture(scope="module")
def fp32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "small.onnx"
    onnx.save(fp32_model(), str(path))
    return path


@pytest.fixture(scope="module")
def int8(fp32: Path) -> Path:
    return quantize_model(fp32, fp32.with_name("small_int8.onnx"), random=8, seed=1)


# ------------------------------------------------------------------------------ quantize
def test_quantize_random_is_per_channel_int8_by_default(fp32: Path, int8: Path) -> None:
    q = onnx.load(str(int8))
    n_q, n_dq = qdq_counts(q)
    assert n_q >= 4 and n_dq > n_q  # activations, plus one DequantizeLinear per weight
    for weight, channels, axis in (("w1", CONV_OUT, 0), ("w2", CONV_OUT, 0)):
        dq = dq_of_weight(q, weight)
        assert helper.get_node_attr_value(dq, "axis") == axis
        assert initializer(q, dq.input[1]).shape == (channels,)  # one scale per output channel
        assert initializer(q, dq.input[0]).dtype == np.int8
        assert not initializer(q, dq.input[2]).any()  # symmetric: zero points are 0
    assert activation_zero_points(q) == {np.dtype(np.int8)}
    close_to_fp32(int8, onnx.load(str(fp32)), sample())
    assert run_ort(int8, sample()).shape == (1, 10)  # and with onnxruntime's default optimisations


def test_quantize_npz_uint8_per_tensor(fp32: Path, tmp_path: Path) -> None:
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.random.default_rng(2).standard_normal((6, *SHAPE)).astype(np.float32))
    out = quantize_model(fp32, tmp_path / "q.onnx", calibration=calib, activations="uint8", per_channel=False)
    q = onnx.load(str(out))
    assert initializer(q, dq_of_weight(q, "w1").input[1]).size == 1
    assert activation_zero_points(q) == {np.dtype(np.uint8)}
    close_to_fp32(out, onnx.load(str(fp32)), sample())


def test_old_opset_is_upgraded_for_per_channel(tmp_path: Path) -> None:
    out = quantize_model(fp32_model(opset=11), tmp_path / "q.onnx", random=2)
    q = onnx.load(str(out))
    assert next(o.version for o in q.opset_import if o.domain in ("", "ai.onnx")) >= 13
    assert initializer(q, dq_of_weight(q, "w1").input[1]).shape == (CONV_OUT,)


def test_calibration_arrays_with_or_without_sample_axis() -> None:
    model, x = fp32_model(), sample()["x"]
    assert len(calibration_samples(model, {"x": x})) == 1
    assert len(calibration_samples(model, {"x": np.stack([x[0]] * 3)[:, None]})) == 3
    assert len(calibration_samples(model, [{"x": x}, {"x": x}])) == 2
    symbolic = fp32_model(batch="N")  # the symbolic batch dimension takes the arrays' own
    assert calibration_samples(symbolic, {"x": np.zeros((2, 4, 3, 16, 16), np.float64)})[1]["x"].dtype == np.float32


# ------------------------------------------------------------------------- CLI errors
def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *words: str) -> str:
    """Run the CLI; it must fail like every command does (exit status 1, one stderr line)."""
    assert main(argv) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"tvm-npu {argv[0]}: error: ")
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.mark.parametrize("arrays, words", [
    ({"image": np.zeros(SHAPE, np.float32)}, ("'image'", "is not an input", "['x']")),
    ({"x": np.zeros((1, 3, 8, 8), np.float32)}, ("'x'", "(1, 3, 8, 8)", "(1, 3, 16, 16)", "sample axis")),
    ({"x": np.zeros(SHAPE, np.int64)}, ("'x'", "int64", "floating-point")),
], ids=["wrong-name", "wrong-shape", "not-float"])
def test_quantize_calibration_errors(fp32: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     arrays: dict[str, np.ndarray], words: tuple[str, ...]) -> None:
    calib = tmp_path / "calib.npz"
    np.savez(calib, **arrays)
    one_line_error(capsys, ["quantize", str(fp32), "-o", str(tmp_path / "q.onnx"), "--calibration", str(calib)],
                   str(calib), *words)
    assert not (tmp_path / "q.onnx").exists()


def hide_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import onnxruntime`` (and its submodules) fail, as when it is not installed."""
    for name in [m for m in sys.modules if m == "onnxruntime" or m.startswith("onnxruntime.")]:
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: the import fails


def test_quantize_without_onnxruntime(fp32: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    hide_onnxruntime(monkeypatch)
    one_line_error(capsys, ["quantize", str(fp32), "-o", str(tmp_path / "q.onnx"), "--random", "2"],
                   'pip install "tvm-npu[quantize]"')


def test_quantize_binds_symbolic_dimensions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dynamic.onnx"
    onnx.save(fp32_model(batch="N"), str(path))
    argv = ["quantize", str(path), "-o", str(tmp_path / "q.onnx"), "--random", "2"]

    def batch() -> int:
        return onnx.load(str(tmp_path / "q.onnx")).graph.input[0].type.tensor_type.shape.dim[0].dim_value

    assert main(argv) == 0  # the symbolic batch is 1, with a warning saying how to choose another
    assert "symbolic batch dimension 'N' bound to 1" in capsys.readouterr().err and batch() == 1
    one_line_error(capsys, [*argv, "--input-shape", "x=1,3,8,8"], "does not fit input 'x'")
    assert main([*argv, "--input-shape", "x=2,3,16,16"]) == 0
    out = capsys.readouterr().out
    assert "2 random standard-normal samples (seed 0)" in out and f"wrote {tmp_path / 'q.onnx'}" in out
    assert batch() == 2
    model = fp32_model(batch="N")
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
    onnx.save(model, str(path))
    one_line_error(capsys, argv, "'x'", "dimension 2 ('H') is symbolic", "--input-shape x=1,3,224,16")


def test_quantize_cli_reports_what_it_did(fp32: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "q.onnx"
    assert main(["quantize", str(fp32), "-o", str(out), "--random", "4", "--activations", "uint8"]) == 0
    text = capsys.readouterr().out
    n_q, n_dq = qdq_counts(onnx.load(str(out)))
    for words in ("quantized small with onnxruntime", "calibration: 4 random standard-normal samples (seed 0)",
                  "per channel", "activations: uint8", f"{n_q} QuantizeLinear, {n_dq} DequantizeLinear",
                  f"wrote {out}"):
        assert words in text, text


# ------------------------------------------------------------------------------ compare
def check_rows(rows: list, reference: onnx.ModelProto, min_snr_db: float, qdq: bool) -> None:
    order = [o for n in reference.graph.node for o in n.output]
    names = [r.name for r in rows]
    assert names == sorted(names, key=order.index) and len(names) >= 4  # graph order
    assert names[-1] == "y" and rows[-1].output and not any(r.output for r in rows[:-1])
    for r in rows:
        assert math.isfinite(r.snr_db) and r.snr_db > min_snr_db, r
        assert r.cosine > 0.99 and 0 <= r.mean_abs <= r.max_abs, r
        assert (r.steps is not None) == qdq, r


def test_compare_quantized_on_onnxruntime(fp32: Path, int8: Path) -> None:
    reference, q = onnx.load(str(fp32)), onnx.load(str(int8))
    matches, skipped = match_tensors(q, reference)
    assert skipped == ["c1", "m"]  # the quantizer folded the Relus: their inputs are gone
    assert [m.name for m in matches] == ["r1", "c2", "f", "rm", "y"]
    rows = compare_models(q, reference, sample(), engine="onnxruntime")
    check_rows(rows, reference, 15.0, qdq=True)
    assert all(r.steps < 10 for r in rows)  # a few quantization steps, not a saturated kernel


def test_compare_cli(fp32: Path, int8: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = tmp_path / "x.npz"
    np.savez(inputs, **sample())
    assert main(["compare", str(int8), "--reference", str(fp32), "--inputs", str(inputs),
                 "--engine", "onnxruntime", "--top", "2"]) == 0
    text = capsys.readouterr().out
    assert "5 tensors compared; 2 reference tensors without a counterpart skipped" in text
    assert "SNR dB" in text and "2 lowest SNR:" in text and "\nfinal output y: max |err|" in text
    np.savez(inputs, image=sample()["x"])
    one_line_error(capsys, ["compare", str(int8), "--reference", str(fp32), "--inputs", str(inputs)],
                   "'image'", "is not an input")


def test_compare_on_the_npu(fp32: Path, int8: Path) -> None:
    """The NPU build (int8 convs on the NPU or, until they land, on the host: either way the
    same model) must show the same quantization error as onnxruntime, within a step."""
    reference, q = onnx.load(str(fp32)), onnx.load(str(int8))
    npu = compare_models(q, reference, sample(), target="npu -max-sram-bytes=65536", engine="npu")
    ort_rows = compare_models(q, reference, sample(), engine="onnxruntime")
    check_rows(npu, reference, 15.0, qdq=True)
    for a, b in zip(npu, ort_rows, strict=True):
        assert a.name == b.name and abs(a.steps - b.steps) <= 1.5, (a, b)


def test_compare_without_onnxruntime(fp32: Path, int8: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference then runs on llvm; only ``--engine onnxruntime`` needs onnxruntime."""
    reference, q = onnx.load(str(fp32)), onnx.load(str(int8))
    with_ort = compare_models(q, reference, sample(), engine="onnxruntime")
    hide_onnxruntime(monkeypatch)
    rows = compare_models(q, reference, sample(), engine="npu")
    assert [r.name for r in rows] == [r.name for r in with_ort]
    assert all(abs(a.steps - b.steps) <= 1.5 for a, b in zip(rows, with_ort, strict=True))
    with pytest.raises(ImportError, match=r'pip install "tvm-npu\[quantize\]"'):
        compare_models(q, reference, sample(), engine="onnxruntime")


def test_compare_fp16(fp32: Path) -> None:
    float16 = pytest.importorskip("onnxconverter_common.float16")
    reference = onnx.load(str(fp32))
    half = float16.convert_float_to_float16(reference, keep_io_types=True)
    for engine in ("onnxruntime", "npu"):
        rows = compare_models(half, reference, sample(), engine=engine)
        check_rows(rows, reference, 40.0, qdq=False)
        assert [r.name for r in rows] == ["c1", "r1", "c2", "f", "m", "rm", "y"]  # fp16 keeps every name
