"""ProgramBuilder: how the codegen (and tests) assemble a program for one configuration.

It owns the three resources a program must not overrun — DRAM tensor names, SRAM
bytes and semaphores — and fails at build time, with the numbers, when a request does
not fit, instead of leaving it to the simulator's validation. The codegen uses it as
is: ``sram_limit`` keeps an operator's buffers below the regions its plan reserves,
``tags`` record which operator emitted each instruction.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tvm_npu.config import DType, HardwareConfig

from . import isa
from .errors import BuildError, SramBudgetError


def row_major(shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of ``shape``."""
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


def _as3(shape: Sequence[int], what: str) -> tuple[int, int, int]:
    if not 1 <= len(shape) <= 3:
        raise BuildError(f"{what} must have 1 to 3 dims, got {tuple(shape)}")
    return tuple(int(n) for n in (1,) * (3 - len(shape)) + tuple(shape))  # type: ignore[return-value]


class ProgramBuilder:
    """Declares tensors, allocates SRAM, hands out semaphores and emits instructions."""

    def __init__(self, hw: HardwareConfig) -> None:
        self.hw = hw
        self._tensors: list[isa.TensorDecl] = []
        self._index: dict[str, int] = {}  # tensor name -> table index (the codegen asks per DMA)
        self._tensors_tuple: tuple[isa.TensorDecl, ...] = ()
        self._constants: dict[str, np.ndarray] = {}
        self._instructions: list[isa.Instruction] = []
        self._tags: list[int] = []
        self._sram_top = 0
        self.sram_high_water = 0
        #: Allocations must end at or below this address (the rest of the SRAM is reserved).
        self.sram_limit = hw.max_sram_bytes
        self._next_sem = 0

    # ----------------------------------------------------------------- DRAM
    def tensor(
        self,
        name: str,
        shape: Sequence[int],
        dtype: DType,
        kind: isa.TensorKind,
        data: np.ndarray | None = None,
    ) -> int:
        """Declare a DRAM tensor; CONSTANT tensors need ``data``. Returns its table index."""
        if name in self._index:
            raise BuildError(f"tensor {name!r} is declared twice")
        decl = isa.TensorDecl(name, dtype, tuple(int(n) for n in shape), kind)
        if kind == isa.TensorKind.CONSTANT:
            if data is None:
                raise BuildError(f"CONSTANT tensor {name!r} needs its data")
            data = np.asarray(data)
            if data.shape != decl.shape or data.dtype != dtype.np:
                raise BuildError(f"constant {name!r} is {data.dtype} {data.shape}, declared {dtype.np} {decl.shape}")
            self._constants[name] = np.ascontiguousarray(data)  # no copy: programs never write constants
        elif data is not None:
            raise BuildError(f"only CONSTANT tensors carry data; {name!r} is {kind.name}")
        self._tensors.append(decl)
        self._index[name] = len(self._tensors) - 1
        return len(self._tensors) - 1

    def declare(self, name: str, shape: Sequence[int], dtype: DType, kind: isa.TensorKind,
                data: np.ndarray | None = None) -> int:
        """Like :meth:`tensor`, but a repeated declaration of the same tensor returns its index
        (an operator may name one tensor as several operands)."""
        i = self._index.get(name)
        if i is None:
            return self.tensor(name, shape, dtype, kind, data)
        t = self._tensors[i]
        if (t.shape, t.dtype, t.kind) != (tuple(int(n) for n in shape), dtype, kind):
            raise BuildError(f"tensor {name!r} is declared again as {kind.name} {dtype.name} "
                             f"{tuple(shape)}, first as {t.kind.name} {t.dtype.name} {t.shape}")
        return i

    def tensor_index(self, name: str) -> int:
        """The table index of a declared tensor."""
        i = self._index.get(name)
        if i is None:
            raise BuildError(f"DRAM tensor {name!r} is not declared in this program")
        return i

    def has_tensor(self, name: str) -> bool:
        return name in self._index

    @property
    def tensors(self) -> tuple[isa.TensorDecl, ...]:
        if len(self._tensors_tuple) != len(self._tensors):  # declarations only append: rebuild when one did
            self._tensors_tuple = tuple(self._tensors)
        return self._tensors_tuple

    # ----------------------------------------------------------------- SRAM
    def alloc(self, nbytes: int, name: str = "buffer") -> int:
        """Reserve ``nbytes`` of SRAM at the next aligned address; raise if past the budget."""
        addr = self._sram_top
        end = addr + self.hw.align(nbytes)
        if nbytes <= 0 or end > self.sram_limit:
            reserved = (f" ({self.hw.max_sram_bytes - self.sram_limit} bytes at the top are reserved)"
                        if self.sram_limit < self.hw.max_sram_bytes else "")
            raise SramBudgetError(
                f"SRAM budget exceeded: {name!r} needs {nbytes} bytes at {addr}, ending at {end}, but "
                f"-max-sram-bytes={self.hw.max_sram_bytes}{reserved}"
            )
        self._sram_top = end
        self.sram_high_water = max(self.sram_high_water, end)
        return addr

    def sram_mark(self) -> int:
        """The current allocation point, to :meth:`sram_release` back to later (stack discipline)."""
        return self._sram_top

    def sram_place(self, addr: int) -> None:
        """Make the next allocations start at ``addr`` (aligned, with nothing allocated above it):
        consecutive operators placed at opposite ends of the SRAM, so one's first loads need not
        wait for the other's last compute."""
        if addr % self.hw.sram_align_bytes or not 0 <= addr <= self.sram_limit:
            raise BuildError(f"SRAM placement {addr} is not an aligned address below {self.sram_limit}")
        self._sram_top = addr

    def sram_release(self, mark: int) -> None:
        """Free every allocation made since ``mark``."""
        if not 0 <= mark <= self._sram_top:
            raise BuildError(f"SRAM mark {mark} is not below the allocation point {self._sram_top}")
        self._sram_top = mark

    # ----------------------------------------------------------- semaphores
    def semaphore(self) -> int:
        """A fresh semaphore id."""
        if self._next_sem >= self.hw.num_semaphores:
            raise BuildError(f"all {self.hw.num_semaphores} semaphores are in use (-num-semaphores)")
        self._next_sem += 1
        return self._next_sem - 1

    # --------------------------------------------------------- instructions
    def emit(self, instr: isa.Instruction, tag: int = 0) -> int:
        """Append an instruction (``tag``: e.g. the operator it belongs to); returns its index."""
        self._instructions.append(instr)
        self._tags.append(tag)
        return len(self._instructions) - 1

    def reorder(self, start: int, order: Sequence[int]) -> None:
        """Put the instructions ``start + order[k]`` at ``start + k`` (a permutation of a range, for
        passes that move independent instructions; the caller answers for legality)."""
        if sorted(order) != list(range(len(order))) or start + len(order) > len(self._instructions):
            raise BuildError(f"reorder: {list(order)} is not a permutation of a range from {start}")
        for lst in (self._instructions, self._tags):
            lst[start:start + len(order)] = [lst[start + k] for k in order]

    @property
    def instructions(self) -> list[isa.Instruction]:
        """The instructions emitted so far (a copy), and their tags."""
        return list(self._instructions)

    @property
    def tags(self) -> list[int]:
        return list(self._tags)

    def __len__(self) -> int:
        return len(self._instructions)

    def _dma(
        self,
        cls: type[isa.DmaLoad] | type[isa.DmaStore],
        tensor: int,
        sram_addr: int,
        shape: Sequence[int],
        dram_offset: int,
        dram_strides: Sequence[int] | None,
        sram_strides: Sequence[int] | None,
    ) -> int:
        if not 0 <= tensor < len(self._tensors):
            raise BuildError(f"tensor index {tensor} is not declared")
        shape3 = _as3(shape, "DMA shape")
        dense = row_major(shape3)
        dram = dense if dram_strides is None else _as3(dram_strides, "dram_strides")
        sram = dense if sram_strides is None else _as3(sram_strides, "sram_strides")
        dtype = self._tensors[tensor].dtype
        return self.emit(cls(tensor, int(dram_offset), int(sram_addr), dtype, shape3, dram, sram))

    def dma_load(
        self,
        tensor: int,
        sram_addr: int,
        shape: Sequence[int],
        dram_offset: int = 0,
        dram_strides: Sequence[int] | None = None,
        sram_strides: Sequence[int] | None = None,
    ) -> int:
        """DRAM -> SRAM copy of up to 3 dims; strides default to row-major of ``shape``."""
        return self._dma(isa.DmaLoad, tensor, sram_addr, shape, dram_offset, dram_strides, sram_strides)

    def dma_store(
        self,
        tensor: int,
        sram_addr: int,
        shape: Sequence[int],
        dram_offset: int = 0,
        dram_strides: Sequence[int] | None = None,
        sram_strides: Sequence[int] | None = None,
    ) -> int:
        """SRAM -> DRAM copy of up to 3 dims; strides default to row-major of ``shape``."""
        return self._dma(isa.DmaStore, tensor, sram_addr, shape, dram_offset, dram_strides, sram_strides)

    def matmul(
        self, a_addr: int, b_addr: int, c_addr: int, m: int, n: int, k: int, dtype: DType, accumulate: bool = False
    ) -> int:
        """Row-major (m, k) @ (k, n) -> (m, n) in the accumulator type."""
        return self.emit(
            isa.MatMul(a_addr, (k, 1), b_addr, (n, 1), c_addr, (n, 1), m, n, k, dtype, accumulate)
        )

    def signal(self, engine: isa.Engine, sem: int) -> int:
        return self.emit(isa.Signal(engine, sem))

    def wait(self, engine: isa.Engine, sem: int) -> int:
        return self.emit(isa.Wait(engine, sem))

    def build(self, instructions: Sequence[isa.Instruction] | None = None) -> isa.Program:
        """The finished program (End appended), stamped with this configuration's hash.

        ``instructions`` replaces the emitted list (e.g. once synchronisation is inserted).
        """
        body = (*(self._instructions if instructions is None else instructions), isa.End())
        return isa.Program(self.hw.config_hash, tuple(self._tensors), body, dict(self._constants))
