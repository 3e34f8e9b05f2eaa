"""Floating-point precision: fp16 operators accumulate in fp32; ``-precision=fp16`` runs an fp32
model's operators in fp16.

* ``Fp16Accumulate``: a ``conv2d`` / ``matmul`` of fp16 operands with an fp16 result (what an
  fp16 ONNX model imports as) becomes ``astype(op(..., out_dtype=float32), float16)``. The
  NPU's tensor engine accumulates fp16 products in fp32 and rounds once; TVM's default
  fp16 kernels accumulate in fp16. Making the accumulation explicit gives the NPU and the
  llvm reference the same arithmetic (and the reference a better one).
* ``-precision=fp16`` is TVM's own ``ToMixedPrecision(out_dtype=float32)``: convolutions and
  matmuls take fp16 operands with fp32 accumulation, elementwise ops follow in fp16, and
  casts appear where fp16 meets the operators TVM keeps in fp32 (softmax, reductions) --
  the partition boundaries, as ``--quantize F16`` does in other NPU toolchains. In a quantized
  model only its float layers change (:mod:`.fp16_layers`): a mixed int8 / int16 / fp16 model.
"""

from __future__ import annotations

import tvm
from tvm import relax

from tvm_npu.config import Precision

from .fp16_layers import fp16_float_layers
from .fp16_rowwise import fp16_rowwise_widened

_ACCUMULATING = ("relax.nn.conv2d", "relax.matmul")


@relax.expr_functor.mutator
class _Fp16Accumulate(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in _ACCUMULATING:
            return call
        dtypes = {str(a.ty.dtype) for a in call.args if isinstance(a.ty, relax.TensorType)} | {str(call.ty.dtype)}
        if dtypes != {"float16"}:
            return call
        if call.op.name == "relax.matmul":
            wide = relax.op.matmul(call.args[0], call.args[1], out_dtype="float32")
        else:
            a = call.attrs
            wide = relax.op.nn.conv2d(
                call.args[0], call.args[1], strides=a.strides, padding=a.padding, dilation=a.dilation,
                groups=int(a.groups), data_layout=str(a.data_layout), kernel_layout=str(a.kernel_layout),
                out_layout=str(a.out_layout or a.data_layout), out_dtype="float32")
        return relax.op.astype(self.builder_.emit(wide), "float16")


@relax.transform.function_pass(opt_level=0, name="tvm_npu.Fp16Accumulate")
def fp16_accumulate(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """fp16 conv2d / matmul accumulate in fp32 and round once (what the NPU computes)."""
    return _Fp16Accumulate().visit_expr(func)


_AVERAGING = ("relax.mean", "relax.nn.avg_pool2d", "relax.nn.adaptive_avg_pool2d")


@relax.expr_functor.mutator
class _Fp16Averages(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in _AVERAGING or str(call.ty.dtype) != "float16":
            return call
        wide = relax.Call(call.op, [self.builder_.emit(relax.op.astype(call.args[0], "float32")), *call.args[1:]],
                          call.attrs, call.ty_args)
        return relax.op.astype(self.builder_.emit(wide), "float16")


@relax.transform.function_pass(opt_level=0, name="tvm_npu.Fp16Averages")
def fp16_averages(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """fp16 averages summed in fp32 and rounded once, for the llvm reference only: the NPU's pooling
    sums exactly and rounds once (``isa.Pool``), TVM's fp16 pooling sums in fp16. The NPU build keeps
    the fp16 operator (a widening cast there would be a DRAM round trip)."""
    return _Fp16Averages().visit_expr(func)


def precision_passes(precision: Precision) -> list[tvm.transform.Pass]:
    """The passes that fix the arithmetic types of the model before layout planning."""
    if precision == Precision.FP16:  # TVM's ToMixedPrecision, integer (QDQ) operators left as they are
        return [fp16_float_layers, fp16_rowwise_widened, relax.transform.FoldConstant()]
    return [fp16_accumulate]
