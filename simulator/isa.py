"""The NPU instruction set: opcodes, one typed record per instruction, programs.

Every SRAM operand is a base byte address plus element strides over a logical
shape given by the instruction, so one record describes CHW or HWC tiles,
transposed matmul operands and broadcasts (stride 0) alike. DRAM is reached only
by DMA, through a program-level table of named tensors. Each record states its
operands once, as :class:`Access` descriptions (``accesses()``); validation,
numerics, costs, the SRAM high-water mark, hazard checking and the compiler's
synchronisation pass all read the geometry from there. The binary encoding lives
in :mod:`tvm_npu.simulator.encoding`; the semantics and costs in
``docs/architecture.md`` and :mod:`tvm_npu.simulator.machine`.
"""

from __future__ import annotations

import enum
import operator
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
    VSILU = 0x35
    VHSIGMOID = 0x36
    VHSWISH = 0x37
    VCLIP = 0x38
    VSCALE = 0x39
    VBIAS_ADD = 0x3A
    VREQUANT = 0x3B
    VCAST = 0x3C
    VQADD = 0x3D
    VLUT = 0x3E
    VQMUL = 0x3F
    VMAXPOOL = 0x40
    VAVGPOOL = 0x41
    VDWCONV = 0x42
    VMAXPOOL_PAD = 0x43
    VEXP = 0x60
    VRECIP = 0x61
    VRSQRT = 0x62
    VGELU_TANH = 0x63
    VRMAX = 0x64
    VRSUM = 0x65
    VPOW = 0x66
    VLOG = 0x67
    VREQUANT64 = 0x68
    SIGNAL = 0x50
    WAIT = 0x51
    END = 0xFF


class Space(enum.IntEnum):
    """The memory an operand lives in."""

    SRAM = 0
    DRAM = 1


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


# ---------------------------------------------------------------------- operands
@dataclass(frozen=True, slots=True)
class Access:
    """One operand of an instruction: where it is, its geometry, and what the instruction does with it.

    ``base`` is a byte address in SRAM, or an element offset from the start of DRAM
    tensor ``tensor`` (an index into :attr:`Program.tensors`); ``strides`` are in
    elements of ``dtype`` over the logical ``shape``, so element ``idx`` sits at
    ``base + sum(idx * strides)`` (times the element size in SRAM). ``read`` and
    ``write`` say whether the instruction reads and/or writes it: an accumulating
    MatMul/Conv reads and writes its output. ``distinct`` is set where the ISA
    requires every index to reach a different element (every written operand, the SRAM
    side of every DMA, tensor-engine and pooling operands); the other reads may
    broadcast (stride 0). ``field``/``strides_field`` name the record's fields, for
    error messages.
    """

    space: Space
    base: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: DType
    read: bool
    write: bool
    distinct: bool
    field: str
    strides_field: str
    tensor: int = -1

    @property
    def nelems(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def last(self) -> int:
        """Element offset, from ``base``, of the last element reached (strides are non-negative once valid)."""
        return sum(map(operator.mul, self.shape, self.strides)) - sum(self.strides)

    @property
    def extent(self) -> tuple[int, int]:
        """The bounding range ``[lo, hi)``: SRAM bytes, or DRAM elements of the tensor."""
        if self.space == Space.SRAM:
            return self.base, self.base + (self.last + 1) * self.dtype.itemsize
        return self.base, self.base + self.last + 1

    def offsets(self) -> np.ndarray:
        """Sorted distinct element offsets, from ``base``, that the operand reaches (int64)."""
        off = np.zeros(1, np.int64)
        for n, s in zip(self.shape, self.strides, strict=True):
            if n > 1 and s != 0:
                off = (off[:, None] + np.arange(n, dtype=np.int64) * s).reshape(-1)
        return np.unique(off)

    def units(self) -> np.ndarray:
        """Sorted distinct units the operand touches, in the coordinates of :attr:`extent`.

        SRAM: byte addresses (every byte of every element); DRAM: element offsets in the tensor.
        """
        if self.space == Space.DRAM:
            return self.offsets() + self.base
        size = self.dtype.itemsize
        start = self.offsets() * size + self.base
        if size == 1:
            return start
        return (start[:, None] + np.arange(size, dtype=np.int64)).reshape(-1)  # sorted: elements do not overlap


def _sram(field: str, strides_field: str, addr: int, shape: tuple[int, ...], strides: tuple[int, ...],
          dtype: DType, *, read: bool = False, write: bool = False, distinct: bool = True) -> Access:
    return Access(Space.SRAM, addr, shape, strides, dtype, read, write, distinct, field, strides_field)


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

    def accesses(self) -> tuple[Access, Access]:
        """(the DRAM side, the SRAM side): a load reads DRAM and writes SRAM, a store the reverse."""
        store = self.opcode == Opcode.DMA_STORE
        dram = Access(Space.DRAM, self.dram_offset, self.shape, self.dram_strides, self.dtype, not store, store,
                      store, "dram_offset", "dram_strides", self.tensor)
        sram = _sram("sram_addr", "sram_strides", self.sram_addr, self.shape, self.sram_strides, self.dtype,
                     read=store, write=not store)
        return dram, sram


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

    ``in_dtype`` is A's type; B has the same type, except that an 8-bit A (int8 or
    uint8) or 16-bit A multiplies int8 B (``DType.weight``). fp32 and fp16 products are summed in
    the array's wide internal accumulator and the tile's sum is rounded once to the fp32
    accumulator (so a result does not depend on its position in the tile); 8-bit
    products are summed in int32 with two's-complement wrap-around, 16-bit A (int16 or uint16, times
    int8 B) in int64 (the 16x8 mode, at ``int16_mac_slowdown`` slots per MAC). The tile's sum is
    added to C once (``accumulate``) or overwrites it.
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

    def accesses(self) -> tuple[Access, Access, Access]:
        """(A (m, k), B (k, n), C (m, n) in the accumulator type; C is also read when accumulating)."""
        return (
            _sram("a_addr", "a_strides", self.a_addr, (self.m, self.k), self.a_strides, self.in_dtype, read=True),
            _sram("b_addr", "b_strides", self.b_addr, (self.k, self.n), self.b_strides, self.in_dtype.weight,
                  read=True),
            _sram("c_addr", "c_strides", self.c_addr, (self.m, self.n), self.c_strides, self.acc_dtype,
                  read=self.accumulate, write=True),
        )

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
    is at most ``(kernel - 1) * dilation``. Padding reads ``pad_value``: 0 for float
    types; for 8-bit types the input's zero point (the quantized zero), in its range.
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
    pad_value: int = 0

    engine: ClassVar[Engine] = Engine.TENSOR
    opcode: ClassVar[Opcode] = Opcode.CONV

    @property
    def acc_dtype(self) -> DType:
        return ACCUMULATOR[self.in_dtype]

    def accesses(self) -> tuple[Access, Access, Access]:
        """(input (c, h, w), weights (o, i/groups, kh, kw), output (c, h, w), also read when accumulating)."""
        w_shape = (self.out_c, self.in_c // self.groups if self.groups else 0, self.kernel_h, self.kernel_w)
        return (
            _sram("in_addr", "in_strides", self.in_addr, (self.in_c, self.in_h, self.in_w), self.in_strides,
                  self.in_dtype, read=True),
            _sram("w_addr", "w_strides", self.w_addr, w_shape, self.w_strides, self.in_dtype.weight, read=True),
            _sram("out_addr", "out_strides", self.out_addr, (self.out_c, self.out_h, self.out_w), self.out_strides,
                  self.acc_dtype, read=self.accumulate, write=True),
        )

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

    def types(self) -> tuple[DType, DType]:
        """(source, destination) element types; they differ only for VecRequant and VecCast."""
        return self.dtype, self.dtype

    def accesses(self) -> tuple[Access, ...]:
        """(dst, src, then ``other`` or the bias): dst is written with distinct elements, sources may broadcast."""
        src_t, dst_t = self.types()
        return (
            _sram("dst_addr", "dst_strides", self.dst_addr, self.shape, self.dst_strides, dst_t, write=True),
            _sram("src_addr", "src_strides", self.src_addr, self.shape, self.src_strides, src_t,
                  read=True, distinct=False),
        )


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

    def accesses(self) -> tuple[Access, Access, Access]:
        dst, src = _VecBase.accesses(self)
        other = _sram("other_addr", "other_strides", self.other_addr, self.shape, self.other_strides, self.dtype,
                      read=True, distinct=False)
        return dst, src, other


@dataclass(frozen=True, slots=True)
class VecUnary(_VecBase):
    """``dst = f(src)`` for relu, sigmoid, tanh, gelu (erf form), copy/transpose, and the
    row-wise operators' exp, natural log ``ln(x)`` (log-softmax's ``log(sum(exp))``), reciprocal
    ``1/x``, reciprocal square root ``1/sqrt(x)`` and gelu in its tanh form ``0.5 x (1 +
    tanh(sqrt(2/pi) (x + 0.044715 x^3)))``, and swish (silu) ``x * sigmoid(x)``.

    Sigmoid, tanh, gelu (both forms), exp, log, reciprocal, rsqrt and swish take float dtypes
    only, are evaluated in float64 and rounded once to ``dtype`` (nearest even; IEEE results for
    0 and negative inputs: inf, -inf, nan). Relu and copy take every dtype.
    """

    dtype: DType
    op: Opcode

    OPS: ClassVar[frozenset[Opcode]] = frozenset(
        {Opcode.VRELU, Opcode.VSIGMOID, Opcode.VTANH, Opcode.VGELU, Opcode.VCOPY,
         Opcode.VEXP, Opcode.VRECIP, Opcode.VRSQRT, Opcode.VGELU_TANH, Opcode.VSILU, Opcode.VLOG}
    )
    TRANSCENDENTAL: ClassVar[frozenset[Opcode]] = frozenset(
        {Opcode.VSIGMOID, Opcode.VTANH, Opcode.VGELU, Opcode.VEXP, Opcode.VRECIP, Opcode.VRSQRT, Opcode.VGELU_TANH,
         Opcode.VSILU, Opcode.VLOG}
    )

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
class VecHardSigmoid(_VecBase):
    """Hard sigmoid ``h = min(max(src * alpha + beta, 0), 1)`` (op VHSIGMOID) or hard swish
    ``src * h`` (op VHSWISH) for float data: ONNX ``HardSigmoid`` / ``HardSwish`` (alpha 1/6,
    beta 1/2) in one pass, so the activation stays in the epilogue of its conv.

    Evaluated in float64 and rounded once to ``dtype``; one lane-group cycle per 32 elements
    like the other piecewise-linear steps (a multiply-add, a clamp and a multiply in the lane's
    pipeline; the datasheet lists activations among the vector engine's work without a cost).
    """

    dtype: DType
    alpha: float
    beta: float
    op: Opcode

    OPS: ClassVar[frozenset[Opcode]] = frozenset({Opcode.VHSIGMOID, Opcode.VHSWISH})

    @property
    def opcode(self) -> Opcode:
        return self.op


@dataclass(frozen=True, slots=True)
class VecPow(_VecBase):
    """``dst = src ** exponent`` for float data (local response normalisation's
    ``(bias + alpha * mean(x^2)) ** -beta``; a power of a computed base needs its own step,
    since the vector engine has no log).

    Evaluated in float64 and rounded once to ``dtype`` (IEEE results: ``0 ** p`` is inf for
    p < 0, a negative base with a non-integer exponent is nan). A lane evaluates ``exp(p *
    log(x))``: two transcendental evaluations, so it costs ``2 * transcendental_cycles`` per
    lane group.
    """

    dtype: DType
    exponent: float

    opcode: ClassVar[Opcode] = Opcode.VPOW
    #: Transcendental evaluations per element (a log and an exp): the timing's multiplier.
    EVALUATIONS: ClassVar[int] = 2


@dataclass(frozen=True, slots=True)
class VecBiasAdd(_VecBase):
    """``dst = src + bias[i_axis]``: a contiguous bias vector along iteration axis ``axis``; integers wrap."""

    bias_addr: int
    axis: int
    dtype: DType

    opcode: ClassVar[Opcode] = Opcode.VBIAS_ADD

    def accesses(self) -> tuple[Access, Access, Access]:
        """(dst, src, bias): the bias is the contiguous vector along ``axis``, broadcast over the other two."""
        dst, src = _VecBase.accesses(self)
        strides = tuple(int(axis == self.axis) for axis in range(3))
        bias = _sram("bias_addr", "axis", self.bias_addr, self.shape, strides, self.dtype, read=True, distinct=False)
        return dst, src, bias


@dataclass(frozen=True, slots=True)
class VecRequant(_VecBase):
    """int32 -> int8/uint8/int16/uint16 (op VREQUANT), or int64 -> the same (op VREQUANT64, the 16x8
    accumulator): ``clip(round_half_to_even(float32(src) * scale) + zero_point, lo, hi)``.

    ``scale`` is an fp32 operand read with ``scale_strides`` (a per-channel multiplier
    vector, or stride 0 for one value); the arithmetic is float32 in exactly the order
    of :func:`tvm_npu.simulator.quant.requantize`. ``zero_point``, ``lo`` and ``hi`` are
    integers in ``dst_dtype``'s range with ``lo <= hi`` (a folded relu or clip narrows them).
    """

    scale_addr: int
    scale_strides: Strides3
    zero_point: int
    lo: int
    hi: int
    dst_dtype: DType
    op: Opcode = Opcode.VREQUANT  # carried by the opcode byte: programs without VREQUANT64 encode as before

    OPS: ClassVar[frozenset[Opcode]] = frozenset({Opcode.VREQUANT, Opcode.VREQUANT64})

    @property
    def opcode(self) -> Opcode:
        return self.op

    def types(self) -> tuple[DType, DType]:
        return DType.INT64 if self.op == Opcode.VREQUANT64 else DType.INT32, self.dst_dtype

    def accesses(self) -> tuple[Access, Access, Access]:
        """(dst, src, the fp32 multipliers)."""
        dst, src = _VecBase.accesses(self)
        scale = _sram("scale_addr", "scale_strides", self.scale_addr, self.shape, self.scale_strides, DType.FP32,
                      read=True, distinct=False)
        return dst, src, scale


class _EightBitPair(_VecBase):
    """The 8-bit instructions of two tensors (``src`` and ``other``, both ``src_dtype``) and an 8-bit
    result (``dst_dtype``): their types and accesses (the records keep their own fields, in their order)."""

    __slots__ = ()

    def types(self) -> tuple[DType, DType]:
        return self.src_dtype, self.dst_dtype

    def accesses(self) -> tuple[Access, Access, Access]:
        dst, src = _VecBase.accesses(self)
        other = _sram("other_addr", "other_strides", self.other_addr, self.shape,
                      self.other_strides, self.src_dtype, read=True, distinct=False)
        return dst, src, other


@dataclass(frozen=True, slots=True)
class VecQAdd(_EightBitPair):
    """Sum of two 8-bit tensors with their own scales, requantised:
    ``clip(round_half_to_even((offset + float32(src) * scale_a) + float32(other) * scale_b), lo, hi)``.

    float32 arithmetic in exactly the order of :func:`tvm_npu.simulator.quant.rescale_add`;
    ``scale_a``, ``scale_b`` and ``offset`` are float32 values (the zero points are folded
    into ``offset``). ``src`` and ``other`` are ``src_dtype`` (int8 or uint8), the result
    ``dst_dtype`` (int8 or uint8) with ``lo <= hi`` in its range.
    """

    other_addr: int
    other_strides: Strides3
    scale_a: float
    scale_b: float
    offset: float
    lo: int
    hi: int
    src_dtype: DType
    dst_dtype: DType

    opcode: ClassVar[Opcode] = Opcode.VQADD


@dataclass(frozen=True, slots=True)
class VecQMul(_EightBitPair):
    """Product of two 8-bit tensors with their own scales, requantised:
    ``clip(round_half_to_even(float32((src - zero_a) * (other - zero_b)) * ratio + zero_y), lo, hi)``.

    float32 arithmetic in exactly the order of :func:`tvm_npu.simulator.quant.rescale_mul` (the zero points
    removed exactly, the integer product exact in float32, the output zero point added before rounding);
    ``ratio`` is a float32 value. ``src`` and ``other`` are ``src_dtype`` (int8 or uint8) with zero points in
    its range, the result ``dst_dtype`` (int8 or uint8) with ``zero_y`` and ``lo <= hi`` in its range.
    """

    other_addr: int
    other_strides: Strides3
    zero_a: int
    zero_b: int
    ratio: float
    zero_y: int
    lo: int
    hi: int
    src_dtype: DType
    dst_dtype: DType

    opcode: ClassVar[Opcode] = Opcode.VQMUL


@dataclass(frozen=True, slots=True)
class VecCast(_VecBase):
    """Type conversion: float->float rounds to nearest even, to integers rounds half to even and saturates.

    To a float type, too-large magnitudes become +-inf (IEEE); to an integer type, NaN
    becomes 0 and int->int saturates.
    """

    src_dtype: DType
    dst_dtype: DType

    opcode: ClassVar[Opcode] = Opcode.VCAST

    def types(self) -> tuple[DType, DType]:
        return self.src_dtype, self.dst_dtype


@dataclass(frozen=True, slots=True)
class VecLut(_VecBase):
    """8-bit table lookup: ``dst = table[src - qmin]``, ``qmin`` the least value of ``src_dtype``
    (-128 for int8, 0 for uint8), so the table's entry ``k`` is the result for the input ``qmin + k``.

    The table is :data:`ENTRIES` contiguous ``dst_dtype`` values in SRAM at ``table_addr`` (loaded by an
    ordinary DMA); ``src`` and the result are int8 or uint8. Any function of one 8-bit value (an int8
    activation between a dequantization and a quantization) is one lookup, computed at compile time:
    exact by construction. One lookup per lane per cycle, like every non-transcendental vector step.
    """

    table_addr: int
    src_dtype: DType
    dst_dtype: DType

    opcode: ClassVar[Opcode] = Opcode.VLUT
    #: Entries of a table: one per value of an 8-bit source.
    ENTRIES: ClassVar[int] = 256
    #: Cycles per lane group: one read of the table per lane per cycle (the datasheet's rate; a
    #: 256-byte table is a small multi-ported SRAM bank next to the lanes, as on NPUs of this class).
    CYCLES_PER_GROUP: ClassVar[int] = 1

    def types(self) -> tuple[DType, DType]:
        return self.src_dtype, self.dst_dtype

    def accesses(self) -> tuple[Access, Access, Access]:
        """(dst, src, the whole table: read by every element, hence not distinct per element)."""
        dst, src = _VecBase.accesses(self)
        table = _sram("table_addr", "table_addr", self.table_addr, (self.ENTRIES,), (1,), self.dst_dtype,
                      read=True, distinct=False)
        return dst, src, table


@dataclass(frozen=True, slots=True)
class VecReduce:
    """Row reduction: ``dst[a, b] = reduce_r src[a, b, r]`` over the innermost of a 3-D ``shape``
    (max for VRMAX, sum for VRSUM) in a float ``dtype``.

    The rows of a softmax or a layer norm: ``dst`` has one element per (a, b), distinct;
    ``src`` may broadcast. Sums are taken in float64 and rounded once to ``dtype``.
    Lanes take consecutive elements of a row, so a row of ``r`` elements costs
    ``ceil(r / lanes)`` lane-group cycles (the combine of the lanes is pipelined).
    """

    shape: Strides3
    dst_addr: int
    dst_strides: tuple[int, int]
    src_addr: int
    src_strides: Strides3
    dtype: DType
    op: Opcode

    engine: ClassVar[Engine] = Engine.VECTOR
    OPS: ClassVar[frozenset[Opcode]] = frozenset({Opcode.VRMAX, Opcode.VRSUM})

    @property
    def opcode(self) -> Opcode:
        return self.op

    @property
    def nelems(self) -> int:
        return self.shape[0] * self.shape[1] * self.shape[2]

    def accesses(self) -> tuple[Access, Access]:
        """(dst (a, b), distinct; src (a, b, r), may broadcast)."""
        return (
            _sram("dst_addr", "dst_strides", self.dst_addr, self.shape[:2], self.dst_strides, self.dtype, write=True),
            _sram("src_addr", "src_strides", self.src_addr, self.shape, self.src_strides, self.dtype,
                  read=True, distinct=False),
        )


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

    def accesses(self) -> tuple[Access, Access]:
        """(input (c, in_h, in_w), output (c, out_h, out_w)), both with distinct elements."""
        return (
            _sram("in_addr", "in_strides", self.in_addr, (self.channels, self.in_h, self.in_w), self.in_strides,
                  self.dtype, read=True),
            _sram("out_addr", "out_strides", self.out_addr, (self.channels, self.out_h, self.out_w),
                  self.out_strides, self.dtype, write=True),
        )


@dataclass(frozen=True, slots=True)
class PaddedMaxPool(Pool):
    """Max pooling whose padding reads ``pad_value`` instead of being ignored.

    A constant ``Pad`` before a max pool (Keras ``ZeroPadding2D`` before the stem pool; an 8-bit tensor
    padded with its zero point) folds into the pool only so: a zero does win the max of negative values.
    Otherwise :class:`Pool` with ``op`` ``VMAXPOOL``; the same cost.
    """

    pad_value: float

    OPS: ClassVar[frozenset[Opcode]] = frozenset({Opcode.VMAXPOOL_PAD})


@dataclass(frozen=True, slots=True)
class DwConv:
    """Depthwise convolution tile on the vector engine: a multiply-accumulate over a window.

    ``out[c, y, x] (+)= sum_{ky,kx} in[c, y*sh + ky*dh - pad_top, x*sw + kx*dw - pad_left]
    * w[c, ky, kx]``, with input positions outside ``[0, in_h) x [0, in_w)`` reading
    ``pad_value`` (as :class:`Conv`: 0 for float types, an 8-bit input's zero point). Each
    channel is its own group, so this is the tensor engine's ``Conv`` with
    ``groups = in_c = out_c`` and the same numerics: fp32/fp16 products are summed in a wide
    accumulator and rounded once into the fp32 output, 8-bit inputs (int8 or uint8) times
    int8 weights accumulate in int32 with wrap-around; ``accumulate`` adds to the output
    instead of overwriting it. Lanes take consecutive output elements (row-major over
    channel, row, column), each lane one window tap per cycle.
    """

    in_addr: int
    in_strides: Strides3  # (c, h, w)
    in_h: int
    in_w: int
    w_addr: int
    w_strides: Strides3  # (c, kh, kw)
    out_addr: int
    out_strides: Strides3  # (c, h, w)
    channels: int
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
    in_dtype: DType
    accumulate: bool
    pad_value: int = 0

    engine: ClassVar[Engine] = Engine.VECTOR
    opcode: ClassVar[Opcode] = Opcode.VDWCONV

    @property
    def acc_dtype(self) -> DType:
        return ACCUMULATOR[self.in_dtype]

    def accesses(self) -> tuple[Access, Access, Access]:
        """(input (c, h, w), weights (c, kh, kw), output (c, h, w), also read when accumulating)."""
        return (
            _sram("in_addr", "in_strides", self.in_addr, (self.channels, self.in_h, self.in_w), self.in_strides,
                  self.in_dtype, read=True),
            _sram("w_addr", "w_strides", self.w_addr, (self.channels, self.kernel_h, self.kernel_w),
                  self.w_strides, self.in_dtype.weight, read=True),
            _sram("out_addr", "out_strides", self.out_addr, (self.channels, self.out_h, self.out_w),
                  self.out_strides, self.acc_dtype, read=self.accumulate, write=True),
        )

    @property
    def macs(self) -> int:
        return self.channels * self.out_h * self.out_w * self.kernel_h * self.kernel_w


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

    def accesses(self) -> tuple[Access, ...]:
        return ()


@dataclass(frozen=True, slots=True)
class Wait:
    """Block ``engine`` until semaphore ``sem`` is positive, then decrement it."""

    engine_id: Engine
    sem: int

    opcode: ClassVar[Opcode] = Opcode.WAIT

    @property
    def engine(self) -> Engine:
        return self.engine_id

    def accesses(self) -> tuple[Access, ...]:
        return ()


@dataclass(frozen=True, slots=True)
class End:
    """The last instruction of every program."""

    opcode: ClassVar[Opcode] = Opcode.END
    engine: ClassVar[None] = None

    def accesses(self) -> tuple[Access, ...]:
        return ()


Instruction = (
    DmaLoad | DmaStore | MatMul | Conv | VecBinary | VecUnary | VecClip | VecScale | VecHardSigmoid | VecPow
    | VecBiasAdd | VecRequant | VecQAdd | VecQMul | VecCast | VecLut | VecReduce | Pool | PaddedMaxPool | DwConv
    | Signal | Wait | End
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
    **{op: VecHardSigmoid for op in VecHardSigmoid.OPS},
    Opcode.VPOW: VecPow,
    Opcode.VBIAS_ADD: VecBiasAdd,
    **{op: VecRequant for op in VecRequant.OPS},
    Opcode.VQADD: VecQAdd,
    Opcode.VQMUL: VecQMul,
    Opcode.VCAST: VecCast,
    Opcode.VLUT: VecLut,
    **{op: VecReduce for op in VecReduce.OPS},
    **{op: Pool for op in Pool.OPS},
    Opcode.VMAXPOOL_PAD: PaddedMaxPool,
    Opcode.VDWCONV: DwConv,
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

