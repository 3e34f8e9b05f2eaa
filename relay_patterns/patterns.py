"""The NPU's pattern table for ``FuseOpsByPattern`` (names ``npu.*``).

Order is priority, highest first: conv2d / matmul with the longest epilogue
chains first (conv -> bias -> residual -> activation, every subset), then the bare
operators, pooling, and last the single elementwise ops, so that a bias add or an
activation is claimed by its producer before it could become an operator of its
own. ``MergeCompositeFunctions`` later merges neighbouring ``npu.*`` composites
into one NPU region.

Every check function builds the spec the codegen will build (``extract.py``),
so an operator is offloaded only when extraction succeeds (supported op, dtypes,
static shapes, layouts) and the planner finds a tile that fits the SRAM budget.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from tvm import relax
from tvm.relax.backend.pattern_registry import register_patterns
from tvm.relax.dpl import DFPattern, is_const, is_op, wildcard
from tvm.relax.transform import PatternCheckContext
from tvm_npu.tir_schedules.scheduler import split_global_pool
from tvm_npu.tir_schedules.tile_search import fits

from tvm_npu.config import DType, NpuTarget
from tvm_npu.core.epilogue import RULES
from tvm_npu.core.ops import ElementwiseSpec, OpSpec, PoolSpec

from . import resize
from .extract import GenericConst, extract_from_context, tensor_type
from .graph import selection

PREFIX = "npu"

#: Unary steps by pattern name (``relu6`` reaches us as ``clip(x, 0, 6)``), and binary elementwise ops
#: offloaded on their own (one operand a tensor, the other a tensor or a constant): from the epilogue table.
ACTIVATIONS: dict[str, str] = {r.pattern_name: r.relax_op for r in RULES.values() if r.unary and r.relax_op}
BINARY: dict[str, str] = {r.pattern_name: r.relax_op for r in RULES.values() if not r.unary and r.relax_op}
POOLS: dict[str, str] = {
    "max_pool2d": "relax.nn.max_pool2d",
    "avg_pool2d": "relax.nn.avg_pool2d",
    "adaptive_avg_pool2d": "relax.nn.adaptive_avg_pool2d",
    "mean": "relax.mean",
}

#: Row-wise operators (softmax, layer norm over the last axis): ``tir_schedules/rowwise.py``.
ROWWISE: dict[str, DFPattern] = {
    "softmax": is_op("relax.nn.softmax")(wildcard()),
    "layer_norm": is_op("relax.nn.layer_norm")(wildcard(), wildcard(), wildcard()),
}

#: The float forms :mod:`.quantized` gives a dequantize / quantize it leaves around a float operator:
#: ``(astype(x) - z) * s`` (cast, subtract, multiply) and ``quantize(astype(astype(y, f64) * (1 / s), f32), 1, z)``
#: (the exact quotient, :mod:`.qdivide`: a VSCALE, a cast to int32 and a requantisation by 1); a quantize it
#: leaves (a scale that is not a positive normal float32) is refused with the reason.
LONE_QDQ: dict[str, DFPattern] = {
    "dequantize": is_op("relax.multiply")(is_op("relax.subtract")(is_op("relax.astype")(wildcard()), is_const()),
                                          is_const()),
    "quantize_scaled": is_op("relax.quantize")(
        is_op("relax.astype")(is_op("relax.multiply")(is_op("relax.astype")(wildcard()), is_const())), is_const(),
        is_const()),
    # an integer form ending in a clamp (a relu folded into a requantisation, :mod:`.qbinary` / :mod:`.qaffine`)
    "quantize_clip": is_op("relax.clip")(is_op("relax.quantize")(wildcard(), is_const(), is_const()), wildcard(),
                                         wildcard()),
    "quantize": is_op("relax.quantize")(wildcard(), is_const(), is_const()),
}

#: An 8-bit table lookup as :mod:`.qlut` writes it, ``take(table, astype(x, int32) - qmin)`` (one VLUT pass,
#: or a step of the producer's epilogue once the plan fuses it).
LOOKUP: DFPattern = is_op("relax.take")(is_const(),
                                         is_op("relax.subtract")(is_op("relax.astype")(wildcard()), is_const()))

CheckFn = Callable[[PatternCheckContext], bool]
PatternEntry = tuple[str, DFPattern, dict[str, DFPattern], CheckFn]


def _hard_sigmoid(x: DFPattern) -> DFPattern:
    """``clip(x * alpha + beta, 0, 1)``: the form canonicalisation gives ONNX HardSigmoid (bounds checked
    by the extraction)."""
    scaled = is_op("relax.add")(is_op("relax.multiply")(x, is_const()), is_const())
    return is_op("relax.clip")(scaled, wildcard(), wildcard())


#: Activations spelled in several Relax ops (one epilogue step each; ``x`` is used twice by hard swish).
COMPOSITE_ACTIVATIONS: dict[str, Callable[[DFPattern], DFPattern]] = {
    "hardswish": lambda x: is_op("relax.multiply")(x, _hard_sigmoid(x)),
    "hardsigmoid": _hard_sigmoid,
}


def _activation(name: str, x: DFPattern) -> DFPattern:
    if name in COMPOSITE_ACTIVATIONS:
        return COMPOSITE_ACTIVATIONS[name](x)
    op = is_op(ACTIVATIONS[name])
    if name == "power":  # a constant scalar exponent (checked by the extraction)
        return op(x, is_const())
    return op(x, wildcard(), wildcard()) if name == "clip" else op(x)


def _epilogue_variants(fusion: int) -> list[tuple[bool, bool, str | None]]:
    """(bias, residual, activation) combinations, longest chain first; only the bare op at fusion 0."""
    if fusion == 0:
        return [(False, False, None)]
    variants = [
        (bias, residual, act)
        for bias in (True, False)
        for residual in (True, False)
        for act in (*COMPOSITE_ACTIVATIONS, *ACTIVATIONS, None)
    ]
    return sorted(variants, key=lambda v: -(v[0] + v[1] + (v[2] is not None)))


def _with_epilogue(op: DFPattern, bias: bool, residual: bool, act: str | None) -> DFPattern:
    out = op
    if bias:
        out = is_op("relax.add")(out, is_const())
    if residual:
        out = is_op("relax.add")(out, wildcard())
    if act is not None:
        out = _activation(act, out)
    return out


def _requantised(out: DFPattern, bias: bool, clip: bool) -> DFPattern:
    """``[+ bias] -> quantize(astype(.) * m)`` [-> integer clip]: the requantisation form of :mod:`.quantized`."""
    if bias:
        out = is_op("relax.add")(out, is_const())
    scaled = is_op("relax.multiply")(is_op("relax.astype")(out), is_const())
    out = is_op("relax.quantize")(scaled, is_const(), is_const())
    return is_op("relax.clip")(out, wildcard(), wildcard()) if clip else out


def _rescaled_add(clip: bool) -> DFPattern:
    """``quantize((astype(a) * ra + offset) + astype(b) * rb)`` [-> clip]: the 8-bit add of :mod:`.quantized`."""
    def scaled() -> DFPattern:
        return is_op("relax.multiply")(is_op("relax.astype")(wildcard()), is_const())

    total = is_op("relax.add")(is_op("relax.add")(scaled(), is_const()), scaled())
    out = is_op("relax.quantize")(total, is_const(), is_const())
    return is_op("relax.clip")(out, wildcard(), wildcard()) if clip else out


def _rescaled_mul(clip: bool) -> DFPattern:
    """``quantize((astype(a) - za) * (astype(b) - zb) * ratio + zy)`` [-> clip]: the 8-bit product of
    :mod:`.qbinary` (a zero point of 0 leaves the subtraction out)."""
    def shifted() -> DFPattern:
        cast = is_op("relax.astype")(wildcard())
        return is_op("relax.subtract")(cast, is_const()) | cast

    product = is_op("relax.multiply")(shifted(), shifted() | is_const())  # a constant factor: folded b - zb
    total = is_op("relax.add")(is_op("relax.multiply")(product, is_const()), is_const())
    out = is_op("relax.quantize")(total, is_const(), is_const())
    return is_op("relax.clip")(out, wildcard(), wildcard()) if clip else out


def _int8_variants(fusion: int) -> list[tuple[bool, bool, bool]]:
    """(bias, clip, explicit pad) of the 8-bit conv / matmul patterns, longest first (none at fusion 0:
    the int32 accumulator then goes to DRAM and the host requantises)."""
    if fusion == 0:
        return []
    variants = [(b, c, p) for b in (True, False) for c in (True, False) for p in (True, False)]
    return sorted(variants, key=lambda v: -sum(v))


def _narrowed(op: DFPattern) -> DFPattern:
    """The operator, or its fp32 accumulator cast to fp16 (the form of fp16 models)."""
    return is_op("relax.astype")(op) | op


def _transposed_b() -> DFPattern:
    """A matmul's second operand transposed in its last two axes (a weight, or K^T of attention): folded
    into the matmul, whose B tile is then read transposed. Other transposes stay operators of their own."""
    perm = is_op("relax.permute_dims")(wildcard())
    swaps = [perm.has_attr({"axes": [*range(r - 2), r - 1, r - 2]}) for r in (2, 3, 4)]
    return swaps[0] | swaps[1] | swaps[2] | is_op("relax.permute_dims")(is_const())


def _variant_name(op: str, bias: bool, residual: bool, act: str | None) -> str:
    parts = [op, "bias" if bias else "", "add" if residual else "", act or ""]
    return f"{PREFIX}." + "_".join(p for p in parts if p)


def _leaks(ctx: PatternCheckContext) -> bool:
    """True when a value computed inside the match is also used outside it (it could not be fused)."""
    inside = set(ctx.matched_bindings.keys())
    root_var = ctx.value_to_bound_var.get(ctx.matched_expr)
    for var in inside:
        if var.same_as(root_var):
            continue
        if any(user not in inside for user in ctx.var_usages.get(var, [])):
            return True
    return False


class HostFallbackWarning(UserWarning):
    """An operator the NPU supports runs on the host: no tile of it fits the SRAM budget."""


#: Why the check functions refused each match, by the variable the match binds; set only
#: inside :func:`collect_refusals`. The last refusal of a variable is its barest pattern's (lowest priority).
_refusals: ContextVar[dict[relax.Var, str] | None] = ContextVar("npu_refusals", default=None)


@contextmanager
def collect_refusals() -> Iterator[dict[relax.Var, str]]:
    """While active, partitioning records why each refused operator stays on the host (``tvm-npu inspect``)."""
    found: dict[relax.Var, str] = {}
    token = _refusals.set(found)
    try:
        yield found
    finally:
        _refusals.reset(token)


def _refuse(ctx: PatternCheckContext, reason: str) -> bool:
    """Record ``reason`` for the match's variable when collecting; always False (the match is refused)."""
    found = _refusals.get()
    var = ctx.value_to_bound_var.get(ctx.matched_expr)
    if found is not None and var is not None:
        found[var] = reason
    return False


def _bare(spec: OpSpec) -> bool:
    """Whether ``spec`` is a single operator, the last pattern tried for it (nothing smaller follows)."""
    return len(spec.epilogue) == (1 if isinstance(spec, ElementwiseSpec) else 0)


def make_check(target: NpuTarget) -> CheckFn:
    """Accept a match when it extracts to a supported spec that the planner can tile into SRAM.

    When even the bare operator does not fit, it stays on the host and a
    :class:`HostFallbackWarning` says so (a fused variant that does not fit is not a
    fallback: the operator is offered again with a shorter epilogue).
    """

    def check(ctx: PatternCheckContext) -> bool:
        if _leaks(ctx):
            return False
        try:
            op = extract_from_context(ctx)
        except ValueError as e:
            return _refuse(ctx, str(e))
        if fits(op.spec, target.hw, target.options):
            return True
        if isinstance(op.spec, PoolSpec) and split_global_pool(op.spec, target) is not None:
            return True  # the plan stage averages it in bands of rows first
        budget = (f"fits -max-sram-bytes={target.hw.max_sram_bytes} with "
                  f"-pipeline-stages={target.options.pipeline_stages}")
        if _bare(op.spec):
            out = op.spec.out
            warnings.warn(f"{op.spec.name} with output {list(out.shape)} {out.dtype.np.name} runs on the host "
                          f"(llvm): no tile of it {budget}", HostFallbackWarning, stacklevel=2)
        # the match may be a fused operator rooted here (a requantisation refused with its convolution): name it
        steps = [e.kind.value for e in op.spec.epilogue][isinstance(op.spec, ElementwiseSpec):]
        return _refuse(ctx, f"no tile of {'+'.join([op.spec.name, *steps])} {budget}")

    return check


def pattern_table(target: NpuTarget) -> list[PatternEntry]:
    """``(name, pattern, annotations, check)`` entries, highest priority first, for ``FuseOpsByPattern``."""
    check = make_check(target)
    table: list[PatternEntry] = []

    def add(name: str, pattern: DFPattern) -> None:
        table.append((name, pattern, {}, check))

    for bias, clip, pad in _int8_variants(target.options.fusion):
        data = is_op("relax.nn.pad")(wildcard()) if pad else wildcard()
        conv = is_op("relax.nn.conv2d")(data, wildcard())
        tail = "_".join(p for p in ("bias" if bias else "", "requant", "clip" if clip else "") if p)
        add(f"{PREFIX}.conv2d{'_pad' if pad else ''}_{tail}", _requantised(conv, bias, clip))
        if not pad:
            add(f"{PREFIX}.matmul_{tail}", _requantised(is_op("relax.matmul")(wildcard(), wildcard()), bias, clip))
    add(f"{PREFIX}.conv2d_pad", is_op("relax.nn.conv2d")(is_op("relax.nn.pad")(wildcard()), wildcard()))
    variants = _epilogue_variants(target.options.fusion)
    for bias, residual, act in variants:
        conv = _narrowed(is_op("relax.nn.conv2d")(wildcard(), wildcard()))
        add(_variant_name("conv2d", bias, residual, act), _with_epilogue(conv, bias, residual, act))
        b = _transposed_b() | wildcard()
        matmul = _narrowed(is_op("relax.matmul")(wildcard(), b))
        add(_variant_name("matmul", bias, residual, act), _with_epilogue(matmul, bias, residual, act))
    for clip in (True, False)[target.options.fusion == 0:]:
        add(f"{PREFIX}.qadd{'_clip' if clip else ''}", _rescaled_add(clip))
        add(f"{PREFIX}.qmul{'_clip' if clip else ''}", _rescaled_mul(clip))
    # a constant pad before a max pool (Keras ZeroPadding2D): the pool's padding reads its value
    add(f"{PREFIX}.max_pool2d_pad", is_op("relax.nn.max_pool2d")(is_op("relax.nn.pad")(wildcard())))
    for name, op in POOLS.items():
        add(f"{PREFIX}.{name}", is_op(op)(wildcard()))
    for name, op in ROWWISE.items():
        add(f"{PREFIX}.{name}", op)
    # a linear resize the canonicalisation left for the resize operator (resize.operator_wins)
    add(f"{PREFIX}.resize", is_op("relax.image.resize2d")(wildcard(), wildcard()))
    for name, pattern in LONE_QDQ.items():  # before the binary ops, which would claim their parts
        if target.options.fusion or not name.endswith("_clip"):  # at -fusion=0 a clamp is an operator of its own
            add(f"{PREFIX}.{name}", pattern)
    for name in COMPOSITE_ACTIVATIONS:  # before the binary ops, which would claim their parts
        add(f"{PREFIX}.{name}", _activation(name, wildcard()))
    add(f"{PREFIX}.lut", LOOKUP)  # before the binary ops, which would claim the index's subtraction
    for name, op in BINARY.items():
        add(f"{PREFIX}.{name}", is_op(op)(wildcard(), wildcard()))
    # c / x: a reciprocal and a multiply by c (extract._constant_first); x / c is x * (1 / c) by canonicalisation
    add(f"{PREFIX}.constant_divide", is_op("relax.divide")(is_const(), wildcard()))
    for name in ACTIVATIONS:
        add(f"{PREFIX}.{name}", _activation(name, wildcard()))
    add(f"{PREFIX}.sqrt", is_op("relax.sqrt")(wildcard()))  # a power by 0.5 (extract._unary_steps)
    add(f"{PREFIX}.astype", is_op("relax.astype")(wildcard()))  # fp32 <-> fp16 where precisions meet
    table.extend(data_movement_entries())
    return table


#: Relax operators that move no data on the NPU (relabel or reorder dims): views.
VIEW_OPS: dict[str, DFPattern] = {
    "relax.reshape": is_op("relax.reshape")(wildcard(), wildcard()),
    "relax.flatten": is_op("relax.flatten")(wildcard()),
    "relax.squeeze": is_op("relax.squeeze")(wildcard()),
    "relax.expand_dims": is_op("relax.expand_dims")(wildcard()),
    "relax.permute_dims": is_op("relax.permute_dims")(wildcard()),
    "relax.strided_slice": is_op("relax.strided_slice")(wildcard(), wildcard(), wildcard(), wildcard(), wildcard()),
    "relax.take": is_op("relax.take")(wildcard(), is_const()),
    "relax.broadcast_to": is_op("relax.broadcast_to")(wildcard(), wildcard()),  # zero strides: a nearest resize
}
#: Element types a view or concat may have: those an unavoidable copy (a 1x1 max pool) can move.
_MOVABLE = (DType.FP32, DType.FP16, DType.INT8, DType.UINT8, DType.INT16, DType.UINT16)


def _static(expr: object) -> bool:
    try:
        tensor_type(expr)
    except ValueError:
        return False
    return True


def _check_view(ctx: PatternCheckContext) -> bool:
    """A view needs static shapes (a transpose becomes the strides its readers and writers use: the
    DMA orders its loops by DRAM stride, so runs stay as long as the innermost stored axis allows)."""
    call = ctx.matched_expr
    if not (isinstance(call.args[0], relax.Var) and _static(call) and _static(call.args[0])
            and tensor_type(call)[1] in _MOVABLE):
        return _refuse(ctx, "a view needs a static-shape float32, float16, 8- or 16-bit integer tensor "
                                 "variable")
    # a slice / gather is a view only with static positive steps and constant evenly spaced indices
    if call.op.name in ("relax.strided_slice", "relax.take") and selection(call) is None:
        return _refuse(ctx, "a slice or gather is a view only with static positive steps or constant, "
                            "evenly spaced indices")
    return True


def _check_concat(ctx: PatternCheckContext) -> bool:
    """A concat of static tensors (variables or constants) of one type (its inputs are written, or
    copied, into its slices)."""
    call = ctx.matched_expr
    if _static(call) and isinstance(call.args[0], relax.Tuple):
        dtype = tensor_type(call)[1]
        # a constant member is copied into its slice from a constant DRAM tensor of the partition
        if dtype in _MOVABLE and all(isinstance(f, relax.Var | GenericConst) and _static(f)
                                     and tensor_type(f)[1] == dtype for f in call.args[0].fields):
            return True
    return _refuse(ctx, "a concat needs static-shape float32, float16, 8- or 16-bit integer tensors of "
                        "one type")


def data_movement_entries() -> list[PatternEntry]:
    """``npu.view`` (reshape, flatten, squeeze, expand_dims, transposes, strided slices, gathers) and
    ``npu.concat``: no operator of their own, the partition graph turns them into views (``graph.py``)."""
    entries: list[PatternEntry] = [(f"{PREFIX}.view_{op.rsplit('.', 1)[-1]}", p, {}, _check_view)
                                   for op, p in VIEW_OPS.items()]
    # the tuple as a whole: the composite function then takes the concatenated tensors as its parameters
    entries.append((f"{PREFIX}.concat", is_op("relax.concat")(wildcard()), {}, _check_concat))
    # a resize2d still here is one the canonicalisation does not take: refused, with the reason
    entries.append((f"{PREFIX}.resize2d", is_op("relax.image.resize2d")(wildcard(), wildcard()), {}, _check_resize))
    return entries


def _check_resize(ctx: PatternCheckContext) -> bool:
    """Always refuses: the NPU forms of a resize are made by ``npu.canonicalize.resize`` (``resize.py``), or it
    is the resize operator's (``npu.resize``, tried first)."""
    reason = resize.host_reason(ctx.matched_expr) or (
        "a resize npu.canonicalize.resize did not rewrite (disabled) that the resize operator does not take "
        "(not linear float32 NCHW, or no band of it fits -max-sram-bytes)")
    return _refuse(ctx, reason)


# The registry lists later entries first; register lowest priority first so that
# get_patterns_with_prefix("npu") returns the table in its own order.
register_patterns(list(reversed(pattern_table(NpuTarget()))))
