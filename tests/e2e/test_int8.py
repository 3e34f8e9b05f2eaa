"""int8 convolutions and matmuls (int32 results) on the NPU are bit-exact with llvm."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

import tvm_npu


def _model(layout: str, seed: int) -> tuple[tvm.IRModule, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    shape = (1, 16, 14, 14) if layout == "NCHW" else (1, 14, 14, 16)
    bias_shape = (1, 32, 1, 1) if layout == "NCHW" else (1, 1, 1, 32)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "int8"))
    a = relax.Var("a", relax.TensorType((20, 64), "int8"))
    w = relax.const(rng.integers(-128, 128, (32, 16, 3, 3)).astype("int8"))
    b = relax.const(rng.integers(-1000, 1000, bias_shape).astype("int32"))
    wm = relax.const(rng.integers(-128, 128, (64, 48)).astype("int8"))
    with bb.function("main", [x, a]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, w, padding=(1, 1), strides=(2, 2), data_layout=layout,
                                           out_layout=layout, out_dtype="int32"))
            d = bb.emit(relax.op.nn.relu(relax.op.add(c, b)))
            m = bb.emit(relax.op.matmul(a, wm, out_dtype="int32"))
            out = bb.emit_output(relax.Tuple([d, m]))
        bb.emit_func_output(out)
    inputs = [rng.integers(-128, 128, shape).astype("int8"), rng.integers(-128, 128, (20, 64)).astype("int8")]
    return bb.get(), inputs


@pytest.mark.parametrize("target", ["npu", "npu -pipeline-stages=1 -max-sram-bytes=16384", "npu -fusion=0"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_int8_is_bit_exact(layout: str, target: str) -> None:
    mod, inputs = _model(layout, 0)
    args = [tvm.runtime.tensor(v) for v in inputs]
    with tvm_npu.profile() as prof:
        got = relax.VirtualMachine(tvm_npu.build(mod, target), tvm.cpu())["main"](*args)
    want = relax.VirtualMachine(tvm_npu.build_reference(mod), tvm.cpu())["main"](*args)
    ops = sorted(x.op for run in prof.runs for x in run.artifact.layers)
    assert "conv2d" in ops and "matmul" in ops  # both ran on the NPU
    for g, w in zip(got, want, strict=True):
        assert g.numpy().dtype == np.int32
        np.testing.assert_array_equal(g.numpy(), w.numpy())
