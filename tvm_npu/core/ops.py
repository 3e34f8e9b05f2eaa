"""Typed descriptions of the operators the NPU runs: the contract between stages.

The pattern table turns a matched Relax region into one of these specs, the
cost model and the templates read them, and the codegen lowers them. A spec names
its DRAM tensors (:class:`TensorRef`); it never holds TVM objects, so it is
hashable, printable and cheap to pass around.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, fields, replace

from tvm_npu.config import DType
from tvm_npu.simulator import isa


class EpiKind(enum.Enum):
    """Elementwise steps applied to an operator's output tile while it is in SRAM."""

    BIAS = "bias"  # + per-channel vector
    ADD = "add"  # + tensor of the output's shape (residual) or per-channel vector
    SUB = "sub"
    MUL = "mul"
    MAX = "max"
    MIN = "min"
    RELU = "relu"
    CLIP = "clip"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    GELU = "gelu"
    GELU_TANH = "gelu_tanh"  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    SILU = "silu"  # swish: x * sigmoid(x)
    HSIGMOID = "hardsigmoid"  # min(max(x * alpha + beta, 0), 1): floats = (alpha, beta)
    HSWISH = "hardswish"  # x * hardsigmoid(x): floats = (alpha, beta)
    POW = "power"  # x ** p for a constant scalar p: floats = (p,) (local response normalisation)
    RECIP = "reciprocal"  # 1 / x (a constant divided by a tensor: c / x = c * (1 / x))
    # x * scale + shift evaluated in float64, rounded once: floats = (scale, shift). A quantize's exact
    # quotient y / s as y * float64(1 / s) (relay_patterns.qdivide)
    SCALE = "scale"
    REQUANT = "requant"  # int32 / int64 -> 8 or 16 bits, per-channel fp32 multipliers (operand), ints = (zp, lo, hi)
    CAST = "cast"  # float type conversion (fp32 accumulator -> fp16), to ``dtype``
    QADD = "qadd"  # + an 8-bit tensor with its own scale, requantised: floats (scale_a, scale_b, offset), ints (lo, hi)
    # QADD with the roles of the two tensors exchanged: the operand is the offset's term (scale_a), the value
    # so far the other (scale_b). The plan's fusion makes one when it moves a residual add onto the producer
    # of its second tensor; the float32 sums are then in the same order as QADD's (bit for bit the same).
    QADD_R = "qadd_r"
    # an 8-bit value looked up in a 256-entry table of the result type (operand, Broadcast.TABLE; ``dtype``):
    # any function of one 8-bit value, computed at compile time (relay_patterns.qlut)
    LUT = "lut"
    # * an 8-bit tensor with its own scale, requantised (onnxruntime's QLinearMul, simulator.quant.rescale_mul):
    # floats (ratio,), ints (zero_a, zero_b, zero_y, lo, hi); the operand broadcast FULL or CHANNEL
    QMUL = "qmul"

    @property
    def binary(self) -> bool:
        return self in _BINARY


_BINARY = frozenset({EpiKind.BIAS, EpiKind.ADD, EpiKind.SUB, EpiKind.MUL, EpiKind.MAX, EpiKind.MIN,
                     EpiKind.REQUANT, EpiKind.QADD, EpiKind.QADD_R, EpiKind.LUT, EpiKind.QMUL})


class Broadcast(enum.Enum):
    """How a binary epilogue operand lines up with the output tile."""

    FULL = "full"  # same shape as the output
    CHANNEL = "channel"  # one value per output channel
    TABLE = "table"  # a lookup table indexed by the value itself (LUT): loaded whole, read at the value


@dataclass(frozen=True)
class View:
    """Where the elements of a tensor that is not stored on its own live in another DRAM tensor.

    Reshapes, channel shuffles and concat slices move no data: the operators read (or
    write) ``base`` through strides. Element ``idx`` of the viewed tensor is at
    ``offset + sum over dims d of sum over factors (n, s) of digit * s`` of ``base``, where
    each logical dim's index is split row-major into digits over its factors ``(extent,
    stride)`` (one factor for a plain strided dim; several after a shuffle's
    reshape -> transpose -> reshape).
    """

    base: str
    offset: int
    dims: tuple[tuple[tuple[int, int], ...], ...]

    @property
    def contiguous(self) -> bool:
        """Whether the view's elements are consecutive in row-major order (from ``offset``)."""
        stride = 1
        for extent, s in reversed([f for d in self.dims for f in d]):
            if extent != 1 and s != stride:
                return False
            stride *= extent
        return True


@dataclass(frozen=True)
class TensorRef:
    """A DRAM tensor by name, with its static shape, element type and layout string; ``view``
    says where its elements live when it is not a DRAM tensor of its own."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    layout: str = ""
    view: View | None = None
    #: Held in SRAM, not DRAM (a layer group's intermediate slice): reads and writes are on-chip copies.
    on_chip: bool = False

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def dim(self, axis: str) -> int:
        """Extent of a named axis of the layout (``"C"`` of ``"NCHW"``)."""
        return self.shape[self.layout.index(axis)]


@dataclass(frozen=True)
class Epilogue:
    """One elementwise step on the output tile; binary steps read ``operand`` from DRAM.

    ``lo``/``hi`` are float parameters (clip bounds), ``ints`` integer ones (e.g. a
    requantisation's zero point and clamp), ``floats`` further float ones (a rescaled add's
    scales); ``dtype`` is the step's result type when it
    differs from its input's (a requantise to int8), else None. What each kind means in
    every stage is :data:`tvm_npu.core.epilogue.RULES`.
    """

    kind: EpiKind
    operand: TensorRef | None = None
    broadcast: Broadcast = Broadcast.FULL
    lo: float = 0.0
    hi: float = 0.0
    ints: tuple[int, ...] = ()
    dtype: DType | None = None
    floats: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.kind.binary != (self.operand is not None):
            raise ValueError(f"epilogue {self.kind.value} {'needs' if self.kind.binary else 'takes no'} operand")


@dataclass(frozen=True)
class _OpBase:
    name: str
    out: TensorRef
    epilogue: tuple[Epilogue, ...] = field(default=(), kw_only=True)

    def with_epilogue(self, *steps: Epilogue) -> OpSpec:
        return replace(self, epilogue=self.epilogue + steps)

    @property
    def inputs(self) -> tuple[TensorRef, ...]:
        """Every DRAM tensor the operator reads, epilogue operands included."""
        return self._main_inputs() + tuple(e.operand for e in self.epilogue if e.operand is not None)

    def _main_inputs(self) -> tuple[TensorRef, ...]:
        raise NotImplementedError


@dataclass(frozen=True)
class Conv2dSpec(_OpBase):
    """2-D convolution; ``data``/``out`` in NCHW or NHWC, ``weight`` in OIHW."""

    data: TensorRef
    weight: TensorRef
    strides: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    groups: int = 1
    pad_value: int = 0  # what padding reads: an 8-bit input's zero point

    def _main_inputs(self) -> tuple[TensorRef, ...]:
        return (self.data, self.weight)

    @property
    def layout(self) -> str:
        """The layout the NPU computes in (the output's; the input DMA reads ``data.layout``)."""
        return self.out.layout

    @property
    def in_channels(self) -> int:
        return self.data.dim("C")

    @property
    def out_channels(self) -> int:
        return self.out.dim("C")

    @property
    def kernel(self) -> tuple[int, int]:
        return self.weight.shape[2], self.weight.shape[3]

    @property
    def macs(self) -> int:
        kh, kw = self.kernel
        return self.out.size * (self.in_channels // self.groups) * kh * kw


@dataclass(frozen=True)
class MatmulSpec(_OpBase):
    """``out[b, m, n] = sum_k a[b, m, k] * b[(b,) k, n]``; ``b`` may be transposed (``[n, k]``)."""

    a: TensorRef
    b: TensorRef
    transpose_b: bool = False

    def _main_inputs(self) -> tuple[TensorRef, ...]:
        return (self.a, self.b)

    @property
    def mnk(self) -> tuple[int, int, int]:
        m, k = self.a.shape[-2:]
        n = self.b.shape[-2] if self.transpose_b else self.b.shape[-1]
        return m, n, k

    @property
    def batch(self) -> int:
        return math.prod(self.a.shape[:-2])

    @property
    def macs(self) -> int:
        m, n, k = self.mnk
        return self.batch * m * n * k


class PoolKind(enum.Enum):
    MAX = "max"
    AVG = "avg"


@dataclass(frozen=True)
class PoolSpec(_OpBase):
    """Max / average pooling over H and W (global pooling is a window of the whole image)."""

    data: TensorRef
    kind: PoolKind
    kernel: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    count_include_pad: bool = False
    #: What a max pool's padding reads: a folded constant ``Pad`` (None: padding never wins the max).
    pad_value: float | None = None

    def _main_inputs(self) -> tuple[TensorRef, ...]:
        return (self.data,)

    @property
    def layout(self) -> str:
        """The layout the NPU computes in (the output's; the input DMA reads ``data.layout``)."""
        return self.out.layout

    macs = 0


@dataclass(frozen=True)
class ElementwiseSpec(_OpBase):
    """``out = epilogue(data)``: a chain of elementwise steps streamed through SRAM."""

    data: TensorRef

    def _main_inputs(self) -> tuple[TensorRef, ...]:
        return (self.data,)

    macs = 0


class RowKind(enum.Enum):
    """The row-wise operators: two fixed step programs and the general one (``RowwiseSpec.program``)."""

    SOFTMAX = "softmax"
    LAYER_NORM = "layer_norm"
    PROGRAM = "rowwise"  # any program of vector steps over the rows (a recognised normalisation)


class Along(enum.Enum):
    """How a row-wise operator's constant lines up with its ``rows x cols`` view of the data."""

    COLS = "cols"  # one value per position in the row, the same for every row: shape (cols,)
    ROWS = "rows"  # one value per row: shape (rows,)
    FULL = "full"  # one value per element: shape (rows, cols)


@dataclass(frozen=True)
class RowParam:
    """A constant a row-wise program reads (gamma, beta, a per-channel scale), by its broadcast."""

    ref: TensorRef
    along: Along

    def __repr__(self) -> str:
        """Without the tensor's name: :func:`spec_key` prints it, and equal programs schedule alike."""
        return f"RowParam({self.ref.dtype.name}{list(self.ref.shape)}, {self.along.value})"


@dataclass(frozen=True)
class RowStep:
    """One vector instruction of a row-wise program: ``op`` on ``src`` (and ``other``).

    Sources name the data (``x``), a parameter (``gamma``, ``beta``, ``p<k>``) or an earlier step's
    result (``rw<k>``). ``row``: the result is one value per row (a reduction, or arithmetic on
    per-row values), else a full tile. Parameters by opcode: VSCALE ``src * scale + shift``; VPOW
    ``src ** scale``; VCLIP ``min(max(src, scale), shift)`` (the bounds may be infinite).
    """

    op: isa.Opcode
    src: str
    other: str | None = None
    row: bool = False
    scale: float = 1.0
    shift: float = 0.0

    @property
    def reduce(self) -> bool:
        return self.op in isa.VecReduce.OPS


@dataclass(frozen=True)
class RowwiseSpec(_OpBase):
    """An operator over rows, one row at a time: numerically stable softmax (``exp(x - max) / sum``),
    layer norm (``(x - mean) / sqrt(var + eps) * gamma + beta``, ``gamma``/``beta`` vectors of the row
    length, either may be absent) or, for ``RowKind.PROGRAM``, the vector steps of ``program`` reading
    ``params`` (named ``p0``, ``p1``, ...). The data is viewed as ``rows x cols``: ``row_length``
    consecutive elements per row (0: the last axis)."""

    data: TensorRef
    kind: RowKind
    gamma: TensorRef | None = None
    beta: TensorRef | None = None
    eps: float = 0.0
    row_length: int = 0
    params: tuple[RowParam, ...] = ()
    program: tuple[RowStep, ...] = ()

    def __post_init__(self) -> None:
        if (self.kind == RowKind.PROGRAM) != bool(self.program):
            needs = "needs" if self.kind == RowKind.PROGRAM else "takes no"
            raise ValueError(f"a {self.kind.value} row-wise operator {needs} step program")
        if self.data.size % self.cols:
            raise ValueError(f"rows of {self.cols} elements do not tile the data {self.data.shape}")
        if self.out.size != (self.rows if self.per_row else self.data.size):
            raise ValueError(f"a row-wise output {self.out.shape} is neither one value per row nor per element "
                             f"of {self.data.shape} in rows of {self.cols}")

    def _main_inputs(self) -> tuple[TensorRef, ...]:
        return (self.data, *(t for t in (self.gamma, self.beta) if t is not None), *(p.ref for p in self.params))

    @property
    def cols(self) -> int:
        """The row length (the normalised axes)."""
        return self.row_length or self.data.shape[-1]

    @property
    def rows(self) -> int:
        return self.data.size // self.cols

    @property
    def per_row(self) -> bool:
        """The result is one value per row (a reduction, as ``rows x 1``), not one per element."""
        return self.kind == RowKind.PROGRAM and self.program[-1].row

    macs = 0


#: One output index of a linear resize along an axis: the two source indices it reads and their float32
#: weights (``lo``, ``hi``, ``w0``, ``w1``; ``y = x[lo] * w0 + x[hi] * w1``).
Tap = tuple[int, int, float, float]


@dataclass(frozen=True)
class ResizeSpec(_OpBase):
    """A linear (bilinear) resize of NCHW ``data``: along W with ``cols``, then along H with ``rows`` (TVM's
    order, so every output is llvm's bit for bit). The taps are fixed at compile time by the front end."""

    data: TensorRef
    rows: tuple[Tap, ...]
    cols: tuple[Tap, ...]

    def _main_inputs(self) -> tuple[TensorRef, ...]:
        return (self.data,)

    macs = 0


OpSpec = Conv2dSpec | MatmulSpec | PoolSpec | ElementwiseSpec | RowwiseSpec | ResizeSpec


#: Fields added after tuning records existed: left out of the key at their default value,
#: so the keys of every operator that does not use them are unchanged.
_NEWER_FIELDS = frozenset({"pad_value", "row_length", "params", "program"})


def spec_key(spec: OpSpec) -> str:
    """A name-free signature of an operator: equal for operators that schedule identically.

    Tuning records are keyed by it, so a tile tuned for one ResNet block applies to
    every block of the same shape.
    """

    def ref(t: TensorRef | None) -> str:
        if t is None:
            return "-"
        strided = "" if t.view is None or t.view.contiguous else f"@{[list(d) for d in t.view.dims]}"
        return f"{t.dtype.name}{list(t.shape)}{t.layout}{strided}{'@sram' if t.on_chip else ''}"

    parts = [type(spec).__name__]
    for f in fields(spec):
        if f.name in ("name", "epilogue") or (f.name in _NEWER_FIELDS and getattr(spec, f.name) == f.default):
            continue
        v = getattr(spec, f.name)
        parts.append(ref(v) if isinstance(v, TensorRef) else f"{f.name}={v.value if isinstance(v, enum.Enum) else v}")
    for e in spec.epilogue:
        extra = ((f":{list(e.ints)}" if e.ints else "") + (f":{e.dtype.name}" if e.dtype is not None else "")
                 + (f":{list(e.floats)}" if e.floats else ""))
        parts.append(f"{e.kind.value}:{e.broadcast.value}:{ref(e.operand)}:{e.lo}:{e.hi}{extra}")
    return "|".join(parts)
