"""The partitioning pass: ``FuseOpsByPattern`` with the pattern table, preceded by the row programs found
in the module being partitioned (:mod:`.rowwise_region`: their patterns are the subgraphs' own
structures, so they are made per module, not once for the table)."""

from __future__ import annotations

import tvm
from tvm import relax

from tvm_npu.config import NpuTarget

from .patterns import pattern_table
from .rowwise_region import row_program_entries


def fuse_ops_by_pattern(target: NpuTarget) -> tvm.transform.Pass:
    """``FuseOpsByPattern(row programs + pattern_table(target), bind_constants=True)``."""

    @tvm.transform.module_pass(opt_level=0, name="tvm_npu.FuseOpsByPattern")
    def fuse(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        table = row_program_entries(mod, target) + pattern_table(target)
        return relax.transform.FuseOpsByPattern(table, bind_constants=True, annotate_codegen=False)(mod)

    return fuse
