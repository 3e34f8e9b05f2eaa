"""The precision search (:mod:`tvm_npu.tools.precision_search`): ``quantize_model(..., target_sqnr=)`` and
``tvm-npu quantize --target-sqnr``, on the small conv/matmul model of ``test_quantize_compare``.

Every claim of the result is checked from outside the search: the written model's output SQNR is
measured again on onnxruntime, its 16-bit tensors are read from its zero points, its cycles recomputed
with the cost model.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from test_quantize_compare import fp32_model, one_line_error  # tests/tools is on sys.path (prepend import)

from tvm_npu.config import parse_target
from tvm_npu.tools.cli import main
from tvm_npu.tools.layer_cost import layers, model_cycles
from tvm_npu.tools.precision_search import PrecisionChoice, choose_precisions
from tvm_npu.tools.quantize import calibration_samples, quantize_model
from tvm_npu.tools.sqnr import quantized_tensors, sqnr_db


def output_sqnr(fp32: onnx.ModelProto, quantized: Path, samples: list[dict[str, np.ndarray]]) -> float:
    """The output's SQNR on onnxruntime (basic optimisations: no fused integer kernels), float64 sums."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    ref = ort.InferenceSession(fp32.SerializeToString(), providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(str(quantized), options, providers=["CPUExecutionProvider"])
    return sqnr_db((ref.run(None, s)[0], got.run(None, s)[0]) for s in samples)


@pytest.fixture(scope="module")
def setting() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    model = fp32_model()
    return model, calibration_samples(model, random=6, seed=5)


def search(setting: tuple, path: Path, target_db: float, fp16: bool = False) -> PrecisionChoice:
    """The search on the calibration samples and held out the same ones (so that "meets" is exact here)."""
    model, samples = setting
    return choose_precisions(partial(quantize_model, model, calibration=samples), model, samples, path, target_db,
                             held_out=samples, fp16=fp16)


@pytest.fixture(scope="module")
def extremes(setting: tuple, tmp_path_factory: pytest.TempPathFactory) -> tuple[float, float]:
    """(all-int8, all-16-bit) output SQNR, measured on the models quantize_model writes."""
    model, samples = setting
    tmp = tmp_path_factory.mktemp("extremes")
    int8 = quantize_model(model, tmp / "int8.onnx", calibration=samples, int16=[])  # opset 21, as the search
    every = [t.name for t in quantized_tensors(onnx.load(str(int8))).values()]
    int16 = quantize_model(model, tmp / "int16.onnx", calibration=samples, int16=every)
    return output_sqnr(model, int8, samples), output_sqnr(model, int16, samples)


def test_meets_the_budget_at_fewer_cycles_than_all_16bit(setting: tuple, extremes: tuple, tmp_path: Path) -> None:
    model, samples = setting
    low, high = extremes
    assert high > low + 1  # there is a range to choose in
    budget = (low + high) / 2
    choice = search(setting, tmp_path / "mixed.onnx", budget)
    written = onnx.load(str(choice.output))
    onnx.checker.check_model(written)  # an ordinary QDQ model
    bits = {t.name: t.bits for t in quantized_tensors(written).values()}
    assert 0 < sum(b == 16 for b in bits.values()) < len(bits)  # mixed
    achieved = output_sqnr(model, choice.output, samples)
    assert achieved >= budget and achieved == pytest.approx(choice.achieved_db, abs=1e-3)
    assert choice.int8_db == pytest.approx(low, abs=1e-3) and choice.int16_db == pytest.approx(high, abs=1e-3)
    hw, cost = parse_target("npu").hw, layers(written)
    assert choice.cycles == pytest.approx(model_cycles(hw, cost, {t: "int16" for t, b in bits.items() if b == 16}))
    assert choice.int8_cycles < choice.cycles < choice.int16_cycles
    assert {r.tensor: r.precision for r in choice.rows} == {t: f"int{b}" for t, b in bits.items()}
    assert choice.target == "npu" and choice.held_out_db == choice.achieved_db
    lines = choice.table().splitlines()
    assert lines[0].split()[:2] == ["tensor", "producer"] and f"(target {budget:g} dB on both;" in choice.table()


def test_no_tensor_moves_when_int8_meets_the_budget(setting: tuple, extremes: tuple, tmp_path: Path) -> None:
    choice = search(setting, tmp_path / "q.onnx", math.floor(extremes[0]) - 1)
    assert all(r.precision == "int8" for r in choice.rows) and choice.cycles == choice.int8_cycles


def test_the_python_api(setting: tuple, extremes: tuple, tmp_path: Path) -> None:
    model, samples = setting
    budget = (extremes[0] + extremes[1]) / 2
    out = quantize_model(model, tmp_path / "q.onnx", calibration=samples, target_sqnr=budget)
    assert out == tmp_path / "q.onnx" and output_sqnr(model, out, samples) >= budget


@pytest.mark.parametrize("budget", [0.0, -3.0, math.nan, math.inf])
def test_a_budget_is_a_positive_number(setting: tuple, tmp_path: Path, budget: float) -> None:
    with pytest.raises(ValueError, match=r"the target SQNR must be a positive number of dB \(e.g. 30\), not"):
        search(setting, tmp_path / "q.onnx", budget)
    assert not (tmp_path / "q.onnx").exists()


def test_quantize_target_sqnr_cli(setting: tuple, extremes: tuple, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    fp32, out = tmp_path / "small.onnx", tmp_path / "q.onnx"
    onnx.save(setting[0], str(fp32))
    budget = 20  # random calibration: held-out samples too, on which all-int8 reaches 21 dB (its ranges clip)
    assert main(["quantize", str(fp32), "-o", str(out), "--random", "6", "--seed", "5",
                 "--target-sqnr", str(budget)]) == 0
    text = capsys.readouterr().out
    assert "SQNR if only it is 8-bit" in text and f"(target {budget:g} dB on both;" in text and f"wrote {out}" in text
    assert "16-bit or fp16 for the tensors chosen above" in text
    unreachable = one_line_error(capsys, ["quantize", str(fp32), "-o", str(out), "--random", "6", "--seed", "5",
                                          "--target-sqnr", "90"], "target SQNR 90 dB is not reachable")
    best = float(unreachable.split("ask for at most ")[1].split()[0])
    assert best > extremes[1] and " dB held out (all-int8: " in unreachable  # the best reachable, named
    one_line_error(capsys, ["quantize", str(fp32), "-o", str(tmp_path / "r.onnx"), "--random", "2",
                            "--target-sqnr", "-1"], "positive number of dB")
    assert not (tmp_path / "r.onnx").exists()


def test_int16_and_a_budget_exclude_each_other(setting: tuple, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"give the 16-bit tensors \(int16=\) or a target SQNR"):
        quantize_model(setting[0], tmp_path / "q.onnx", random=1, int16=["c2"], target_sqnr=30)


def test_fp16_layers_meet_a_budget_beyond_all_16_bit(setting: tuple, extremes: tuple, tmp_path: Path) -> None:
    """A budget all-16-bit cannot meet (the weights stay int8) is met with fp16 layers: their producers left in
    float (float weights), their QDQ pairs gone, the target saying -precision=fp16; the written model on
    onnxruntime (float layers in fp32) at least as good as the search measured with fp16 casts."""
    model, samples = setting
    budget = extremes[1] + 3
    choice = search(setting, tmp_path / "fp16.onnx", budget, fp16=True)
    written = onnx.load(str(choice.output))
    onnx.checker.check_model(written)
    fp16 = {r.tensor for r in choice.rows if r.precision == "fp16"}
    assert fp16 and choice.float_nodes and choice.target == "npu -precision=fp16"
    assert not fp16 & set(quantized_tensors(written))  # no QDQ pair left on them
    float_weights = {i.name for i in written.graph.initializer if i.data_type == onnx.TensorProto.FLOAT}
    nodes = {n.name: n for n in written.graph.node}
    assert {i for n in choice.float_nodes for i in nodes[n].input} & float_weights  # float weights
    assert min(choice.achieved_db, choice.held_out_db) >= budget
    assert output_sqnr(model, choice.output, samples) >= choice.achieved_db - 0.1
    wide = {t for t, q in quantized_tensors(written).items() if q.bits == 16}
    hw, cost = parse_target("npu").hw, layers(written)
    precision = {**dict.fromkeys(wide, "int16"), **dict.fromkeys(fp16, "fp16")}
    # (the search prices the all-int8 model's layers, where onnxruntime folded each Relu into its Conv; the
    # written model has the float layers' Relus as nodes of their own)
    assert choice.cycles == pytest.approx(model_cycles(hw, cost, precision, choice.float_nodes), rel=0.05)
    assert "compile with: --target 'npu -precision=fp16'" in choice.table()
