"""The per-layer report (``tvm_npu.analysis``) on small models with a known binding resource."""

from __future__ import annotations

import numpy as np
import relax_models as rm
import tvm
from tvm import relax

import tvm_npu
from tvm_npu.analysis import report


def _grouped(bias: bool) -> tvm.IRModule:
    """A 3x3 conv of 64 channels in 32 groups of 2: two channels per group keep the tensor
    engine's array mostly idle, so the tensor engine binds (its bias add is negligible). (A
    depthwise conv would run on the vector engine.)"""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64, 20, 20), "float32"))
    rng = np.random.default_rng(0)
    with bb.function("main", [x]):
        with bb.dataflow():
            w = relax.const(rng.standard_normal((64, 2, 3, 3)).astype("float32"))
            y = bb.emit(relax.op.nn.conv2d(x, w, padding=1, groups=32))
            if bias:
                y = bb.emit(relax.op.add(y, relax.const(rng.standard_normal((1, 64, 1, 1)).astype("float32"))))
            gv = bb.emit_output(y)
        bb.emit_func_output(gv)
    return bb.get()


def _profiled(mod: tvm.IRModule) -> tvm_npu.Profile:
    with tvm_npu.profile(trace=True) as prof:
        rm.run(tvm_npu.build(mod, "npu"), rm.inputs_for(mod))
    return prof


def test_an_engine_waiting_on_a_semaphore_is_not_busy() -> None:
    """With a bias epilogue the vector engine spends the layer waiting for the tensor engine;
    the report must still name the tensor engine as the binding resource."""
    for bias in (False, True):
        (layer,) = report(_profiled(_grouped(bias))).layers
        assert layer.op == "conv2d" and layer.bound_by == "tensor", (bias, layer.bound_by)
        assert 0 < layer.efficiency < 0.5  # 2 channels per group are far from the roofline on a 16x16 array


def test_layer_cycles_add_up_to_the_run() -> None:
    prof = _profiled(rm.convnet("NCHW"))
    rep = report(prof)
    assert sum(x.cycles for x in rep.layers) == rep.cycles == prof.total_cycles
    assert all(0 < x.efficiency <= 1 for x in rep.layers if x.macs)
