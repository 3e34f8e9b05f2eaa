"""Data movement on the NPU: views (reshape, flatten, channel shuffle), concat written in place by
its producers, and squeeze-and-excitation, on small ONNX models built with ``onnx.helper``,
against llvm, with the host calls and partitions they save."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm import relax

import tvm_npu
from tvm_npu.core.plan import PartitionPlan

H = W = 8


class _Net(OnnxNet):
    """:class:`OnnxNet` whose input is ``(1, channels, H, W)`` unless given."""

    def __init__(self, channels: int, seed: int = 0) -> None:
        super().__init__(seed)
        self.channels = channels

    def model(self, y: str, out_shape: list[int], in_shape: list[int] | None = None) -> onnx.ModelProto:
        return super().model(y, in_shape or [1, self.channels, H, W], out_shape, name="data_movement")


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


def _slice(net: _Net, x: str, starts: list[int], ends: list[int], axes: list[int],
           steps: list[int] | None = None) -> str:
    ints = [net.const(v, np.int64) for v in (starts, ends, axes, *([steps] if steps else []))]
    return net.node("Slice", [x, *ints])


def roll_model(use: str = "conv") -> onnx.ModelProto:
    """conv -> ``torch.roll(shifts=(-3, 2), dims=(2, 3))`` as the exporter writes it (Slice + Concat per
    axis, Swin's cyclic shift) -> conv; or the roll as the result, or the roll plus the rows-only roll."""
    net = _Net(8)
    a = net.conv("x", 8, 8, 1)
    rows = net.node("Concat", [_slice(net, a, [3], [H], [2]), _slice(net, a, [0], [3], [2])], axis=2)
    cols = net.node("Concat", [_slice(net, rows, [W - 2], [W], [3]), _slice(net, rows, [0], [W - 2], [3])], axis=3)
    if use == "result":
        return net.model(cols, [1, 8, H, W])
    y = net.conv(cols, 8, 8, 3, relu=False) if use == "conv" else net.node("Add", [cols, rows])
    return net.model(y, [1, 8, H, W])


def strided_slice_model() -> onnx.ModelProto:
    """conv -> every second row from row 1, columns 2..7, channels 2..5 -> conv: read through a view."""
    net = _Net(8)
    a = net.conv("x", 8, 8, 1)
    s = _slice(net, a, [2, 1, 2], [6, H, 7], [1, 2, 3], [1, 2, 1])
    y = net.conv(s, 4, 8, 3, relu=False)
    return net.model(y, [1, 8, H // 2, 5])


def token_model(index: list[int] | int | None, cls_token: bool = False) -> onnx.ModelProto:
    """conv -> tokens ``(1, HW, C)`` (reshape + transpose); optionally a constant class token
    ``Expand``-ed to the batch and concatenated in front (ViT); a ``Gather`` of constant token indices
    (or none) -> Gemm / MatMul."""
    c, k = 8, 6
    net = _Net(c)
    a = net.conv("x", c, c, 1)
    t = net.node("Transpose", [net.node("Reshape", [a, net.const([1, c, H * W], np.int64)])], perm=[0, 2, 1])
    tokens = H * W
    if cls_token:
        cls = net.node("Expand", [net.const(net.rng.standard_normal((1, 1, c))), net.const([1, 1, c], np.int64)])
        t = net.node("Concat", [cls, t], axis=1)
        tokens += 1
    w = net.const(net.rng.standard_normal((c, k)) / np.sqrt(c))
    if index is None:
        return net.model(net.node("MatMul", [t, w]), [1, tokens, k])
    g = net.node("Gather", [t, net.const(index, np.int64)], axis=1)
    y = net.node("MatMul", [g, w])
    return net.model(y, [1, k] if isinstance(index, int) else [1, len(index), k])


def _copies(plan: PartitionPlan) -> list:
    return [op.spec for op in plan.ops if op.spec.name.startswith("copy")]


def test_a_roll_is_slices_copied_into_concats() -> None:
    """A roll along two axes is four blocks of the tensor rolled copied into the second concat (the
    members are views: nothing stores into two places at once); the first concat is not stored."""
    plan = _plan(_check(roll_model()))
    copies = _copies(plan)
    assert len(copies) == 4 and {s.data.view.base for s in copies} == {plan.ops[0].spec.out.name}
    assert sorted(s.data.view.offset for s in copies) == [0, W - 2, 3 * W, 3 * W + W - 2]  # block corners
    (buffer,) = plan.buffers
    assert {s.out.view.base for s in copies} == {buffer.name} and plan.ops[-1].spec.data.name == buffer.name


@pytest.mark.parametrize("use", ["result", "add"])
def test_a_roll_as_result_or_next_to_its_first_concat(use: str) -> None:
    """As the partition's result the roll's blocks are copied into the output; when the first concat is
    read too (an add of both rolls), it stays (two copies) besides the four blocks of the second."""
    plan = _plan(_check(roll_model(use)))
    copies = _copies(plan)
    if use == "result":
        assert len(copies) == 4 and [b.name for b in plan.buffers] == list(plan.outputs)
    else:
        assert len(copies) == 6 and len(plan.buffers) == 2


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_a_strided_slice_is_read_through_a_view(layout: str) -> None:
    plan = _plan(_check(strided_slice_model(), f"npu -layout-pref={layout}"))
    assert not _copies(plan)
    reader = plan.ops[-1].spec
    assert reader.data.view is not None and reader.data.view.base == plan.ops[0].spec.out.name
    if layout == "NCHW":  # channel 2, row 1, column 2 of the conv's output; rows by 2, columns by 1
        assert reader.data.view.offset == 2 * H * W + W + 2
        assert [d[0] for d in reader.data.view.dims] == [(1, 8 * H * W), (4, H * W), (H // 2, 2 * W), (5, 1)]


@pytest.mark.parametrize("index", [0, H * W - 1, -2, [1, 3, 5, 7], [9]])
def test_a_gather_of_constant_token_indices_is_a_view(index: list[int] | int) -> None:
    plan = _plan(_check(token_model(index)))
    assert not _copies(plan)
    matmul = plan.ops[-1].spec
    assert matmul.a.view is not None and matmul.a.view.base == plan.ops[0].spec.out.name


def test_a_gather_of_unevenly_spaced_indices_stays_on_the_host() -> None:
    out, ref, info = _build_and_run(token_model([0, 2, 3]))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    assert info.host_ops == {"relax.take": 1}


@pytest.mark.parametrize("gather", [None, 0])
def test_a_constant_concat_member_is_copied_from_a_constant(gather: int | None) -> None:
    """ViT's class token: a constant (an ``Expand`` of one, folded) concatenated in front of the
    tokens is copied into its slice from a constant DRAM tensor; the tokens are stored in place."""
    plan = _plan(_check(token_model(gather, cls_token=True)))
    (copy,) = _copies(plan)
    assert copy.out.view is not None and copy.out.view.offset == 0
    src = copy.data.view.base if copy.data.view is not None else copy.data.name
    assert src.startswith("k")
    tokens = plan.ops[0].spec.out.view  # the conv stores its output transposed into the concat, after the token
    assert tokens is not None and tokens.base == copy.out.view.base and tokens.offset == 8


def window_reverse_roll_model() -> onnx.ModelProto:
    """MatMul over 4 windows of 4x4 tokens -> Swin's window reverse (reshape, transpose, reshape to
    8x8) -> roll by 3 rows (Slice + Concat) -> MatMul: the slice of rows 0..4 crosses the windows."""
    c = 8
    net = _Net(c)
    a = net.node("MatMul", ["x", net.const(net.rng.standard_normal((c, c)) / np.sqrt(c))])
    r = net.node("Reshape", [a, net.const([1, 2, 2, 4, 4, c], np.int64)])
    t = net.node("Transpose", [r], perm=[0, 1, 3, 2, 4, 5])
    m = net.node("Reshape", [t, net.const([1, H, W, c], np.int64)])
    rolled = net.node("Concat", [_slice(net, m, [5], [H], [1]), _slice(net, m, [0], [5], [1])], axis=1)
    y = net.node("MatMul", [rolled, net.const(net.rng.standard_normal((c, 4)) / np.sqrt(c))])
    return net.model(y, [1, H, W, 4], [4, 16, c])


def test_a_window_reverse_sliced_across_windows_is_stored_in_order() -> None:
    """The slice does not compose with the window reverse: the MatMul stores in image order instead
    (rather than a copy of the whole image), and the two members of the roll are copied."""
    plan = _plan(_check(window_reverse_roll_model()))
    copies = _copies(plan)
    assert len(copies) == 2 and all(s.data.view.base == copies[0].data.view.base for s in copies)
    first = plan.ops[0].spec.out.view
    assert first is not None and first.base == copies[0].data.view.base and len(first.dims[1]) == 2
