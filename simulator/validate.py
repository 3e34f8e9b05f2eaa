"""Static validation of a program against a hardware configuration.

Run once per loaded program, before any cycle is simulated (timing-only runs too), so
that executing an instruction can never index outside the SRAM or a DRAM tensor, see
an operand of the wrong type or build an array the numerics cannot handle. Every
defect raises :class:`InstructionError` (index, opcode, field, rule) or, for the
program as a whole, :class:`ProgramFormatError` / :class:`ConfigMismatchError`.

Rules beyond bounds and alignment, and why:

* every destination, every DMA's SRAM side and every tensor-engine operand has
  distinct elements (no zero or overlapping strides), so results never depend on
  write order and no operand is larger than the SRAM;
* conv padding is at most the dilated kernel extent minus one, pool padding is
  smaller than the kernel, so every pool window sees at least one real element;
* DmaStore writes only OUTPUT or SCRATCH tensors.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from functools import cache
from typing import NoReturn

import numpy as np

from tvm_npu.config import DType, HardwareConfig

from . import isa
from .errors import ConfigMismatchError, InstructionError, ProgramFormatError

_TENSOR_DTYPES = (DType.INT8, DType.UINT8, DType.INT16, DType.UINT16, DType.FP16, DType.FP32)
_INT_RANGE = {dt: (int(np.iinfo(dt.np).min), int(np.iinfo(dt.np).max))
              for dt in (DType.INT8, DType.UINT8, DType.INT16, DType.UINT16, DType.INT32, DType.INT64)}


def distinct_elements(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """True if no two indices of ``shape`` map to the same offset (sufficient test).

    Sorting dims by stride, each stride must exceed the largest offset the smaller
    dims reach: the layouts codegen produces (row-major, transposed, padded) all pass.
    """
    reach = 0
    for s, n in sorted((s, n) for n, s in zip(shape, strides, strict=True) if n > 1):
        if s <= reach:
            return False
        reach += (n - 1) * s
    return True


class _Checker:
    """Checks one instruction; remembers the highest SRAM byte any operand touches."""

    def __init__(self, hw: HardwareConfig, program: isa.Program) -> None:
        self.hw = hw
        self.program = program
        self.sizes = [t.size for t in program.tensors]
        self.valid_operands: set[tuple] = set()  # SRAM operands already checked (tiles repeat)
        self.index = 0
        self.op = ""
        self.high_water = 0
        self.accesses: tuple[isa.Access, ...] | None = None  # of the instruction being checked

    def fail(self, field: str, rule: str) -> NoReturn:
        raise InstructionError(self.index, self.op, field, rule)

    def positive(self, instr: object, *names: str) -> None:
        for name in names:
            value = getattr(instr, name)
            values = value if isinstance(value, tuple) else (value,)
            if any(v <= 0 for v in values):
                self.fail(name, f"must be positive, got {value}")

    def nonnegative(self, instr: object, *names: str) -> None:
        for name in names:
            value = getattr(instr, name)
            values = value if isinstance(value, tuple) else (value,)
            if any(v < 0 for v in values):
                self.fail(name, f"must be non-negative, got {value}")

    def tensor_dtype(self, field: str, dtype: DType) -> None:
        if dtype not in _TENSOR_DTYPES:
            self.fail(field, f"operand dtype {dtype.name} is not a tensor-engine type; accepted: INT8, UINT8, INT16, "
                             "UINT16, FP16, FP32")

    def describe(self, ins: isa.Instruction) -> tuple[isa.Access, ...]:
        """The record's :meth:`accesses`, once its own fields have been checked (dtypes, axis, groups)."""
        self.accesses = ins.accesses()
        return self.accesses

    def operands(self, ins: isa.Instruction) -> None:
        """Bounds, alignment and overlap of every SRAM operand, from the record's own :meth:`accesses`."""
        for acc in self.describe(ins):
            if acc.space == isa.Space.SRAM:
                self.sram(acc)

    def sram(self, acc: isa.Access) -> None:
        """Bounds, alignment and (for ``distinct`` operands) overlap of one SRAM operand."""
        key = (acc.base, acc.shape, acc.strides, acc.dtype, acc.distinct)
        if key in self.valid_operands:
            return
        if any(s < 0 for s in acc.strides):
            self.fail(acc.strides_field, f"must be non-negative, got {acc.strides}")
        addr, size = acc.base, acc.dtype.itemsize
        if addr % size:
            self.fail(acc.field, f"SRAM address {addr} is misaligned: must be a multiple of {size} ({acc.dtype.name})")
        end = acc.extent[1]
        if addr < 0 or end > self.hw.max_sram_bytes:
            self.fail(
                acc.field,
                f"SRAM access out of bounds: bytes [{addr}, {end}) outside [0, {self.hw.max_sram_bytes})",
            )
        if acc.distinct and not distinct_elements(acc.shape, acc.strides):
            self.fail(acc.strides_field, f"elements must be distinct (no zero or overlapping strides): {acc.strides}")
        self.high_water = max(self.high_water, end)
        self.valid_operands.add(key)

    # ------------------------------------------------------------ per record
    def dma(self, ins: isa.DmaLoad | isa.DmaStore) -> None:
        tensors = self.program.tensors
        if not 0 <= ins.tensor < len(tensors):
            self.fail("tensor", f"tensor index {ins.tensor} is not in the program's table of {len(tensors)} tensors")
        decl = tensors[ins.tensor]
        if ins.dtype != decl.dtype:
            self.fail(
                "dtype", f"operand dtype mismatch: {ins.dtype.name} but tensor {decl.name!r} is {decl.dtype.name}"
            )
        self.positive(ins, "shape")
        self.nonnegative(ins, "dram_offset", "dram_strides")
        dram, sram = self.describe(ins)
        first, last = dram.base, dram.extent[1] - 1
        if last >= self.sizes[ins.tensor]:
            self.fail(
                dram.field,
                f"DRAM access out of bounds: elements [{first}, {last}] of tensor {decl.name!r} "
                f"which has {self.sizes[ins.tensor]}",
            )
        if dram.write:
            if decl.kind not in (isa.TensorKind.OUTPUT, isa.TensorKind.SCRATCH):
                self.fail(
                    "tensor",
                    f"DmaStore writes only OUTPUT or SCRATCH tensors; {decl.name!r} is {decl.kind.name}",
                )
            if dram.distinct and not distinct_elements(dram.shape, dram.strides):
                self.fail(dram.strides_field, f"destination elements must be distinct, got {dram.strides}")
        self.sram(sram)

    def matmul(self, ins: isa.MatMul) -> None:
        self.tensor_dtype("in_dtype", ins.in_dtype)
        self.positive(ins, "m", "n", "k")
        self.operands(ins)

    def conv(self, ins: isa.Conv) -> None:
        self.tensor_dtype("in_dtype", ins.in_dtype)
        self.positive(
            ins, "in_c", "in_h", "in_w", "out_c", "out_h", "out_w", "kernel_h", "kernel_w",
            "stride_h", "stride_w", "dilation_h", "dilation_w", "groups",
        )  # fmt: skip
        for name in ("in_c", "out_c"):
            if getattr(ins, name) % ins.groups:
                self.fail(name, f"{getattr(ins, name)} is not divisible by groups={ins.groups}")
        self._conv_window(ins)

    def dwconv(self, ins: isa.DwConv) -> None:
        self.tensor_dtype("in_dtype", ins.in_dtype)
        self.positive(
            ins, "channels", "in_h", "in_w", "out_h", "out_w", "kernel_h", "kernel_w",
            "stride_h", "stride_w", "dilation_h", "dilation_w",
        )  # fmt: skip
        self._conv_window(ins)

    def _conv_window(self, ins: isa.Conv | isa.DwConv) -> None:
        """Pad value, padding and window rules shared by both convolution records, then the operands."""
        self.nonnegative(ins, "pad_top", "pad_left", "pad_bottom", "pad_right")
        if ins.in_dtype.is_quantized:
            self.in_range("pad_value", ins.pad_value, ins.in_dtype)
        elif ins.pad_value != 0:
            self.fail("pad_value", f"must be 0 for {ins.in_dtype.name} (only 8-bit inputs pad with a zero point), "
                                   f"got {ins.pad_value}")
        for axis, kernel, dilation, pads in (
            ("h", ins.kernel_h, ins.dilation_h, ("pad_top", "pad_bottom")),
            ("w", ins.kernel_w, ins.dilation_w, ("pad_left", "pad_right")),
        ):
            extent = (kernel - 1) * dilation
            for pad in pads:
                if getattr(ins, pad) > extent:
                    self.fail(pad, f"padding {getattr(ins, pad)} exceeds the dilated kernel extent - 1 = {extent}")
            self._window(ins, axis, extent + 1)
        self.operands(ins)

    def _window(self, ins: isa.Conv | isa.DwConv | isa.Pool, axis: str, window: int) -> None:
        """The last output's window must end inside the padded input."""
        out, stride, size = (
            (ins.out_h, ins.stride_h, ins.pad_top + ins.in_h + ins.pad_bottom)
            if axis == "h"
            else (ins.out_w, ins.stride_w, ins.pad_left + ins.in_w + ins.pad_right)
        )
        end = (out - 1) * stride + window
        if end > size:
            self.fail(
                f"out_{axis}",
                f"the last output's window ends at padded {axis} {end}, beyond pad + in_{axis} + pad = {size}",
            )

    def vec_base(self, ins: isa._VecBase) -> None:
        self.positive(ins, "shape")
        self.operands(ins)

    def vec_binary(self, ins: isa.VecBinary) -> None:
        self.op_in(ins, isa.VecBinary.OPS)
        self.vec_base(ins)

    def vec_unary(self, ins: isa.VecUnary) -> None:
        self.op_in(ins, isa.VecUnary.OPS)
        if ins.op in isa.VecUnary.TRANSCENDENTAL and not ins.dtype.is_float:
            self.fail("dtype", f"{ins.op.name} needs a float dtype (FP16, FP32), got {ins.dtype.name}")
        self.vec_base(ins)

    def vec_clip(self, ins: isa.VecClip) -> None:
        for name in ("lo", "hi"):
            value = getattr(ins, name)
            if math.isnan(value):
                self.fail(name, "must not be NaN")
            if not ins.dtype.is_float:
                lo, hi = _INT_RANGE[ins.dtype]
                if not math.isfinite(value) or value != int(value):
                    self.fail(name, f"must be an integer for {ins.dtype.name}, got {value}")
                if not lo <= value <= hi:
                    self.fail(name, f"{value} is outside the {ins.dtype.name} range [{lo}, {hi}]")
        if ins.lo > ins.hi:
            self.fail("lo", f"lo={ins.lo} is greater than hi={ins.hi}")
        self.vec_base(ins)

    def vec_scale(self, ins: isa.VecScale) -> None:
        if not ins.dtype.is_float:
            self.fail("dtype", f"VSCALE needs a float dtype (FP16, FP32), got {ins.dtype.name}")
        for name in ("scale", "shift"):
            if not math.isfinite(getattr(ins, name)):
                self.fail(name, f"must be finite, got {getattr(ins, name)}")
        self.vec_base(ins)

    def vec_hard_sigmoid(self, ins: isa.VecHardSigmoid) -> None:
        self.op_in(ins, isa.VecHardSigmoid.OPS)
        if not ins.dtype.is_float:
            self.fail("dtype", f"{ins.op.name} needs a float dtype (FP16, FP32), got {ins.dtype.name}")
        for name in ("alpha", "beta"):
            if not math.isfinite(getattr(ins, name)):
                self.fail(name, f"must be finite, got {getattr(ins, name)}")
        self.vec_base(ins)

    def vec_pow(self, ins: isa.VecPow) -> None:
        if not ins.dtype.is_float:
            self.fail("dtype", f"VPOW needs a float dtype (FP16, FP32), got {ins.dtype.name}")
        if not math.isfinite(ins.exponent):
            self.fail("exponent", f"must be finite, got {ins.exponent}")
        self.vec_base(ins)

    def vec_bias_add(self, ins: isa.VecBiasAdd) -> None:
        if ins.axis not in (0, 1, 2):
            self.fail("axis", f"must be 0, 1 or 2, got {ins.axis}")
        self.vec_base(ins)

    def in_range(self, field: str, value: int, dtype: DType) -> None:
        lo, hi = _INT_RANGE[dtype]
        if not lo <= value <= hi:
            self.fail(field, f"must be in the {dtype.name} range [{lo}, {hi}], got {value}")

    def vec_requant(self, ins: isa.VecRequant) -> None:
        self.op_in(ins, isa.VecRequant.OPS)
        if not ins.dst_dtype.is_quantized:
            self.fail("dst_dtype", f"must be INT8, UINT8, INT16 or UINT16, got {ins.dst_dtype.name}")
        for name in ("zero_point", "lo", "hi"):
            self.in_range(name, getattr(ins, name), ins.dst_dtype)
        if ins.lo > ins.hi:
            self.fail("lo", f"lo={ins.lo} is greater than hi={ins.hi}")
        self.vec_base(ins)

    def vec_qadd(self, ins: isa.VecQAdd) -> None:
        for name in ("src_dtype", "dst_dtype"):
            if not getattr(ins, name).is_8bit:
                self.fail(name, f"must be INT8 or UINT8, got {getattr(ins, name).name}")
        for name in ("scale_a", "scale_b", "offset"):
            value = getattr(ins, name)
            if not math.isfinite(value) or float(np.float32(value)) != value:
                self.fail(name, f"must be a finite float32 value, got {value}")
        for name in ("lo", "hi"):
            self.in_range(name, getattr(ins, name), ins.dst_dtype)
        if ins.lo > ins.hi:
            self.fail("lo", f"lo={ins.lo} is greater than hi={ins.hi}")
        self.vec_base(ins)

    def vec_qmul(self, ins: isa.VecQMul) -> None:
        for name in ("src_dtype", "dst_dtype"):
            if not getattr(ins, name).is_8bit:
                self.fail(name, f"must be INT8 or UINT8, got {getattr(ins, name).name}")
        if not math.isfinite(ins.ratio) or float(np.float32(ins.ratio)) != ins.ratio:
            self.fail("ratio", f"must be a finite float32 value, got {ins.ratio}")
        for name in ("zero_a", "zero_b"):
            self.in_range(name, getattr(ins, name), ins.src_dtype)
        for name in ("zero_y", "lo", "hi"):
            self.in_range(name, getattr(ins, name), ins.dst_dtype)
        if ins.lo > ins.hi:
            self.fail("lo", f"lo={ins.lo} is greater than hi={ins.hi}")
        self.vec_base(ins)

    def vec_cast(self, ins: isa.VecCast) -> None:
        self.vec_base(ins)

    def vec_lut(self, ins: isa.VecLut) -> None:
        for name in ("src_dtype", "dst_dtype"):
            if not getattr(ins, name).is_8bit:
                self.fail(name, f"must be INT8 or UINT8 (a table has one entry per 8-bit value), got "
                                f"{getattr(ins, name).name}")
        self.vec_base(ins)

    def vec_reduce(self, ins: isa.VecReduce) -> None:
        self.op_in(ins, isa.VecReduce.OPS)
        if not ins.dtype.is_float:
            self.fail("dtype", f"{ins.op.name} needs a float dtype (FP16, FP32), got {ins.dtype.name}")
        self.positive(ins, "shape")
        self.operands(ins)

    def pool(self, ins: isa.Pool) -> None:
        self.op_in(ins, type(ins).OPS)
        if isinstance(ins, isa.PaddedMaxPool):
            self._pad_value(ins)
        self.positive(ins, "channels", "in_h", "in_w", "out_h", "out_w", "kernel_h", "kernel_w", "stride_h", "stride_w")
        self.nonnegative(ins, "pad_top", "pad_left", "pad_bottom", "pad_right")
        for kernel, pads in ((ins.kernel_h, ("pad_top", "pad_bottom")), (ins.kernel_w, ("pad_left", "pad_right"))):
            for pad in pads:
                if getattr(ins, pad) >= kernel:
                    self.fail(pad, f"padding {getattr(ins, pad)} must be smaller than the kernel ({kernel})")
        self._window(ins, "h", ins.kernel_h)
        self._window(ins, "w", ins.kernel_w)
        self.operands(ins)

    def _pad_value(self, ins: isa.PaddedMaxPool) -> None:
        v = ins.pad_value
        if not math.isfinite(v):
            self.fail("pad_value", f"{v} is not finite; accepted: a finite value of the pool's dtype")
        elif not ins.dtype.is_float:
            info = np.iinfo(ins.dtype.np)
            if v != int(v) or not info.min <= v <= info.max:
                self.fail("pad_value",
                          f"{v} is not a {ins.dtype.np.name}; accepted: an integer in {info.min}..{info.max}")
        elif float(ins.dtype.np.type(v)) != v:
            self.fail("pad_value", f"{v} is not exact in {ins.dtype.np.name}; accepted: a value of the pool's dtype")

    def sync(self, ins: isa.Signal | isa.Wait) -> None:
        if not 0 <= ins.sem < self.hw.num_semaphores:
            self.fail("sem", f"semaphore {ins.sem} does not exist; accepted: 0..{self.hw.num_semaphores - 1}")

    def op_in(self, ins: isa.VecBinary | isa.VecUnary | isa.VecHardSigmoid | isa.VecReduce | isa.Pool,
              ops: frozenset[isa.Opcode]) -> None:
        if ins.op not in ops:
            accepted = sorted(o.name for o in ops)
            self.fail("op", f"{ins.op!r} is not valid for {type(ins).__name__}; accepted: {accepted}")


_CHECKS: dict[type, Callable[[_Checker, object], None]] = {
    isa.DmaLoad: _Checker.dma,
    isa.DmaStore: _Checker.dma,
    isa.MatMul: _Checker.matmul,
    isa.Conv: _Checker.conv,
    isa.VecBinary: _Checker.vec_binary,
    isa.VecUnary: _Checker.vec_unary,
    isa.VecClip: _Checker.vec_clip,
    isa.VecScale: _Checker.vec_scale,
    isa.VecHardSigmoid: _Checker.vec_hard_sigmoid,
    isa.VecPow: _Checker.vec_pow,
    isa.VecBiasAdd: _Checker.vec_bias_add,
    isa.VecRequant: _Checker.vec_requant,
    isa.VecQAdd: _Checker.vec_qadd,
    isa.VecQMul: _Checker.vec_qmul,
    isa.VecCast: _Checker.vec_cast,
    isa.VecLut: _Checker.vec_lut,
    isa.VecReduce: _Checker.vec_reduce,
    isa.Pool: _Checker.pool,
    isa.PaddedMaxPool: _Checker.pool,
    isa.DwConv: _Checker.dwconv,
    isa.Signal: _Checker.sync,
    isa.Wait: _Checker.sync,
}


# ------------------------------------------------------------ field types
def _is_int(v: object) -> bool:
    return type(v) is int


def _tuple_of_ints(arity: int) -> Callable[[object], bool]:
    return lambda v: type(v) is tuple and len(v) == arity and all(type(x) is int for x in v)


_TYPE_TESTS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "int": ("an int", _is_int),
    "bool": ("a bool", lambda v: type(v) is bool),
    "float": ("a float", lambda v: type(v) in (int, float)),
    "DType": ("a DType", lambda v: isinstance(v, DType)),
    "Engine": ("an Engine", lambda v: isinstance(v, isa.Engine)),
    "Opcode": ("an Opcode", lambda v: isinstance(v, isa.Opcode)),
    "Strides3": ("a tuple of 3 ints", _tuple_of_ints(3)),
    "Strides4": ("a tuple of 4 ints", _tuple_of_ints(4)),
    "tuple[int, int]": ("a tuple of 2 ints", _tuple_of_ints(2)),
}


@cache
def _field_tests(cls: type) -> tuple[tuple[str, str, Callable[[object], bool]], ...]:
    return tuple((f.name, *_TYPE_TESTS[f.type]) for f in dataclasses.fields(cls))


def _check_types(index: int, instr: object) -> None:
    """Field types of a record built in Python (decoded programs are typed by construction)."""
    if type(instr) not in isa.RECORD_OF.values():
        raise InstructionError(index, type(instr).__name__, "opcode", "not an NPU instruction record")
    for name, what, test in _field_tests(type(instr)):
        if not test(getattr(instr, name)):
            raise InstructionError(index, instr.opcode.name, name, f"must be {what}, got {getattr(instr, name)!r}")


# ------------------------------------------------------------ program level
def _check_tensors(program: isa.Program) -> None:
    names = set()
    for i, t in enumerate(program.tensors):
        if not isinstance(t, isa.TensorDecl) or not isinstance(t.name, str):
            raise ProgramFormatError(f"tensor table entry #{i} is not a TensorDecl with a string name")
        if not isinstance(t.dtype, DType) or not isinstance(t.kind, isa.TensorKind):
            raise ProgramFormatError(f"tensor {t.name!r}: dtype must be a DType and kind a TensorKind")
        if type(t.shape) is not tuple or not all(type(d) is int and d > 0 for d in t.shape):
            raise ProgramFormatError(f"tensor {t.name!r}: shape must be a tuple of positive ints, got {t.shape!r}")
        if t.name in names:
            raise ProgramFormatError(f"tensor table has a duplicate name {t.name!r}")
        names.add(t.name)
        if t.kind == isa.TensorKind.CONSTANT:
            data = program.constants.get(t.name)
            if not isinstance(data, np.ndarray) or data.shape != t.shape or data.dtype != t.dtype.np:
                got = "nothing" if data is None else f"{getattr(data, 'dtype', '?')} {getattr(data, 'shape', '')}"
                raise ProgramFormatError(f"constant {t.name!r} needs data of {t.dtype.name} {t.shape}, got {got}")


def validate(hw: HardwareConfig, program: isa.Program, *, check_types: bool = True) -> int:
    """Check every rule of the ISA for ``hw``; return the SRAM high-water mark in bytes."""
    return validate_accesses(hw, program, check_types=check_types)[0]


def validate_accesses(
    hw: HardwareConfig, program: isa.Program, *, check_types: bool = True
) -> tuple[int, list[tuple[isa.Access, ...]]]:
    """:func:`validate`, also returning every instruction's :meth:`accesses` (equal records share one tuple)."""
    if program.config_hash != hw.config_hash:
        raise ConfigMismatchError(
            f"program was compiled for hardware configuration 0x{program.config_hash:016x}, this simulator is "
            f"0x{hw.config_hash:016x} (target 'npu {hw.target_string()}'); recompile for this target"
        )
    _check_tensors(program)
    instrs = program.instructions
    if not instrs:
        raise InstructionError(0, "END", "opcode", "a program must end with exactly one END; it is empty")
    checker = _Checker(hw, program)
    last = len(instrs) - 1
    # equal records pass or fail alike: check each once (and describe its operands once)
    valid: dict[isa.Instruction, tuple[isa.Access, ...]] = {}
    accesses: list[tuple[isa.Access, ...]] = []
    for index, instr in enumerate(instrs):
        if check_types:
            _check_types(index, instr)
        known = valid.get(instr)
        if known is not None:
            accesses.append(known)
            continue
        checker.index, checker.op = index, instr.opcode.name
        if isinstance(instr, isa.End):
            if index != last:
                checker.fail("opcode", f"END must be the last instruction (#{last}) and appear once")
            accesses.append(())
            continue
        if index == last:
            checker.fail("opcode", "the last instruction must be END")
        checker.accesses = None
        _CHECKS[type(instr)](checker, instr)
        accs = checker.accesses if checker.accesses is not None else instr.accesses()
        valid[instr] = accs
        accesses.append(accs)
    return checker.high_water, accesses
