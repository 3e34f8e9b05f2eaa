"""QDQ concats whose inputs have their own scales (relay_patterns.quantized): 8-bit on the NPU.

``quantize(concat(dequantize(x_i, s_i, z_i)), s_y, z_y)`` becomes a concat of 8-bit tensors, each
input not already at ``(s_y, z_y)`` requantised on the NPU. Checked against onnxruntime on every 8-bit
value of the inputs (its DequantizeLinear -> QuantizeLinear divides where the NPU multiplies: the
multiplier is chosen to agree), and in a small network (two convolutions with their own output scales
concatenated, then a convolution): nothing but the model's input quantization on the host, the NPU
equal to llvm, and onnxruntime's integers.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
import tvm
from helpers import ort_session
from onnx import TensorProto, helper, numpy_helper
from tvm import relax
from tvm_npu.relay_patterns import qdq_to_integer

import tvm_npu
from tvm_npu.compiler.driver import load_model
from tvm_npu.core.artifact import LayerInfo

ELEM = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8}
#: A scale pair whose multiplier ``float32(s_i) / float32(s_y)`` rounds one value differently from
#: onnxruntime's division (x - z_i = 56: exactly 70.5 by the division, to even 70; 70.500008 by the
#: multiplier, 71): found by a seeded search over random scales; the next float32 multiplier down agrees
#: on all 256 values.
TIE_SCALE, TIE_ZERO, TIE_OUT_SCALE, TIE_OUT_ZERO = 0.052920516580343246, -85, 0.04203615337610245, -17
#: onnxruntime's integer kernels against the NPU in the network (the task's bar; measured: all equal).
MIN_SAME = 0.999


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], output: onnx.ValueInfoProto,
           initializers: dict[str, np.ndarray]) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(v, k) for k, v in initializers.items()]
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, [output], inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def _params(inits: dict[str, np.ndarray], name: str, scale: float, zero: int, dtype: str) -> list[str]:
    inits[f"{name}_s"] = np.array(scale, np.float32)
    inits[f"{name}_z"] = np.array(zero, dtype)
    return [f"{name}_s", f"{name}_z"]


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray], *, basic: bool) -> np.ndarray:
    return ort_session(model, basic=basic).run(None, feeds)[0]


def _build_and_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]
                   ) -> tuple[np.ndarray, np.ndarray, dict[str, int], list[LayerInfo]]:
    """(NPU output, llvm output, host operator calls, NPU layers)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", tvm_npu.HostFallbackWarning)  # a region left in float fails here
        executable, info = tvm_npu.build_with_info(model, "npu")
    args = [tvm.runtime.tensor(feeds[i.name]) for i in model.graph.input]
    with tvm_npu.profile() as prof:
        npu = relax.VirtualMachine(executable, tvm.cpu())["main"](*args).numpy()
    llvm = relax.VirtualMachine(tvm_npu.build_reference(model), tvm.cpu())["main"](*args).numpy()
    return npu, llvm, dict(info.host_ops), [layer for run in prof.runs for layer in run.artifact.layers]


def _steps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    return np.abs(got.astype(np.int64) - want.astype(np.int64))


# ------------------------------------------------------------------ every value, against onnxruntime
#: (type, scale, zero point) per concat input; the output's are those of the first input.
RANK4_INT8 = [("int8", TIE_OUT_SCALE, TIE_OUT_ZERO),  # at the output's parameters: used as it is
              ("int8", TIE_SCALE, TIE_ZERO),  # the multiplier that differs from onnxruntime's division
              ("uint8", 0.0371, 131),  # another type: requantised too
              ("int8", 0.0093, 0)]  # no zero point: no bias
RANK3_UINT8 = [("uint8", 0.0215, 120),
               ("int8", 0.0402, -3),  # into another type
               ("uint8", 0.0215, 112)]  # the output's scale, another zero point


@pytest.mark.parametrize("members,shape", [(RANK4_INT8, (1, 2, 8, 16)), (RANK3_UINT8, (2, 8, 16))],
                         ids=["rank4-int8", "rank3-uint8"])
def test_requantised_members_equal_onnxruntime_on_every_value(members: list[tuple[str, float, int]],
                                                              shape: tuple[int, ...]) -> None:
    """Each input holds all 256 values of its type; the NPU, llvm and onnxruntime (both levels) agree
    on every one, and everything runs on the NPU (a rank-3 tensor as a 4-D view)."""
    out_dtype, sy, zy = members[0]
    inits: dict[str, np.ndarray] = {}
    nodes, inputs, feeds = [], [], {}
    for k, (dtype, scale, zero) in enumerate(members):
        info = np.iinfo(dtype)
        feeds[f"x{k}"] = np.arange(info.min, info.max + 1).astype(dtype).reshape(shape)
        inputs.append(helper.make_tensor_value_info(f"x{k}", ELEM[dtype], list(shape)))
        nodes.append(helper.make_node("DequantizeLinear", [f"x{k}", *_params(inits, f"x{k}", scale, zero, dtype)],
                                      [f"d{k}"]))
    nodes.append(helper.make_node("Concat", [f"d{k}" for k in range(len(members))], ["cat"], axis=1))
    nodes.append(helper.make_node("QuantizeLinear", ["cat", *_params(inits, "y", sy, zy, out_dtype)], ["y"]))
    out_shape = [shape[0], shape[1] * len(members), *shape[2:]]
    model = _model(nodes, inputs, helper.make_tensor_value_info("y", ELEM[out_dtype], out_shape), inits)

    npu, llvm, host, _ = _build_and_run(model, feeds)
    assert host == {}, f"left on the host: {host}"
    assert not _steps(npu, llvm).any()
    for basic in (True, False):
        steps = _steps(npu, _onnxruntime(model, feeds, basic=basic))
        assert not steps.any(), f"basic={basic}: {int((steps > 0).sum())} values differ, at {np.argwhere(steps)}"


def test_tie_scale_pair_needs_the_chosen_multiplier() -> None:
    """The pair above is a real case: ``float32(s_i) / float32(s_y)`` as the multiplier misses onnxruntime's
    DequantizeLinear -> QuantizeLinear (which the test above matches on every value)."""
    f32 = np.float32
    d = np.arange(-128, 128) - TIE_ZERO
    division = np.clip(np.rint((d.astype(f32) * f32(TIE_SCALE)) / f32(TIE_OUT_SCALE)) + TIE_OUT_ZERO, -128, 127)
    naive = np.clip(np.rint(d.astype(f32) * (f32(TIE_SCALE) / f32(TIE_OUT_SCALE))) + TIE_OUT_ZERO, -128, 127)
    assert list(d[division != naive]) == [56]


def test_per_axis_member_stays_float_with_a_warning() -> None:
    """A member dequantized per channel has no per-tensor requantisation: the concat stays float32,
    and the warning names it and the reason."""
    inits: dict[str, np.ndarray] = {"a_s": np.array([0.02, 0.03], np.float32), "a_z": np.zeros(2, np.int8)}
    nodes = [helper.make_node("DequantizeLinear", ["a", "a_s", "a_z"], ["ad"], axis=1),
             helper.make_node("DequantizeLinear", ["b", *_params(inits, "b", 0.02, 0, "int8")], ["bd"]),
             helper.make_node("Concat", ["ad", "bd"], ["cat"], axis=1),
             helper.make_node("QuantizeLinear", ["cat", *_params(inits, "y", 0.02, 0, "int8")], ["y"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT8, [1, 2, 4, 4]) for n in ("a", "b")]
    model = _model(nodes, inputs, helper.make_tensor_value_info("y", TensorProto.INT8, [1, 4, 4, 4]), inits)
    with pytest.warns(tvm_npu.HostFallbackWarning, match=r"quantized concat .*input 0 scale is per-axis"):
        mod = qdq_to_integer(load_model(model))
    assert "relax.concat" in [c.op.name for c in _calls(mod["main"]) if c.ty.dtype == "float32"]


def _calls(func: relax.Function) -> list[relax.Call]:
    calls: list[relax.Call] = []
    relax.analysis.post_order_visit(func, lambda e: calls.append(e) if isinstance(e, relax.Call) else None)
    return calls


# ----------------------------------------------------------------------------- a small network
def _conv(nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray], name: str, x: str, c_in: int, c_out: int,
          k: int, sx: float, out: tuple[float, int], rng: np.random.Generator) -> str:
    """DQ(W) conv DQ(B) -> relu -> Q(out) -> DQ: onnxruntime's QDQ form; returns the dequantized output."""
    w = rng.integers(-127, 128, (c_out, c_in, k, k)).astype(np.int8)
    ws = rng.uniform(0.002, 0.006, c_out).astype(np.float32)
    inits[f"{name}_w"], inits[f"{name}_ws"], inits[f"{name}_wz"] = w, ws, np.zeros(c_out, np.int8)
    inits[f"{name}_b"] = rng.integers(-2000, 2000, c_out).astype(np.int32)
    inits[f"{name}_bs"], inits[f"{name}_bz"] = (np.float32(sx) * ws).astype(np.float32), np.zeros(c_out, np.int32)
    nodes += [
        helper.make_node("DequantizeLinear", [f"{name}_w", f"{name}_ws", f"{name}_wz"], [f"{name}_wd"], axis=0),
        helper.make_node("DequantizeLinear", [f"{name}_b", f"{name}_bs", f"{name}_bz"], [f"{name}_bd"], axis=0),
        helper.make_node("Conv", [x, f"{name}_wd", f"{name}_bd"], [f"{name}_c"], pads=[k // 2] * 4),
        helper.make_node("Relu", [f"{name}_c"], [f"{name}_r"]),
        helper.make_node("QuantizeLinear", [f"{name}_r", *_params(inits, f"{name}_q", *out, "int8")], [f"{name}_q"]),
        helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_q_s", f"{name}_q_z"], [f"{name}_d"]),
    ]
    return f"{name}_d"


def _network() -> onnx.ModelProto:
    """x -> Q -> {conv a (3x3), conv b (1x1)}, each with its own output scale -> Concat -> Q at conv a's
    scale -> conv c -> int8 output. Relu outputs with a zero point of -128, as onnxruntime calibrates them."""
    rng = np.random.default_rng(7)
    inits: dict[str, np.ndarray] = {}
    sx = 0.03
    nodes = [helper.make_node("QuantizeLinear", ["x", *_params(inits, "xq", sx, 0, "int8")], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xq_s", "xq_z"], ["xd"])]
    a = _conv(nodes, inits, "a", "xd", 8, 16, 3, sx, (0.041, -128), rng)
    b = _conv(nodes, inits, "b", "xd", 8, 16, 1, sx, (0.013, -128), rng)
    nodes += [helper.make_node("Concat", [a, b], ["cat"], axis=1),
              helper.make_node("QuantizeLinear", ["cat", *_params(inits, "cat_q", 0.041, -128, "int8")], ["cat_q"]),
              helper.make_node("DequantizeLinear", ["cat_q", "cat_q_s", "cat_q_z"], ["cat_d"])]
    _conv(nodes, inits, "c", "cat_d", 32, 8, 3, 0.041, (0.05, -128), rng)
    nodes.pop()  # the output is conv c's 8-bit tensor
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 24, 24])],
                  helper.make_tensor_value_info("c_q", TensorProto.INT8, [1, 8, 24, 24]), inits)


def test_network_concat_of_two_scales_runs_8bit_on_the_npu() -> None:
    """Left float32, the concat would need two DequantizeLinear and a QuantizeLinear on the host; now
    nothing runs on the host (the model's input quantize too, issue 24: a multiply by the reciprocal of its
    scale), every other layer is 8-bit, and the output is llvm's bit for bit and onnxruntime's integers."""
    model = _network()
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 8, 24, 24)).astype(np.float32) * 2}
    npu, llvm, host, layers = _build_and_run(model, feeds)
    assert host == {}, f"left on the host: {host}"
    assert [x.dtype for x in layers[1:]] == ["int8"] * (len(layers) - 1), [(x.name, x.dtype) for x in layers]
    assert not _steps(npu, llvm).any()
    integer = _steps(npu, _onnxruntime(model, feeds, basic=False))
    basic = _steps(npu, _onnxruntime(model, feeds, basic=True))
    print(f"\nNPU vs onnxruntime: integer kernels {(integer == 0).mean():.4%} identical, at most "
          f"{integer.max()} step(s); BASIC {(basic == 0).mean():.4%}, at most {basic.max()}")
    assert (integer == 0).mean() >= MIN_SAME and integer.max() <= 1
    assert basic.max() <= 1
