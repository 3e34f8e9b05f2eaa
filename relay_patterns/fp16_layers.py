"""``-precision=fp16`` in a quantized model: its float layers in fp16, its integer layers as they are.

A QDQ model may keep some layers in float (onnxruntime's ``nodes_to_exclude``, or a tensor whose
QuantizeLinear / DequantizeLinear pair was removed: the mixed-precision search writes such models).
After ``canonicalize`` its 8- and 16-bit regions are integer ``conv2d`` / ``matmul`` with float32
requantisation arithmetic around them; its float layers are float32 ``conv2d`` / ``matmul`` fed by
dequantize arithmetic. TVM's ``ToMixedPrecision`` is the right tool for the float layers (fp16
operands, fp32 accumulation, the elementwise operators after them in fp16, fp16 storage of tensors
only fp16 operators read), but it treats every ``conv2d`` / ``matmul`` as fp16-always, also an
integer one, whose int32 result then meets an int32 bias in an fp16 ``add`` (a type error). So:

1. each integer ``conv2d`` / ``matmul`` is moved into a private function of one non-dataflow binding,
   which ``ToMixedPrecision`` leaves alone (a call of a function has no mixed-precision policy and
   keeps its argument types; the rewriter only changes dataflow blocks); so is a ``clip`` (an fp32-only
   operator with scalar bounds, on which TVM's rewriter fails when its input arrives in fp16: it gets
   its input cast back to fp32);
2. ``ToMixedPrecision(out_dtype=float32)`` runs; the requantisation's float32 arithmetic stays float32
   (its operands are not fp16: TVM's follow rule keeps such operators in fp32), and a dequantized
   tensor only an fp16 layer reads is cast to fp16 once, after the dequantize;
3. the functions are inlined back and the bindings made one dataflow block again;
4. an fp16 value entering a quantize (whose ONNX arithmetic the import writes in float64) is widened to
   float32 first: exact, and the lone-quantize pattern the NPU runs reads float32 (fp16 -> float64
   directly would leave the quantize on the host).

A model without integer operators gets exactly TVM's pass, as before.
"""

from __future__ import annotations

import tvm
from tvm import relax

_GEMMS = ("relax.nn.conv2d", "relax.matmul")


def _is_integer_gemm(call: relax.Call) -> bool:
    return isinstance(call.op, tvm.ir.Op) and call.op.name in _GEMMS and any(
        isinstance(a.ty, relax.TensorType) and str(a.ty.dtype).startswith(("int", "uint")) for a in call.args)


def _never_with_scalars(call: relax.Call) -> bool:
    """An operator ToMixedPrecision keeps in fp32 that has a scalar argument (``clip``'s bounds): its rewriter
    fails on the scalar when the tensor argument arrives in fp16, so it is hidden too (and gets fp32)."""
    policy = call.op.get_attr("TMixedPrecisionPolicy") if isinstance(call.op, tvm.ir.Op) else None
    return policy is None and isinstance(call.op, tvm.ir.Op) and any(
        isinstance(a.ty, tvm.ir.PrimType) for a in call.args)


@relax.expr_functor.mutator
class _HideIntegerGemms(relax.PyExprMutator):
    """Each integer conv2d / matmul becomes a call of a private function holding it (step 1)."""

    def __init__(self, mod: tvm.IRModule, clips: bool) -> None:
        super().__init__(mod)
        self.clips, self.hidden = clips, 0

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not (_is_integer_gemm(call) or (self.clips and _never_with_scalars(call))):
            return call
        passed = [a for a in call.args if not isinstance(a.ty, tvm.ir.PrimType)]
        params = [relax.Var(f"arg{i}", a.ty) for i, a in enumerate(passed)]
        inside = iter(params)
        out = relax.Var("out", call.ty)
        inner = relax.Call(call.op, [a if isinstance(a.ty, tvm.ir.PrimType) else next(inside) for a in call.args],
                           call.attrs, call.ty_args)
        body = relax.SeqExpr([relax.BindingBlock([relax.VarBinding(out, inner)])], out)
        func = relax.BlockBuilder().normalize(relax.Function(params, body, call.ty, is_pure=True))
        self.hidden += _is_integer_gemm(call)
        return relax.Call(self.builder_.add_func(func, "npu_hidden"), passed)


@relax.expr_functor.mutator
class _WidenBeforeFloat64(relax.PyExprMutator):
    """``astype(x: float16, float64)`` -> ``astype(astype(x, float32), float64)`` (step 4; exact)."""

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.astype" and str(call.ty.dtype) == "float64" \
                and str(call.args[0].ty.dtype) == "float16":
            return relax.op.astype(self.builder_.emit(relax.op.astype(call.args[0], "float32")), "float64")
        return call


def _hide_integer_gemms(mod: tvm.IRModule, clips: bool) -> tuple[tvm.IRModule, int]:
    mutator = _HideIntegerGemms(mod, clips)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get(), mutator.hidden


@tvm.transform.module_pass(opt_level=0, name="tvm_npu.Fp16FloatLayers")
def fp16_float_layers(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """TVM's ``ToMixedPrecision`` on the float operators of ``mod``, its integer ones untouched (module
    docstring)."""
    mixed = relax.transform.ToMixedPrecision(out_dtype="float32")
    if not _hide_integer_gemms(mod, clips=False)[1]:
        return mixed(mod)
    hidden_mod, _ = _hide_integer_gemms(mod, clips=True)
    mod = tvm.transform.Sequential([
        mixed, relax.transform.InlinePrivateFunctions(), relax.transform.ConvertToDataflow(),
        relax.transform.CanonicalizeBindings(), relax.transform.DeadCodeElimination()])(hidden_mod)
    widen = _WidenBeforeFloat64(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            widen.builder_.update_func(gv, widen.visit_expr(func))
    return widen.builder_.get()
