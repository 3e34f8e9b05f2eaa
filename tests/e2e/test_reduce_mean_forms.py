"""``ReduceMean`` over the spatial axes as exporters write it (issues 24 item 4 / 26), fp32 and 8-bit.

* torch / ONNX global pool: ``ReduceMean(axes=[2, 3], keepdims=1)`` on NCHW;
* DenseNet-style / Keras heads: ``ReduceMean(axes=[2, 3], keepdims=0)`` -> ``[N, C]`` -> ``Gemm``;
* tf2onnx without a transpose: NHWC input, ``Transpose`` -> ``Conv`` -> ``Transpose`` back and
  ``ReduceMean(axes=[1, 2], keepdims=0)`` -> ``MatMul``;

each at opset 13 (``axes`` an attribute) and opset 18 (``axes`` an input). The mean is a global
average pool on the NPU and the dropped axes a reshape (a view), so the head (mean -> matmul ->
softmax) is one partition with the convolution: no host operator, outputs equal to llvm's
(``tvm_npu.build_reference``) and onnxruntime's. The same models quantized by onnxruntime's
``quantize_static`` (``DequantizeLinear -> ReduceMean -> QuantizeLinear``) run the mean in 8 bits,
bit-exact with llvm and within one step of onnxruntime.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from helpers import ort_session
from onnx import TensorProto, helper, numpy_helper
from test_quantized_models import run_vm  # tests/e2e is on sys.path (pytest's prepend import)

import tvm_npu
from tvm_npu.tools.inspection import inspect_model
from tvm_npu.tools.quantize import quantize_model

pytestmark = pytest.mark.slow  # models built and run: the quick tier leaves it out

SIDE, IN_C, MID_C, CLASSES, SAMPLES = 12, 3, 16, 10, 3


def _const(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def head_model(style: str, opset: int, *, keepdims: int = 0) -> onnx.ModelProto:
    """Conv -> Relu -> ReduceMean over H, W -> classifier -> Softmax.

    ``style`` "torch": NCHW input, ``ReduceMean(axes=[2, 3])`` -> ``Gemm(transB=1)`` (with
    ``keepdims=1`` a ``Flatten`` between them). "tf2onnx": NHWC input, ``Transpose(0, 3, 1, 2)`` ->
    Conv -> Relu -> ``Transpose(0, 2, 3, 1)`` -> ``ReduceMean(axes=[1, 2])`` -> ``MatMul`` + ``Add``."""
    rng = np.random.default_rng(3)
    w = rng.normal(0, 0.3, (MID_C, IN_C, 3, 3)).astype(np.float32)
    inits = [_const("w", w), _const("b", rng.normal(0, 0.1, MID_C).astype(np.float32))]
    nodes = []
    x = "x"
    if style == "tf2onnx":
        nodes.append(helper.make_node("Transpose", ["x"], ["x_nchw"], perm=[0, 3, 1, 2]))
        x = "x_nchw"
    nodes += [helper.make_node("Conv", [x, "w", "b"], ["conv"], pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["conv"], ["act"])]
    act, axes = "act", [2, 3]
    if style == "tf2onnx":
        nodes.append(helper.make_node("Transpose", ["act"], ["act_nhwc"], perm=[0, 2, 3, 1]))
        act, axes = "act_nhwc", [1, 2]
    nodes.append(_reduce_mean(act, "mean", axes, keepdims, opset, inits))
    feats = "mean"
    if keepdims:
        nodes.append(helper.make_node("Flatten", ["mean"], ["flat"], axis=1))
        feats = "flat"
    fc = rng.normal(0, 0.5, (CLASSES, MID_C)).astype(np.float32)
    bias = rng.normal(0, 0.1, CLASSES).astype(np.float32)
    if style == "torch":
        inits += [_const("fc", fc), _const("fc_b", bias)]
        nodes.append(helper.make_node("Gemm", [feats, "fc", "fc_b"], ["logits"], transB=1))
    else:
        inits += [_const("fc", fc.T.copy()), _const("fc_b", bias)]
        nodes += [helper.make_node("MatMul", [feats, "fc"], ["mm"]),
                  helper.make_node("Add", ["mm", "fc_b"], ["logits"])]
    nodes.append(helper.make_node("Softmax", ["logits"], ["y"], axis=-1))
    shape = [1, SIDE, SIDE, IN_C] if style == "tf2onnx" else [1, IN_C, SIDE, SIDE]
    return _model(nodes, inits, f"{style}_mean_head", TensorProto.FLOAT, shape, opset)


def inputs_of(model: onnx.ModelProto, dtype: type = np.float32) -> list[np.ndarray]:
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    rng = np.random.default_rng(11)
    if dtype == np.float32:
        return [rng.normal(0, 1, shape).astype(np.float32) for _ in range(SAMPLES)]
    return [rng.integers(-128, 128, shape).astype(dtype) for _ in range(SAMPLES)]


def onnxruntime(model: onnx.ModelProto, inputs: Sequence[np.ndarray], *, basic: bool = True) -> np.ndarray:
    session = ort_session(model, basic=basic)
    return np.concatenate([session.run(None, {"x": x})[0] for x in inputs])


def int8_mean_model(layout: str, opset: int, *, keepdims: int = 0) -> onnx.ModelProto:
    """The TFLite -> tf2onnx form of an 8-bit head: int8 ``x`` -> DequantizeLinear -> ReduceMean over H, W
    (``Mean``, ``keepdims=0``) -> QuantizeLinear -> DequantizeLinear -> MatMul with per-column int8 weights
    + int32 bias -> QuantizeLinear: int8 in, int8 out (nothing the model needs on the host)."""
    rng = np.random.default_rng(5)
    s_w = rng.uniform(0.002, 0.004, CLASSES).astype(np.float32)
    s_m = np.float32(0.011)
    inits = [_const("s_x", np.float32(0.047)), _const("z_x", np.int8(-7)),
             _const("s_m", s_m), _const("z_m", np.int8(-3)),
             _const("w", rng.integers(-127, 128, (MID_C, CLASSES)).astype(np.int8)), _const("s_w", s_w),
             _const("z_w", np.zeros(CLASSES, np.int8)),
             _const("b", rng.integers(-2000, 2000, CLASSES).astype(np.int32)), _const("s_b", s_m * s_w),
             _const("z_b", np.zeros(CLASSES, np.int32)),
             _const("s_y", np.float32(0.05)), _const("z_y", np.int8(4))]
    axes = [1, 2] if layout == "NHWC" else [2, 3]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s_x", "z_x"], ["xf"])]
    nodes.append(_reduce_mean("xf", "mf", axes, keepdims, opset, inits))
    feats = "m"
    nodes.append(helper.make_node("QuantizeLinear", ["mf", "s_m", "z_m"], ["m"]))
    if keepdims:
        nodes.append(helper.make_node("Flatten", ["m"], ["m2"], axis=1))
        feats = "m2"
    nodes += [helper.make_node("DequantizeLinear", [feats, "s_m", "z_m"], ["ff"]),
              helper.make_node("DequantizeLinear", ["w", "s_w", "z_w"], ["wf"], axis=1),
              helper.make_node("DequantizeLinear", ["b", "s_b", "z_b"], ["bf"], axis=0),
              helper.make_node("MatMul", ["ff", "wf"], ["mm"]), helper.make_node("Add", ["mm", "bf"], ["yf"]),
              helper.make_node("QuantizeLinear", ["yf", "s_y", "z_y"], ["y"])]
    shape = [1, SIDE, SIDE, MID_C] if layout == "NHWC" else [1, MID_C, SIDE, SIDE]
    return _model(nodes, inits, f"int8_mean_{layout}", TensorProto.INT8, shape, opset)


def _reduce_mean(src: str, dst: str, axes: list[int], keepdims: int, opset: int,
                 inits: list[onnx.TensorProto]) -> onnx.NodeProto:
    """``ReduceMean`` as each opset writes it: ``axes`` an attribute before 18, an input from 18 on."""
    if opset >= 18:
        inits.append(_const(f"{dst}_axes", np.array(axes, np.int64)))
        return helper.make_node("ReduceMean", [src, f"{dst}_axes"], [dst], keepdims=keepdims)
    return helper.make_node("ReduceMean", [src], [dst], axes=axes, keepdims=keepdims)


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], name: str, elem: int, shape: list[int],
           opset: int) -> onnx.ModelProto:
    """The checked model from input ``x`` of ``shape`` to ``y`` of ``[1, CLASSES]``, both of type ``elem``."""
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", elem, shape)],
                              [helper.make_tensor_value_info("y", elem, [1, CLASSES])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def within_a_step(got: np.ndarray, want: np.ndarray) -> None:
    """Within one quantization step of onnxruntime on >= 99.9% of the elements."""
    steps = np.abs(got.astype(np.int64) - want.astype(np.int64))
    assert (steps <= 1).mean() >= 0.999, f"{(steps > 1).sum()} of {steps.size} elements more than 1 step apart"


# ---- fp32 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("style", ["torch", "tf2onnx"])
def test_float_mean_head_is_one_npu_partition(style: str, keepdims: int, opset: int) -> None:
    model = head_model(style, opset, keepdims=keepdims)
    executable, info = tvm_npu.build_with_info(model, "npu")
    assert info.host_ops == {} and info.partitions == 1, (info.host_ops, info.partitions)
    assert info.npu_ops.get("relax.mean") == 1, info.npu_ops
    inputs = inputs_of(model)
    npu = run_vm(executable, inputs)
    np.testing.assert_allclose(npu, run_vm(tvm_npu.build_reference(model), inputs), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(npu, onnxruntime(model, inputs), rtol=1e-4, atol=1e-5)


def test_disabled_rewrite_leaves_the_mean_on_the_host() -> None:
    """``npu.canonicalize.spatial-mean`` is the switch (``PassContext(disabled_pass=...)``)."""
    import tvm

    model = head_model("torch", 13)
    with tvm.transform.PassContext(disabled_pass=["npu.canonicalize.spatial-mean"]):
        _, info = tvm_npu.build_with_info(model, "npu")
    assert info.host_ops == {"relax.mean": 1}, info.host_ops


# ---- 8-bit -----------------------------------------------------------------------------------------


def output_steps(model: onnx.ModelProto, y: np.ndarray) -> np.ndarray:
    """An 8-bit output as it is; a float output dequantized by the model's last DequantizeLinear in its steps."""
    if y.dtype != np.float32:
        return y
    last = model.graph.node[-1]
    assert last.op_type == "DequantizeLinear" and last.output[0] == model.graph.output[0].name
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    scale, zero = (float(inits[name]) for name in last.input[1:3])
    return (np.round(y / np.float32(scale)) + zero).astype(np.int64)


def check_int8(model: onnx.ModelProto, host_ops: dict[str, int]) -> tvm_npu.BuildInfo:
    """No host operator but ``host_ops``; NPU == llvm bit for bit; within a step of onnxruntime."""
    executable, info = tvm_npu.build_with_info(model, "npu")
    assert info.host_ops == host_ops, info.host_ops
    assert "relax.mean" not in info.npu_ops, f"the 8-bit mean ran in float: {info.npu_ops}"
    dtype = np.int8 if model.graph.input[0].type.tensor_type.elem_type == TensorProto.INT8 else np.float32
    inputs = inputs_of(model, dtype)
    npu = run_vm(executable, inputs)
    llvm = run_vm(tvm_npu.build_reference(model), inputs)
    assert npu.dtype == llvm.dtype and np.array_equal(npu, llvm), "NPU vs llvm differ"
    for basic in (True, False):
        within_a_step(output_steps(model, npu), output_steps(model, onnxruntime(model, inputs, basic=basic)))
    assert len(np.unique(npu)) > 3, "outputs all alike check nothing"
    return info


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_int8_mean_runs_in_eight_bits(layout: str, keepdims: int, opset: int) -> None:
    info = check_int8(int8_mean_model(layout, opset, keepdims=keepdims), {})
    assert info.partitions == 1, info.partitions


@pytest.mark.parametrize("style", ["torch", "tf2onnx"])
def test_quantize_static_head(style: str, tmp_path: object) -> None:
    """onnxruntime's ``quantize_static`` leaves ReduceMean in float between DequantizeLinear and
    QuantizeLinear; the mean, the classifier and the softmax run in one NPU partition. Nothing is left on the
    host: the fp32 input's quantize and the softmax output's, whose scales are not powers of two, multiply
    by their reciprocals on the NPU (issue 24; exactly ONNX's quotient, relay_patterns/qdivide.py)."""
    model = onnx.load(quantize_model(head_model(style, 13), tmp_path / "q.onnx", random=8, seed=1))
    assert "ReduceMean" in [n.op_type for n in model.graph.node]
    info = check_int8(model, {})
    assert info.npu_ops.get("relax.matmul") == 1, info.npu_ops
    npu = [op for op in inspect_model(model).operators if op.where == "NPU"]
    head = {op.partition for op in npu if "matmul" in op.op or op.op == "softmax"}
    mean = {op.partition for op in npu if op.op.startswith("conv2d")}  # the conv and the mean's window sum
    assert len(head) == 1 and head == mean, [(op.op, op.partition) for op in npu]
