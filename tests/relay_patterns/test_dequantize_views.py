"""A lone dequantize / quantize moved across a transpose (``relay_patterns/dequantize_views.py``, issue 24).

The rewrite must give the same numbers (the llvm build of the module before and after it, bit for bit, on every
8-bit value and on float values at the quantization's rounding ties) and the moved form: the dequantize reads
the 8-bit tensor itself, the quantize the float operator's result itself, the transpose after them. Per-axis
parameters, which would have to be permuted too, are left where they are.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm_npu.relay_patterns.dequantize_views import dequantize_views

SHAPE, PERM = (2, 4, 8), [0, 2, 1]


def _module(build) -> tvm.IRModule:
    """``main(x)`` with the body ``build(bb, x)`` (x: ``SHAPE``, int8 or float32 as ``build`` says)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(SHAPE, build.dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(build(bb, x))
        bb.emit_func_output(out)
    return bb.get()


def _dequantize_of_transpose(zero: np.ndarray, scale: np.ndarray):
    def build(bb: relax.BlockBuilder, x: relax.Var) -> relax.Expr:
        t = bb.emit(relax.op.permute_dims(x, PERM))
        f = bb.emit(relax.op.astype(t, "float32"))
        return bb.emit(relax.op.multiply(bb.emit(relax.op.subtract(f, relax.const(zero))), relax.const(scale)))

    build.dtype = "int8"
    return build


def _quantize_of_transpose(multiplier: float, zero: int):
    """``quantize(astype(astype(permute_dims(y), f64) * m, f32), 1, z)``, the lone quantize of :mod:`.quantized`."""
    def build(bb: relax.BlockBuilder, y: relax.Var) -> relax.Expr:
        t = bb.emit(relax.op.permute_dims(y, PERM))
        w = bb.emit(relax.op.multiply(bb.emit(relax.op.astype(t, "float64")), relax.const(multiplier, "float64")))
        q = bb.emit(relax.op.astype(w, "float32"))
        return bb.emit(relax.op.quantize(q, relax.const(1.0, "float32"), relax.const(zero, "int8"), axis=1,
                                         out_dtype="int8"))

    build.dtype = "float32"
    return build


def _ops(mod: tvm.IRModule) -> list[str]:
    return [b.value.op.name for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call)]


def _run(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(relax.build(mod, "llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def _rewritten(mod: tvm.IRModule) -> tvm.IRModule:
    return dequantize_views(mod)


def test_dequantize_moves_ahead_of_the_transpose_bit_for_bit() -> None:
    mod = _module(_dequantize_of_transpose(np.array(-5, np.float32), np.array(0.0873, np.float32)))
    new = _rewritten(mod)
    assert _ops(new) == ["relax.astype", "relax.subtract", "relax.multiply", "relax.permute_dims"], _ops(new)
    x = np.resize(np.arange(-128, 128, dtype=np.int8), SHAPE)  # every int8 value
    want, got = _run(mod, x), _run(new, x)
    assert got.dtype == want.dtype == np.float32 and np.array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize(("multiplier", "zero"), [(254.99998491956009, -128), (28.287977837969024, -6)])
def test_quantize_moves_after_the_transpose_bit_for_bit(multiplier: float, zero: int) -> None:
    mod = _module(_quantize_of_transpose(multiplier, zero))
    new = _rewritten(mod)
    assert _ops(new)[0] == "relax.astype" and _ops(new)[-1] == "relax.permute_dims", _ops(new)
    rng = np.random.default_rng(3)
    ties = (np.arange(np.prod(SHAPE)) - 32 + 0.5) / multiplier  # values whose quotient lies near a tie
    x = (ties * (1 + rng.integers(-4, 5, ties.size) * 2.0**-23)).astype(np.float32).reshape(SHAPE)
    assert np.array_equal(_run(new, x), _run(mod, x))


def test_per_axis_parameters_stay_where_they_are() -> None:
    """A zero point per channel of the transposed tensor is not one value: the dequantize is left after the
    transpose."""
    mod = _module(_dequantize_of_transpose(np.arange(SHAPE[1], dtype=np.float32).reshape(1, 1, -1),
                                           np.array(0.05, np.float32)))
    assert _ops(_rewritten(mod))[0] == "relax.permute_dims"
