"""A float elementwise operator whose result is larger than each operand reads its data through ``broadcast_to``.

``x * c`` with ``x`` of shape ``(1, 16, 1)`` and a constant ``c`` of shape ``(64,)`` (a tf2onnx layer norm's
``inv_std * gamma``) makes a ``(1, 16, 64)`` outer product. The NPU's elementwise operator reads its data at
the output's shape and an operand at that shape or one value per channel, so such a call stayed on the host.
``broadcast_to(x, (1, 16, 64)) * c`` is the same value (numpy broadcasting repeats ``x`` either way, the float
operation per element is unchanged) and the ``broadcast_to`` is a view with zero strides on the NPU, read by the
operator's DMA (no copy). In a 16-bit QDQ model every such product is a float chain of its own between
a dequantize and a quantize (``relay_patterns.quantized`` leaves it float), which is how the layer norms of a
16-bit ViT stayed on the host; the 8-bit form does the same for its operands (``qbinary._expanded``).

Only calls where no operand has the result's shape are rewritten: otherwise the full-shape operand is
the data and the other an epilogue operand already. The non-constant operand with the most elements is
broadcast (the first of equals); a constant stays as it is (the extraction materialises constants at the
shape it needs).
"""

from __future__ import annotations

import math

import tvm
from tvm import relax

from .extract import GenericConst

_BINARY = frozenset({"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
                     "relax.minimum"})


def _static(expr: relax.Expr) -> tuple[int, ...] | None:
    """The static shape of a tensor expression (None for a symbolic or unknown one)."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    if not all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values):
        return None
    return tuple(int(d) for d in ty.shape.values)


@relax.expr_functor.mutator
class _BroadcastOperands(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in _BINARY or len(call.args) != 2:
            return call
        out = _static(call)
        if out is None or not str(call.ty.dtype).startswith("float"):
            return call
        shapes = [_static(a) for a in call.args]
        if any(s is None or s == out for s in shapes):
            return call
        tensors = [i for i, a in enumerate(call.args) if not isinstance(a, GenericConst)]
        if not tensors:
            return call
        widest = max(tensors, key=lambda i: (math.prod(shapes[i]), -i))
        args = list(call.args)
        args[widest] = self.builder_.emit(relax.op.broadcast_to(args[widest], out))
        return relax.Call(call.op, args, call.attrs, call.ty_args)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.BroadcastOperands")
def broadcast_operands(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """Float elementwise outer products read their data through ``broadcast_to`` (see the module docstring)."""
    return _BroadcastOperands().visit_expr(func)
