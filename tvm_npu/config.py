"""The single source of truth for the NPU's hardware and the compiler's options.

A target string such as ``"npu -max-sram-bytes=1048576 -pipeline-stages=2"`` is
parsed exactly once, by :func:`parse_target`, into two frozen dataclasses:
:class:`HardwareConfig` (what the machine is; the simulator, the cost model and the
roofline bound all read it) and :class:`CompilerOptions` (how the compiler should
use it). Every other hardware number in the project is derived from these objects.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np


class DType(enum.IntEnum):
    """Element types the NPU moves and computes on (codes are part of the ISA encoding)."""

    INT8 = 0
    INT32 = 1
    FP16 = 2
    FP32 = 3
    UINT8 = 4
    INT16 = 5
    UINT16 = 6
    INT64 = 7

    @property
    def np(self) -> np.dtype:
        """The numpy dtype that holds this element type bit-exactly."""
        return _NP_DTYPES[self]

    @property
    def itemsize(self) -> int:
        return _NP_DTYPES[self].itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.FP16, DType.FP32)

    @property
    def is_quantized(self) -> bool:
        """An 8- or 16-bit integer activation type (a quantized tensor with a scale and zero point)."""
        return self in (DType.INT8, DType.UINT8, DType.INT16, DType.UINT16)

    @property
    def is_8bit(self) -> bool:
        """An 8-bit activation type: what a 256-entry table (``VLUT``) and the 8-bit pair instructions take."""
        return self in (DType.INT8, DType.UINT8)

    @property
    def weight(self) -> DType:
        """The tensor engine's weight operand type for this activation type: int8 for any quantized
        activation (uint8 and 16-bit activations multiply int8 weights, 16x8), else the same type."""
        return DType.INT8 if self.is_quantized else self

    @classmethod
    def from_str(cls, name: str) -> DType:
        """Map a TVM / numpy dtype name (``"float32"``, ``"int8"`` ...) to a DType."""
        try:
            return _FROM_NAMES[str(name)]
        except KeyError:
            accepted = ", ".join(sorted(_FROM_NAMES))
            raise ValueError(f"dtype {name!r} is not supported by the NPU; accepted: {accepted}") from None


_NP_NAMES = {DType.INT8: "int8", DType.INT32: "int32", DType.FP16: "float16", DType.FP32: "float32",
             DType.UINT8: "uint8", DType.INT16: "int16", DType.UINT16: "uint16", DType.INT64: "int64"}
_FROM_NAMES = {v: k for k, v in _NP_NAMES.items()}
_NP_DTYPES = {k: np.dtype(v) for k, v in _NP_NAMES.items()}

#: Accumulator type of the tensor engine for each operand type (datasheet: int32 / fp32). 16-bit activations
#: times int8 weights accumulate in int64: a product reaches 2**22, so int32 overflows from 512 worst-case
#: terms on (TFLite's 16x8 kernels sum in int64, Ethos-U in 48 bits; docs/architecture.md, *16-bit activations*).
ACCUMULATOR = {DType.INT8: DType.INT32, DType.UINT8: DType.INT32, DType.INT16: DType.INT64,
               DType.UINT16: DType.INT64, DType.FP16: DType.FP32, DType.FP32: DType.FP32}


def _key(name: str) -> str:
    """Dataclass field name -> target-string key (``max_sram_bytes`` -> ``max-sram-bytes``)."""
    return name.replace("_", "-")


def _field(default: Any, lo: int | None = None, hi: int | None = None, doc: str = "", **kw: Any) -> Any:
    return field(default=default, metadata={"lo": lo, "hi": hi, "doc": doc, **kw})


@dataclass(frozen=True)
class HardwareConfig:
    """The simulated NPU (docs/architecture.md, "The machine"); every field is a ``-key=value`` target option.

    Fields the datasheet does not name (``num-semaphores``, the engines' fixed
    per-instruction overheads, the cost of transcendental functions) are the
    choices documented in ``docs/architecture.md``.
    """

    clock_mhz: int = _field(1000, 1, 100_000, "clock frequency in MHz")
    mac_rows: int = _field(16, 1, 1024, "tensor-engine rows (reduction dimension of a pass)")
    mac_cols: int = _field(16, 1, 1024, "tensor-engine columns (output channels of a pass)")
    vector_lanes: int = _field(32, 1, 4096, "vector-engine lanes (elements per cycle)")
    max_sram_bytes: int = _field(1 << 20, 4096, 1 << 30, "on-chip SRAM scratchpad size in bytes")
    sram_align_bytes: int = _field(64, 1, 4096, "alignment of every SRAM allocation", pow2=True)
    dram_bytes_per_cycle: int = _field(16, 1, 4096, "DRAM bandwidth shared by loads and stores")
    dma_latency: int = _field(100, 0, 1_000_000, "fixed cycles every DMA descriptor pays")
    dram_burst_bytes: int = _field(64, 1, 4096, "DRAM burst size; partial bursts waste the rest", pow2=True)
    num_semaphores: int = _field(64, 12, 4096, "counting semaphores between engines (the compiler's "
                                 "synchronisation uses one per ordered pair of the 4 engines: at least 12)")
    fp32_mac_slowdown: int = _field(4, 1, 64, "an fp32 MAC takes this many int8/fp16 MAC slots")
    int16_mac_slowdown: int = _field(2, 1, 64, "a 16-bit activation x int8 weight MAC takes this many int8 "
                                     "MAC slots", hashed_if_default=False)
    tensor_issue_cycles: int = _field(32, 0, 100_000, "fixed cycles per tensor instruction (array fill/drain)")
    vector_issue_cycles: int = _field(8, 0, 100_000, "fixed cycles per vector instruction")
    transcendental_cycles: int = _field(4, 1, 1024, "cycles per lane-group for sigmoid/tanh/gelu")

    def __post_init__(self) -> None:
        _validate_ranges(self)
        if self.max_sram_bytes % self.sram_align_bytes:
            raise ValueError(
                f"-max-sram-bytes={self.max_sram_bytes} is not a multiple of "
                f"-sram-align-bytes={self.sram_align_bytes}; accepted: a multiple of the alignment"
            )

    # ---- derived values: the only place they are computed ----
    def peak_macs_per_cycle(self, dtype: DType) -> float:
        """Peak tensor-engine MACs per cycle for an operand type."""
        if dtype in (DType.INT8, DType.UINT8, DType.FP16, DType.FP32, DType.INT16, DType.UINT16):
            return self.mac_rows * self.mac_cols / self.mac_pass_cycles(dtype)
        raise ValueError(f"the tensor engine takes int8, uint8, int16, uint16, fp16 or fp32 operands, not {dtype.name}")

    def mac_pass_cycles(self, dtype: DType) -> int:
        """Cycles to stream one row through the array for an operand type (MAC slots per MAC)."""
        if dtype == DType.FP32:
            return self.fp32_mac_slowdown
        return self.int16_mac_slowdown if dtype in (DType.INT16, DType.UINT16) else 1

    def align(self, nbytes: int) -> int:
        """Round a byte count up to the SRAM allocation alignment."""
        a = self.sram_align_bytes
        return -(-nbytes // a) * a

    def cycles_to_seconds(self, cycles: float) -> float:
        return cycles / (self.clock_mhz * 1e6)

    @property
    def config_hash(self) -> int:
        """A stable 64-bit hash of every field, stamped into programs compiled for this machine."""
        # a field added after programs were stamped enters the hash only when it differs from its
        # default, so programs compiled before it keep their stamp
        text = ";".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                        if f.metadata.get("hashed_if_default", True) or getattr(self, f.name) != f.default)
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")

    def target_string(self) -> str:
        """The ``-key=value`` options that differ from the defaults (round-trips through parse)."""
        return _options_string(self)


class Layout(enum.Enum):
    """Activation layouts the compiler can plan for."""

    NCHW = "NCHW"
    NHWC = "NHWC"
    AUTO = "auto"


class Precision(enum.Enum):
    """The type NPU partitions compute in: the model's own, or fp16 for an fp32 model."""

    MODEL = "model"
    FP16 = "fp16"


class DepthwiseEngine(enum.Enum):
    """Where the tile search may put a depthwise convolution."""

    AUTO = "auto"  # the tensor engine or the vector engine (VDWCONV), whichever the cost model prefers
    TENSOR = "tensor"  # the tensor engine only


@dataclass(frozen=True)
class CompilerOptions:
    """How the compiler uses the hardware; every field is a ``-key=value`` target option."""

    pipeline_stages: int = _field(2, 1, 3, "SRAM buffers per streamed operand (1 none, 2 double, 3 triple buffering)")
    layout_pref: Layout = _field(Layout.AUTO, doc="activation layout: NCHW, NHWC or auto (planner decides)",  # noqa: RUF009 - an immutable enum default
                                 enum=Layout)
    fusion: int = _field(1, 0, 3, "0 every op to DRAM, 1 fuse epilogues in SRAM, "
                                  "2 also keep small intermediates on chip, 3 layer groups (operators run "
                                  "together slice by slice, intermediates in SRAM)")
    tile_min: int = _field(1, 1, 1 << 20, "smallest tile extent the tile search considers")
    tile_max: int = _field(4096, 1, 1 << 20, "largest tile extent the tile search considers")
    precision: Precision = _field(Precision.MODEL, enum=Precision,  # noqa: RUF009 - an immutable enum default
                                  doc="model: compute in the model's types; fp16: run an fp32 model's NPU "
                                      "operators in fp16 (fp32 accumulation, casts where they meet the host)")
    depthwise_engine: DepthwiseEngine = _field(DepthwiseEngine.AUTO, enum=DepthwiseEngine,  # noqa: RUF009 - an immutable enum default
                                               doc="auto: a depthwise conv2d on the tensor or the vector engine, "
                                                   "as the cost model prefers; tensor: the tensor engine only")

    def __post_init__(self) -> None:
        _validate_ranges(self)
        for f in fields(self):
            kind = f.metadata.get("enum")
            if kind is not None and not isinstance(getattr(self, f.name), kind):
                accepted = "|".join(x.value for x in kind)
                raise ValueError(f"-{_key(f.name)}={getattr(self, f.name)!r} is invalid; accepted: {accepted}")
        if self.tile_min > self.tile_max:
            raise ValueError(
                f"-tile-min={self.tile_min} is larger than -tile-max={self.tile_max}; "
                "accepted: tile-min <= tile-max"
            )

    def target_string(self) -> str:
        return _options_string(self)


@dataclass(frozen=True)
class NpuTarget:
    """A parsed ``npu ...`` target: the hardware and the compiler options, nothing else."""

    hw: HardwareConfig = field(default_factory=HardwareConfig)
    options: CompilerOptions = field(default_factory=CompilerOptions)

    def __str__(self) -> str:
        rest = " ".join(s for s in (self.hw.target_string(), self.options.target_string()) if s)
        return f"npu {rest}".strip()


def _validate_ranges(obj: Any) -> None:
    for f in fields(obj):
        value = getattr(obj, f.name)
        lo, hi = f.metadata.get("lo"), f.metadata.get("hi")
        if lo is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"-{_key(f.name)}={value!r} is out of range; accepted: an integer in {lo}..{hi}")
        if f.metadata.get("pow2") and value & (value - 1):
            raise ValueError(f"-{_key(f.name)}={value} is not a power of two; accepted: a power of two")


def _options_string(obj: Any) -> str:
    parts = []
    for f in fields(obj):
        value = getattr(obj, f.name)
        if value != f.default:
            shown = value.value if isinstance(value, enum.Enum) else value
            parts.append(f"-{_key(f.name)}={shown}")
    return " ".join(parts)


_KEYS: dict[str, tuple[type, dataclasses.Field]] = {
    _key(f.name): (cls, f) for cls in (HardwareConfig, CompilerOptions) for f in fields(cls)
}


def _convert(key: str, f: dataclasses.Field, text: str) -> Any:
    kind = f.metadata.get("enum")
    if kind is not None:
        for value in kind:
            if text.lower() == value.value.lower():
                return value
        accepted = "|".join(x.value for x in kind)
        raise ValueError(f"invalid value {text!r} for target key -{key}; accepted: {accepted}")
    try:
        return int(text, 0)
    except ValueError:
        lo, hi = f.metadata["lo"], f.metadata["hi"]
        raise ValueError(f"invalid value {text!r} for target key -{key}; accepted: an integer in {lo}..{hi}") from None


def parse_target(target: str | NpuTarget) -> NpuTarget:
    """Parse ``"npu -key=value ..."`` once into hardware and compiler options.

    Raises ``ValueError`` naming the offending key or token and what is accepted.
    """
    if isinstance(target, NpuTarget):
        return target
    if not isinstance(target, str):
        raise ValueError(f"target must be a string like 'npu -max-sram-bytes=1048576', not {type(target).__name__}")
    tokens = target.split()
    if not tokens or tokens[0] != "npu":
        kind = tokens[0] if tokens else "<empty>"
        raise ValueError(
            f"target kind {kind!r} is not handled by tvm_npu; accepted: 'npu' followed by -key=value options "
            f"(use tvm.relax.build for other targets)"
        )
    values: dict[type, dict[str, Any]] = {HardwareConfig: {}, CompilerOptions: {}}
    for token in tokens[1:]:
        if not token.startswith("-") or "=" not in token:
            raise ValueError(f"malformed target option {token!r}; accepted: -key=value")
        key, _, text = token.lstrip("-").partition("=")
        if key not in _KEYS:
            raise ValueError(f"unknown target key -{key}; accepted keys: {', '.join('-' + k for k in sorted(_KEYS))}")
        cls, f = _KEYS[key]
        if f.name in values[cls]:
            raise ValueError(f"target key -{key} is given twice")
        values[cls][f.name] = _convert(key, f, text)
    return NpuTarget(HardwareConfig(**values[HardwareConfig]), CompilerOptions(**values[CompilerOptions]))


def target_help() -> list[tuple[str, str, str]]:
    """``(key, default, meaning)`` for every target option, for ``--help`` and the README."""
    rows = []
    for cls in (HardwareConfig, CompilerOptions):
        for f in fields(cls):
            default = f.default.value if isinstance(f.default, enum.Enum) else f.default
            rows.append((f"-{_key(f.name)}", str(default), f.metadata["doc"]))
    return rows
