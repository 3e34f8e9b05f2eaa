"""The importer's constant ``Pad`` as ``nn.pad``, which the pattern table folds into the NPU operator reading it.

TVM's ONNX importer writes ``Pad`` as a ``call_tir`` of ``topi.nn.pad``'s PrimFunc, which no pattern
matches, so a pad that the ONNX-level fold (``onnx_import.fold_pads``) cannot prove exact ran on the host:
a zero pad before a max pool of values that may be negative, as Keras ``ZeroPadding2D`` writes before the
stem pool of a ResNetV2 or a DenseNet (a zero does win the max there). Relax's ``nn.pad`` says the same as
an operator: the pattern table folds it into the padding of the conv2d (``conv2d_pad``) or of the max
pool (``max_pool2d_pad``: the pool's padding then reads the value, ``VMAXPOOL_PAD``) that reads it, and
llvm computes it as before.

A ``call_tir`` is rewritten only where its PrimFunc is, structurally, topi's constant pad of its input:
the pads and the value are read off the PrimFunc, topi's pad is rebuilt with them and compared with
``tvm_ffi.structural_equal``. Anything else stays as it was. TVM has no pass that lifts a ``call_tir``
back to the operator it came from, hence this one.
"""

from __future__ import annotations

import itertools
import re

import tvm
import tvm_ffi
from tvm import relax, tirx, topi

from .extract import static_shape

#: Literal constants in a PrimFunc's TVMScript (``T.float32(0.0)``, ``T.int8(-3)``): the pad value's candidates.
_LITERAL = re.compile(r"T\.(?:float|int|uint)\d+\(([-+0-9.e]+|-?inf)\)")
#: Total padding per axis above which the split is not searched (exporters pad by a few elements).
_MAX_PAD = 16


def _candidates(func: tirx.PrimFunc) -> list[float]:
    values = {0.0}
    for text in _LITERAL.findall(func.script()):
        try:
            values.add(float(text))
        except ValueError:
            continue
    return sorted(values)


def _topi_pad(shape: list[int], dtype: str, before: list[int], after: list[int], value: float) -> tirx.PrimFunc:
    """topi's constant pad as the importer emits it (``BlockBuilder.emit_te``: int64 shapes and loops)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with bb.function("f", [x]):
        bb.emit_func_output(bb.emit_te(topi.nn.pad, x, before, after, value))
    mod = bb.get()
    return next(mod[g] for g in mod.get_global_vars() if isinstance(mod[g], tirx.PrimFunc))


def _matching_pad(func: tirx.PrimFunc, shape: list[int], out: list[int],
                  dtype: str) -> tuple[list[int], list[int], float] | None:
    """(pad before, pad after, value) with which topi's constant pad is ``func``, or None."""
    total = [o - i for i, o in zip(shape, out, strict=True)]
    if any(t < 0 or t > _MAX_PAD for t in total):
        return None
    for before in itertools.product(*(range(t + 1) for t in total)):
        after = [t - b for t, b in zip(total, before, strict=True)]
        for value in _candidates(func):
            if tvm_ffi.structural_equal(_topi_pad(shape, dtype, list(before), after, value).body, func.body,
                                        map_free_vars=True):
                return list(before), after, value
    return None


def _rewrite(call: relax.Call, mod: tvm.IRModule) -> relax.Expr | None:
    """``nn.pad`` for a ``call_tir`` of topi's constant pad, else None."""
    callee = call.args[0]
    if not isinstance(callee, tvm.ir.GlobalVar) or callee not in mod.functions:
        return None
    func = mod[callee]
    args = call.args[1]
    if not isinstance(func, tirx.PrimFunc) or not isinstance(args, relax.Tuple) or len(args.fields) != 1:
        return None
    data = args.fields[0]
    shape, out = static_shape(data), static_shape(call)
    if shape is None or out is None or len(shape) != len(out):
        return None
    dtype = str(data.ty.dtype)
    found = _matching_pad(func, list(shape), list(out), dtype)
    if found is None:
        return None
    before, after, value = found
    width = [p for pair in zip(before, after, strict=True) for p in pair]
    return relax.op.nn.pad(data, width, "constant", value)


@relax.expr_functor.mutator
class _Lift(relax.PyExprMutator):
    """Rewrites the pads of ``mod``'s functions. At module level: a mutator class made per call is registered
    with TVM for good, and its closure kept the whole module (a model's weights) alive after the build."""

    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.mod = mod

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir":
            lifted = _rewrite(call, self.mod)
            if lifted is not None:
                return lifted
        return call


@relax.transform.function_pass(opt_level=0, name="tvm_npu.PadsAsOperators")
def pads_as_operators(func: relax.Function, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """Every ``call_tir`` of topi's constant pad -> ``relax.op.nn.pad`` (module docstring)."""
    return _Lift(mod).visit_expr(func)
