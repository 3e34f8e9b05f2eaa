"""What benchmarks/vela_compare.py relies on, without tensorflow or Vela (tvm_npu.testing): reading Vela's
CSVs, pairing layers, cutting a QDQ model into quantized layers and judging each alone against onnxruntime."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_npu.testing import layerwise
from tvm_npu.testing import vela as vela_csv

PER_LAYER_HEAD = ("Original Operator,NNG Operator,Target,Staging Usage,Peak% (Staging),Op Cycles,Network% (cycles),"
                  "NPU,SRAM AC,DRAM AC,OnFlash AC,OffFlash AC,MAC Count,Network% (MAC),Util% (MAC),Name\n")


def test_vela_summary_and_per_layer_csv(tmp_path: Path) -> None:
    summary = tmp_path / "net_summary_TvmNpu.csv"
    summary.write_text("experiment,network,core_clock,dram_bandwidth,nn_macs,cycles_npu,cycles_total\n"
                       "default,net,1000000000.0,14.901161193847656,300838992,3135642,3146377\n")
    got = vela_csv.read_vela_summary(summary)
    assert got["cycles_total"] == 3146377 and got["network"] == "net"
    assert got["dram_bandwidth"] * 2**30 / got["core_clock"] == pytest.approx(16.0)

    layers = tmp_path / "net_per-layer.csv"
    layers.write_text(PER_LAYER_HEAD
                      + "Conv2D,Conv2D,NPU,1,1,152450,4.8,152450,1,1,0,0,10838016,3.6,27.7,conv1\n"
                      + "Conv2D,Relu6,NPU,0,0,0,0,0,0,0,0,0,0,0,100,conv1\n"
                      + "Pad,MemoryCopy,NPU,0,0,8361,0,8361,0,0,0,0,7296,0,0,conv1\n"
                      + "Softmax,Sub,NPU,0,0,1008,0,1008,0,0,0,0,0,0,0,sm\n"
                      + "Softmax,Mul,NPU,0,0,18,0,18,0,0,0,0,0,0,0,sm\n")
    assert vela_csv.read_vela_layers(layers) == [
        {"name": "conv1", "op": "Conv2D", "cycles": 152450, "macs": 10838016, "target": "NPU"},
        {"name": "conv1", "op": "Pad", "cycles": 8361, "macs": 7296, "target": "NPU"},
        {"name": "sm", "op": "Softmax", "cycles": 1026, "macs": 0, "target": "NPU"},
    ]

    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="cycles_total"):
        vela_csv.read_vela_summary(bad)


def test_vela_cpu_operators_from_its_log(tmp_path: Path) -> None:
    log = tmp_path / "vela.log"
    log.write_text("Network summary for net\nAccelerator configuration  Ethos_U65_256\n"
                   "CPU operators = 12 (21.4%)\nNPU operators = 44 (78.6%)\n")
    assert vela_csv.read_vela_cpu_operators(log) == 12
    log.write_text("CPU operators = 0 (0.0%)\nNPU operators = 175 (100.0%)\n")
    assert vela_csv.read_vela_cpu_operators(log) == 0
    log.write_text("Warning: vela failed\n")
    with pytest.raises(ValueError, match="CPU operators"):
        vela_csv.read_vela_cpu_operators(log)


def test_layers_pair_in_order_by_mac_count() -> None:
    ours = [SimpleNamespace(macs=m) for m in (100, 0, 50, 50, 7)]
    vela = [{"name": n, "macs": m} for n, m in (("a", 100), ("b", 50), ("pool", 0), ("c", 50), ("d", 8))]
    pairs = vela_csv.match_layers(ours, vela)
    assert {i: v["name"] for i, v in pairs.items()} == {0: "a", 2: "b", 3: "c"}


def _qdq_net() -> onnx.ModelProto:
    """int8 x -> conv (relu) -> y1 -> conv -> y2; out = y1 + y2, each tensor through Q / DQ as TFLite does."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []
    # scales as a converter writes them (not round numbers: with s_x * s_w / s_y = 0.02 exact ties are common,
    # and float32 resolves a tie either way, in onnxruntime as on the NPU)
    s_x, s_w, s_y = np.float32(0.0437), np.float32(0.0173), np.float32(0.0611)

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def q(src: str, out: str, scale: np.float32, zp: int) -> str:
        nodes.append(helper.make_node("QuantizeLinear", [src, const(f"{out}_s", np.float32(scale)),
                                                         const(f"{out}_z", np.int8(zp))], [out]))
        return out

    def dq(src: str) -> str:
        """The one DequantizeLinear of an 8-bit tensor, with its QuantizeLinear's scale and zero point."""
        nodes.append(helper.make_node("DequantizeLinear", [src, f"{src}_s", f"{src}_z"], [f"{src}_dq"]))
        return f"{src}_dq"

    def conv(src: str, out: str, relu: bool, s_in: np.float32) -> str:
        # 7-bit weights: onnxruntime's x86 integer conv (no VNNI) sums u8 x s8 products in pairs saturating
        # at int16, so with full-range weights its default level is not exact
        w = const(f"{out}_w", rng.integers(-63, 64, (4, 4, 3, 3), dtype=np.int8))
        ws = const(f"{out}_ws", np.full(4, s_w, np.float32))
        wz = const(f"{out}_wz", np.zeros(4, np.int8))
        nodes.append(helper.make_node("DequantizeLinear", [w, ws, wz], [f"{out}_wdq"], axis=0))
        b = const(f"{out}_b", rng.integers(-500, 500, 4, dtype=np.int32))
        bs = const(f"{out}_bs", np.full(4, s_in * s_w, np.float32))
        bz = const(f"{out}_bz", np.zeros(4, np.int32))
        nodes.append(helper.make_node("DequantizeLinear", [b, bs, bz], [f"{out}_bdq"], axis=0))
        nodes.append(helper.make_node("Conv", [src, f"{out}_wdq", f"{out}_bdq"], [f"{out}_f"], pads=[1, 1, 1, 1]))
        if relu:
            nodes.append(helper.make_node("Relu", [f"{out}_f"], [f"{out}_r"]))
        return q(f"{out}_r" if relu else f"{out}_f", out, s_y, -3)

    const("x_s", s_x)
    const("x_z", np.int8(1))
    y1 = dq(conv(dq("x"), "y1", relu=True, s_in=s_x))
    y2 = dq(conv(y1, "y2", relu=False, s_in=s_y))
    nodes.append(helper.make_node("Add", [y1, y2], ["sum"]))
    q("sum", "out", np.float32(0.0893), 2)
    graph = helper.make_graph(nodes, "qdq_net", [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.INT8, [1, 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return onnx.shape_inference.infer_shapes(model)


def test_quantized_layers_start_at_8_bit_tensors() -> None:
    layers = layerwise.quantized_layers(_qdq_net())
    assert [(x.output, x.inputs, x.op) for x in layers] == [
        ("y1", ("x",), "Conv"), ("y2", ("y1",), "Conv"), ("out", ("y1", "y2"), "Add")]


def test_every_layer_alone_matches_onnxruntime() -> None:
    model = _qdq_net()
    x = np.random.default_rng(1).integers(-128, 128, (1, 4, 8, 8), dtype=np.int8)
    check = layerwise.layer_check(model, "x", x, "npu")
    assert check["layers"] == 3
    for key in ("basic", "default", "ort_default_vs_basic"):
        s = check["summary"][key]
        assert s["layers_meeting"] == 3, (key, s)
        assert s["max_steps"] <= 1
