"""Small exporter-style ONNX graphs with Split and Resize / Upsample nodes, and how the Split / Resize
tests run them (``tests/`` is on ``sys.path``): NPU build against llvm (``build_reference``) and
onnxruntime, within the fp32 standard."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import tvm
from onnx import helper
from onnx_net import OnnxNet
from tvm import relax

import tvm_npu
from tvm_npu.tools.quantize import quantize_model

RTOL, ATOL = 1e-4, 1e-5


def run(model: onnx.ModelProto, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, tvm_npu.BuildInfo]:
    """(NPU output, llvm output, build info)."""
    ex, info = tvm_npu.build_with_info(model, "npu")
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ref = relax.VirtualMachine(tvm_npu.build_reference(model), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    return out, ref, info


def ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def model_input(model: onnx.ModelProto) -> np.ndarray:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(1).standard_normal(shape).astype(np.float32)


def check(model: onnx.ModelProto, with_ort: bool = True) -> tvm_npu.BuildInfo:
    """No host operator, one partition, the NPU within the fp32 standard of llvm (and onnxruntime)."""
    x = model_input(model)
    out, ref, info = run(model, x)
    assert info.host_ops == {}, info.host_ops
    assert info.partitions == 1, info.partitions
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    if with_ort:
        np.testing.assert_allclose(out, ort(model, x), rtol=RTOL, atol=ATOL)
    return info


def model_at(net: OnnxNet, y: str, in_shape: list[int], out_shape: list[int], opset: int) -> onnx.ModelProto:
    """``net.model`` at ``opset`` (whose Split / Resize forms the nodes were written in)."""
    net.nodes[-1].output[0] = "y"
    for node in net.nodes:
        node.input[:] = ["y" if i == y else i for i in node.input]
    graph = helper.make_graph(net.nodes, "net", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out_shape)], net.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def split(net: OnnxNet, x: str, sizes: list[int] | None, axis: int, parts: int, opset: int) -> list[str]:
    """A Split node as each opset writes it: sizes as an attribute (< 13) or an input; equal parts by
    ``num_outputs`` (18) or by the output count."""
    outs = [net._name("split") for _ in range(parts)]
    if sizes is None:
        attrs = {"num_outputs": parts} if opset >= 18 else {}
        net.nodes.append(helper.make_node("Split", [x], outs, axis=axis, **attrs))
    elif opset >= 13:
        net.nodes.append(helper.make_node("Split", [x, net.const(np.array(sizes), np.int64)], outs, axis=axis))
    else:
        net.nodes.append(helper.make_node("Split", [x], outs, axis=axis, split=sizes))
    return outs


def upsample(net: OnnxNet, x: str, form: str, out_shape: list[int], **attrs: object) -> str:
    """x2 nearest upsampling the way exporters write it (``form``), or a Resize with ``attrs``."""
    if form == "upsample7":
        return net.node("Upsample", [x], mode="nearest", scales=[1.0, 1.0, 2.0, 2.0])
    if form == "sizes":
        return net.node("Resize", [x, "", "", net.const(np.array(out_shape), np.int64)], **attrs)
    scales = net.const(np.array(attrs.pop("scales", [1.0, 1.0, 2.0, 2.0]), np.float32))
    return net.node("Resize", [x, net.const(np.zeros(0)), scales], **attrs)


def strided_conv(net: OnnxNet, x: str, cin: int, cout: int) -> str:
    w = net.const(net.rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9))
    return net.node("Relu", [net.node("Conv", [x, w], pads=[1, 1, 1, 1], strides=[2, 2])])


def resize_after_conv(attrs: dict[str, object], in_hw: int = 6, opset: int = 13) -> onnx.ModelProto:
    """conv -> Resize(attrs, its ``scales``) -> conv."""
    scales = attrs.get("scales", [1.0, 1.0, 2.0, 2.0])
    out_hw = [int(in_hw * s) for s in scales[2:]]
    net = OnnxNet(seed=7)
    up = upsample(net, net.conv("x", 3, 8, 3), "scales", [], **dict(attrs))
    out = net.conv(up, 8, 4, 3, relu=False)
    return model_at(net, out, [1, 3, in_hw, in_hw], [1, 4, *out_hw], opset)


def quantized(model: onnx.ModelProto) -> onnx.ModelProto:
    with tempfile.TemporaryDirectory() as tmp:
        return onnx.load(str(quantize_model(model, Path(tmp) / "q.onnx", random=8, seed=0)))
