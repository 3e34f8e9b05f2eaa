"""``-precision=fp16``: a layer norm or softmax that ``ToMixedPrecision`` left in fp16 computes in float32.

TVM's mixed-precision policy lets ``layer_norm`` follow its input's type, so after ``-precision=fp16`` a
transformer's layer norms read fp16 and compute in fp16, and the NPU's row-wise operator (float32 steps,
``tir_schedules/rowwise.py``) left them on the host. Here such an operator reads its input widened to
float32 (exact), computes in float32 and its result is rounded to fp16 once: the storage between
operators stays fp16, as ``-precision=fp16`` means, and the statistics are taken at float32 precision,
as the rest of fp16 mode accumulates (``conv2d`` / ``matmul`` in fp32, :mod:`.precision`). The widening casts
are NPU operators (the ``astype`` pattern) that the plan fuses into the neighbouring operators' epilogues.
"""

from __future__ import annotations

import tvm
from tvm import relax

_ROWWISE = ("relax.nn.layer_norm", "relax.nn.softmax")


@relax.expr_functor.mutator
class _WidenedRowwise(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in _ROWWISE or str(call.ty.dtype) != "float16":
            return call
        args = [self.builder_.emit(relax.op.astype(a, "float32")) if isinstance(a.ty, relax.TensorType) else a
                for a in call.args]
        return relax.op.astype(self.builder_.emit(relax.Call(call.op, args, call.attrs, call.ty_args)), "float16")


@relax.transform.function_pass(opt_level=0, name="tvm_npu.Fp16RowwiseWidened")
def fp16_rowwise_widened(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext
                         ) -> relax.Function:
    """fp16 layer norms and softmaxes computed in float32 between two casts (see the module docstring)."""
    return _WidenedRowwise().visit_expr(func)
