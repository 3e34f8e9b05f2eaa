"""Layer norms of 16-bit and fp16 models on the NPU (issue 28, item 4).

A transformer quantized with 16-bit activations (onnxruntime's quantizer puts a QDQ pair on every tensor)
leaves each step of a tf2onnx layer norm a float chain of its own between a 16-bit DQ and Q; two of them
stayed on the host: ``sqrt`` (now a ``VPOW`` by 0.5, the correctly rounded root) and ``inv_std * gamma``, an
outer product of a per-row and a per-column value (now read through ``broadcast_to``,
:mod:`tvm_npu.relay_patterns.broadcast_operands`). ``-precision=fp16`` left the layer norms in fp16, which the
row-wise operator does not take (now computed in float32 between two casts,
:mod:`tvm_npu.relay_patterns.fp16_rowwise`).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax
from tvm_npu.relay_patterns import precision_passes
from tvm_npu.relay_patterns.broadcast_operands import broadcast_operands
from tvm_npu.relay_patterns.canonicalize import canonicalize_passes

import tvm_npu
from tvm_npu.compiler.driver import load_model
from tvm_npu.config import Precision
from tvm_npu.testing.corpus import Net, _layer_norm_tf
from tvm_npu.tools.quantize import quantize_model
from tvm_npu.tools.sqnr import OrtModel, quantized_tensors

ROWS, C = 16, 64


def _inputs(count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.normal(0, 1, (1, ROWS, C)) * (1 + i)).astype(np.float32) for i in range(count)]


def _run(executable: relax.VMExecutable, inputs: list[np.ndarray]) -> list[np.ndarray]:
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return [vm["main"](tvm.runtime.tensor(x)).numpy() for x in inputs]


def _built(model: onnx.ModelProto, target: str) -> relax.VMExecutable:
    """Built with no HostFallbackWarning, nothing on the host, one partition."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", tvm_npu.HostFallbackWarning)
        executable, info = tvm_npu.build_with_info(model, target)
    assert info.host_ops == {} and info.host_macs == 0 and info.partitions == 1, (info.host_ops, info.partitions)
    return executable


def _layer_norm_model(matmuls: bool) -> onnx.ModelProto:
    """Keras' layer norm as tf2onnx writes it over (1, 16, 64) (``matmuls``: between two projections)."""
    net = Net(5)
    x = net.op("MatMul", "x", net.weights((C, C), C)) if matmuls else "x"
    y = _layer_norm_tf(net, x, C)
    return net.model(net.op("MatMul", y, net.weights((C, C), C)) if matmuls else y, (1, ROWS, C), "layer_norm")


def test_16_bit_qdq_layer_norm_runs_on_the_npu(tmp_path: Path) -> None:
    """All-int16 QDQ layer norm (onnxruntime's quantizer): 0 host operators, bit-exact with llvm, within a step
    of onnxruntime."""
    fp32 = _layer_norm_model(matmuls=False)
    calibration = _inputs(4, seed=1)
    samples = [{"x": x} for x in calibration]
    int8 = quantize_model(fp32, tmp_path / "int8.onnx", calibration=samples, int16=[])
    every = [t.name for t in quantized_tensors(onnx.load(str(int8))).values()]
    model = onnx.load(str(quantize_model(fp32, tmp_path / "int16.onnx", calibration=samples, int16=every)))
    ops = {n.op_type for n in model.graph.node}
    assert {"Sqrt", "Mul", "ReduceMean"} <= ops and len(every) > 10, ops
    inputs = _inputs(3)
    got = _run(_built(model, "npu"), inputs)
    want = _run(tvm_npu.build_reference(model), inputs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    out = model.graph.output[0].name
    scale = next(float(onnx.numpy_helper.to_array(i)) for n in model.graph.node if out in n.output
                 for i in model.graph.initializer if i.name == n.input[1])
    ort = OrtModel(model)
    steps = max(float(np.abs(g - ort.run({"x": x})[out]).max()) / scale for g, x in zip(got, inputs, strict=True))
    assert steps <= 1 + 1e-3, steps


def test_float_sqrt_is_the_correctly_rounded_root() -> None:
    """``sqrt`` alone (no row reduction around it) on the NPU: bit for bit llvm's over values from 1e-6 to 1e6."""
    net = Net(0)
    model = net.model(net.op("Sqrt", net.op("Mul", "x", "x")), (1, ROWS, C), "sqrt")
    rng = np.random.default_rng(2)
    inputs = [(10.0 ** rng.uniform(-3, 3, (1, ROWS, C))).astype(np.float32) for _ in range(2)]
    for g, w in zip(_run(_built(model, "npu"), inputs), _run(tvm_npu.build_reference(model), inputs), strict=True):
        np.testing.assert_array_equal(g, w)


def _converted(model: onnx.ModelProto) -> tvm.IRModule:
    """The NPU build's module before layout planning: canonicalised (the layer norm one operator) and converted
    to fp16."""
    with tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential([*canonicalize_passes(), *precision_passes(Precision.FP16)])(
            load_model(model))


def test_precision_fp16_layer_norm_runs_on_the_npu() -> None:
    """``-precision=fp16``: projections in fp16, the layer norm between them in float32 on the NPU; close to llvm
    running the same conversion (float32 norms, one fp16 rounding apart) and to the fp32 model."""
    model = _layer_norm_model(matmuls=True)
    inputs = _inputs(3)
    got = _run(_built(model, "npu -precision=fp16"), inputs)
    same = _run(relax.build(_converted(model), target="llvm"), inputs)
    fp32 = _run(tvm_npu.build_reference(model), inputs)
    for g, s, w in zip(got, same, fp32, strict=True):
        assert np.linalg.norm(g - s) <= 2.0**-9 * np.linalg.norm(s)
        assert np.linalg.norm(g - w) <= 1e-2 * np.linalg.norm(w)


def _layer_norm_dtypes(mod: tvm.IRModule) -> list[str]:
    found = []
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, lambda e: found.append(str(e.ty.dtype)) if isinstance(
                e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "relax.nn.layer_norm" else None)
    return found


def test_precision_fp16_keeps_layer_norm_in_float32() -> None:
    """After the fp16 conversion the layer norm computes in float32 (TVM's policy had left it fp16)."""
    assert _layer_norm_dtypes(_converted(_layer_norm_model(matmuls=True))) == ["float32"]


@pytest.mark.parametrize(("shapes", "broadcast"), [
    (((1, ROWS, 1), (C,)), True),  # an outer product: the tensor read through broadcast_to
    (((1, ROWS, C), (C,)), False),  # per-channel operand: as it was
    (((1, ROWS, C), (1, ROWS, 1)), False),  # the data has the result's shape
])
def test_broadcast_operands_only_for_outer_products(shapes: tuple, broadcast: bool) -> None:
    x = relax.Var("x", relax.TensorType(shapes[0], "float32"))
    other = relax.const(np.ones(shapes[1], np.float32)) if len(shapes[1]) == 1 else relax.Var(
        "y", relax.TensorType(shapes[1], "float32"))
    params = [x] if len(shapes[1]) == 1 else [x, other]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(relax.op.multiply(x, other))
        bb.emit_func_output(out)
    mod = broadcast_operands(bb.get())
    text = mod.script()
    assert ("R.broadcast_to(x" in text) == broadcast, text
    tvm.ir.assert_structural_equal(mod["main"].ret_ty, bb.get()["main"].ret_ty)
