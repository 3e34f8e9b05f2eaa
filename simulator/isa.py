"""The NPU instruction set: opcodes, one typed record per instruction, programs.

Every SRAM operand is a base byte address plus element strides over a logical
shape given by the instruction, so one record describes CHW or HWC tiles,
transposed matmul operands and broadcasts (stride 0) alike. DRAM is reached only
by DMA, through a program-level table of named tensors. The binary encoding lives
in :mod:`tvm_npu.simulator.encoding`; the semantics and costs in
``docs/architecture.md`` and :mod:`tvm_npu.simulator.machine`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from tvm_npu.config import ACCUMULATOR, DType

Strides3 = tuple[int, int, int]
Strides4 = tuple[int, int, int, int]


class Engine(enum.IntEnum):
    """The four engines; each runs its own in-order queue."""

    DMA_LOAD = 0
    DMA_STORE = 1
    TENSOR = 2
    VECTOR = 3


class Opcode(enum.IntEnum):
    """Instruction opcodes (the first byte of every encoded instruction)."""

    DMA_LOAD = 0x01
    DMA_STORE = 0x02
    MATMUL = 0x10
    CONV = 0x11
    VADD = 0x20
    VSUB = 0x21
    VMUL = 0x22
    VMAX = 0x23
    VMIN = 0x24
    VRELU = 0x30
    VSIGMOID = 0x31
    VTANH = 0x32
    VGELU = 0x33
    VCOPY = 0x34
    VCLIP = 0x38
    VSCALE = 0x39
    VBIAS_ADD = 0x3A
    VREQUANT = 0x3B
    VCAST = 0x3C
    VMAXPOOL = 0x40
    VAVGPOOL = 0x41
    SIGNAL = 0x50
    WAIT = 0x51
    END = 0xFF


class TensorKind(enum.IntEnum):
    """Role of a DRAM tensor in a program; only scratch tensors may stay off the bound."""

    INPUT = 0
    OUTPUT = 1
    CONSTANT = 2
    SCRATCH = 3


@dataclass(frozen=True, slots=True)
class TensorDecl:
    """A named DRAM tensor a program reads or writes (constants carry their data)."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    kind: TensorKind

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


# --------------------------------------------------------------------------- DMA
@dataclass(frozen=True, slots=True)
class _Dma:
    """A 3-D strided copy of ``shape`` elements (dim 2 innermost) between DRAM and SRAM.

    ``dtype`` must be the tensor's dtype (DMA never converts). The SRAM side, and the
    DRAM side of a store, must address distinct elements.
    """

    tensor: int  # index into Program.tensors
    dram_offset: int  # elements from the tensor's start
    sram_addr: int  # bytes
    dtype: DType
    shape: Strides3
    dram_strides: Strides3  # elements
    sram_strides: Strides3  # elements

    engine: ClassVar[Engine]
    opcode: ClassVar[Opcode]

    @property
    def nelems(self) -> int:
        return self.shape[0] * self.shape[1] * self.shape[2]


@dataclass(frozen=True, slots=True)
class DmaLoad(_Dma):
    engine: ClassVar[Engine] = Engine.DMA_LOAD
    opcode: ClassVar[Opcode] = Opcode.DMA_LOAD


@dataclass(frozen=True, slots=True)
class DmaStore(_Dma):
    engine: ClassVar[Engine] = Engine.DMA_STORE
    opcode: ClassVar[Opcode] = Opcode.DMA_STORE


# ----------------------------------------------------------------------- tensor
@dataclass(frozen=True, slots=True)
class MatMul:
    """``C[m, n] (+)= sum_k A[m, k] * B[k, n]`` in the accumulator type of ``in_dtype``.

    fp32 and fp16 products are summed in the array's wide internal accumulator and the
    tile's sum is rounded once to the fp32 accumulator (so a result does not depend on
    its position in the tile); int8 products are summed in int32 with two's-complement
    wrap-around. The tile's sum is added to C once (``accumulate``) or overwrites it.
    """

    a_addr: int
    a_strides: tuple[int, int]  # (m, k)
    b_addr: int
    b_strides: tuple[int, int]  # (k, n)
    c_addr: int
    c_strides: tuple[int, int]  # (m, n)
    m: int
    n: int
    k: int
    in_dtype: DType
    accumulate: bool

    engine: ClassVar[Engine] = Engine.TENSOR
    opcode: ClassVar[Opcode] = Opcode.MATMUL

    @property
    def acc_dtype(self) -> DType:
        return ACCUMULATOR[self.in_dtype]

    @property
    def macs(self) -> int:
        return self.m * self.n * self.k


@dataclass(frozen=True, slots=True)
class Conv:
    """One implicit-GEMM convolution tile, zero padding applied inside the tile.

    ``out[o, y, x] (+)= sum in[g*cin_g + i, y*sh + ky*dh - pad_top, x*sw + kx*dw - pad_left]
    * w[o, i, ky, kx]`` over ``i < in_c/groups`` and the kernel window, with input
    positions outside ``[0, in_h) x [0, in_w)`` reading zero; ``g = o // (out_c/groups)``.
    Types and accumulation as :class:`MatMul` (it is the same implicit GEMM). Each pad
    is at most ``(kernel - 1) * dilation``.
    """

    in_addr: int
    in_strides: Strides3  # (c, h, w)
    in_c: int
    in_h: int
    in_w: int
    w_addr: int
    w_strides: Strides4  # (o, i, kh, kw)
    out_addr: int
    out_strides: Strides3  # (c, h, w)
    out_c: int
    out_h: int
    out_w: int
    kernel_h: int
    kernel_w: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int
    pad_top: int
    pad_left: int
    pad_bottom: int
    pad_right: int
    groups: int
    in_dtype: DType
    accumulate: bool

    engine: ClassVar[Engine] = Engine.TENSOR
    opcode: ClassVar[Opcode] = Opcode.CONV

    @property
    def acc_dtype(self) -> DType:
        return ACCUMULATOR[self.in_dtype]

    @property
    def macs(self) -> int:
        return self.out_c * self.out_h * self.out_w * (self.in_c // max(self.groups, 1)) * self.kernel_h * self.kernel_w


# ----------------------------------------------------------------------- vector
@dataclass(frozen=True, slots=True)
class _VecBase:
    """Fields shared by vector instructions over a 3-D iteration ``shape``."""

    shape: Strides3
    dst_addr: int
    dst_strides: Strides3
    src_addr: int
    src_strides: Strides3

    engine: ClassVar[Engine] = Engine.VECTOR

    @property
    def nelems(self) -> int:
        return self.shape[0] * self.shape[1] * self.shape[2]


@dataclass(frozen=True, slots=True)
class VecBinary(_VecBase):
    """``dst = src <op> other`` elementwise (add, sub, mul, max, min) in ``dtype``; integers wrap."""

    other_addr: int
    other_strides: Strides3
    dtype: DType
    op: Opcode

    OPS: ClassVar[frozenset[Opcode]] = frozenset({Opcode.VADD, Opcode.VSUB, Opcode.VMUL, Opcode.VMAX, Opcode.VMIN})

    @property
    def opcode(self) -> Opcode:
        return self.op


@dataclass(frozen=True, slots=True)
class VecUnary(_VecBase):
    """``dst = f(src)`` for relu, sigmoid, tanh, gelu (erf form) and copy/transpose.

    Sigmoid, tanh and gelu take float dtypes only, are evaluated in float64 and rounded
    once to ``dtype`` (nearest even). Relu and copy take every dtype.
    """

    dtype: DType
    op: Opcode

    OPS: ClassVar[frozenset[Opcode]] = frozenset(
        {Opcode.VRELU, Opcode.VSIGMOID, Opcode.VTANH, Opcode.VGELU, Opcode.VCOPY}
    )
    TRANSCENDENTAL: ClassVar[frozenset[Opcode]] = frozenset({Opcode.VSIGMOID, Opcode.VTANH, Opcode.VGELU})

    @property
    def opcode(self) -> Opcode:
        return self.op


@dataclass(frozen=True, slots=True)
class VecClip(_VecBase):
    """``dst = min(max(src, lo), hi)`` (relu6 and friends).

    ``lo`` and ``hi`` are first rounded to ``dtype``; for integer dtypes they must be
    integers inside its range, so the result always saturates within it.
    """

    dtype: DType
    lo: float
    hi: float

    opcode: ClassVar[Opcode] = Opcode.VCLIP


@dataclass(frozen=True, slots=True)
class VecScale(_VecBase):
    """``dst = src * scale + shift`` for float data (folded batch-norm, averaging).

    Evaluated in float64 and rounded once to ``dtype``.
    """

    dtype: DType
    scale: float
    shift: float

    opcode: ClassVar[Opcode] = Opcode.VSCALE


@dataclass(frozen=True, slots=True)
class VecBiasAdd(_VecBase):
    """``dst = src + bias[i_axis]``: a contiguous bias vector along iteration axis ``axis``; integers wrap."""

    bias_addr: int
    axis: int
    dtype: DType

    opcode: ClassVar[Opcode] = Opcode.VBIAS_ADD


@dataclass(frozen=True, slots=True)
class VecRequant(_VecBase):
    """int32 -> int8: ``clamp(((src * multiplier + 2**(shift-1)) >> shift) + zero_point, -128, 127)``.

    Exact in int64; ``>>`` is arithmetic (floor); the rounding term is 0 when
    ``shift == 0``; ``0 <= shift <= 62`` and ``zero_point`` is in the int8 range.
    """

    multiplier: int
    shift: int
    zero_point: int

    opcode: ClassVar[Opcode] = Opcode.VREQUANT


@dataclass(frozen=True, slots=True)
class VecCast(_VecBase):
    """Type conversion: float->float rounds to nearest even, to integers rounds half to even and saturates.

    To a float type, too-large magnitudes become +-inf (IEEE); to an integer type, NaN
    becomes 0 and int->int saturates.
    """

    src_dtype: DType
    dst_dtype: DType

    opcode: ClassVar[Opcode] = Opcode.VCAST


@dataclass(frozen=True, slots=True)
class Pool:
    """Max or average pooling window over a (c, h, w) tile; outside the tile is padding.

    Max ignores padding; average divides by the window size when
    ``count_include_pad`` else by the number of in-tile positions. Averages sum in
    float64 (int64 for integer dtypes) and round once to ``dtype`` (integers half to
    even). Each pad is smaller than the kernel, so every window sees the tile.
    """

    in_addr: int
    in_strides: Strides3
    in_h: int
    in_w: int
    out_addr: int
    out_strides: Strides3
    channels: int
    out_h: int
    out_w: int
    kernel_h: int
    kernel_w: int
    stride_h: int
    stride_w: int
    pad_top: int
    pad_left: int
    pad_bottom: int
    pad_right: int
    dtype: DType
    op: Opcode
    count_include_pad: bool

    engine: ClassVar[Engine] = Engine.VECTOR
    OPS: ClassVar[frozenset[Opcode]] = frozenset({Opcode.VMAXPOOL, Opcode.VAVGPOOL})

    @property
    def opcode(self) -> Opcode:
        return self.op


# ---------------------------------------------------------------- sync and end
@dataclass(frozen=True, slots=True)
class Signal:
    """Increment semaphore ``sem`` when ``engine`` reaches this point of its queue."""

    engine_id: Engine
    sem: int

    opcode: ClassVar[Opcode] = Opcode.SIGNAL

    @property
    def engine(self) -> Engine:
        return self.engine_id


@dataclass(frozen=True, slots=True)
class Wait:
    """Block ``engine`` until semaphore ``sem`` is positive, then decrement it."""

    engine_id: Engine
    sem: int

    opcode: ClassVar[Opcode] = Opcode.WAIT

    @property
    def engine(self) -> Engine:
        return self.engine_id


@dataclass(frozen=True, slots=True)
class End:
    """The last instruction of every program."""

    opcode: ClassVar[Opcode] = Opcode.END
    engine: ClassVar[None] = None


Instruction = (
    DmaLoad | DmaStore | MatMul | Conv | VecBinary | VecUnary | VecClip | VecScale | VecBiasAdd
    | VecRequant | VecCast | Pool | Signal | Wait | End
)

#: Which record class each opcode decodes into.
RECORD_OF: dict[Opcode, type] = {
    Opcode.DMA_LOAD: DmaLoad,
    Opcode.DMA_STORE: DmaStore,
    Opcode.MATMUL: MatMul,
    Opcode.CONV: Conv,
    **{op: VecBinary for op in VecBinary.OPS},
    **{op: VecUnary for op in VecUnary.OPS},
    Opcode.VCLIP: VecClip,
    Opcode.VSCALE: VecScale,
    Opcode.VBIAS_ADD: VecBiasAdd,
    Opcode.VREQUANT: VecRequant,
    Opcode.VCAST: VecCast,
    **{op: Pool for op in Pool.OPS},
    Opcode.SIGNAL: Signal,
    Opcode.WAIT: Wait,
    Opcode.END: End,
}


@dataclass(frozen=True, eq=False)
class Program:
    """One compiled partition: its DRAM tensors, constant data and instruction stream.

    ``config_hash`` is :attr:`HardwareConfig.config_hash` of the machine it was
    compiled for; the simulator refuses a program built for another configuration.
    """

    config_hash: int
    tensors: tuple[TensorDecl, ...]
    instructions: tuple[Instruction, ...]
    constants: dict[str, np.ndarray] = field(default_factory=dict)

    def tensor_index(self, name: str) -> int:
        for i, t in enumerate(self.tensors):
            if t.name == name:
                return i
        raise KeyError(name)

    def tensors_of(self, kind: TensorKind) -> list[TensorDecl]:
        return [t for t in self.tensors if t.kind == kind]
