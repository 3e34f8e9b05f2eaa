"""The command line on models with symbolic dimensions: built once for every shape without ``--input-shape``,
``--input-shape`` repeated for several shapes, per-shape first-call and steady-state figures (``profile``,
``bench``), the symbolic dimensions and compiled shapes (``inspect``), tuning per shape, and one-line errors
for bad inputs (``run``, ``tvm_npu.run``). In this process (:func:`tvm_npu.tools.cli.main`), each test with its
own JIT cache."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest

import tvm_npu
from tvm_npu.models.inputs import TensorSpec
from tvm_npu.runtime import jit
from tvm_npu.testing.dynamic_models import classifier, recogniser
from tvm_npu.tools.bench import check_inputs
from tvm_npu.tools.cli import main


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path) -> Iterator[jit.JitCache]:
    with jit.use_cache(jit.JitCache(jit.DiskCache(tmp_path / "cache"))) as cache:
        yield cache


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """The classifier ([-1, 3, '?', '?']) and the recogniser (paddle2onnx names) as .onnx files."""
    paths = {"classifier": tmp_path / "cls.onnx", "recogniser": tmp_path / "rec.onnx"}
    onnx.save(classifier(), str(paths["classifier"]))
    onnx.save(recogniser(), str(paths["recogniser"]))
    return paths


def _cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def test_compile_without_input_shape_then_inspect_and_run_any_shape(files: dict[str, Path], tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    lib = tmp_path / "rec.so"
    status, out, err = _cli(capsys, "compile", files["recogniser"], "-o", lib, "--input-shape", "x=1,3,32,64",
                            "--input-shape", "x=1,3,32,96")
    assert status == 0, err
    assert "compiled ahead of time: x=(1, 3, 32, 64); x=(1, 3, 32, 96)" in out
    status, out, err = _cli(capsys, "inspect", lib)
    assert status == 0, err
    assert "  p2o.DynamicDimension.1: input 'x' dimension 3; no bounds (any size)" in out
    assert "compiled ahead of time: x=(1, 3, 32, 64); x=(1, 3, 32, 96)" in out
    status, out, err = _cli(capsys, "run", lib, "--random-inputs", "0", "--input-shape", "x=1,3,32,40")
    assert status == 0, err
    assert "output_0: float32 (1, 10, 40)" in out
    status, out, err = _cli(capsys, "run", lib, "--random-inputs", "0", "--input-shape", "x=1,3,30,40")
    assert status == 1 and len(err.strip().splitlines()) == 1
    assert "dimension 2 is static 32, not 30" in err and "Check failed" not in err
    status, out, err = _cli(capsys, "compile", files["classifier"], "-o", tmp_path / "cls.so")
    assert status == 0, err
    assert "compiled ahead of time: none" in out and "x_dim2: input 'x' dimension 2" in out


def test_profile_reports_compile_seconds_per_shape_and_names_the_shape(
        files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        private_cache: jit.JitCache) -> None:
    out_json = tmp_path / "prof.json"
    status, out, err = _cli(capsys, "profile", files["classifier"], "--input-shape", "x=1,3,16,16",
                            "--input-shape", "x=2,3,24,40", "--repeat", "1", "--json", out_json)
    assert status == 0, err
    for shape in ("x=(1, 3, 16, 16)", "x=(2, 3, 24, 40)"):
        assert f"{shape}: first call " in out and f"per-layer report at {shape}" in out
    assert out.count("(compiled: p0 ") == 2 and private_cache.compiles == 2
    data = json.loads(out_json.read_text())
    assert [s["shape"] for s in data["shapes"]] == ["x=(1, 3, 16, 16)", "x=(2, 3, 24, 40)"]
    assert [r["model"]["shape"] for r in data["reports"]] == ["x=(1, 3, 16, 16)", "x=(2, 3, 24, 40)"]
    assert all(set(s["compile_s"]) == {"p0"} and s["compile_s"]["p0"] > 0 for s in data["shapes"])


def test_bench_prints_first_call_and_steady_state_per_shape(files: dict[str, Path], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "bench.json"
    status, out, err = _cli(capsys, "bench", files["classifier"], "--input-shape", "x=1,3,16,16",
                            "--input-shape", "x=1,3,24,16", "--input-shape", "x=1,3,8,8",
                            "--repeat", "1", "--json", out_json)
    assert status == 0, err
    rows = json.loads(out_json.read_text())["shapes"]
    assert [r["shape"] for r in rows] == ["x=(1, 3, 16, 16)", "x=(1, 3, 24, 16)", "x=(1, 3, 8, 8)"]
    assert all(r["source"] == "compiled" and r["max_abs_error"] < 1e-5 for r in rows)
    assert out.count("shape        x=(") == 3


def test_shape_option_errors_are_one_line(files: dict[str, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    static = tmp_path / "static.onnx"
    model = classifier()
    for d, n in zip(model.graph.input[0].type.tensor_type.shape.dim, (1, 3, 16, 16), strict=True):
        d.Clear()
        d.dim_value = n
    onnx.save(model, str(static))
    cases = [
        (("bench", static, "--input-shape", "x=1,3,16,16", "--input-shape", "x=1,3,8,8"),
         "--input-shape x: given several times, but the input's shape is static (1, 3, 16, 16)"),
        (("bench", files["classifier"], "--input-shape", "x=1,3,16,16", "--input-shape", "x=1,3,16,16"),
         "--input-shape x=1,3,16,16: given twice; give each shape once"),
        (("tune", files["recogniser"], "--work-dir", tmp_path / "db"),
         "give the shapes to tune with --input-shape (repeatable"),
    ]
    for args, message in cases:
        status, _, err = _cli(capsys, *args)
        assert status == 1 and message in err and len(err.strip().splitlines()) == 1, err


def test_tune_tunes_each_shape_given(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``--input-shape`` set is tuned into the one work directory (the tuner itself is
    tests/tuning's; here it records what it was asked)."""
    from tvm_npu.tuning import tuner

    asked: list[object] = []
    monkeypatch.setattr(tuner, "tune", lambda model, target, work_dir, trials, **kw: asked.append(kw["shapes"]) or [])
    status, out, err = _cli(capsys, "tune", files["recogniser"], "--work-dir", tmp_path / "db", "--input-shape",
                            "x=1,3,32,64", "--input-shape", "x=1,3,32,128")
    assert status == 0, err
    assert asked == [{"x": (1, 3, 32, 64)}, {"x": (1, 3, 32, 128)}]
    assert "tuning at x=(1, 3, 32, 128)" in out


def test_inspect_a_model_lists_its_symbolic_dimensions(files: dict[str, Path],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _cli(capsys, "inspect", files["classifier"], "--input-shape", "x=2,3,16,24",
                            "--input-shape", "x=1,3,8,8")
    assert status == 0, err
    assert "  x_dim0: input 'x' dimension 0; no bounds (any size)" in out
    assert "compiled ahead of time: x=(2, 3, 16, 24); x=(1, 3, 8, 8)" in out
    assert "operators below: at x=(2, 3, 16, 24)" in out and "x: float32 (2, 3, 16, 24)" in out
    status, out, err = _cli(capsys, "inspect", files["classifier"])
    assert status == 0, err
    assert "compiled ahead of time: none (every shape compiles on its first call)" in out
    assert "operators below: at x=(1, 3, 224, 224)" in out


def test_bad_inputs_are_one_value_error_before_the_model_runs(private_cache: jit.JitCache) -> None:
    """tvm_npu.run: a size outside the profile's bounds (checked before the host part), the wrong number of inputs."""
    profile = {"min": (1, 3, 32, 32), "opt": (1, 3, 32, 64), "max": (1, 3, 32, 128)}
    ex = tvm_npu.build(recogniser(), shapes={"x": profile})
    with pytest.raises(ValueError, match=r"^input 'x' dimension 3 \('p2o.DynamicDimension.1'\) is 256, outside the "
                                         r"bounds 32..128 of the model's shape profile; accepted: "
                                         r"p2o.DynamicDimension.1 in 32..128$"):
        tvm_npu.run(ex, np.zeros((1, 3, 32, 256), np.float32))
    with pytest.raises(ValueError, match=r"^the model takes 1 input\(s\) \('x'\); given 2$"):
        tvm_npu.run(ex, np.zeros((1, 3, 32, 64), np.float32), np.zeros(1, np.float32))
    with pytest.raises(ValueError, match=r"^input 'x' dimension 3 \('p2o.DynamicDimension.1'\) is 0; accepted: "
                                         r"p2o.DynamicDimension.1 >= 1 \(in 32..128\)$"):
        tvm_npu.run(ex, np.zeros((1, 3, 32, 0), np.float32))
    assert private_cache.compiles == 0  # opt compiled ahead; nothing else ran
    assert tvm_npu.run(ex, np.zeros((1, 3, 32, 64), np.float32)).shape == (1, 16, 40)


def test_a_named_dimension_is_one_size_across_inputs() -> None:
    """``run``'s input check: inputs sharing a dimension name must agree (else TVM's match_cast would fail)."""
    specs = [TensorSpec("a", (1, "W"), "float32"), TensorSpec("b", ("W", 4), "float32")]
    check_inputs([np.zeros((1, 8), np.float32), np.zeros((8, 4), np.float32)], specs)
    with pytest.raises(ValueError, match=r"^input 'b' dimension 0 \('W'\) is 6, but input 'a' dimension 1 gives "
                                         r"'W' = 8; 'W' names one size in every place$"):
        check_inputs([np.zeros((1, 8), np.float32), np.zeros((6, 4), np.float32)], specs)
