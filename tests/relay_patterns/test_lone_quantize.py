"""A lone quantize by any scale runs on the NPU as ``quantize(y * float32(1 / s), 1, z)`` (issue 24 item 3).

onnxruntime's QuantizeLinear divides (``rint(float32(y / s))``); the NPU multiplies by the float32
reciprocal. The two agree exactly for a power-of-two scale; for any other scale they differ only where
the quotient lies within float32 error of a rounding tie, by one step. Measured here, on the rule the
rewrite writes (the multiplier is read back from the rewritten module): random float32 values
(>= 99.999 % identical) and every float32 within 8 units in the last place of the ties of 64 quantized
values (the worst case there is: < 2 % differ), never more than one step, over 300 random scales.
"""

from __future__ import annotations

import numpy as np
import pytest
from tvm import relax
from tvm_npu.relay_patterns import qdq_to_integer

F32 = np.float32
SCALES = 300


def _multiplier(scale: float, zero_point: int = 0) -> np.float32:
    """The constant the integer rewrite multiplies a float32 tensor by before ``quantize(., 1, z)``."""
    x = relax.Var("x", relax.TensorType((1, 64), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            q = bb.emit(relax.op.quantize(x, relax.const(scale, "float32"), relax.const(zero_point, "int8"),
                                          axis=1, out_dtype="int8"))
            out = bb.emit_output(q)
        bb.emit_func_output(out)
    func = qdq_to_integer(bb.get())["main"]
    found: list[np.float32] = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.quantize":
            assert float(expr.args[1].value.numpy()) == 1.0, "the rewritten quantize divides by 1"
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.multiply":
            found.append(F32(expr.args[1].value.numpy()))

    relax.analysis.post_order_visit(func.body, visit)
    assert len(found) == 1, f"expected one multiply by the reciprocal, got {found}"
    return found[0]


def _near_ties(scale: np.float32, rng: np.random.Generator) -> np.ndarray:
    """Every float32 within 8 ulps of ``(n + 1/2) * s`` for 64 random quantized values n."""
    ties = ((rng.integers(-128, 128, 64) + 0.5) * np.float64(scale)).astype(F32)
    return (ties.view(np.int32)[:, None] + np.arange(-8, 9, dtype=np.int32)[None, :]).ravel().view(F32)


def _steps(y: np.ndarray, scale: np.float32, r: np.float32) -> np.ndarray:
    return np.abs(np.rint(y * r) - np.rint(np.divide(y, scale, dtype=F32)))


@pytest.mark.parametrize("scale", [1 / 256, 2.0**-7, 0.5, 4.0])
def test_power_of_two_scale_is_exact(scale: float) -> None:
    r = _multiplier(scale)
    assert r == F32(1 / scale)
    y = np.random.default_rng(0).standard_normal(100_000).astype(F32) * F32(scale * 60)
    assert not _steps(y, F32(scale), r).any()


def test_any_scale_is_within_one_step_and_rarely_differs() -> None:
    rng = np.random.default_rng(24)
    random_same = random_total = tie_same = tie_total = 0
    worst = 0.0
    for _ in range(SCALES):
        s = F32(np.exp(rng.uniform(np.log(1e-4), 0.0)))
        r = _multiplier(float(s), int(rng.integers(-128, 128)))
        assert r == F32(1) / s  # the float32 reciprocal of the float32 scale
        y = (rng.standard_normal(20_000) * s * 40).astype(F32)
        d = _steps(y, s, r)
        random_same, random_total = random_same + int((d == 0).sum()), random_total + d.size
        t = _steps(_near_ties(s, rng), s, r)
        tie_same, tie_total = tie_same + int((t == 0).sum()), tie_total + t.size
        worst = max(worst, float(d.max()), float(t.max()))
    assert worst <= 1.0, f"{worst} steps apart"
    assert random_same / random_total >= 0.99999, (random_same, random_total)
    assert 0.98 < tie_same / tie_total < 1.0, (tie_same, tie_total)  # the ties are where the step is
