"""Data movement on the NPU: views (reshape, flatten, channel shuffle), concat written in place by
its producers, and squeeze-and-excitation, on small ONNX models built with ``onnx.helper``,
against llvm, with the host calls and partitions they save."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import tvm_npu
from tvm_npu.plan import PartitionPlan

H = W = 8


class _Net:
    """A small ONNX graph under construction (random weights, fixed seed)."""

    def __init__(self, channels: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.channels = channels
        self.n = 0

    def _name(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.n}"

    def const(self, values: np.ndarray, dtype: type = np.float32) -> str:
        name = self._name("w")
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs: object) -> str:
        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int = 1, relu: bool = True) -> str:
        w = self.const(self.rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k))
        b = self.const(self.rng.standard_normal(cout) * 0.1)
        y = self.node("Conv", [x, w, b], pads=[k // 2] * 4)
        return self.node("Relu", [y]) if relu else y

    def model(self, y: str, out_shape: list[int], in_shape: list[int] | None = None) -> onnx.ModelProto:
        self.nodes[-1].output[0] = "y"
        for node in self.nodes:  # the renamed result
            node.input[:] = ["y" if i == y else i for i in node.input]
        graph = helper.make_graph(
            self.nodes, "data_movement",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape or [1, self.channels, H, W])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        onnx.checker.check_model(model)
        return model


def concat_model(graph_input_member: bool = False) -> onnx.ModelProto:
    """Two branches concatenated along channels, then a conv (SqueezeNet's fire module)."""
    net = _Net(8)
    a = net.conv("x", 8, 8, 1)
    b = net.conv("x", 8, 8, 3)
    members = ["x", a, b] if graph_input_member else [a, b]
    cat = net.node("Concat", members, axis=1)
    y = net.conv(cat, 8 * len(members), 8, 1, relu=False)
    return net.model(y, [1, 8, H, W])


def shuffle_model(groups: int = 2) -> onnx.ModelProto:
    """conv -> reshape -> transpose -> reshape (ShuffleNet's channel shuffle) -> conv."""
    c = 8
    net = _Net(c)
    a = net.conv("x", c, c, 1)
    r = net.node("Reshape", [a, net.const([1, groups, c // groups, H, W], np.int64)])
    t = net.node("Transpose", [r], perm=[0, 2, 1, 3, 4])
    s = net.node("Reshape", [t, net.const([1, c, H, W], np.int64)])
    y = net.conv(s, c, c, 3, relu=False)
    return net.model(y, [1, c, H, W])


def se_model() -> onnx.ModelProto:
    """conv -> squeeze-and-excitation (pool, 1x1 conv, relu, 1x1 conv, sigmoid, channel multiply) -> conv."""
    c = 16
    net = _Net(c)
    f = net.conv("x", c, c, 3)
    p = net.node("GlobalAveragePool", [f])
    s = net.conv(p, c, c // 4, 1)
    s = net.node("Sigmoid", [net.conv(s, c // 4, c, 1, relu=False)])
    m = net.node("Mul", [f, s])
    y = net.conv(m, c, 8, 1, relu=False)
    return net.model(y, [1, 8, H, W])


def flatten_model() -> onnx.ModelProto:
    """conv -> global pool -> Flatten -> Gemm: the flatten is a view between two NPU operators."""
    net = _Net(8)
    p = net.node("GlobalAveragePool", [net.conv("x", 8, 16, 3)])
    f = net.node("Flatten", [p], axis=1)
    y = net.node("Gemm", [f, net.const(net.rng.standard_normal((10, 16)) / 4), net.const(np.zeros(10))], transB=1)
    return net.model(y, [1, 10])


def _build_and_run(model: onnx.ModelProto, target: str = "npu") -> tuple[np.ndarray, np.ndarray, tvm_npu.BuildInfo]:
    x = np.random.default_rng(1).standard_normal([d.dim_value for d in
                                                   model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    ex, info = tvm_npu.build_with_info(model, target)
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ref = relax.VirtualMachine(tvm_npu.build_reference(model), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    return out, ref, info


def output_view_model(kind: str) -> onnx.ModelProto:
    """The partition's result is a view: a flatten or a shuffle of the conv's output, or a transpose
    of the model's input."""
    net = _Net(8)
    if kind == "input":
        net.node("Relu", ["x"])  # unused: the graph only transposes its input
        y = net.node("Transpose", ["x"], perm=[0, 2, 3, 1])
        return net.model(y, [1, H, W, 8])
    a = net.conv("x", 8, 8, 1)
    if kind == "shuffle":
        r = net.node("Reshape", [a, net.const([1, 2, 4, H, W], np.int64)])
        t = net.node("Transpose", [r], perm=[0, 2, 1, 3, 4])
        y = net.node("Reshape", [t, net.const([1, 8 * H * W], np.int64)])
    else:
        y = net.node("Flatten", [a], axis=1)
    return net.model(y, [1, 8 * H * W])


def _check(model: onnx.ModelProto, target: str = "npu") -> tvm_npu.BuildInfo:
    out, ref, info = _build_and_run(model, target)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5, err_msg=target)
    assert info.host_ops == {} and info.partitions == 1, (info.host_ops, info.partitions)
    return info


def _plan(info: tvm_npu.BuildInfo):
    (plan,) = info.plans
    return plan


@pytest.mark.parametrize(("layout", "fusion"), [("NCHW", 1), ("NHWC", 1), ("NCHW", 2)])
def test_concat_producers_store_into_their_slices(layout: str, fusion: int) -> None:
    plan = _plan(_check(concat_model(), f"npu -layout-pref={layout} -fusion={fusion}"))
    (buffer,) = [b for b in plan.buffers if b.name.startswith("c")]  # the concat's output, declared once
    writers = [op.spec for op in plan.ops if op.spec.out.view is not None and op.spec.out.view.base == buffer.name]
    assert len(writers) == 2 and len(plan.ops) == 3  # the two branches write it; no concat, no copy
    assert sorted(s.out.view.offset for s in writers) == [0, 8 * H * W if layout == "NCHW" else 8]
    reader = plan.ops[-1].spec
    assert reader.data.name == buffer.name and reader.data.view is None
    if layout == "NHWC":  # the NCHW model output: the last conv stores through the transposing view
        assert reader.out.view is not None and reader.out.view.base == plan.outputs[0]
    assert PartitionPlan.from_json(plan.to_json()) == plan  # views and buffers survive the hand-over


def test_concat_copies_a_partition_input_into_its_slice() -> None:
    plan = _plan(_check(concat_model(graph_input_member=True)))
    copies = [op.spec for op in plan.ops if op.spec.name.startswith("copy")]
    assert len(copies) == 1 and copies[0].data.name.startswith("in0") and copies[0].out.view.offset == 0


@pytest.mark.parametrize(("fusion", "groups"), [(0, 2), (1, 4), (2, 2)])
def test_channel_shuffle_is_a_strided_store(fusion: int, groups: int) -> None:
    """The producer stores in shuffled order (its channel axis split in two factors); the next conv
    reads plain tiles."""
    plan = _plan(_check(shuffle_model(groups), f"npu -fusion={fusion}"))
    (out,) = [op.spec.out for op in plan.ops if op.spec.out.view is not None]  # the conv (or its relu at -fusion=0)
    assert len(out.view.dims[1]) == 2 and not out.view.contiguous
    (reader,) = [op.spec for op in plan.ops if any(t.name == out.view.base for t in op.spec.inputs)]
    assert reader.name.startswith("conv2d") and reader.data.view is None
    assert out.view.base in {b.name for b in plan.buffers}
    assert not any(op.spec.name.startswith("copy") for op in plan.ops)


def test_channel_shuffle_nhwc_keeps_the_layout_transforms_on_the_npu() -> None:
    info = _check(shuffle_model(), "npu -layout-pref=NHWC")
    assert info.layout_transforms == 0


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_squeeze_and_excitation_runs_in_one_partition(layout: str) -> None:
    plan = _plan(_check(se_model(), f"npu -layout-pref={layout}"))
    kinds = [op.spec.name.rsplit("_", 1)[0] for op in plan.ops]
    assert kinds == ["conv2d", "mean", "conv2d", "conv2d", "multiply", "conv2d"]
    scale = plan.ops[4].spec.epilogue[0]
    assert scale.broadcast.value == "channel" and scale.operand.view.base == plan.ops[3].spec.out.name


def test_flatten_between_npu_operators_is_a_view() -> None:
    plan = _plan(_check(flatten_model()))
    assert [op.spec.name.rsplit("_", 1)[0] for op in plan.ops] == ["conv2d", "mean", "matmul"]
    assert plan.ops[2].spec.a.view is not None and plan.ops[2].spec.a.view.base == plan.ops[1].spec.out.name


@pytest.mark.parametrize("kind", ["flatten", "shuffle", "input"])
def test_a_view_as_partition_result(kind: str) -> None:
    """A reshape or transpose of a tensor computed in the partition is stored by its producer straight
    into the result (through the inverse view); one of a partition input is copied."""
    plan = _plan(_check(output_view_model(kind)))
    copies = [op for op in plan.ops if op.spec.name.startswith("copy")]
    assert len(copies) == (1 if kind == "input" else 0)
    assert [b.name for b in plan.buffers] == list(plan.outputs)


def test_a_global_pool_too_big_for_the_sram_is_averaged_in_bands() -> None:
    """A 32 x 64 x 64 fp32 map (512 KiB per channel tile) with 256 KiB of SRAM: row bands, then the bands."""
    net = _Net(32)
    p = net.node("GlobalAveragePool", [net.node("Relu", ["x"])])
    model = net.model(p, [1, 32, 1, 1], [1, 32, 64, 64])
    plan = _plan(_check(model, "npu -max-sram-bytes=262144"))
    names = [op.spec.name for op in plan.ops]
    assert len(names) == 3 and names[1].endswith("_bands")
    bands = plan.ops[1].spec
    assert bands.out.shape[2] > 1 and 64 % bands.out.shape[2] == 0 and plan.ops[2].spec.data == bands.out
