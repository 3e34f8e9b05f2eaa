"""int8, int16 and fp16 layers in one QDQ model, all on the NPU (issue 28, item 4).

A layer the quantizer leaves in float (onnxruntime's ``nodes_to_exclude``) or a tensor whose QDQ pair is
removed runs in fp16 when the model is compiled with ``-precision=fp16``
(:mod:`tvm_npu.relay_patterns.fp16_layers`), its integer neighbours as before: no host operator, one
partition; the NPU bit for bit equal to llvm running the same fp16 conversion, and the quantized output
within a step of onnxruntime running the float layers in fp32 (measured: equal). The integer-to-fp16
boundary is a vector pass of its own; its cycles are what :mod:`tvm_npu.tools.layer_cost` adds for it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper
from tvm import relax
from tvm_npu.relay_patterns import precision_passes, semantic_passes
from tvm_npu.relay_patterns.fp16_layers import fp16_float_layers

import tvm_npu
from tvm_npu.compiler.driver import load_model
from tvm_npu.config import Precision, parse_target
from tvm_npu.models.light import tiny_convnet
from tvm_npu.tools.layer_cost import layers, model_cycles
from tvm_npu.tools.quantize import quantize_model
from tvm_npu.tools.sqnr import OrtModel

FP16 = "npu -precision=fp16"


def _inputs(count: int) -> list[np.ndarray]:
    return [np.random.default_rng(10 + i).normal(0, 1, (1, 3, 64, 64)).astype(np.float32) for i in range(count)]


def _run(executable: relax.VMExecutable, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list]:
    vm = relax.VirtualMachine(executable, tvm.cpu())
    with tvm_npu.profile() as prof:
        out = [vm["main"](tvm.runtime.tensor(x)).numpy() for x in inputs]
    return out, [layer for run in prof.runs for layer in run.artifact.layers]


def _reference_fp16(model: onnx.ModelProto) -> relax.VMExecutable:
    """llvm running what the NPU build runs: the integer kernels and the same fp16 conversion."""
    with tvm.transform.PassContext(opt_level=3):
        mod = tvm.transform.Sequential([*semantic_passes(), *precision_passes(Precision.FP16)])(load_model(model))
    return relax.build(mod, target="llvm")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> onnx.ModelProto:
    """tiny_convnet: the residual block's two convs left in float (fp16), the logits in int16, the rest int8."""
    path = tmp_path_factory.mktemp("mixed") / "mixed.onnx"
    return onnx.load(str(quantize_model(tiny_convnet(), path, random=4, exclude=["b1a_c", "b1b_c"], int16=["gap"])))


@pytest.mark.slow  # an NPU and an llvm build of a small network: about 25 s on 2 busy cores
def test_mixed_int8_int16_fp16_model_runs_every_layer_on_the_npu(mixed: onnx.ModelProto) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        executable, info = tvm_npu.build_with_info(mixed, FP16)
    assert info.host_ops == {} and info.host_macs == 0 and info.partitions == 1, (info.host_ops, info.partitions)
    inputs = _inputs(3)
    got, npu_layers = _run(executable, inputs)
    gemms = {x.dtype for x in npu_layers if x.op in ("conv2d", "matmul")}
    assert gemms == {"int8", "int16", "float16"}, gemms
    reference = relax.VirtualMachine(_reference_fp16(mixed), tvm.cpu())
    want = [reference["main"](tvm.runtime.tensor(x)).numpy() for x in inputs]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    ort = OrtModel(mixed)
    step = 1 / 255  # the softmax output's int8 scale (onnxruntime's for [0, 1])
    steps = max(float(np.abs(g - ort.run({"input": x})["probs"]).max()) / step for g, x in zip(got, inputs,
                                                                                                strict=True))
    assert steps <= 1 + 1e-3, steps


def test_precision_fp16_leaves_an_int8_model_as_it_was(tmp_path: Path) -> None:
    """Every layer integer: ``-precision=fp16`` changes nothing (TVM's pass alone would turn the integer
    conv2d into an fp16 one and fail on its int32 bias)."""
    model = onnx.load(str(quantize_model(tiny_convnet(), tmp_path / "q.onnx", random=2)))
    inputs = _inputs(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain, _ = _run(tvm_npu.build(model, "npu"), inputs)
        half, half_layers = _run(tvm_npu.build(model, FP16), inputs)
    np.testing.assert_array_equal(plain[0], half[0])
    assert "float16" not in {x.dtype for x in half_layers}


def test_an_fp32_model_gets_tvms_own_pass() -> None:
    """Without integer operators the pass is ``ToMixedPrecision(out_dtype=float32)`` exactly."""
    mod = load_model(tiny_convnet())
    ours, tvms = fp16_float_layers(mod), relax.transform.ToMixedPrecision(out_dtype="float32")(mod)
    tvm.ir.assert_structural_equal(ours, tvms)


def _boundary_model(float_conv: bool, pool: bool) -> onnx.ModelProto:
    """x -> Q/DQ int8 (-> 2x2 max pool) -> conv A -> Q/DQ int8 -> conv B (int8) -> Q/DQ int8, every conv 3x3 with
    32 channels; conv A with int8 weights, or float ones (left in float: an fp16 layer between int8 tensors)."""
    rng = np.random.default_rng(0)
    c, size = 32, 32
    inits: dict[str, np.ndarray] = {"s": np.float32(0.02), "z": np.int8(0), "so": np.float32(0.05),
                                    "zo": np.int8(0)}
    n = helper.make_node
    nodes = [n("QuantizeLinear", ["x", "s", "z"], ["xq"]), n("DequantizeLinear", ["xq", "s", "z"], ["xd"])]
    if pool:
        nodes += [n("MaxPool", ["xd"], ["p"], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1]),
                  n("QuantizeLinear", ["p", "s", "z"], ["pq"]), n("DequantizeLinear", ["pq", "s", "z"], ["pd"])]
    for conv, source, quantized in (("a", "pd" if pool else "xd", not float_conv), ("b", "ad", True)):
        w = rng.normal(0, 0.1, (c, c, 3, 3)).astype(np.float32)
        if quantized:
            ws = np.full(c, np.abs(w).max() / 127, np.float32)
            inits |= {f"{conv}wq": np.round(w / ws[:, None, None, None]).astype(np.int8), f"{conv}ws": ws,
                      f"{conv}wz": np.zeros(c, np.int8)}
            nodes.append(n("DequantizeLinear", [f"{conv}wq", f"{conv}ws", f"{conv}wz"], [f"{conv}w"], axis=0))
        else:
            inits[f"{conv}w"] = w
        nodes += [n("Conv", [source, f"{conv}w"], [f"{conv}y"], pads=[1, 1, 1, 1], name=conv),
                  n("QuantizeLinear", [f"{conv}y", "so", "zo"], [f"{conv}q"]),
                  n("DequantizeLinear", [f"{conv}q", "so", "zo"], [f"{conv}d"])]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "boundary", [value("x", TensorProto.FLOAT, [1, c, size, size])],
                              [value("bd", TensorProto.FLOAT, [1, c, size, size])],
                              [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("pool", [False, True], ids=["after-the-input", "after-a-max-pool"])
def test_the_cost_model_prices_the_int8_to_fp16_boundary(pool: bool) -> None:
    """The same conv as an int8 layer and as an fp16 layer between int8 tensors: the simulated cycles of the
    two models differ by 0.5-1.0x what the cost model adds for the fp16 layer (one pass over the tensor,
    reading int8 and writing fp16; measured 0.70x after the input, 0.57x after a max pool: the compiler fuses
    the conversion into the producer's epilogue, so it pays the wider store and the vector steps but not a
    second read)."""
    hw = parse_target("npu").hw
    cycles = {}
    for float_conv in (False, True):
        vm = relax.VirtualMachine(tvm_npu.build(_boundary_model(float_conv, pool), FP16), tvm.cpu())
        with tvm_npu.profile(timing_only=True) as prof:
            vm["main"](tvm.runtime.tensor(np.zeros((1, 32, 32, 32), np.float32)))
        cycles[float_conv] = prof.total_cycles
    cost = layers(_boundary_model(True, pool))
    predicted = model_cycles(hw, cost, "int8", ["a"]) - model_cycles(hw, cost, "int8")
    measured = cycles[True] - cycles[False]
    print(f"\nint8 -> fp16 boundary: measured {measured} cycles, cost model {predicted:.0f}")
    assert 0.5 * predicted <= measured <= predicted
