"""16-bit activations with int8 weights (A16W8, TFLite's 16x8) on the NPU (issue 28, items 1 and 4).

* onnxruntime ``quantize_static(activation_type=QInt16 | QUInt16, weight_type=QInt8)`` models and the TFLite
  16x8 -> tf2onnx form (:func:`converter_models.converter_model` with ``bits=16``: int16 activations with zero
  point 0, per-channel int8 weights, int32 biases): no host operator, one partition, every conv / matmul in
  16 bits on the tensor engine (int64 accumulator), the NPU bit-exact with llvm (the same integer rewrite);
* per layer against onnxruntime (:func:`tvm_npu.testing.layerwise.layer_check`: each layer compiled alone and
  fed onnxruntime's own inputs) within 1 step. onnxruntime has no 16-bit integer kernels: it runs
  DequantizeLinear -> float32 Conv -> QuantizeLinear, and at 16 bits a step is 256 times finer than at 8, so
  its float32 sums' rounding moves some values across a rounding tie: measured 99.84-100 % identical per layer
  (not the 8-bit 99.9 %); on one conv the NPU is nearer the exact (float64) result than onnxruntime is;
* 8 <-> 16-bit boundaries, a float chain between 16-bit DQ and Q (float32 on the NPU: a table is 8-bit only)
  and a model mixing int8 and int16 layers, all on the NPU (issue 28 item 4).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import onnx
import pytest
import tvm
from converter_models import INPUT, converter_model, mobilenet_v2_like, resnet50_like
from onnx import TensorProto, helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from test_quantized_models import (  # tests/e2e is on sys.path (pytest's prepend import)
    agreement,
    inputs_for,
    onnx_model,
    qdq_conv,
    run_onnxruntime,
)
from tvm import relax

import tvm_npu
from tvm_npu.core.artifact import LayerInfo
from tvm_npu.models.light import tiny_convnet
from tvm_npu.testing import layerwise
from tvm_npu.tools.quant_error import with_outputs

SIXTEEN = ("int16", "uint16")
GEMMS = ("conv2d", "matmul")
#: Per layer against onnxruntime's float path at 16 bits (module docstring): never more than a step, and
#: at least this share identical (measured minimum 99.84 %).
MIN_SAME_16 = 0.995


class _Samples(CalibrationDataReader):
    def __init__(self, shape: Sequence[int], count: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.samples = iter([{"input": rng.normal(0, 1, shape).astype(np.float32)} for _ in range(count)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.samples, None)


def a16w8(tmp_path: object, activation: QuantType, overrides: Sequence[str] = ()) -> onnx.ModelProto:
    """tiny_convnet quantized by onnxruntime: ``activation`` everywhere, or int8 with the tensors named in
    ``overrides`` in int16 (its ``TensorQuantOverrides``: a mixed model with its own conversions)."""
    src, out = f"{tmp_path}/fp32.onnx", f"{tmp_path}/q.onnx"
    onnx.save(tiny_convnet(), src)
    extra = {"TensorQuantOverrides": {t: [{"quant_type": QuantType.QInt16}] for t in overrides}} if overrides else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_static(src, out, _Samples((1, 3, 64, 64), 4, 0), quant_format=QuantFormat.QDQ,
                        activation_type=activation, weight_type=QuantType.QInt8, per_channel=True,
                        extra_options=extra)
    return onnx.shape_inference.infer_shapes(onnx.load(out))


def _step(model: onnx.ModelProto, name: str) -> float:
    """The quantization step of graph output ``name``: 1 for an integer tensor, the scale of the
    DequantizeLinear that writes a float one."""
    if model.graph.output[0].type.tensor_type.elem_type != TensorProto.FLOAT:
        return 1.0
    dq = next(n for n in model.graph.node if n.output[0] == name and n.op_type == "DequantizeLinear")
    return float(next(onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name == dq.input[1]))


def on_npu_bit_exact(model: onnx.ModelProto, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, list[LayerInfo]]:
    """Built with no HostFallbackWarning, no host operator, one partition; the NPU equal to llvm bit for bit.
    A classifier's softmax is a float32 region between 16-bit DQ and Q (the NPU's row program and llvm's
    kernel agree to float32 rounding, the fp32 standard, not bit for bit): its 16-bit logits, made an extra
    output, are compared bit for bit and the probabilities within one step. Returns the NPU's outputs (the
    model's own) and its layers."""
    logits = layerwise.logits_of(model)
    probe = with_outputs(model, [logits]) if logits else model
    with warnings.catch_warnings():
        warnings.simplefilter("error", tvm_npu.HostFallbackWarning)
        executable, info = tvm_npu.build_with_info(probe, "npu")
    assert info.host_ops == {} and info.host_macs == 0 and info.partitions == 1, (info.host_ops, info.partitions)
    with tvm_npu.profile() as prof:
        got = run_outputs(executable, inputs[:1])
    got += run_outputs(executable, inputs[1:])
    want = run_outputs(tvm_npu.build_reference(probe), inputs)
    for g, w in zip(got, want, strict=True):
        if logits:
            np.testing.assert_array_equal(g[1], w[1])
            steps = np.abs(g[0].astype(np.float64) - w[0]) / _step(model, model.graph.output[0].name)
            assert steps.max() <= 1 + 1e-3, steps.max()
        else:
            np.testing.assert_array_equal(g[0], w[0])
    return np.concatenate([g[0] for g in got]), [layer for run in prof.runs for layer in run.artifact.layers]


def run_outputs(executable: object, inputs: Sequence[np.ndarray]) -> list[list[np.ndarray]]:
    """Every output of ``main`` for each input."""
    vm = relax.VirtualMachine(executable, tvm.cpu())
    results = []
    for x in inputs:
        out = vm["main"](tvm.runtime.tensor(x))
        results.append([out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out])
    return results


def gemm_types(layers: Sequence[LayerInfo]) -> set[str]:
    return {layer.dtype for layer in layers if layer.op in GEMMS}


def assert_layers_within_a_step(model: onnx.ModelProto, x: np.ndarray) -> None:
    """Every quantized layer alone on the NPU, fed onnxruntime's inputs: within 1 step of onnxruntime."""
    report = layerwise.layer_check(model, model.graph.input[0].name, x, "npu")
    # a Pad compiled alone stays on the host (8-bit too); in the model it folds into its reader's padding
    assert set(report["layers_with_host_ops"]) <= {"Pad"}, report["layers_with_host_ops"]
    for row in report["rows"]:
        same, steps = row["basic"]
        assert steps <= 1 and same >= MIN_SAME_16, f"{row['layer']} ({row['op']}): {same:.4%} identical, {steps} steps"


# ------------------------------------------------------------------------------------- one conv
def _exact_conv(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """:func:`qdq_conv`'s output computed in float64 from its integers (the value onnxruntime's float32
    path approximates), quantized once."""
    v = {t.name: onnx.numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    info = np.iinfo(onnx.helper.tensor_dtype_to_np_dtype(model.graph.output[0].type.tensor_type.elem_type))
    xq = np.clip(np.rint((x.astype(np.float32) / np.float32(v["xs"])).astype(np.float32)) + v["xz"], info.min,
                 info.max)
    xp = np.pad((xq - v["xz"]) * v["xs"], ((0, 0), (0, 0), (1, 1), (1, 1)))
    w = (v["wq"] - v["wz"][:, None, None, None]) * v["ws"][:, None, None, None]
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # n, c, h, w, 3, 3
    y = np.einsum("nchwij,ocij->nohw", windows, w) + (v["bq"] * v["bs"])[None, :, None, None]
    ys, yz = v["ys"].reshape(-1, 1, 1) if v["ys"].ndim else v["ys"], v["yz"]
    return np.clip(np.rint(y / ys) + yz, info.min, info.max)


@pytest.mark.parametrize("activations", SIXTEEN)
def test_a16w8_conv_runs_in_16_bits_on_the_npu(activations: str) -> None:
    """One QDQ conv with 16-bit activations: a 16-bit conv2d on the NPU (no warning, nothing on the host),
    bit-exact with llvm, within a step of onnxruntime and no further from the exact result than it."""
    model = qdq_conv(activations=activations)
    inputs = inputs_for(model, 2)
    got, layers = on_npu_bit_exact(model, inputs)
    assert gemm_types(layers) == {activations}
    want = run_onnxruntime(model, inputs, basic=True)
    assert agreement(got, want).max_steps <= 1, agreement(got, want)
    exact = np.concatenate([_exact_conv(model, x) for x in inputs])
    npu_off, ort_off = int((got != exact).sum()), int((want != exact).sum())
    print(f"\n{activations}: NPU vs onnxruntime {agreement(got, want)}; off the float64 result: NPU {npu_off}, "
          f"onnxruntime {ort_off} of {exact.size}")
    assert npu_off <= ort_off


def test_boundaries_and_a_16_bit_float_chain_stay_on_the_npu() -> None:
    """float -> Q16 -> sigmoid (a float chain between 16-bit DQ and Q: float32 on the NPU) -> max pool (same
    scale, on the int16 tensor) -> Q8 (16 -> 8) -> conv (int8 x int8) -> Q16 (8 -> 16) -> add of two 16-bit
    tensors (float on the NPU, as onnxruntime computes it) -> Q16 -> DQ: everything on the NPU, bit-exact
    with llvm, within a step of onnxruntime."""
    rng = np.random.default_rng(3)
    c = 8
    w = rng.normal(0, 0.2, (c, c, 3, 3)).astype(np.float32)
    ws = (np.abs(w).reshape(c, -1).max(axis=1) / 127).astype(np.float32)
    p16 = {"s16": np.float32(8 / 65535), "z16": np.int16(0), "sa": np.float32(1 / 65535), "za": np.int16(-32768),
           "so": np.float32(12 / 65535), "zo": np.int16(100)}
    inits = {**p16, "s8": np.float32(1 / 255), "z8": np.int8(-128), "wq": np.round(w / ws[:, None, None, None])
             .astype(np.int8), "ws": ws, "wz": np.zeros(c, np.int8)}
    n = helper.make_node
    nodes = [n("QuantizeLinear", ["x", "s16", "z16"], ["xq"]), n("DequantizeLinear", ["xq", "s16", "z16"], ["xd"]),
             n("Sigmoid", ["xd"], ["sg"]), n("QuantizeLinear", ["sg", "sa", "za"], ["sq"]),
             n("DequantizeLinear", ["sq", "sa", "za"], ["sd"]),
             n("MaxPool", ["sd"], ["mp"], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1]),
             n("QuantizeLinear", ["mp", "sa", "za"], ["mq"]), n("DequantizeLinear", ["mq", "sa", "za"], ["md"]),
             n("QuantizeLinear", ["md", "s8", "z8"], ["m8"]), n("DequantizeLinear", ["m8", "s8", "z8"], ["m8d"]),
             n("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             n("Conv", ["m8d", "wd"], ["cv"], pads=[1, 1, 1, 1]), n("QuantizeLinear", ["cv", "s16", "z16"], ["cq"]),
             n("DequantizeLinear", ["cq", "s16", "z16"], ["cd"]), n("Add", ["cd", "xd"], ["ad"]),
             n("QuantizeLinear", ["ad", "so", "zo"], ["aq"]), n("DequantizeLinear", ["aq", "so", "zo"], ["y"])]
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 10, 10])],
                       helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 10, 10]), inits, opset=21)
    inputs = inputs_for(model, 2)
    got, layers = on_npu_bit_exact(model, inputs)
    assert gemm_types(layers) == {"int8"}
    steps = np.abs(got - run_onnxruntime(model, inputs, basic=True)) / p16["so"]
    assert steps.max() <= 1 + 1e-3, steps.max()


def test_a_16_bit_batch_norm_is_one_affine_step() -> None:
    """DQ16 -> BatchNormalization -> Relu -> Q16 (onnxruntime's quantizer leaves a batch norm so without
    pre-processing): one requantize_affine step, bit-exact with llvm (as float the two builds' batch norms
    round differently: 2 of 40,960 values a step apart, measured), within a step of onnxruntime."""
    rng = np.random.default_rng(0)
    c = 16
    inits = {"s": np.float32(8 / 65535), "z": np.int16(0), "g": rng.uniform(0.5, 1.5, c).astype(np.float32),
             "b": rng.normal(0, 0.1, c).astype(np.float32), "m": rng.normal(0, 0.1, c).astype(np.float32),
             "v": rng.uniform(0.5, 1.5, c).astype(np.float32), "so": np.float32(5 / 65535), "zo": np.int16(-3)}
    n = helper.make_node
    nodes = [n("QuantizeLinear", ["x", "s", "z"], ["xq"]), n("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             n("BatchNormalization", ["xd", "g", "b", "m", "v"], ["bn"]), n("Relu", ["bn"], ["r"]),
             n("QuantizeLinear", ["r", "so", "zo"], ["y"])]
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 32, 32])],
                       helper.make_tensor_value_info("y", TensorProto.INT16, [1, c, 32, 32]), inits, opset=21)
    inputs = [np.random.default_rng(k).normal(0, 2, (1, c, 32, 32)).astype(np.float32) for k in range(3)]
    got, _ = on_npu_bit_exact(model, inputs)
    assert agreement(got, run_onnxruntime(model, inputs, basic=True)).max_steps <= 1


def test_16_bit_concat_of_other_scales_and_types() -> None:
    """Concat into an int16 tensor of an int16 input at another scale and an int8 one (an 8 -> 16-bit
    boundary): each rescaled by the multiplier that reproduces onnxruntime's DequantizeLinear ->
    QuantizeLinear on all of its values; bit-exact with llvm, and equal to onnxruntime."""
    inits = {"s1": np.float32(6 / 65535), "z1": np.int16(0), "s2": np.float32(2 / 255), "z2": np.int8(3),
             "so": np.float32(7 / 65535), "zo": np.int16(11)}
    n = helper.make_node
    nodes = [n("QuantizeLinear", ["a", "s1", "z1"], ["aq"]), n("DequantizeLinear", ["aq", "s1", "z1"], ["ad"]),
             n("QuantizeLinear", ["b", "s2", "z2"], ["bq"]), n("DequantizeLinear", ["bq", "s2", "z2"], ["bd"]),
             n("Concat", ["ad", "bd"], ["cat"], axis=1), n("QuantizeLinear", ["cat", "so", "zo"], ["y"])]
    shape = [1, 8, 6, 6]
    model = onnx_model(nodes, [helper.make_tensor_value_info(t, TensorProto.FLOAT, shape) for t in "ab"],
                       helper.make_tensor_value_info("y", TensorProto.INT16, [1, 16, 6, 6]), inits, opset=21)
    rng = np.random.default_rng(1)
    feeds = {"a": rng.uniform(-3, 3, shape).astype(np.float32), "b": rng.uniform(-1, 1, shape).astype(np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("error", tvm_npu.HostFallbackWarning)
        executable, info = tvm_npu.build_with_info(model, "npu")
    assert info.host_ops == {} and info.partitions == 1, info.host_ops
    args = [tvm.runtime.tensor(feeds[t]) for t in "ab"]
    got = relax.VirtualMachine(executable, tvm.cpu())["main"](*args).numpy()
    want = relax.VirtualMachine(tvm_npu.build_reference(model), tvm.cpu())["main"](*args).numpy()
    np.testing.assert_array_equal(got, want)
    session = layerwise.ort_run(model, feeds, "basic")[0]
    np.testing.assert_array_equal(got, session)


# ------------------------------------------------------------------------------------- models
@pytest.mark.slow
@pytest.mark.parametrize("activation", [QuantType.QInt16, QuantType.QUInt16], ids=SIXTEEN)
def test_quantize_static_a16w8_model(tmp_path: object, activation: QuantType) -> None:
    """tiny_convnet (conv / bn / relu, max pool, residual add, global average pool, gemm, softmax) as
    onnxruntime's quantizer writes A16W8: all on the NPU in 16 bits, bit-exact, each layer within a step."""
    model = a16w8(tmp_path, activation)
    inputs = inputs_for(model, 3)
    _, layers = on_npu_bit_exact(model, inputs)
    assert gemm_types(layers) == {SIXTEEN[activation == QuantType.QUInt16]}
    assert_layers_within_a_step(model, inputs[0])


@pytest.mark.slow
@pytest.mark.parametrize("network", [mobilenet_v2_like, resnet50_like], ids=["mobilenet_v2", "resnet50"])
def test_tflite_16x8_form(network: object) -> None:
    """The TFLite 16x8 -> tf2onnx form (int16 NHWC input and softmax output, symmetric int16 activations,
    per-channel int8 weights, int32 biases, Pad / Clip / Squeeze + MatMul as the 8-bit form has them)."""
    model = onnx.shape_inference.infer_shapes(converter_model(network(16), bits=16))
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(7)
    inputs = [rng.integers(-32767, 32768, shape).astype(np.int16) for _ in range(3)]
    _, layers = on_npu_bit_exact(model, inputs)
    assert gemm_types(layers) == {"int16"}
    assert model.graph.input[0].name == INPUT
    assert_layers_within_a_step(model, inputs[0])


@pytest.mark.slow
def test_mixed_int8_and_int16_model_runs_every_layer_on_the_npu(tmp_path: object) -> None:
    """int8 with the stem's activation (so the max pool and the next conv), the residual branch's batch norm,
    the global average (an int8 -> int16 pool) and the logits in int16 (onnxruntime's per-tensor overrides):
    one partition, nothing on the host, convs and matmuls in both types, bit-exact, each layer within a step
    of onnxruntime."""
    model = a16w8(tmp_path, QuantType.QInt8, overrides=("stem_r", "b1b_bn", "gap", "logits"))
    kinds = {onnx.numpy_helper.to_array(t).dtype.name for t in model.graph.initializer if "zero_point" in t.name}
    assert {"int8", "int16"} <= kinds, kinds
    inputs = inputs_for(model, 3)
    _, layers = on_npu_bit_exact(model, inputs)
    assert gemm_types(layers) == {"int8", "int16"}
    assert_layers_within_a_step(model, inputs[0])
