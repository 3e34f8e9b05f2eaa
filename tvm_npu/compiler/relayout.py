"""The layout a static build would choose, applied to an NPU partition compiled for one shape.

A static build plans activation layouts for the whole model at its sizes (``relay_patterns/layout.py``:
each convolution votes NCHW or NHWC by the cost model, at small maps NHWC often wins) before partitioning.
A model built for every input size is partitioned once with symbolic sizes, where the vote cannot be taken
(no sizes), so its partitions keep the model's layout. When a partition is compiled for a call's sizes
(:func:`tvm_npu.compiler.dynamic.compile_partition`), :func:`relayout` takes the vote there: the partition's
operators (its composite functions inlined back into plain Relax operators) form a module on which the
static build's ``layout``, ``fold-layout`` and ``partition`` stages run (their passes are defined here, the
driver's stages use them); when the vote converts and the
result is again one NPU partition with nothing left on the host (the transforms at its inputs and outputs
folded into the DMA of the operators next to them), that partition is compiled instead.

For a model that is one NPU partition this is the static build's decision, so the same programs. A model
of several partitions with host operators between them keeps the model's layout at the partitions' borders
(the host part is shape-generic and built once), and each partition votes with its own convolutions where
a static build votes with all of them: there the programs can differ from a static build's (same results).
"""

from __future__ import annotations

from collections.abc import Mapping

import tvm
from tvm import relax

from tvm_npu.config import NpuTarget
from tvm_npu.relay_patterns.canonicalize import fold_constants
from tvm_npu.relay_patterns.fusion import fuse_ops_by_pattern
from tvm_npu.relay_patterns.layout import choose_layouts, fold_layout_transforms, unfold_host_layouts


def fold_layout_passes() -> list[tvm.transform.Pass]:
    """The ``fold-layout`` stage: transforms next to a convolution or pooling folded into its DMA."""
    return [fold_layout_transforms, fold_constants]


def partition_passes(target: NpuTarget) -> list[tvm.transform.Pass]:
    """The ``partition`` stage: the pattern table (and the row programs found in the module), then merged."""
    return [fuse_ops_by_pattern(target), relax.transform.MergeCompositeFunctions(), unfold_host_layouts]


def _subst(expr: relax.Expr, env: Mapping[relax.Var, relax.Expr]) -> relax.Expr:
    """``expr`` with its variables replaced by ``env`` (the forms a partition's bindings take)."""
    if isinstance(expr, relax.Var):
        return env.get(expr, expr)
    if isinstance(expr, relax.Tuple):
        return relax.Tuple([_subst(f, env) for f in expr.fields])
    if isinstance(expr, relax.TupleGetItem):
        return relax.TupleGetItem(_subst(expr.tuple_value, env), expr.index)
    if isinstance(expr, relax.Call):
        return relax.Call(_subst(expr.op, env) if isinstance(expr.op, relax.Var) else expr.op,
                          [_subst(a, env) for a in expr.args], expr.attrs, expr.ty_args)
    return expr


def _emit_body(bb: relax.BlockBuilder, func: relax.Function, env: dict[relax.Var, relax.Expr]) -> relax.Expr:
    """Emit ``func``'s bindings into ``bb`` (composite functions' bodies inlined where they are called)."""
    composites: dict[relax.Var, relax.Function] = {}
    for block in func.body.blocks:
        for b in block.bindings:
            value = b.value
            if isinstance(value, relax.Function):
                composites[b.var] = value
                continue
            if isinstance(value, relax.Call) and (value.op in composites or isinstance(value.op, relax.Function)):
                inner = composites.get(value.op, value.op)
                args = [_subst(a, env) for a in value.args]
                env[b.var] = _emit_body(bb, inner, dict(zip(inner.params, args, strict=True)))
                continue
            env[b.var] = bb.emit(_subst(value, env))
    return _subst(func.body.body, env)


def flatten(func: relax.Function) -> relax.Function:
    """``func`` (a partition: calls of composite functions) as one function of plain Relax operators."""
    bb = relax.BlockBuilder()
    params = [relax.Var(p.name, p.ty) for p in func.params]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(_emit_body(bb, func, dict(zip(func.params, params, strict=True))))
        bb.emit_func_output(out)
    return bb.get()["main"]


def relayout(func: relax.Function, target: NpuTarget) -> relax.Function:
    """``func`` (a partition bound to static sizes) in the layout the static build's vote chooses at these sizes,
    as one NPU partition; ``func`` itself when the vote keeps its layout or the converted operators do not form
    one partition with nothing on the host (module docstring)."""
    if not _has_conv(func):
        return func
    mod = tvm.IRModule({"main": flatten(func)})
    converted = choose_layouts(mod, target)
    if converted.same_as(mod):
        return func
    with tvm.transform.PassContext(opt_level=3):  # as the static build's stages run
        converted = tvm.transform.Sequential([*fold_layout_passes(), *partition_passes(target)])(converted)
    npu = [f for f in converted.functions.values() if isinstance(f, relax.Function) and f.attrs
           and f.attrs.get("Codegen") == "npu"]
    main = converted["main"]
    bindings = [b for block in main.body.blocks for b in block.bindings]
    if len(npu) != 1 or len(bindings) != 1 or not isinstance(bindings[0].value, relax.Call) \
            or not isinstance(bindings[0].value.op, relax.GlobalVar):
        return func
    return npu[0]


def _has_conv(func: relax.Function) -> bool:
    """Whether ``func`` holds a convolution (the only operator that votes for a layout)."""
    found = False

    def visit(e: relax.Expr) -> None:
        nonlocal found
        found = found or (isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "relax.nn.conv2d")

    relax.analysis.post_order_visit(func, visit)
    return found
