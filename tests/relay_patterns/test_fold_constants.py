"""Constant folding in numpy and rewrites on lifted constants give what TVM's own passes give."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard
from tvm_npu.relay_patterns.canonicalize import _NumpyFold, fold_constants
from tvm_npu.relay_patterns.lifted import with_lifted_constants


def _module(build: Callable[[relax.BlockBuilder, relax.Var], relax.Expr]) -> tvm.IRModule:
    """``main(x)`` whose body ``build(x)`` emits (in a dataflow block) and returns."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 3, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(build(bb, x))
        bb.emit_func_output(out)
    return bb.get()


def _const(shape: tuple[int, ...], seed: int, dtype: str = "float32") -> relax.Expr:
    return relax.const(np.random.default_rng(seed).standard_normal(shape).astype(dtype) + 2.0)


def _constant_chains(bb: relax.BlockBuilder, x: relax.Var) -> relax.Expr:
    """Bias-, batch-norm- and layout-style arithmetic on constants, and a dense layer's weights transposed."""
    c = bb.emit(relax.op.reshape(_const((4,), 0), (1, 4, 1, 1)))
    nhwc = bb.emit(relax.op.layout_transform(c, lambda n, ch, h, w: (n, h, w, ch)))
    back = bb.emit(relax.op.permute_dims(nhwc, [0, 3, 1, 2]))
    scale = bb.emit(relax.op.divide(relax.op.sqrt(_const((1, 4, 1, 1), 1)), _const((1, 4, 1, 1), 2)))
    wide = bb.emit(relax.op.broadcast_to(relax.op.subtract(back, scale), (1, 4, 3, 3)))
    cat = bb.emit(relax.op.concat([_const((1, 2, 3, 3), 3), _const((1, 2, 3, 3), 4)], axis=1))
    half = bb.emit(relax.op.astype(_const((1, 4, 1, 1), 6), "float16"))
    y = bb.emit(relax.op.add(relax.op.multiply(x, wide), relax.op.maximum(cat, _const((1, 4, 1, 1), 5))))
    dense = bb.emit(relax.op.permute_dims(_const((300, 260), 7), [1, 0]))  # transposed in bands of rows
    return relax.Tuple([bb.emit(relax.op.add(y, relax.op.astype(half, "float32"))), dense])


def test_numpy_folding_matches_tvm_fold_constant() -> None:
    mod = _module(_constant_chains)
    with tvm.transform.PassContext(opt_level=3):
        expected = relax.transform.FoldConstant()(mod)
    got = relax.analysis.remove_all_unused(_NumpyFold().visit_expr(mod["main"]))  # numpy alone, no fallback
    tvm.ir.assert_structural_equal(got, expected["main"])  # constants compared bit for bit
    calls = []
    relax.analysis.post_order_visit(got.body, lambda e: calls.append(e.op.name)
                                    if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    assert sorted(calls) == ["relax.add", "relax.add", "relax.multiply"]
    before = mod["main"]
    with tvm.transform.PassContext(opt_level=3):
        tvm.ir.assert_structural_equal(fold_constants(mod), expected)
    assert mod["main"].same_as(before)  # the pass leaves its input module as it was


def test_what_numpy_does_not_fold_is_left_to_tvm() -> None:
    """Integer division rounds differently in numpy, ``exp`` may differ in the last bit, and a
    layout_transform that splits an axis is no transpose: TVM's FoldConstant folds those."""

    def build(bb: relax.BlockBuilder, x: relax.Var) -> relax.Expr:
        q = bb.emit(relax.op.divide(relax.const(np.array([-7, 7], "int32")), relax.const(np.array([2, 2], "int32"))))
        split = bb.emit(relax.op.layout_transform(_const((1, 4, 1, 1), 0), lambda n, c, h, w: (n, c // 2, h, w, c % 2)))
        y = bb.emit(relax.op.add(x, relax.op.reshape(split, (1, 4, 1, 1))))
        return relax.Tuple([y, q, bb.emit(relax.op.exp(_const((2,), 5)))])

    mod = _module(build)
    with tvm.transform.PassContext(opt_level=3):
        expected = relax.transform.FoldConstant()(mod)
        got = fold_constants(mod)
    tvm.ir.assert_structural_equal(got, expected)
    assert not tvm_ffi.structural_equal(mod, got)  # TVM did fold them


@pytest.mark.parametrize("equal_constants", [True, False])
def test_rewrite_on_lifted_constants_matches_rewrite_call(equal_constants: bool) -> None:
    """TVM's rewrite_call also eliminates common subexpressions, so uses of equal constants end up
    shared; the lifted rewrite must end the same, with the constants a rewriter adds bound back."""
    second = _const((1, 4, 1, 1), 0 if equal_constants else 1)

    def build(bb: relax.BlockBuilder, x: relax.Var) -> relax.Var:
        a = bb.emit(relax.op.add(x, relax.op.permute_dims(_const((1, 4, 1, 1), 0), [0, 1, 2, 3])))
        b = bb.emit(relax.op.add(a, relax.op.permute_dims(second, [0, 1, 2, 3])))
        return bb.emit(relax.op.nn.relu(b))

    func = _module(build)["main"]
    y = wildcard()
    pattern = is_op("relax.nn.relu")(y)
    bias = np.full((1, 4, 1, 1), 0.5, "float32")
    expected = rewrite_call(pattern, lambda _o, m: relax.op.nn.silu(relax.op.add(m[y], relax.const(bias))), func)
    got = with_lifted_constants(func, lambda f, lifted: rewrite_call(
        pattern, lambda _o, m: relax.op.nn.silu(relax.op.add(m[y], lifted.add(bias))), f))
    assert tvm_ffi.structural_equal(got, expected)
    assert [p.name for p in got.params] == ["x"]
    permutes = []
    relax.analysis.post_order_visit(got.body, lambda e: permutes.append(e) if isinstance(e, relax.Call)
                                    and e.op == tvm.ir.Op.get("relax.permute_dims") else None)
    assert len(permutes) == (1 if equal_constants else 2)  # equal ones merged, as rewrite_call merges them
