"""What ``build_with_info`` reports about a build: operators and MACs per execution."""

from __future__ import annotations

import numpy as np
from relax_models import inputs_for, repeated_block, run

import tvm_npu


def test_a_reused_composite_function_counts_once_per_call() -> None:
    mod = repeated_block(repeats=3)
    ex, info = tvm_npu.build_with_info(mod, "npu")
    conv_macs = 16 * 16 * 3 * 3 * 8 * 8
    assert info.npu_ops["relax.nn.conv2d"] == 3 and info.npu_ops["relax.nn.relu"] == 3
    assert info.npu_macs == 3 * conv_macs and info.host_macs == 0
    args = inputs_for(mod)
    with tvm_npu.profile() as prof:
        out = run(ex, args)
    # the report counts executed layers; the build info must agree with it
    assert sum(layer.macs for r in prof.runs for layer in r.artifact.layers) == info.npu_macs
    np.testing.assert_allclose(out, run(tvm_npu.build_reference(mod), args), rtol=1e-4, atol=1e-5)
