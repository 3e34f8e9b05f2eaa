"""Row-wise expressions by their algebra (``relay_patterns/rowwise_algebra.py``, ``rowwise_region.py``).

* canonical forms: the exporters' ways of writing one normalisation are equal, different algebra is not;
* programs: the canonical layer norm and softmax are the fixed programs of the row-wise kind;
* Relax: ONNX decompositions (torch, tf2onnx) imported by TVM give equal canonical forms;
* the step-program template on the simulator against an independent numpy evaluation (every step kind,
  every way a constant lines up with the rows, tiles that do not divide the rows, pipelining), with the
  SRAM footprint the codegen allocates and the cost model within 10% of the simulated cycles.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm.relax.frontend.onnx import from_onnx
from tvm_npu.codegen.operator import standalone_program
from tvm_npu.relay_patterns import rowwise_algebra as A
from tvm_npu.relay_patterns.rowwise_region import find_row_programs, recognise, row_program_spec
from tvm_npu.simulator import Simulator, isa
from tvm_npu.tir_schedules import kind_of, tile_search
from tvm_npu.tir_schedules.rowwise import row_steps

from tvm_npu.config import CompilerOptions, DType, HardwareConfig
from tvm_npu.core.ops import (
    Along,
    Broadcast,
    EpiKind,
    Epilogue,
    RowKind,
    RowParam,
    RowStep,
    RowwiseSpec,
    TensorRef,
    spec_key,
)
from tvm_npu.core.plan import spec_from_json, spec_to_json
from tvm_npu.core.tiles import RowTile

HW = HardwareConfig()
F32 = DType.FP32
N = 64
G, B = A.param(Along.COLS, "g"), A.param(Along.COLS, "b")
EPS = A.const(1e-5)


def _mean_sub(x: A.Node = A.X) -> A.Node:
    return A.sub(x, A.mean(x, N))


def _torch_layer_norm(square: str = "mul", root: str = "div") -> A.Node:
    d = _mean_sub()
    var = A.mean(A.mul(d, d) if square == "mul" else A.power(d, 2.0), N)
    shifted = A.add(var, EPS)
    normed = A.div(d, A.sqrt(shifted)) if root == "div" else A.mul(d, A.rsqrt(shifted))
    return A.add(A.mul(normed, G), B)


def _tf2onnx_layer_norm(neg: bool) -> A.Node:
    m = A.mean(A.X, N)
    d = A.sub(A.X, m)
    rg = A.mul(A.recip(A.sqrt(A.add(A.mean(A.mul(d, d), N), EPS))), G)
    shift = A.add(A.neg(A.mul(m, rg)), B) if neg else A.sub(B, A.mul(m, rg))
    return A.add(A.mul(A.X, rg), shift)


def test_layer_norm_forms_are_one_canonical_form() -> None:
    forms = [_torch_layer_norm(s, r) for s in ("mul", "pow") for r in ("div", "rsqrt")]
    forms += [_tf2onnx_layer_norm(neg) for neg in (False, True)]
    assert all(f == forms[0] for f in forms[1:])


def test_different_algebra_is_a_different_form() -> None:
    ln = _torch_layer_norm()
    d = _mean_sub()
    cubed = A.add(A.mul(A.div(d, A.sqrt(A.add(A.mean(A.power(d, 3.0), N), EPS))), G), B)
    other_eps = A.add(A.mul(A.div(d, A.sqrt(A.add(A.mean(A.mul(d, d), N), A.const(1e-3)))), G), B)
    swapped = A.add(A.mul(A.div(d, A.sqrt(A.add(A.mean(A.mul(d, d), N), EPS))), B), G)
    rms = A.mul(A.mul(A.X, A.rsqrt(A.add(A.mean(A.mul(A.X, A.X), N), EPS))), G)
    assert len({ln, cubed, other_eps, swapped, rms}) == 5


def test_rms_norm_forms_and_rules() -> None:
    a = A.mul(A.mul(A.X, A.rsqrt(A.add(A.mean(A.mul(A.X, A.X), N), EPS))), G)
    b = A.mul(A.div(A.X, A.sqrt(A.add(A.mean(A.power(A.X, 2.0), N), EPS))), G)
    c = A.div(A.mul(G, A.X), A.power(A.add(EPS, A.mul(A.rsum(A.mul(A.X, A.X)), A.const(1.0 / N))), 0.5))
    assert a == b == c
    assert A.sub(A.X, A.X) == A.const(0.0) and A.add(A.X, A.X) == A.mul(A.const(2.0), A.X)
    assert A.rmin(A.X) == A.neg(A.rmax(A.neg(A.X)))  # min(x) = -max(-x)
    assert A.variance(A.X, N) == A.mean(A.mul(_mean_sub(), _mean_sub()), N)


def _without_names(steps: tuple[RowStep, ...], names: dict[str, str]) -> list[tuple]:
    return [(s.op, names.get(s.src, s.src), names.get(s.other, s.other), s.row, round(s.scale, 9), round(s.shift, 12))
            for s in steps]


def test_canonical_layer_norm_and_softmax_are_the_fixed_programs() -> None:
    """The program made from the canonical form is the row-wise kind's own layer norm (and softmax), step for
    step: the same instructions in the same order."""
    x = TensorRef("x", (4, N), F32)
    fixed = RowwiseSpec("ln", TensorRef("y", (4, N), F32), data=x, kind=RowKind.LAYER_NORM,
                        gamma=TensorRef("g", (N,), F32), beta=TensorRef("b", (N,), F32), eps=float(np.float32(1e-5)))
    made = A.program(_tf2onnx_layer_norm(True), {"g": "p0", "b": "p1"})
    assert _without_names(made, {"p0": "gamma", "p1": "beta"}) == _without_names(row_steps(fixed), {})
    e = A.exp(A.sub(A.X, A.rmax(A.X)))
    softmax = RowwiseSpec("sm", TensorRef("y", (4, N), F32), data=x, kind=RowKind.SOFTMAX)
    assert _without_names(A.program(A.div(e, A.rsum(e)), {}), {}) == _without_names(row_steps(softmax), {})


def test_log_softmax_forms_are_one_program() -> None:
    """``x - m - log(sum(exp(x - m)))`` and ``log(softmax(x))`` have one canonical form, whose program computes
    ``x - m`` once and subtracts the log from it (as onnxruntime does); a log does not split over a quotient
    whose divisor may be negative."""
    m = A.rmax(A.X)
    d = A.sub(A.X, m)
    written = A.sub(d, A.log(A.rsum(A.exp(d))))
    assert A.log(A.div(A.exp(d), A.rsum(A.exp(d)))) == written
    steps = A.program(written, {})
    assert [(s.op.name, s.src, s.other, s.row) for s in steps] == [
        ("VRMAX", "x", None, True), ("VSUB", "x", "rw0", False), ("VEXP", "rw1", None, False),
        ("VRSUM", "rw2", None, True), ("VLOG", "rw3", None, True), ("VSUB", "rw1", "rw4", False)]
    assert A.log(A.div(A.X, A.rsum(A.X)))[0] == "log"  # sum(x) may be negative: log(x / s) stays one log
    assert A.log(A.exp(A.X)) == A.X and A.log(A.const(1.0)) == A.const(0.0)


def test_what_is_no_program() -> None:
    with pytest.raises(A.NotRowwise, match="no vector instruction computes erf"):
        A.program(A.sub(A.X, ("erf", A.rsum(A.exp(A.X)))), {})
    with pytest.raises(A.NotRowwise, match="no new value"):
        A.program(A.X, {})
    with pytest.raises(A.NotRowwise, match="does not vary along the row"):
        A.rsum(A.rmax(A.X))


# ---------------------------------------------------------------------- Relax, from ONNX
def _imported(build) -> list:
    """Canonical forms of the row programs TVM's importer gives for ``build(net, x)``."""
    net = OnnxNet(seed=3)
    gamma, beta = np.linspace(0.5, 1.5, 32), np.linspace(-0.1, 0.1, 32)
    y = build(net, "x", net.const(gamma), net.const(beta))
    model = net.model(y, [2, 5, 32], [2, 5, 32])
    func = from_onnx(model, keep_params_in_input=False)["main"]
    return [recognise(out, sub).expr for out, sub in find_row_programs(func)]


def _onnx_torch_ln(net: OnnxNet, x: str, g: str, b: str) -> str:
    m = net.node("ReduceMean", [x], axes=[-1], keepdims=1)
    d = net.node("Sub", [x, m])
    var = net.node("ReduceMean", [net.node("Pow", [d, net.const(np.float32(2))])], axes=[-1], keepdims=1)
    normed = net.node("Div", [d, net.node("Sqrt", [net.node("Add", [var, net.const(np.float32(1e-5))])])])
    return net.node("Add", [net.node("Mul", [normed, g]), b])


def _onnx_tf2onnx_ln(net: OnnxNet, x: str, g: str, b: str) -> str:
    m = net.node("ReduceMean", [x], axes=[-1], keepdims=1)
    d = net.node("Sub", [x, m])
    var = net.node("ReduceMean", [net.node("Mul", [d, d])], axes=[-1], keepdims=1)
    r = net.node("Reciprocal", [net.node("Sqrt", [net.node("Add", [var, net.const(np.float32(1e-5))])])])
    rg = net.node("Mul", [r, g])
    return net.node("Add", [net.node("Mul", [x, rg]), net.node("Sub", [b, net.node("Mul", [m, rg])])])


def test_exporters_layer_norms_in_relax_are_one_canonical_form() -> None:
    (torch,) = _imported(_onnx_torch_ln)
    (tf2onnx,) = _imported(_onnx_tf2onnx_ln)
    assert torch == tf2onnx


def test_a_norm_over_a_leading_axis_is_no_row_program() -> None:
    """Rows are trailing axes: a norm over axis 1 is one only over a transposing view (``rowwise_views.py``,
    tests/e2e/test_normalisations.py)."""

    def over_axis_1(net: OnnxNet, x: str, g: str, b: str) -> str:
        m = net.node("ReduceMean", [x], axes=[1], keepdims=1)
        return net.node("Mul", [net.node("Sub", [x, m]), g])

    assert _imported(over_axis_1) == []


# ---------------------------------------------------------------------- the template on the simulator
def _apply(s: RowStep, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """One step in float64 numpy: an independent reading of :class:`RowStep`'s semantics."""
    op = isa.Opcode
    if s.op in (op.VRSUM, op.VRMAX):
        return a.sum(axis=1, keepdims=True) if s.op == op.VRSUM else a.max(axis=1, keepdims=True)
    binary = {op.VADD: np.add, op.VSUB: np.subtract, op.VMUL: np.multiply, op.VMAX: np.maximum, op.VMIN: np.minimum}
    if s.op in binary:
        return binary[s.op](a, b)
    unary = {op.VEXP: np.exp, op.VRECIP: lambda v: 1 / v, op.VRSQRT: lambda v: 1 / np.sqrt(v),
             op.VSCALE: lambda v: v * s.scale + s.shift, op.VPOW: lambda v: v**s.scale,
             op.VCLIP: lambda v: np.clip(v, s.scale, s.shift)}
    return unary[s.op](a)


def _numpy(spec: RowwiseSpec, env: dict[str, np.ndarray]) -> np.ndarray:
    """The step program evaluated in float64 numpy on the ``rows x cols`` view."""
    rows, cols = spec.rows, spec.cols
    vals: dict[str, np.ndarray] = {"x": env["x"].reshape(rows, cols).astype(np.float64)}
    shapes = {Along.COLS: (1, cols), Along.ROWS: (rows, 1), Along.FULL: (rows, cols)}
    for k, p in enumerate(spec.params):
        vals[f"p{k}"] = env[p.ref.name].reshape(shapes[p.along]).astype(np.float64)
    for i, s in enumerate(spec.program):
        vals[f"rw{i}"] = _apply(s, vals[s.src], vals[s.other] if s.other is not None else None)
    return np.broadcast_to(vals[f"rw{len(spec.program) - 1}"], (rows, cols)).reshape(spec.out.shape)


def _program_spec(shape: tuple[int, ...], row_length: int) -> tuple[RowwiseSpec, dict[str, np.ndarray]]:
    """``clip(x - mean(x), -2, 2) * 1/max(sqrt(sum(x^2) * s_row), 0.5) ** 1.5 + b_pos + e_full`` and so on:
    every step kind, a per-row, a per-position and a per-element constant."""
    rng = np.random.default_rng(0)
    size = int(np.prod(shape))
    rows = size // row_length
    g = A.param(Along.COLS, "g")
    s = A.param(Along.ROWS, "s")
    e = A.param(Along.FULL, "e")
    d = A.minimum(A.maximum(A.sub(A.X, A.mean(A.X, row_length)), A.const(-2.0)), A.const(2.0))
    norm = A.maximum(A.sqrt(A.mul(A.rsum(A.mul(A.X, A.X)), s)), A.const(0.5))
    z = A.add(A.mul(d, A.power(A.recip(norm), 1.5), g), e)
    expr = A.sub(A.maximum(z, A.mul(A.const(0.1), A.X)), A.rmax(A.exp(A.minimum(A.X, A.rmin(A.X)))))
    prog = A.program(expr, {"g": "p0", "s": "p1", "e": "p2"})
    ops = {st.op for st in prog}
    assert {isa.Opcode.VPOW, isa.Opcode.VCLIP, isa.Opcode.VMAX, isa.Opcode.VMIN, isa.Opcode.VEXP} <= ops
    values = {"pg": rng.uniform(0.5, 1.5, row_length), "ps": rng.uniform(0.5, 2.0, rows),
              "pe": rng.standard_normal((rows, row_length))}
    params = tuple(RowParam(TensorRef(n, v.shape, F32), a)
                   for n, v, a in zip(values, values.values(), (Along.COLS, Along.ROWS, Along.FULL), strict=True))
    spec = RowwiseSpec("prog", TensorRef("y", shape, F32), data=TensorRef("x", shape, F32), kind=RowKind.PROGRAM,
                       row_length=0 if row_length == shape[-1] else row_length, params=params, program=prog)
    env = {n: v.astype(np.float32) for n, v in values.items()}
    env["x"] = rng.standard_normal(shape).astype(np.float32) * 2
    return spec, env


@pytest.mark.parametrize("shape, row_length, tile", [((6, 40), 40, RowTile(4, 2)), ((2, 3, 4, 5), 20, RowTile(5, 3)),
                                                     ((2, 8, 16), 16, RowTile(16, 1))])
def test_step_program_on_the_simulator(shape: tuple[int, ...], row_length: int, tile: RowTile) -> None:
    spec, env = _program_spec(shape, row_length)
    program, peak = standalone_program(spec, tile, HW)
    run = Simulator(HW).run(program, env)
    np.testing.assert_allclose(run.outputs["y"], _numpy(spec, env), rtol=1e-5, atol=1e-5)
    assert peak == kind_of(spec).footprint(spec, tile, HW)  # the planner's footprint is what the codegen allocates


def test_step_program_cost_model_tracks_the_simulator() -> None:
    """The flow model's cycles (the planner's ranking) within 10% of the simulated cycles."""
    spec, env = _program_spec((128, 96), 96)
    tile = RowTile(32, 2)
    program, _ = standalone_program(spec, tile, HW)
    cycles = Simulator(HW).run(program, env).stats.total_cycles
    predicted = tile_search.estimate(spec, tile, HW).cycles
    assert abs(predicted - cycles) <= 0.10 * cycles, (predicted, cycles)


def test_row_program_spec_names_its_constants() -> None:
    """The spec built from a recognised subgraph: its row view, its constants by how they line up."""
    net = OnnxNet(seed=3)
    y = _onnx_tf2onnx_ln(net, "x", net.const(np.linspace(0.5, 1.5, 32)), net.const(np.linspace(-0.1, 0.1, 32)))
    func = from_onnx(net.model(y, [2, 5, 32], [2, 5, 32]), keep_params_in_input=False)["main"]
    ((out, sub),) = find_row_programs(func)
    prog = recognise(out, sub)
    spec, consts = row_program_spec(prog, TensorRef("y", (2, 5, 32), F32), "x", lambda k: f"c{k}")
    assert (spec.rows, spec.cols, spec.row_length) == (10, 32, 0)
    assert [p.along for p in spec.params] == [Along.COLS, Along.COLS]
    assert sorted(round(float(v[0]), 3) for v in consts.values()) == [-0.1, 0.5]


def test_no_per_channel_epilogue_when_a_row_spans_several_axes() -> None:
    """A per-channel epilogue operand runs along the output's last axis; rows of several axes are not that
    axis, so no tile computes such a fused operator (the plan's fusion leaves the step an operator of its own)."""
    spec, _ = _program_spec((2, 3, 4, 5), 20)
    step = Epilogue(EpiKind.MUL, TensorRef("v", (5,), F32), Broadcast.CHANNEL)
    assert tile_search.fits(spec, HW, CompilerOptions())
    assert not tile_search.fits(spec.with_epilogue(step), HW, CompilerOptions())
    last_axis, _ = _program_spec((6, 40), 40)
    assert tile_search.fits(last_axis.with_epilogue(replace(step, operand=TensorRef("v", (40,), F32))), HW,
                            CompilerOptions())


def test_a_step_program_survives_the_plan_json() -> None:
    """Plans and tuning workloads carry specs as JSON: a program (an infinite clip bound included) comes back equal."""
    spec, _ = _program_spec((2, 3, 4, 5), 20)
    assert any(s.op == isa.Opcode.VCLIP for s in spec.program)
    assert spec_from_json(spec_to_json(spec)) == spec


def test_equal_programs_have_one_tuning_key() -> None:
    """Tuning records are keyed by a name-free signature: the same program over constants of other names (two
    layers' norms) has one key, another program another."""
    spec, _ = _program_spec((6, 40), 40)
    renamed = replace(spec, name="other", params=tuple(replace(p, ref=replace(p.ref, name=f"k9_{k}"))
                                                      for k, p in enumerate(spec.params)))
    assert spec_key(renamed) == spec_key(spec)
    other = replace(spec, program=(*spec.program[:-1], replace(spec.program[-1], op=isa.Opcode.VADD)))
    assert spec_key(other) != spec_key(spec)
