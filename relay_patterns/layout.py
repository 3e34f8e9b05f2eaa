"""Activation layout planning (before partitioning).

``-layout-pref=NCHW|NHWC`` forces the layout of every convolution and pooling
window through TVM's own ``ConvertLayout``, which inserts a layout transform only
where a producer and a consumer disagree; ``auto`` keeps the model's layout.
"""

from __future__ import annotations

import tvm
from tvm import relax

from tvm_npu.config import Layout, NpuTarget

def plan_layouts(mod: tvm.IRModule, target: NpuTarget) -> tvm.IRModule:
    """Rewrite activation layouts according to ``-layout-pref``."""
    pref = target.options.layout_pref
    if pref == Layout.AUTO:
        return mod
    layout = pref.value
    # pooling and elementwise ops follow their producer's layout (ConvertLayout takes no
    # desired layout for them)
    desired = {"relax.nn.conv2d": [layout, "OIHW"]}
    with tvm.transform.PassContext(opt_level=3):
        mod = relax.transform.ConvertLayout(desired)(mod)
        return relax.transform.FoldConstant()(mod)
