"""The contract between the templates (``tir_schedules``) and the codegen that reads them.

Names written into TIR by the schedules and read back by ``codegen/tir_walk.py`` and
``codegen/emit.py``: defined here once so the two sides cannot drift apart.
"""

from __future__ import annotations

import enum

#: Storage scope of every NPU SRAM buffer.
SRAM_SCOPE = "global.npu_sram"
#: Annotation marking an instruction site (a block or a loop nest); its value is a :class:`SiteKind`.
INSTR_KEY = "npu.instr"
#: Annotation of an epilogue site: the index of its step in ``spec.epilogue``.
EPI_KEY = "npu.epi"
#: Separates a DRAM tensor's name from the use index in a TE placeholder's name.
OPERAND_TAG = "@op"


class SiteKind(enum.StrEnum):
    """What one instruction site becomes."""

    DMA = "dma"  # DmaLoad / DmaStore (or an on-chip copy)
    ZERO = "zero"  # a reduction's zero-initialisation, folded into its first tensor instruction
    INIT = "init"  # a pool's init block (the pool instruction initialises itself)
    MATMUL = "matmul"
    CONV = "conv"
    POOL = "pool"
    EPI = "epi"  # one vector instruction per epilogue step
    ROW = "row"  # one vector instruction per step of a row-wise operator (``npu.epi`` = the step)


class Role(enum.StrEnum):
    """What an SRAM buffer of a template holds (the codegen locates operands by role)."""

    DATA = "data"
    WEIGHT = "weight"
    A = "a"
    B = "b"
    OUT = "out"

    @staticmethod
    def operand(step: int) -> str:
        """The role of epilogue step ``step``'s operand buffer."""
        return f"operand{step}"
