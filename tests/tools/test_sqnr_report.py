"""The per-layer SQNR report (:mod:`tvm_npu.tools.sqnr_report`) and the cost model beside it
(:mod:`tvm_npu.tools.layer_cost`).

The report's figures are checked against a float64 computation written here from the algebra alone:
the fp32 model's layers and the QDQ model's (its weights, biases and activation parameters read from
the QDQ file, quantization as ``clip(round_half_even(x / s) + z)``), on the small conv/matmul model of
``test_quantize_compare``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from onnx import numpy_helper
from test_quantize_compare import (  # tests/tools is on sys.path (pytest's prepend import)
    CONV_OUT,
    SHAPE,
    fp32_model,
    one_line_error,
)

from tvm_npu.config import DType, parse_target
from tvm_npu.tools.cli import main
from tvm_npu.tools.layer_cost import layer_cycles, layers, model_cycles
from tvm_npu.tools.quantize import calibration_samples, quantize_model
from tvm_npu.tools.sqnr import quantized_tensors, sqnr_db
from tvm_npu.tools.sqnr_report import layer_sqnr, sqnr_table

SAMPLES = 4


# ------------------------------------------------------------------------ float64 model
def conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int) -> np.ndarray:
    """NCHW convolution, 3x3, padding 1, in float64."""
    windows = sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
    out = np.einsum("nchwij,ocij->nohw", windows[:, :, ::stride, ::stride], w)
    return out if b is None else out + b[None, :, None, None]


def forward(x: np.ndarray, w: dict[str, np.ndarray], act=lambda name, v: v) -> dict[str, np.ndarray]:
    """Every tensor of :func:`fp32_model`; ``act`` is applied to each activation tensor as it is made."""
    t = {"x": act("x", x)}
    t["r1"] = act("r1", np.maximum(conv(t["x"], w["w1"], w["b1"], 2), 0))
    t["c2"] = act("c2", conv(t["r1"], w["w2"], None, 1))
    t["f"] = act("f", t["c2"].reshape(len(x), -1))
    t["rm"] = act("rm", np.maximum(t["f"] @ w["wm"], 0))
    t["y"] = act("y", t["rm"] @ w["wg"].T + w["bg"])
    return t


#: The tensor each layer of :func:`forward` reads.
LAYER_INPUT = {"r1": "x", "c2": "r1", "f": "c2", "rm": "f", "y": "rm"}


def layer_alone(name: str, ref: dict[str, np.ndarray], w: dict[str, np.ndarray], act) -> np.ndarray:
    """Tensor ``name`` of the QDQ model made by its layer alone from the fp32 model's input to it, quantized
    at that input's parameters (the input tensor ``x``: its own quantization)."""
    if name == "x":
        return act("x", ref["x"])
    q = act(LAYER_INPUT[name], ref[LAYER_INPUT[name]])
    layer = {"r1": lambda: np.maximum(conv(q, w["w1"], w["b1"], 2), 0), "c2": lambda: conv(q, w["w2"], None, 1),
             "f": lambda: q.reshape(len(q), -1), "rm": lambda: np.maximum(q @ w["wm"], 0),
             "y": lambda: q @ w["wg"].T + w["bg"]}[name]
    return act(name, layer())


def qdq_parameters(model: onnx.ModelProto) -> tuple[dict[str, np.ndarray], dict[str, tuple[float, int, np.dtype]]]:
    """(the QDQ model's dequantized weights and biases by fp32 name, activation tensor -> (scale, zero point,
    type)), read from its initializers in float64."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    weights = {}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and n.input[0] in inits:
            q, s = inits[n.input[0]].astype(np.float64), inits[n.input[1]].astype(np.float64)
            z = inits[n.input[2]].astype(np.float64) if len(n.input) > 2 else np.zeros_like(s)
            axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
            shape = [-1 if i == axis % q.ndim else 1 for i in range(q.ndim)] if s.size > 1 else []
            weights[n.input[0].removesuffix("_quantized")] = (q - z.reshape(shape)) * s.reshape(shape)
    acts = {n.input[0]: (float(inits[n.input[1]]), int(inits[n.input[2]]), inits[n.input[2]].dtype)
            for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in inits}
    acts = {k.removesuffix("_QuantizeLinear_Input"): v for k, v in acts.items()}
    return weights, acts


def qdq(params: dict[str, tuple[float, int, np.dtype]]):
    def act(name: str, v: np.ndarray) -> np.ndarray:
        s, z, dtype = params[name]
        info = np.iinfo(dtype)
        return (np.clip(np.round(v / s) + z, info.min, info.max) - z) * s  # np.round: half to even, as ONNX
    return act


def float64_figures(fp32: onnx.ModelProto, quantized: onnx.ModelProto,
                    samples: list[dict[str, np.ndarray]]) -> dict[str, tuple[float, float]]:
    """tensor -> (accumulated SQNR, layer-alone SQNR) in dB, everything computed in float64."""
    w_ref = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in fp32.graph.initializer}
    w_q, params = qdq_parameters(quantized)
    act = qdq(params)
    x = np.concatenate([s["x"] for s in samples]).astype(np.float64)
    ref, got = forward(x, w_ref), forward(x, w_q, act)
    return {n: (sqnr_db([(ref[n], got[n])]), sqnr_db([(ref[n], layer_alone(n, ref, w_q, act))])) for n in params}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[onnx.ModelProto, Path, list]:
    """(the fp32 model, it quantized all-int8, the calibration samples)."""
    model = fp32_model()
    samples = calibration_samples(model, random=SAMPLES, seed=3)
    out = quantize_model(model, tmp_path_factory.mktemp("sqnr") / "int8.onnx", calibration=samples)
    return model, out, samples


def test_report_agrees_with_float64(small: tuple) -> None:
    model, path, samples = small
    quantized = onnx.load(str(path))
    rows, skipped = layer_sqnr(model, quantized, samples)
    assert skipped == [] and [r.tensor for r in rows] == ["x", "r1", "c2", "f", "rm", "y"]
    want = float64_figures(model, quantized, samples)
    for r in rows:
        accumulated, alone = want[r.tensor]
        assert r.bits == 8 and 20 < r.sqnr_db < 60, r
        assert abs(r.sqnr_db - accumulated) < 0.01, (r, accumulated)
        assert abs(r.alone_db - alone) < 0.01, (r, alone)
    by = {r.tensor: r for r in rows}
    assert by["x"].alone_db == by["x"].sqnr_db  # the input's error is its own quantization
    assert by["y"].alone_db > by["y"].sqnr_db + 3  # the model's error accumulates; one layer's is smaller


def test_report_on_a_mixed_model(small: tuple, tmp_path: Path) -> None:
    """A tensor quantized to 16 bits shows 16 bits, and its layer alone adds less error (its input and
    weights stay 8-bit, so not 48 dB less); the figures still agree with float64."""
    model, path, samples = small
    mixed = onnx.load(str(quantize_model(model, tmp_path / "mixed.onnx", calibration=samples, int16=["c2"])))
    assert {t.name: t.dtype for t in quantized_tensors(mixed).values()}["c2"] == "int16"
    rows8 = {r.tensor: r for r in layer_sqnr(model, onnx.load(str(path)), samples)[0]}
    rows16 = {r.tensor: r for r in layer_sqnr(model, mixed, samples)[0]}
    assert rows16["c2"].bits == 16 and rows16["rm"].bits == 8
    assert rows16["c2"].alone_db > rows8["c2"].alone_db + 1
    want = float64_figures(model, mixed, samples)
    for r in rows16.values():
        assert abs(r.sqnr_db - want[r.tensor][0]) < 0.01 and abs(r.alone_db - want[r.tensor][1]) < 0.01, r
    text = sqnr_table(list(rows16.values()))
    assert text.splitlines()[0].split()[:5] == ["tensor", "op", "bits", "SQNR", "dB"] and "int16 cycles" in text


# ------------------------------------------------------------------------------ cost model
def test_layer_cycles_follow_the_datasheet_bound(small: tuple) -> None:
    """The first conv (x 1x3x16x16 -> 1x8x8x8, 3x3 kernel, stride 2): MACs 512 x 27, bytes its input,
    weights (+bias) and output once; a 16-bit input runs at the target's 16-bit rate."""
    hw = parse_target("npu").hw
    conv1 = next(x for x in layers(onnx.load(str(small[1]))) if x.op == "Conv")
    assert conv1.macs == CONV_OUT * 8 * 8 * 27 and conv1.inputs == (("x", math.prod(SHAPE)),)
    assert conv1.weight_elems == CONV_OUT * 27 + CONV_OUT and conv1.outputs == (("r1", CONV_OUT * 64),)
    elems = math.prod(SHAPE) + CONV_OUT * 64
    for precision, act, weight, dtype in (("int8", 1, 1, DType.INT8), ("int16", 2, 1, DType.INT16),
                                          ("fp16", 2, 2, DType.FP16)):
        bound = max(conv1.macs / hw.peak_macs_per_cycle(dtype),
                    (elems * act + conv1.weight_elems * weight) / hw.dram_bytes_per_cycle)
        assert layer_cycles(hw, conv1, precision) == pytest.approx(bound)
    mixed = layer_cycles(hw, conv1, {"x": "int16"})  # 16-bit input, 8-bit output
    assert layer_cycles(hw, conv1, "int8") < mixed < layer_cycles(hw, conv1, "int16")
    model_layers = layers(onnx.load(str(small[1])))
    assert model_cycles(hw, model_layers, "int8") < model_cycles(hw, model_layers, "int16")


# ------------------------------------------------------------------------------ CLI
def test_compare_two_models_cli(small: tuple, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, path, _ = small
    fp32 = tmp_path / "small.onnx"
    onnx.save(model, str(fp32))
    plot = tmp_path / "sqnr.png"
    assert main(["compare", str(fp32), str(path), "--samples", "2", "--plot", str(plot)]) == 0
    text = capsys.readouterr().out
    assert "2 input samples standard-normal (seed 0)" in text and "alone dB" in text and f"wrote {plot}" in text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    one_line_error(capsys, ["compare", str(path)], "--reference", "MODEL QUANTIZED")
    one_line_error(capsys, ["compare", str(fp32), str(path), "--reference", str(fp32)], "not both or neither")
    one_line_error(capsys, ["compare", str(fp32), str(fp32)], "no activation tensor", "tvm-npu quantize")


def test_int16_names_a_tensor(small: tuple, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"int16 tensor 'nope': the model has no activation tensor"):
        quantize_model(small[0], tmp_path / "q.onnx", random=1, int16=["nope"])
    assert not (tmp_path / "q.onnx").exists()
