"""The TIR lowering the codegen runs on a scheduled operator before reading it.

A subset of TVM's own S-TIR pipeline (``tvm/s_tir/pipeline.py``), in its order,
stopping once software pipelining is injected: blocks are still present (opaque)
so each instruction site keeps its annotations, while SRAM buffers are compacted
to tile size and multi-buffered by ``InjectSoftwarePipeline``.
"""

from __future__ import annotations

import tvm
from tvm import s_tir


def lowering_passes() -> list[tvm.transform.Pass]:
    """The passes, in order (each is required: see docs/architecture.md, "Codegen")."""
    p = s_tir.transform
    return [
        p.CanonicalizeLoop(),
        p.LowerInitBlock(),
        p.PlanAndUpdateBufferAllocationLocation(),
        p.ConvertBlocksToOpaque(),
        p.CompactBufferAllocation(),
        p.LowerMatchBuffer(),
        p.StmtSimplify(),
        p.InjectSoftwarePipeline(),
        p.StmtSimplify(),
    ]


def lower(mod: tvm.IRModule) -> tvm.IRModule:
    """Lower a scheduled single-function module to the form :mod:`tir_walk` reads."""
    with tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(lowering_passes())(mod)
