"""ONNX Split and Resize / Upsample on the NPU (issue 26): a split's outputs are strided views of its
input (no data moves), a nearest integer upsampling is a broadcast view (its readers load each row
again through a zero stride), a linear resize the resize operator, any other nearest resize two constant
matrix products (``relay_patterns/resize.py``). Small exporter-style necks built with ``onnx.helper``, against llvm
(``build_reference``) and onnxruntime."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
import tvm
from onnx_net import OnnxNet  # tests/ is on sys.path
from resize_nets import (
    ATOL,
    RTOL,
    check,
    model_at,
    model_input,
    ort,
    quantized,
    resize_after_conv,
    run,
    split,
    strided_conv,
    upsample,
)

import tvm_npu
from tvm_npu.tools.inspection import inspect_model

# (form, opset, the Resize attributes): torch's nn.Upsample(nearest) at opset 11 (scales) and 13 (sizes)
NECKS = {
    "scales-opset11": ("scales", 11, {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                      "nearest_mode": "floor"}),
    "sizes-opset13": ("sizes", 13, {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                    "nearest_mode": "floor"}),
    "sizes-opset18-half-pixel": ("sizes", 18, {"mode": "nearest"}),
    "upsample-opset7": ("upsample7", 7, {}),
}


def _yolov8_neck(form: str, opset: int, attrs: dict[str, object]) -> onnx.ModelProto:
    """A YOLOv8-style neck: a C2f block (conv -> Split in 2 -> a conv on the second half -> Concat of
    all three -> conv), nearest x2 upsampling, Concat with the skip at the larger scale, conv."""
    net = OnnxNet(seed=3)
    skip = net.conv("x", 4, 8, 3)  # (1, 8, 16, 16)
    down = strided_conv(net, skip, 8, 16)  # (1, 16, 8, 8)
    a, b = split(net, down, None if opset >= 18 else [8, 8], 1, 2, opset)
    c2f = net.conv(net.node("Concat", [a, b, net.conv(b, 8, 8, 3)], axis=1), 24, 16, 1)
    up = upsample(net, c2f, form, [1, 16, 16, 16], **attrs)
    out = net.conv(net.node("Concat", [up, skip], axis=1), 24, 8, 3)
    return model_at(net, out, [1, 4, 16, 16], [1, 8, 16, 16], opset)


@pytest.mark.parametrize("neck", list(NECKS))
def test_yolov8_neck_runs_in_one_partition(neck: str) -> None:
    """Split and the nearest upsampling of every exporter form: 0 host calls, 1 partition, within the fp32
    standard of llvm and onnxruntime, and no operator of their own (views). Opset-7 ``Upsample`` (which
    TVM would import as a resize rounding half to even) is rewritten on import into the broadcast it is
    (``npu.import.upsample``; opset 7 has no ``Expand``: a concat of copies per upsampled axis)."""
    form, opset, attrs = NECKS[neck]
    info = check(_yolov8_neck(form, opset, dict(attrs)))
    ops = sorted(re.sub(r"_\d+$", "", op.spec.name) for p in info.plans for op in p.ops)
    if form == "upsample7":
        assert "relax.matmul" not in info.npu_ops and "relax.concat" in info.npu_ops, info.npu_ops
    else:  # five convs and one copy, the upsampled map written into its concat; the split parts are read in place
        assert ops == ["conv2d"] * 5 + ["copy"], ops


@pytest.mark.parametrize(("sizes", "axis", "opset"), [([3, 5], 1, 13), (None, 2, 18), (None, 1, 18),
                                                    ([2, 1, 3], -1, 11)])
def test_split_parts_are_views(sizes: list[int] | None, axis: int, opset: int) -> None:
    """Unequal sizes, equal parts by ``num_outputs`` (8 channels in 3: 3, 3, 2), a negative axis: each
    part, read in place by a sigmoid, is concatenated back in reverse order (so every offset matters)."""
    net = OnnxNet(seed=5)
    y = net.conv("x", 4, 8, 3)  # (1, 8, 6, 6)
    parts = split(net, y, sizes, axis, 3 if sizes is None else len(sizes), opset)
    out = net.node("Concat", [net.node("Sigmoid", [p]) for p in reversed(parts)], axis=axis)
    info = check(model_at(net, out, [1, 4, 6, 6], [1, 8, 6, 6], opset))
    assert info.npu_ops.get("relax.sigmoid", 0) == len(parts), info.npu_ops


def test_dbnet_fpn_bilinear_upsampling_and_add() -> None:
    """A DBNet-style FPN: maps at 1/1, 1/2 and 1/4 of 16x16, the smaller two bilinearly upsampled x2 and
    x4 (torch's ``interpolate(align_corners=False)``: ``half_pixel``) and added to the first, then a
    conv; one partition."""
    net = OnnxNet(seed=11)
    p1 = net.conv("x", 3, 8, 3)
    p2 = strided_conv(net, p1, 8, 8)
    p3 = strided_conv(net, p2, 8, 8)
    linear = {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}
    up2 = upsample(net, net.conv(p2, 8, 8, 1), "sizes", [1, 8, 16, 16], **linear)
    up4 = upsample(net, net.conv(p3, 8, 8, 1), "sizes", [1, 8, 16, 16], **linear)
    fused = net.node("Add", [net.node("Add", [p1, up2]), up4])
    out = net.conv(fused, 8, 4, 3, relu=False)
    info = check(model_at(net, out, [1, 3, 16, 16], [1, 4, 16, 16], 13))
    assert info.npu_ops.get("relax.image.resize2d", 0) == 2 and "relax.matmul" not in info.npu_ops, info.npu_ops


def test_forms_left_on_the_host_say_why() -> None:
    """A cubic resize stays on the host, and ``tvm-npu inspect`` says why."""
    model = resize_after_conv({"mode": "cubic", "coordinate_transformation_mode": "half_pixel"})
    x = model_input(model)
    out, ref, info = run(model, x)
    assert info.host_ops == {"relax.image.resize2d": 1} and info.partitions == 2
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    (host,) = [o for o in inspect_model(model).operators if o.where == "host"]
    assert host.reason == "cubic resize; the NPU takes nearest_neighbor and linear", host.reason


def test_disabling_the_rewrites_leaves_them_on_the_host() -> None:
    """``npu.canonicalize.split`` / ``.resize`` are the switches."""
    model = _yolov8_neck(*NECKS["sizes-opset13"][:2], dict(NECKS["sizes-opset13"][2]))
    with tvm.transform.PassContext(disabled_pass=["npu.canonicalize.split", "npu.canonicalize.resize"]):
        _, info = tvm_npu.build_with_info(model, "npu")
    assert info.host_ops == {"relax.split": 1, "relax.image.resize2d": 1}, info.host_ops


def test_int8_yolov8_neck_is_bit_exact() -> None:
    """The neck quantized (QDQ, int8, per-channel weights): the split parts and the upsampled map stay
    8-bit views between equal-scale DQ / Q; the NPU gives llvm's integers bit for bit and is within one
    step of onnxruntime."""
    model = quantized(_yolov8_neck(*NECKS["sizes-opset13"][:2], dict(NECKS["sizes-opset13"][2])))
    x = model_input(model)
    out, ref, info = run(model, x)
    assert info.host_ops == {}, info.host_ops
    assert info.partitions == 1, info.partitions
    convs = [op.spec for p in info.plans for op in p.ops if op.spec.name.startswith("conv2d")]
    assert len(convs) >= 5 and {c.data.dtype.np.name for c in convs} == {"int8"}  # (and the concat rescales)
    np.testing.assert_array_equal(out, ref)
    expected = ort(model, x)
    step = np.min(np.diff(np.unique(expected)))  # the output scale (consecutive levels of the last DQ)
    assert np.abs(out - expected).max() <= step * 1.001
    assert np.mean(out == expected) >= 0.999


def test_int8_resizes() -> None:
    """In a QDQ model a nearest resize that is no view runs as selection matrices on the dequantized
    values (exact: one weight of 1 per row), llvm's integers bit for bit; a bilinear one as the resize
    operator, whose float sums are llvm's bit for bit, so its 8-bit results are too."""
    nearest = quantized(resize_after_conv({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                             "nearest_mode": "ceil"}))
    x = model_input(nearest)
    out, ref, info = run(nearest, x)
    assert info.host_ops == {} and info.partitions == 1, info.host_ops
    np.testing.assert_array_equal(out, ref)
    linear = quantized(resize_after_conv({"mode": "linear"}))
    out, ref, info = run(linear, x)
    assert info.host_ops == {} and info.npu_ops.get("relax.image.resize2d") == 1, (info.host_ops, info.npu_ops)
    np.testing.assert_array_equal(out, ref)
