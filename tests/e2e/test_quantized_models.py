"""Quantized (QDQ, QOperator) and fp16 ONNX models end to end: the NPU against llvm and onnxruntime.

* QDQ models from :func:`tvm_npu.tools.quantize.quantize_model` (tiny_convnet: int8/uint8 activations,
  per-channel/per-tensor weights; light squeezenet with random weights: int8 per-channel here, the rest
  of its matrix under ``-m benchmark``), cut before their final Softmax so the output is the last 8-bit
  tensor and every comparison counts integer steps: NPU == llvm bit for bit; NPU against onnxruntime;
  every MAC on the NPU in 8-bit and no conv/matmul on the host;
* a QOperator model (QLinearConv, QLinearAdd, QGemm, ...) against its QDQ twin on llvm;
* fp16: an fp16 model and ``-precision=fp16`` against the fp32 model on llvm;
* quantizations the integer rewrite cannot express: a HostFallbackWarning naming the operator and the
  reason, and still onnxruntime's numbers;
* ``-fusion`` and a small SRAM on a QDQ model: still bit-exact.

onnxruntime is the independent reference in two settings (measured on an AVX2 CPU without VNNI):
``ORT_ENABLE_BASIC`` runs the QDQ graph as written (float DequantizeLinear -> op -> QuantizeLinear,
the ONNX semantics); the default level fuses it into integer kernels (the rule the NPU implements), kept
int8 with ``session.qdqisint8allowed`` -- its uint8 x int8 kernels saturate on CPUs without AVX-VNNI
(off by several steps), so for uint8 activations they are printed but not asserted.
"""

from __future__ import annotations

import functools
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import tvm
from helpers import ort_session
from onnx import TensorProto, helper, numpy_helper
from onnxconverter_common import float16
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process
from tvm import relax

import tvm_npu
from tvm_npu.core.artifact import LayerInfo
from tvm_npu.models.light import light_model_path, randomize_weights, tiny_convnet
from tvm_npu.tools.quantize import Sample, quantize_model, random_samples

pytestmark = pytest.mark.slow  # models quantized, built for the NPU and llvm and run: the quick tier leaves it out

#: Inputs compared per model (outputs of 10 and 1000 values); seeded calibration samples.
SAMPLES = {"tiny_convnet": 16, "squeezenet": 2}
CALIBRATION = 8
INPUT_SEED, CALIBRATION_SEED = 100, 1
EIGHT_BIT = ("int8", "uint8")
MATMUL_LIKE = ("conv2d", "matmul")
#: onnxruntime's BASIC level computes each layer in float and rounds once at its QuantizeLinear; the
#: NPU (like onnxruntime's own integer kernels) requantises the int32 accumulator with one float32
#: multiplier. Values within float32 error of a half step round differently (1 step), and a 1-step
#: difference moves the next layers' accumulators, so the share grows with depth: measured 0-1.9 % of
#: the last tensor of tiny_convnet (5 quantized layers) and 1.3-1.7 % of squeezenet's (18 convolutions
#: deep), exactly as many as onnxruntime's integer kernels differ from its own BASIC run. Never more
#: than 1 step.
MIN_SAME_BASIC = 0.97
#: Against onnxruntime's integer kernels, the NPU's rule: a difference is a bug, except an fp32 tie (measured: none).
MIN_SAME_INTEGER = 0.999
#: fp16 against fp32: unit roundoff u = 2**-11; each layer rounds its input, weights and result to fp16
#: (relative error <= u each), so a chain of L layers is off by at most ~3Lu, in practice (independent
#: roundings) ~sqrt(3L)u: 7e-3 / 2e-3 for tiny_convnet (L=5), 2.6e-2 / 3.6e-3 for squeezenet (L=18).
#: Norm-wise relative error of the logits <= 1e-2, cosine similarity >= 0.9999 (measured: 2.9e-4 .. 4.7e-4).
FP16_REL, FP16_COS = 1e-2, 0.9999
#: The NPU against the llvm build of the same fp16 model. Both accumulate conv/matmul in fp32 and round
#: once, but the NPU build folds batch-norm into the fp16 weights (one rounding where the reference has
#: three fp16 operations per layer) and its pooling accumulates in fp32 where the reference's fp16 mean
#: does not (see test_fp16_reference_mean_is_exactly_rounded): about u per layer -> 4u (measured 5.6e-4).
FP16_SAME_MODEL_REL, FP16_SAME_MODEL_COS = 2.0**-9, 0.99999


# ----------------------------------------------------------------------------------- helpers
@functools.cache
def fp32_model(name: str) -> onnx.ModelProto:
    """tiny_convnet, or light squeezenet with seeded random weights (its own weights are constant)."""
    if name == "tiny_convnet":
        return tiny_convnet(0)
    return randomize_weights(onnx.load(str(light_model_path("squeezenet"))), 0)


def before_softmax(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` cut before its final Softmax: its output is the logits or, in a quantized model, the
    8-bit tensor the DequantizeLinear (or QLinearSoftmax) in front of the Softmax reads -- integers to
    compare, where the softmax squashes the probabilities together."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    softmax = [n for n in graph.node if n.op_type in ("Softmax", "QLinearSoftmax")][-1]
    producers = {out: n for n in graph.node for out in n.output}
    reader = softmax if softmax.op_type == "QLinearSoftmax" else producers[softmax.input[0]]
    if reader.op_type in ("DequantizeLinear", "QLinearSoftmax"):
        tensor = reader.input[0]
        elem = next(t.data_type for t in graph.initializer if t.name == reader.input[2])  # the zero point's
    else:
        tensor, elem = softmax.input[0], graph.output[0].type.tensor_type.elem_type
    needed, todo = set(), [tensor]
    while todo:
        node = producers.get(todo.pop())
        if node is not None and node.output[0] not in needed:
            needed.add(node.output[0])
            todo.extend(node.input)
    kept = [n for n in graph.node if n.output[0] in needed]
    del graph.node[:]
    graph.node.extend(kept)
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info(tensor, elem, None))
    return onnx.shape_inference.infer_shapes(model)  # fills in the output's shape where onnx knows the ops


def onnx_model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], output: onnx.ValueInfoProto,
               initializers: dict[str, np.ndarray], opset: int) -> onnx.ModelProto:
    """A checked one-graph model at ``opset`` (and the lowest IR version that allows it)."""
    inits = [numpy_helper.from_array(v, k) for k, v in initializers.items()]
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, [output], inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = helper.find_min_ir_version_for(model.opset_import)
    onnx.checker.check_model(model)
    return model


def inputs_for(model: onnx.ModelProto, count: int) -> list[np.ndarray]:
    """``count`` seeded standard-normal inputs (same values for an fp32 model and its fp16 copy)."""
    return [next(iter(s.values())) for s in random_samples(model, count, INPUT_SEED)]


def run_vm(executable: relax.VMExecutable, inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The outputs of ``main`` for each input, concatenated along the batch axis."""
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return np.concatenate([vm["main"](tvm.runtime.tensor(x)).numpy() for x in inputs])


def run_npu(executable: relax.VMExecutable, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, list[LayerInfo]]:
    """:func:`run_vm`, also returning the NPU layers of one inference (the first)."""
    vm = relax.VirtualMachine(executable, tvm.cpu())
    with tvm_npu.profile() as prof:
        outputs = [vm["main"](tvm.runtime.tensor(inputs[0])).numpy()]
    outputs += [vm["main"](tvm.runtime.tensor(x)).numpy() for x in inputs[1:]]
    return np.concatenate(outputs), [layer for run in prof.runs for layer in run.artifact.layers]


def run_onnxruntime(model: onnx.ModelProto, inputs: Sequence[np.ndarray], *, basic: bool) -> np.ndarray:
    """onnxruntime CPU over ``inputs`` (see :func:`helpers.ort_session` for ``basic``)."""
    session = ort_session(model, basic=basic)
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: x})[0] for x in inputs])


@dataclass(frozen=True)
class Agreement:
    """How many elements of two integer tensors are equal, and the largest difference in steps."""

    same: int
    total: int
    max_steps: int

    @property
    def share(self) -> float:
        return self.same / self.total

    def __str__(self) -> str:
        return f"{self.same}/{self.total} identical ({self.share:.2%}), at most {self.max_steps} step(s) apart"


def agreement(got: np.ndarray, want: np.ndarray) -> Agreement:
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    steps = np.abs(got.astype(np.int64) - want.astype(np.int64))
    return Agreement(int((steps == 0).sum()), steps.size, int(steps.max()))


def eight_bit_share(layers: Sequence[LayerInfo]) -> float:
    """The share of the NPU's MACs computed in int8/uint8."""
    macs = sum(layer.macs for layer in layers)
    assert macs > 0, "no MACs on the NPU"
    return sum(layer.macs for layer in layers if layer.dtype in EIGHT_BIT) / macs


def assert_no_host_gemm(info: tvm_npu.BuildInfo) -> None:
    """Every conv2d / matmul was offloaded: none, and no MAC, left on the host."""
    host = {op for op in info.host_ops if op in ("relax.nn.conv2d", "relax.matmul")}
    assert not host and info.host_macs == 0, f"left on the host: {host}, {info.host_macs} MACs"


def errors(got: np.ndarray, want: np.ndarray) -> tuple[float, float, float, float]:
    """(max abs error, max abs error / max |want|, norm-wise relative error, cosine similarity)."""
    g, w = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    diff = np.abs(g - w)
    norm = float(np.linalg.norm(w))
    return (float(diff.max()), float(diff.max() / np.abs(w).max()), float(np.linalg.norm(g - w)) / norm,
            float(g @ w) / (float(np.linalg.norm(g)) * norm))


# ------------------------------------------------------------------------------ QDQ models
@dataclass(frozen=True)
class Quant:
    """One quantization of one model."""

    model: str
    activations: str
    per_channel: bool

    def __str__(self) -> str:
        return f"{self.model}-{self.activations}-{'per_channel' if self.per_channel else 'per_tensor'}"


@dataclass(frozen=True)
class QuantRun:
    """A QDQ model (cut before its softmax) built for the NPU and for llvm and run on the same inputs."""

    model: onnx.ModelProto
    inputs: list[np.ndarray]
    npu: np.ndarray
    llvm: np.ndarray
    layers: list[LayerInfo]  # of one inference
    info: tvm_npu.BuildInfo


TINY_INT8 = Quant("tiny_convnet", "int8", True)


@functools.cache
def quantized(cfg: Quant) -> QuantRun:
    """Quantize (seeded random calibration), build for the NPU and llvm, run: once per configuration."""
    fp32 = fp32_model(cfg.model)
    with tempfile.TemporaryDirectory(prefix="tvm-npu-test.") as tmp:
        path = quantize_model(fp32, Path(tmp) / "q.onnx", random=CALIBRATION, seed=CALIBRATION_SEED,
                              activations=cfg.activations, per_channel=cfg.per_channel)
        model = before_softmax(onnx.load(str(path)))
    inputs = inputs_for(fp32, SAMPLES[cfg.model])
    executable, info = tvm_npu.build_with_info(model, "npu")
    npu, layers = run_npu(executable, inputs)
    return QuantRun(model, inputs, npu, run_vm(tvm_npu.build_reference(model), inputs), layers, info)


QUANT_CONFIGS = [
    *(Quant("tiny_convnet", act, pc) for act in EIGHT_BIT for pc in (True, False)),
    Quant("squeezenet", "int8", True),
    *(pytest.param(Quant("squeezenet", act, pc), marks=pytest.mark.benchmark)
      for act, pc in (("int8", False), ("uint8", True), ("uint8", False))),
]


@pytest.fixture(scope="module", params=QUANT_CONFIGS, ids=str)
def qdq(request: pytest.FixtureRequest) -> tuple[Quant, QuantRun]:
    """One configuration, quantized, built and run once for the three tests that read it."""
    return request.param, quantized(request.param)


def test_qdq_npu_is_bit_exact_with_llvm(qdq: tuple[Quant, QuantRun]) -> None:
    """The llvm reference runs the same integer rewrite, so any difference is a compiler bug."""
    cfg, run = qdq
    assert run.npu.dtype == np.dtype(cfg.activations)  # the cut left the 8-bit tensor as the output
    diff = agreement(run.npu, run.llvm)
    print(f"\n{cfg}: NPU vs llvm: {diff}")
    assert diff.same == diff.total, f"{cfg}: NPU vs llvm: {diff}"


def test_qdq_npu_matches_onnxruntime(qdq: tuple[Quant, QuantRun]) -> None:
    """An independent reference: the rewrite itself (shared with llvm) could be wrong."""
    cfg, run = qdq
    basic = agreement(run.npu, run_onnxruntime(run.model, run.inputs, basic=True))
    integer = agreement(run.npu, run_onnxruntime(run.model, run.inputs, basic=False))
    print(f"\n{cfg}: NPU vs onnxruntime BASIC: {basic}; vs default level (qdqisint8allowed=1): {integer}")
    assert basic.max_steps <= 1 and basic.share >= MIN_SAME_BASIC, f"{cfg}: NPU vs onnxruntime BASIC: {basic}"
    if cfg.activations == "int8":  # uint8: its u8s8 kernels saturate without AVX-VNNI (module docstring)
        assert integer.max_steps <= 1 and integer.share >= MIN_SAME_INTEGER, \
            f"{cfg}: NPU vs onnxruntime integer kernels: {integer}"


def test_qdq_every_mac_runs_8bit_on_the_npu(qdq: tuple[Quant, QuantRun]) -> None:
    """A region left in float would still be right (and 4x slower): the numbers cannot show it."""
    cfg, run = qdq
    share = eight_bit_share(run.layers)
    print(f"\n{cfg}: {run.info.npu_macs} MACs on the NPU, {share:.2%} in 8-bit; {run.info.host_macs} on the host")
    assert share == 1.0, f"{cfg}: {[(x.op, x.dtype, x.macs) for x in run.layers if x.dtype not in EIGHT_BIT]}"
    assert sum(layer.macs for layer in run.layers) == run.info.npu_macs  # the profile saw every NPU MAC
    assert_no_host_gemm(run.info)


SMALL_SRAM = " -max-sram-bytes=65536"


@pytest.mark.parametrize("target", [f"npu -fusion={f}{sram}" for f in (0, 2) for sram in ("", SMALL_SRAM)])
def test_qdq_bit_exact_with_fusion_and_small_sram(target: str) -> None:
    """Epilogues written to DRAM (0) or intermediates kept on chip (2), tiles cut to 64 KiB: same integers."""
    run = quantized(TINY_INT8)
    executable, info = tvm_npu.build_with_info(run.model, target)
    with tvm_npu.profile() as prof:
        npu = run_vm(executable, run.inputs)
    budget = tvm_npu.parse_target(target).hw.max_sram_bytes
    assert max(r.stats.sram_high_water for r in prof.runs) <= budget
    assert_no_host_gemm(info)
    diff = agreement(npu, run.llvm)
    assert diff.same == diff.total, f"{target}: NPU vs llvm: {diff}"


# --------------------------------------------------------------------------------- QOperator
class _Samples(CalibrationDataReader):
    def __init__(self, samples: list[Sample]) -> None:
        self._samples = iter(samples)

    def get_next(self) -> Sample | None:
        return next(self._samples, None)


def test_qoperator_model_matches_its_qdq_twin(tmp_path: Path) -> None:
    """quantize_static in QOperator format with quantize_model's settings and calibration: its convs run
    int8 on the NPU and give the QDQ model's llvm integers bit for bit."""
    twin = quantized(TINY_INT8)
    fp32 = fp32_model("tiny_convnet")
    source, prepared, output = tmp_path / "fp32.onnx", tmp_path / "prepared.onnx", tmp_path / "qop.onnx"
    onnx.save(fp32, str(source))
    quant_pre_process(source, prepared, skip_symbolic_shape=True)
    quantize_static(str(prepared), str(output), _Samples(random_samples(fp32, CALIBRATION, CALIBRATION_SEED)),
                    quant_format=QuantFormat.QOperator, per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, extra_options={"WeightSymmetric": True, "ActivationSymmetric": False})
    model = before_softmax(onnx.load(str(output)))
    assert {"QLinearConv", "QLinearAdd", "QGemm"} <= {n.op_type for n in model.graph.node}
    model.graph.output[0].type.CopyFrom(twin.model.graph.output[0].type)  # onnx cannot infer com.microsoft ops
    executable, info = tvm_npu.build_with_info(model, "npu")
    npu, layers = run_npu(executable, twin.inputs)
    assert {x.dtype for x in layers if x.op in MATMUL_LIKE} == {"int8"} and eight_bit_share(layers) == 1.0
    assert_no_host_gemm(info)
    vs_twin = agreement(npu, twin.llvm)
    vs_ort = agreement(npu, run_onnxruntime(model, twin.inputs, basic=False))
    print(f"\nQOperator tiny_convnet: NPU vs QDQ twin on llvm: {vs_twin}; vs onnxruntime (QOperator kernels): {vs_ort}")
    assert vs_twin.same == vs_twin.total, f"NPU vs QDQ twin on llvm: {vs_twin}"
    assert vs_ort.max_steps <= 1 and vs_ort.share >= MIN_SAME_INTEGER, f"NPU vs onnxruntime: {vs_ort}"


# -------------------------------------------------------------------------------------- fp16
@functools.cache
def fp32_logits(name: str) -> tuple[onnx.ModelProto, list[np.ndarray], np.ndarray]:
    """(the fp32 model cut before its softmax, inputs, its logits on llvm)."""
    model = before_softmax(fp32_model(name))
    inputs = inputs_for(model, SAMPLES[name])
    return model, inputs, run_vm(tvm_npu.build_reference(model), inputs)


def assert_fp16_on_npu(layers: Sequence[LayerInfo], info: tvm_npu.BuildInfo) -> None:
    """Every conv2d / matmul ran on the NPU, in fp16 (fp32 would be right, and 4x slower)."""
    gemms = [x for x in layers if x.op in MATMUL_LIKE]
    assert gemms and all(x.dtype == "float16" for x in gemms), [(x.op, x.dtype) for x in gemms]
    assert_no_host_gemm(info)


def assert_close(what: str, got: np.ndarray, want: np.ndarray, rel: float, cos: float) -> None:
    """Norm-wise relative error <= ``rel`` and cosine similarity >= ``cos``; prints the errors."""
    max_abs, max_rel, norm_rel, cosine = errors(got, want)
    print(f"\n{what}: max abs error {max_abs:.3g}, max rel error {max_rel:.3g}, "
          f"norm-wise rel error {norm_rel:.3g}, cosine {cosine:.8f}")
    assert norm_rel <= rel and cosine >= cos, f"{what}: rel error {norm_rel:.3g} (<= {rel}), cosine {cosine} (>= {cos})"


def test_fp16_model_runs_fp16_on_the_npu() -> None:
    """An fp16 ONNX model (what onnxconverter_common writes): fp16 on the NPU, close to the fp32 model."""
    fp32, inputs, want = fp32_logits("tiny_convnet")
    model = float16.convert_float_to_float16(fp32)
    half = [x.astype(np.float16) for x in inputs]
    executable, info = tvm_npu.build_with_info(model, "npu")
    got, layers = run_npu(executable, half)
    assert got.dtype == np.float16
    assert_fp16_on_npu(layers, info)
    assert_close("fp16 tiny_convnet on the NPU vs fp32 on llvm", got, want, FP16_REL, FP16_COS)
    assert_close("fp16 tiny_convnet on the NPU vs fp16 on llvm", got, run_vm(tvm_npu.build_reference(model), half),
                 FP16_SAME_MODEL_REL, FP16_SAME_MODEL_COS)


@pytest.mark.parametrize("name", list(SAMPLES))
def test_precision_fp16_runs_every_conv_in_fp16(name: str) -> None:
    """``-precision=fp16`` converts an fp32 model: every conv/matmul in fp16, logits close to fp32."""
    model, inputs, want = fp32_logits(name)
    executable, info = tvm_npu.build_with_info(model, "npu -precision=fp16")
    got, layers = run_npu(executable, inputs)
    assert_fp16_on_npu(layers, info)
    assert_close(f"{name} -precision=fp16 on the NPU vs fp32 on llvm", got, want, FP16_REL, FP16_COS)


def test_fp16_reference_mean_is_exactly_rounded() -> None:
    """build_reference claims the NPU's arithmetic for fp16 (fp32 accumulation); for the mean of a
    global average pool that means the exactly rounded fp16 result."""
    x = np.abs(np.random.default_rng(0).standard_normal((1, 64, 8, 8))).astype(np.float16)
    model = onnx_model([helper.make_node("GlobalAveragePool", ["x"], ["y"])],
                        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, x.shape)],
                        helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 64, 1, 1]), {}, 17)
    exact = x.astype(np.float64).mean(axis=(2, 3), keepdims=True).astype(np.float16)
    np.testing.assert_array_equal(run_vm(tvm_npu.build_reference(model), [x]), exact)


# ------------------------------------------------------------------------------- fallbacks
CIN, COUT, SIZE = 8, 16, 12


def qdq_conv(*, activations: str = "int8", per_axis_output: bool = False, bias_scale: float = 1.0) -> onnx.ModelProto:
    """x -> QuantizeLinear -> DequantizeLinear -> Conv(DQ(int8 W per channel), DQ(int32 B)) -> QuantizeLinear,
    as exporters write it; the output is the quantized tensor. ``bias_scale`` multiplies the bias's
    scale (1: x_scale * w_scale, what the integer rewrite needs)."""
    rng = np.random.default_rng(0)
    act = np.dtype(activations)
    elem = helper.np_dtype_to_tensor_dtype(act)
    span = float(np.iinfo(act).max - np.iinfo(act).min)
    x_scale, y_scale = np.float32(4 / span), np.float32(6 / span)
    w = rng.normal(0, 1 / np.sqrt(CIN * 9), (COUT, CIN, 3, 3)).astype(np.float32)
    w_scale = (np.abs(w).reshape(COUT, -1).max(axis=1) / 127).astype(np.float32)
    b_scale = (x_scale * w_scale * bias_scale).astype(np.float32)
    y_shape = (COUT,) if per_axis_output else ()
    inits = {
        "xs": np.array(x_scale), "xz": np.zeros((), act),
        "wq": np.round(w / w_scale[:, None, None, None]).astype(np.int8), "ws": w_scale, "wz": np.zeros(COUT, np.int8),
        "bq": np.round(rng.normal(0, 0.1, COUT) / b_scale).astype(np.int32), "bs": b_scale,
        "bz": np.zeros(COUT, np.int32),
        "ys": (y_scale * rng.uniform(0.8, 1.2, y_shape)).astype(np.float32), "yz": np.zeros(y_shape, act),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1] * 4),
        helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["y"], axis=1),
    ]
    return onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CIN, SIZE, SIZE])],
                      helper.make_tensor_value_info("y", elem, [1, COUT, SIZE, SIZE]), inits,
                      opset=21 if act.itemsize > 1 else 13)  # int16 Q/DQ from opset 21


@pytest.mark.parametrize(("variant", "reason"), [
    pytest.param(dict(per_axis_output=True), "the output scale is per-axis (16 values)", id="per_axis_output"),
    pytest.param(dict(bias_scale=2.0), "the bias scale is not input scale x weight scale", id="bias_scale"),
])
def test_unsupported_quantization_warns_and_stays_correct(variant: dict[str, Any], reason: str) -> None:
    """What the integer rewrite cannot express stays float: a warning naming the operator and why, and
    onnxruntime's numbers (the float QDQ semantics) -- never wrong integers."""
    model = qdq_conv(**variant)
    with pytest.warns(tvm_npu.HostFallbackWarning, match=rf"quantized conv2d .*: {re.escape(reason)}"):
        executable = tvm_npu.build(model, "npu")
    inputs = inputs_for(model, 4)
    diff = agreement(run_vm(executable, inputs), run_onnxruntime(model, inputs, basic=True))
    print(f"\n{reason}: NPU vs onnxruntime BASIC: {diff}")
    assert diff.max_steps <= 1, f"{reason}: NPU vs onnxruntime BASIC: {diff}"
