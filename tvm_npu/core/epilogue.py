"""The epilogue kinds, in one table: what each elementwise step is in every stage.

For each :class:`~tvm_npu.core.ops.EpiKind`: the Relax operator the pattern table matches
(and the name its pattern carries), its TE expression (the templates' compute), the
vector instruction the codegen emits, its cost class (cycles per lane group, from the
ISA's own classification, so the cost model and the simulator cannot disagree) and
its dtype rule. Adding an elementwise step is one row here (plus the instruction, if
the ISA lacks it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tvm import tirx
from tvm.ir import Expr as PrimExpr

from tvm_npu.config import DType, HardwareConfig
from tvm_npu.core.ops import Broadcast, EpiKind, Epilogue
from tvm_npu.simulator import isa, quant, timing

#: ``te(x, y, step)``: the step's value for input element ``x`` and operand element ``y`` (None if unary).
TeRule = Callable[[PrimExpr, PrimExpr | None, Epilogue], PrimExpr]


@dataclass(frozen=True)
class EpiRule:
    """Everything the stages need to know about one epilogue kind."""

    kind: EpiKind
    relax_op: str | None  # the Relax operator matched as this step (None: derived from another, e.g. bias)
    te: TeRule
    opcode: isa.Opcode
    commutative: bool = False  # binary steps: ``op(x, y) == op(y, x)``
    float_only: bool = False  # refused on integer results

    @property
    def pattern_name(self) -> str:
        """The pattern-table name of the step (``relax.nn.relu`` -> ``relu``)."""
        assert self.relax_op is not None
        return self.relax_op.rsplit(".", 1)[-1]

    @property
    def unary(self) -> bool:
        return not self.kind.binary


def _gelu(x: PrimExpr, _y: PrimExpr | None, _s: Epilogue) -> PrimExpr:
    dt = x.dtype
    return x * tirx.const(0.5, dt) * (tirx.const(1.0, dt) + tirx.erf(x * tirx.const(0.7071067811865476, dt)))


def _hard_sigmoid(x: PrimExpr, s: Epilogue) -> PrimExpr:
    alpha, beta = s.floats
    dt = x.dtype
    return tirx.min(tirx.max(x * tirx.const(alpha, dt) + tirx.const(beta, dt), tirx.const(0.0, dt)),
                    tirx.const(1.0, dt))


def _gelu_tanh(x: PrimExpr, _y: PrimExpr | None, _s: Epilogue) -> PrimExpr:
    dt = x.dtype
    inner = tirx.const(0.7978845608028654, dt) * (x + tirx.const(0.044715, dt) * x * x * x)
    return x * tirx.const(0.5, dt) * (tirx.const(1.0, dt) + tirx.tanh(inner))


def _scale(x: PrimExpr, _y: PrimExpr | None, s: Epilogue) -> PrimExpr:
    """VSCALE: in float64, rounded once to the value's type."""
    scale, shift = s.floats
    return (x.astype("float64") * tirx.const(scale, "float64") + tirx.const(shift, "float64")).astype(x.dtype)


def _clip(x: PrimExpr, _y: PrimExpr | None, s: Epilogue) -> PrimExpr:
    return tirx.min(tirx.max(x, tirx.const(s.lo, x.dtype)), tirx.const(s.hi, x.dtype))


#: :func:`~tvm_npu.simulator.quant.requantize` on TE expressions (the rule is written once, there).
TE_ARITH: quant.Arith[PrimExpr] = quant.Arith(
    to_f32=lambda x: x.astype("float32"),
    mul=lambda a, b: a * (tirx.const(b, "float32") if isinstance(b, float) else b),
    round_even=tirx.nearbyint,
    add_const=lambda x, c: x + tirx.const(c, "float32"),  # the rule's intermediates are all float32
    add=lambda a, b: a + b,
    clip=lambda x, lo, hi: tirx.min(tirx.max(x, tirx.const(lo, "float32")), tirx.const(hi, "float32")),
    cast=lambda x, dtype: x.astype(dtype.np.name),
)


def _cast(x: PrimExpr, _y: PrimExpr | None, s: Epilogue) -> PrimExpr:
    """VCAST: to an integer type rounds half to even and saturates (TIR's cast truncates and wraps)."""
    dt = s.dtype.np.name
    if s.dtype.is_float or not str(x.dtype).startswith("float"):
        return x.astype(dt)
    wide = tirx.nearbyint(x).astype("float64")  # the integer bounds are exact in float64
    info = np.iinfo(s.dtype.np)
    lo, hi = tirx.const(float(info.min), "float64"), tirx.const(float(info.max), "float64")
    return tirx.min(tirx.max(wide, lo), hi).astype(dt)


def _requant(x: PrimExpr, y: PrimExpr | None, s: Epilogue) -> PrimExpr:
    zero_point, lo, hi = s.ints
    assert y is not None and s.dtype is not None
    return quant.requantize(x, y, zero_point, lo, hi, s.dtype, TE_ARITH)


def _qadd(x: PrimExpr, y: PrimExpr | None, s: Epilogue) -> PrimExpr:
    scale_a, scale_b, offset = s.floats
    lo, hi = s.ints
    assert y is not None and s.dtype is not None
    return quant.rescale_add(x, y, scale_a, scale_b, offset, lo, hi, s.dtype, TE_ARITH)


def _qadd_r(x: PrimExpr, y: PrimExpr | None, s: Epilogue) -> PrimExpr:
    """QADD with the operand ``y`` as the offset's term: ``x * scale_b + (offset + y * scale_a)``, the sum
    written value-first (one float32 add commutes exactly) so that the stage reads the value before the
    operand, as every binary step does (the schedules find the operand at read index 1)."""
    scale_a, scale_b, offset = s.floats
    lo, hi = s.ints
    assert y is not None and s.dtype is not None
    ar = TE_ARITH
    total = ar.add(ar.mul(ar.to_f32(x), scale_b), ar.add_const(ar.mul(ar.to_f32(y), scale_a), offset))
    return ar.cast(ar.clip(ar.round_even(total), float(lo), float(hi)), s.dtype)


def _qmul(x: PrimExpr, y: PrimExpr | None, s: Epilogue) -> PrimExpr:
    zero_a, zero_b, zero_y, lo, hi = s.ints
    assert y is not None and s.dtype is not None
    ar = TE_ARITH
    a, b = ar.add_const(ar.to_f32(x), float(-zero_a)), ar.add_const(ar.to_f32(y), float(-zero_b))  # exact
    return quant.rescale_mul(a, b, s.floats[0], zero_y, lo, hi, s.dtype, ar)


_RULES = (
    EpiRule(EpiKind.BIAS, None, lambda x, y, _: x + y, isa.Opcode.VADD, commutative=True),
    EpiRule(EpiKind.ADD, "relax.add", lambda x, y, _: x + y, isa.Opcode.VADD, commutative=True),
    EpiRule(EpiKind.SUB, "relax.subtract", lambda x, y, _: x - y, isa.Opcode.VSUB),
    EpiRule(EpiKind.MUL, "relax.multiply", lambda x, y, _: x * y, isa.Opcode.VMUL, commutative=True),
    EpiRule(EpiKind.MAX, "relax.maximum", lambda x, y, _: tirx.max(x, y), isa.Opcode.VMAX, commutative=True),
    EpiRule(EpiKind.MIN, "relax.minimum", lambda x, y, _: tirx.min(x, y), isa.Opcode.VMIN, commutative=True),
    EpiRule(EpiKind.RELU, "relax.nn.relu", lambda x, _y, _s: tirx.max(x, tirx.const(0, x.dtype)), isa.Opcode.VRELU),
    EpiRule(EpiKind.CLIP, "relax.clip", _clip, isa.Opcode.VCLIP),
    EpiRule(EpiKind.SIGMOID, "relax.sigmoid", lambda x, _y, _s: tirx.sigmoid(x), isa.Opcode.VSIGMOID,
            float_only=True),
    EpiRule(EpiKind.TANH, "relax.tanh", lambda x, _y, _s: tirx.tanh(x), isa.Opcode.VTANH, float_only=True),
    EpiRule(EpiKind.GELU, "relax.nn.gelu", _gelu, isa.Opcode.VGELU, float_only=True),
    EpiRule(EpiKind.GELU_TANH, "relax.nn.gelu_tanh", _gelu_tanh, isa.Opcode.VGELU_TANH, float_only=True),
    EpiRule(EpiKind.SILU, "relax.nn.silu", lambda x, _y, _s: x * tirx.sigmoid(x), isa.Opcode.VSILU,
            float_only=True),
    # matched as clip(x * alpha + beta, 0, 1) and x * that (relay_patterns.patterns / extract; the
    # canonicalisation brings the importer's forms of HardSigmoid and HardSwish to these)
    EpiRule(EpiKind.HSIGMOID, None, lambda x, _y, s: _hard_sigmoid(x, s), isa.Opcode.VHSIGMOID, float_only=True),
    EpiRule(EpiKind.HSWISH, None, lambda x, _y, s: x * _hard_sigmoid(x, s), isa.Opcode.VHSWISH, float_only=True),
    # matched as power(x, scalar constant) (relay_patterns.patterns / extract)
    EpiRule(EpiKind.POW, "relax.power", lambda x, _y, s: tirx.power(x, tirx.const(s.floats[0], x.dtype)),
            isa.Opcode.VPOW, float_only=True),
    # matched as divide(constant, x) -> reciprocal, then multiply by the constant (relay_patterns.extract)
    EpiRule(EpiKind.RECIP, None, lambda x, _y, _s: tirx.const(1.0, x.dtype) / x, isa.Opcode.VRECIP,
            float_only=True),
    # matched as astype(astype(y, float64) * r, float32) (relay_patterns.qdivide: a quantize's quotient)
    EpiRule(EpiKind.SCALE, None, _scale, isa.Opcode.VSCALE, float_only=True),
    # matched as multiply(astype(acc, float32), m) -> quantize(scale 1) (relay_patterns.quantized)
    EpiRule(EpiKind.REQUANT, None, _requant, isa.Opcode.VREQUANT),
    # matched as relax.astype between float types, from 8 bits to float32 (a dequantization) and as the
    # float32 -> int32 rounding of a float quantize (relay_patterns.extract)
    EpiRule(EpiKind.CAST, None, _cast, isa.Opcode.VCAST),
    # matched as quantize((astype(a) * ra + offset) + astype(b) * rb) (relay_patterns.quantized); not
    # commutative: float32 additions in another order round differently
    EpiRule(EpiKind.QADD, None, _qadd, isa.Opcode.VQADD),
    EpiRule(EpiKind.QADD_R, None, _qadd_r, isa.Opcode.VQADD),
    # matched as take(table, astype(x, int32) - qmin) (relay_patterns.qlut / extract); the operand read is
    # the table's entry at table_index(x) (tir_schedules.common), which is the step's value
    EpiRule(EpiKind.LUT, None, lambda _x, y, _s: y, isa.Opcode.VLUT),
    # matched as quantize((x - z_a) * (y - z_b) * ratio + z_y, 1, 0) (relay_patterns.qbinary / extract)
    EpiRule(EpiKind.QMUL, None, _qmul, isa.Opcode.VQMUL),
)

#: The table, by kind.
RULES: dict[EpiKind, EpiRule] = {r.kind: r for r in _RULES}
assert set(RULES) == set(EpiKind), "every epilogue kind needs a row"
#: Relax operator -> kind, for the steps the pattern table matches.
BY_RELAX_OP: dict[str, EpiKind] = {r.relax_op: r.kind for r in _RULES if r.relax_op is not None}


def table_index(x: PrimExpr) -> PrimExpr:
    """The entry of a LUT step's table that 8-bit value ``x`` reads: ``x - qmin`` (VLUT's rule)."""
    return x.astype("int32") - tirx.const(int(np.iinfo(str(x.dtype)).min), "int32")


def rule(kind: EpiKind) -> EpiRule:
    return RULES[kind]


def step_cycles(hw: HardwareConfig, step: Epilogue, nelems: int) -> int:
    """Vector-engine cycles of one epilogue step over ``nelems`` elements (the simulator's formula)."""
    opcode = RULES[step.kind].opcode
    per_group = hw.transcendental_cycles if opcode in isa.VecUnary.TRANSCENDENTAL else 1
    if opcode == isa.Opcode.VPOW:
        per_group = isa.VecPow.EVALUATIONS * hw.transcendental_cycles
    return timing.vector_cycles(hw, nelems, per_group)


#: Casts other than between float types (:data:`RULES`' CAST row): a dequantization's first step, and the
#: rounding of a float32 value to int32 before a requantisation by 1 (a quantize whose scale was folded).
_CASTS = frozenset({(DType.INT8, DType.FP32), (DType.UINT8, DType.FP32), (DType.INT16, DType.FP32),
                    (DType.UINT16, DType.FP32), (DType.FP32, DType.INT32)})


def check_dtype(step: Epilogue, out: DType) -> None:
    """Raise ``ValueError`` when ``step`` cannot run on a value of dtype ``out``."""
    if RULES[step.kind].float_only and not out.is_float:
        raise ValueError(f"{step.kind.value} on an integer ({out.np.name}) result is not supported")
    if step.kind == EpiKind.REQUANT:
        if out not in (DType.INT32, DType.INT64) or step.dtype is None or not step.dtype.is_quantized:
            raise ValueError(f"requantisation takes an int32 / int64 accumulator to an 8- or 16-bit type, not "
                             f"{out.np.name} to "
                             f"{step.dtype.np.name if step.dtype is not None else '?'}")
        if step.operand is None or step.operand.dtype != DType.FP32:
            raise ValueError("requantisation multipliers must be float32")
    elif step.kind in (EpiKind.QADD, EpiKind.QADD_R, EpiKind.QMUL):
        if not out.is_8bit or step.operand is None or step.operand.dtype != out or step.dtype is None:
            raise ValueError(f"a rescaled {'product' if step.kind == EpiKind.QMUL else 'sum'} takes two tensors of one "
                             f"8-bit type, not {out.np.name}")
    elif step.kind == EpiKind.LUT:
        table = step.operand
        if (not out.is_8bit or step.dtype is None or not step.dtype.is_8bit or table is None
                or table.dtype != step.dtype or table.shape != (isa.VecLut.ENTRIES,)
                or step.broadcast != Broadcast.TABLE):
            raise ValueError(f"a table lookup takes an 8-bit value through {isa.VecLut.ENTRIES} entries of an 8-bit "
                             f"type, not {out.np.name} through {table.shape if table is not None else 'none'}")
    elif step.kind == EpiKind.CAST:
        if (out, step.dtype) not in _CASTS and not (out.is_float and step.dtype is not None and step.dtype.is_float):
            to = step.dtype.np.name if step.dtype is not None else "?"
            raise ValueError(f"a cast from {out.np.name} to {to} is not supported; accepted: between float32 and "
                             "float16, int8/uint8/int16/uint16 to float32, float32 to int32")
    elif step.operand is not None and step.operand.dtype != out:
        raise ValueError(f"epilogue {step.kind.value} operand is {step.operand.dtype.np.name}, value is {out.np.name}")


def result_dtype(step: Epilogue, value: DType) -> DType:
    """The dtype of a step's result for an input of dtype ``value``."""
    return value if step.dtype is None else step.dtype  # DType.INT8 is 0: no `or`
