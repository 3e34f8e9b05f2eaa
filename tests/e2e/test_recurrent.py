"""Recurrent layers on the NPU: ONNX ``LSTM`` / ``GRU`` / ``RNN`` unrolled by the import
(``npu.import.recurrent``) run with no host operator in one partition: the input projection of all steps is
one matmul, each step's recurrent matmul takes the projection's rows as its epilogue's add, the gate
functions, cell and state updates are elementwise operators (fused into each other) reading the gates
through strided views, and the states go straight into Y's concat. Against llvm (``build_reference``) and
onnxruntime within rtol 1e-4 / atol 1e-5; short sequences keep it fast."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from recurrent_net import Layer, crnn, expected, feeds, layer_model, onnxruntime_outputs  # tests/ is on sys.path
from tvm import relax

import tvm_npu

RTOL, ATOL = 1e-4, 1e-5


def _outputs(ex: relax.VMExecutable, values: dict[str, np.ndarray]) -> list[np.ndarray]:
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*(tvm.runtime.tensor(v) for v in values.values()))
    return [o.numpy() for o in (out if isinstance(out, tvm.ir.Array | tuple | list) else [out])]


def _check(model: onnx.ModelProto, want: list[np.ndarray], values: dict[str, np.ndarray]) -> tvm_npu.BuildInfo:
    """NPU == llvm == onnxruntime (``want``); nothing on the host, one partition."""
    ex, info = tvm_npu.build_with_info(model, "npu")
    got = _outputs(ex, values)
    ref = _outputs(tvm_npu.build_reference(model), values)
    assert info.host_ops == {}, info.host_ops
    assert info.partitions == 1, info.partitions
    assert len(got) == len(ref) == len(want)
    for g, r, w in zip(got, ref, want, strict=True):
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    return info


def _count(info: tvm_npu.BuildInfo, spec: str) -> int:
    """NPU operators after fusion of one spec type (``ElementwiseSpec``: gate functions and state updates)."""
    return sum(type(op.spec).__name__ == spec for plan in info.plans for op in plan.ops)


CASES = [
    Layer("LSTM", "forward"),
    Layer("LSTM", "reverse", initial=True, layout=1),
    Layer("LSTM", "bidirectional", initial=True),
    Layer("GRU", "forward", linear_before_reset=1),
    Layer("GRU", "reverse", initial=True, layout=1),
    Layer("GRU", "bidirectional", initial=True, linear_before_reset=1),
    Layer("RNN", "forward", initial=True),
    Layer("RNN", "reverse", layout=1),
    Layer("RNN", "bidirectional"),
    Layer("LSTM", "forward", peepholes=True, clip=0.8, initial=True),
]


@pytest.mark.parametrize("c", CASES, ids=lambda c: f"{c.op}-{c.direction}-init{int(c.initial)}-layout{c.layout}"
                         + ("-peep-clip" if c.peepholes else ""))
def test_layer_on_the_npu(c: Layer) -> None:
    model = layer_model(c)
    values = feeds(model)
    info = _check(model, expected(c, values), values)
    matmuls = _count(info, "MatmulSpec")
    per_step = 2 if c.op == "GRU" and not c.linear_before_reset else 1
    assert matmuls == 1 + per_step * c.dirs * (c.steps - (not c.initial))
    if c.op == "LSTM" and not c.peepholes:  # sigmoid(i, o, f); tanh(c) * i; f * C + that; tanh(C) * o at most
        assert _count(info, "ElementwiseSpec") <= c.dirs * 4 * c.steps
    assert _count(info, "PoolSpec") <= c.dirs  # copies of last states that are members of Y's concat too


def test_crnn_captcha_model() -> None:
    """The torch-style CRNN (conv features -> bidirectional LSTM over 8 columns -> classifier): one partition,
    no host operator; the LSTM's gates are at most 4 fused elementwise operators per step and direction (3 at
    the first step, whose state is zero, and at the last, whose cell state only its output reads)."""
    model = crnn(width=32)
    values = feeds(model)
    info = _check(model, onnxruntime_outputs(model, values), values)
    assert _count(info, "ElementwiseSpec") == 2 * (4 * 8 - 2)
