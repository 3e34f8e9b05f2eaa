"""Transformer operators on the NPU: softmax and layer norm (the row-wise kind), GELU in both
forms, Q*K^T with the transpose folded into the operand DMA.

* the row-wise operator alone on the simulator against float64 numpy over hypothesis-drawn
  shapes and tiles (with its SRAM footprint equal to what the codegen allocates);
* Relax models end to end against llvm (the attention block is one partition, no host call);
* the forms ONNX exporters write, built with ``onnx.helper``: ``LayerNormalization``, the
  decomposed layer norm of opset < 17, ``Softmax``, erf-GELU, tanh-GELU and ``MatMul`` with a
  ``Transpose`` of K.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
import pytest
import relax_models as rm
import tvm
from helpers import ATOL, RTOL, assert_matches
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from tvm import relax
from tvm.script import relax as R
from tvm_npu.codegen.operator import standalone_program
from tvm_npu.simulator import Simulator
from tvm_npu.tir_schedules import kind_of, tile_search

import tvm_npu
from tvm_npu.compiler.driver import partition_plans
from tvm_npu.config import CompilerOptions, DType, HardwareConfig
from tvm_npu.core.ops import Broadcast, EpiKind, Epilogue, MatmulSpec, RowKind, RowwiseSpec, TensorRef
from tvm_npu.core.tiles import RowTile

HW = HardwareConfig()
F32 = DType.FP32


# ------------------------------------------------------------------- the row-wise kind alone
#: Epilogues fused after a row-wise operator: none, an activation, or operands (a full tensor and a
#: vector along the rows) and an activation.
EPILOGUES = ("none", "gelu_tanh", "mul_bias_relu")


def _spec(kind: RowKind, shape: tuple[int, ...], affine: bool, epi: str = "none") -> RowwiseSpec:
    cols = shape[-1]
    params = (TensorRef("gamma", (cols,), F32), TensorRef("beta", (cols,), F32)) if affine else (None, None)
    spec = RowwiseSpec("op", TensorRef("y", shape, F32), data=TensorRef("x", shape, F32), kind=kind,
                       gamma=params[0], beta=params[1], eps=1e-5)
    if epi == "gelu_tanh":
        return spec.with_epilogue(Epilogue(EpiKind.GELU_TANH))
    if epi == "mul_bias_relu":
        return spec.with_epilogue(Epilogue(EpiKind.MUL, TensorRef("m", shape, F32)),
                                  Epilogue(EpiKind.BIAS, TensorRef("b", (cols,), F32), Broadcast.CHANNEL),
                                  Epilogue(EpiKind.RELU))
    return spec


def _numpy(spec: RowwiseSpec, env: dict[str, np.ndarray]) -> np.ndarray:
    x = env["x"].astype(np.float64)
    if spec.kind == RowKind.SOFTMAX:
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        y = e / e.sum(axis=-1, keepdims=True)
    else:
        mean = x.mean(axis=-1, keepdims=True)
        y = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + spec.eps)
        if spec.gamma is not None:
            y = y * env["gamma"] + env["beta"]
    kinds = [e.kind for e in spec.epilogue]
    if kinds == [EpiKind.GELU_TANH]:
        y = 0.5 * y * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y**3)))
    elif kinds:
        y = np.maximum(y * env["m"] + env["b"], 0.0)
    return y


def _simulate(spec: RowwiseSpec, tile: RowTile, seed: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    rng = np.random.default_rng(seed)
    cols = spec.cols
    env = {"x": rng.normal(0.0, 4.0, spec.data.shape).astype(np.float32)}
    if spec.gamma is not None:
        env["gamma"] = rng.normal(1.0, 0.3, cols).astype(np.float32)
        env["beta"] = rng.normal(0.0, 0.3, cols).astype(np.float32)
    if len(spec.epilogue) > 1:
        env["m"] = rng.normal(0.0, 1.0, spec.data.shape).astype(np.float32)
        env["b"] = rng.normal(0.0, 1.0, cols).astype(np.float32)
    program, peak = standalone_program(spec, tile, HW)
    run = Simulator(HW).run(program, env)
    return run.outputs["y"], _numpy(spec, env), peak, run.stats.total_cycles


@settings(max_examples=8, deadline=None)
@given(kind=st.sampled_from([RowKind.SOFTMAX, RowKind.LAYER_NORM]), lead=st.sampled_from([(), (3,), (2, 3)]),
       rows=st.integers(1, 9), cols=st.integers(2, 70), tile_rows=st.integers(1, 9), stages=st.sampled_from([1, 2, 3]),
       affine=st.booleans(), epi=st.sampled_from(EPILOGUES), seed=st.integers(0, 1000))
def test_rowwise_matches_numpy(kind, lead, rows, cols, tile_rows, stages, affine, epi, seed) -> None:
    spec = _spec(kind, (*lead, rows, cols), affine and kind == RowKind.LAYER_NORM, epi)
    tile = RowTile(min(tile_rows, spec.rows), stages)
    out, ref, peak, _ = _simulate(spec, tile, seed)
    assert_matches(out, ref, f"{spec.kind.value} {spec.data.shape} {tile}")
    assert peak == kind_of(spec).footprint(spec, tile, HW)  # the planner's footprint is what the codegen allocates


def test_softmax_is_numerically_stable() -> None:
    """Rows of large values (exp would overflow without the max subtracted) and a constant row."""
    spec = _spec(RowKind.SOFTMAX, (3, 40), False)
    program, _ = standalone_program(spec, RowTile(3, 1), HW)
    x = np.stack([np.linspace(800.0, 1000.0, 40), np.full(40, -500.0), np.linspace(-3.0, 3.0, 40)]).astype(np.float32)
    out = Simulator(HW).run(program, {"x": x}).outputs["y"]
    assert np.isfinite(out).all()
    assert_matches(out, _numpy(spec, {"x": x}))
    np.testing.assert_allclose(out[1], np.full(40, 1 / 40), rtol=1e-6)


@pytest.mark.parametrize("kind, shape, tile", [(RowKind.SOFTMAX, (64, 64), RowTile(16, 2)),
                                               (RowKind.LAYER_NORM, (128, 192), RowTile(32, 2)),
                                               (RowKind.LAYER_NORM, (10, 16), RowTile(4, 2))])
def test_cost_model_tracks_the_simulator(kind: RowKind, shape: tuple[int, int], tile: RowTile) -> None:
    """The flow model's cycles (the planner's ranking) within 10% of the simulated cycles."""
    spec = _spec(kind, shape, kind == RowKind.LAYER_NORM)
    _, _, _, cycles = _simulate(spec, tile, 0)
    predicted = tile_search.estimate(spec, tile, HW).cycles
    assert abs(predicted - cycles) <= 0.10 * cycles, (predicted, cycles)


def test_planner_picks_a_tile_that_fits_a_small_sram() -> None:
    spec = _spec(RowKind.LAYER_NORM, (256, 768), True)
    small = HardwareConfig(max_sram_bytes=64 * 1024)
    tile = tile_search.choose(spec, small, CompilerOptions())
    assert isinstance(tile, RowTile) and tile_search.footprint(spec, tile, small) <= small.max_sram_bytes


# ------------------------------------------------------------------- Relax models vs llvm
def _single(op: Callable[[relax.Var, np.random.Generator], relax.Expr], shape: tuple[int, ...],
            seed: int = 0) -> tvm.IRModule:
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(op(x, rng)))
        bb.emit_func_output(out)
    return bb.get()


def _const(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> relax.Constant:
    return relax.const(rng.normal(0.0, scale, shape).astype(np.float32))


def attention(seq: int = 16, dim: int = 32, batch: int = 0, seed: int = 0) -> tvm.IRModule:
    """``softmax(q k^T / sqrt(d)) v`` with q, k, v projections of one input (batched when ``batch``)."""
    rng = np.random.default_rng(seed)
    shape = (batch, seq, dim) if batch else (seq, dim)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            q, k, v = (bb.emit(R.matmul(x, _const(rng, dim, dim, scale=dim**-0.5))) for _ in range(3))
            axes = [0, 2, 1] if batch else None
            scores = bb.emit(R.multiply(bb.emit(R.matmul(q, bb.emit(R.permute_dims(k, axes)))),
                                        relax.const(np.float32(dim**-0.5))))
            out = bb.emit_output(bb.emit(R.matmul(bb.emit(R.nn.softmax(scores, axis=-1)), v)))
        bb.emit_func_output(out)
    return bb.get()


def multi_head_attention(seq: int = 16, dim: int = 32, heads: int = 2, seed: int = 0) -> tvm.IRModule:
    """Attention over split heads as exporters write it: ``reshape`` to (1, seq, heads, d), ``permute_dims``
    to (1, heads, seq, d) (K straight to (1, heads, d, seq)), scores divided by sqrt(d), heads merged back."""
    rng = np.random.default_rng(seed)
    d = dim // heads
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, seq, dim), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            q, k, v = (bb.emit(R.reshape(bb.emit(R.matmul(x, _const(rng, dim, dim, scale=dim**-0.5))),
                                         (1, seq, heads, d))) for _ in range(3))
            qh, vh = (bb.emit(R.permute_dims(t, [0, 2, 1, 3])) for t in (q, v))
            kt = bb.emit(R.permute_dims(k, [0, 2, 3, 1]))
            scores = bb.emit(R.divide(bb.emit(R.matmul(qh, kt)), relax.const(np.float32(math.sqrt(d)))))
            ctx = bb.emit(R.matmul(bb.emit(R.nn.softmax(scores, axis=-1)), vh))
            merged = bb.emit(R.reshape(bb.emit(R.permute_dims(ctx, [0, 2, 1, 3])), (1, seq, dim)))
            out = bb.emit_output(bb.emit(R.matmul(merged, _const(rng, dim, dim, scale=dim**-0.5))))
        bb.emit_func_output(out)
    return bb.get()


def windowed_scores(windows: int = 4, heads: int = 3, tokens: int = 9, d: int = 8, seed: int = 0) -> tvm.IRModule:
    """Swin's scores: ``q k^T`` per window and head, + a relative position bias (heads, t, t) broadcast over
    the windows, + a shifted-window mask added on a 5-D view, softmax, * v."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((windows, heads, tokens, d), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            k = bb.emit(R.matmul(x, _const(rng, d, d, scale=d**-0.5)))
            s = bb.emit(R.add(bb.emit(R.matmul(x, bb.emit(R.permute_dims(k, [0, 1, 3, 2])))),
                              _const(rng, heads, tokens, tokens)))
            mask = relax.const(np.where(rng.random((1, windows, 1, tokens, tokens)) < 0.3, -100.0, 0.0)
                               .astype(np.float32))
            view = bb.emit(R.reshape(s, (1, windows, heads, tokens, tokens)))
            s = bb.emit(R.reshape(bb.emit(R.add(view, mask)), (windows, heads, tokens, tokens)))
            out = bb.emit_output(bb.emit(R.matmul(bb.emit(R.nn.softmax(s, axis=-1)), x)))
        bb.emit_func_output(out)
    return bb.get()


RELAX_MODELS: dict[str, Callable[[], tvm.IRModule]] = {
    "softmax_3d": lambda: _single(lambda x, _: R.nn.softmax(x, axis=-1), (2, 5, 24)),
    "layer_norm": lambda: _single(lambda x, rng: R.nn.layer_norm(x, _const(rng, 48), _const(rng, 48), axes=[-1],
                                                                 epsilon=1e-6), (12, 48)),
    "matmul_gelu_tanh": lambda: _single(lambda x, rng: R.nn.gelu_tanh(R.matmul(x, _const(rng, 32, 40, scale=0.3))),
                                        (8, 32)),
    "attention": attention,
    "attention_batched": lambda: attention(batch=2),
    "multi_head_attention": multi_head_attention,
    "windowed_scores": windowed_scores,
}


@pytest.mark.parametrize("name", RELAX_MODELS)
def test_relax_model_matches_llvm_on_the_npu(name: str) -> None:
    mod = RELAX_MODELS[name]()
    args = rm.inputs_for(mod)
    expected = rm.run(tvm_npu.build_reference(mod), args)
    ex, info = tvm_npu.build_with_info(mod, "npu")
    np.testing.assert_allclose(rm.run(ex, args), expected, rtol=RTOL, atol=ATOL)
    assert info.host_ops == {}, info.host_ops
    assert info.partitions == 1
    if name == "multi_head_attention":  # K^T and the two head-batched matmuls fold their transposes
        specs = [op.spec for plan in info.plans for op in plan.ops if isinstance(op.spec, MatmulSpec)]
        batched = [s for s in specs if len(s.out.shape) == 4]
        assert len(batched) == 2 and batched[0].transpose_b and not batched[1].transpose_b


def test_attention_keeps_the_score_matrix_on_chip() -> None:
    """At -fusion=2 the scores (and the probabilities) never reach DRAM: one partition, and the
    softmax reads its input from an on-chip region."""
    mod = attention(seq=32, dim=32)
    plans = partition_plans(mod, "npu -fusion=2")
    (plan,) = plans
    kinds = [type(op.spec).__name__ for op in plan.ops]
    soft = kinds.index("RowwiseSpec")
    resident = {r.tensor for r in plan.resident}
    assert plan.ops[soft].spec.data.name in resident and plan.ops[soft].spec.out.name in resident


def test_softmax_over_another_axis_runs_through_transposing_views() -> None:
    """The canonicalisation moves the axis last (``permute_dims``), the partition reads and writes through views
    (more: ``tests/e2e/test_any_axis_and_constant_first.py``)."""
    mod = _single(lambda x, _: R.nn.softmax(x, axis=0), (6, 10))
    args = rm.inputs_for(mod)
    ex, info = tvm_npu.build_with_info(mod, "npu")
    np.testing.assert_allclose(rm.run(ex, args), rm.run(tvm_npu.build_reference(mod), args), rtol=RTOL, atol=ATOL)
    assert info.host_ops == {} and info.npu_ops.get("relax.nn.softmax") == 1


# ------------------------------------------------------------------- exporter forms (onnx.helper)
def _onnx(nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray], shape: tuple[int, ...],
          opset: int = 13, inputs: tuple[str, ...] = ("x",)) -> onnx.ModelProto:
    graph = oh.make_graph(nodes, "form", [oh.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in inputs],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def _f(*values: float) -> np.ndarray:
    return np.array(values[0] if len(values) == 1 else values, np.float32)


def _decomposed_layer_norm(square: str) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    sq = ([oh.make_node("Pow", ["d", "two"], ["p"])] if square == "pow" else [oh.make_node("Mul", ["d", "d"], ["p"])])
    nodes = [oh.make_node("ReduceMean", ["x"], ["m"], axes=[-1]), oh.make_node("Sub", ["x", "m"], ["d"]), *sq,
             oh.make_node("ReduceMean", ["p"], ["v"], axes=[-1]), oh.make_node("Add", ["v", "eps"], ["ve"]),
             oh.make_node("Sqrt", ["ve"], ["s"]), oh.make_node("Div", ["d", "s"], ["n"]),
             oh.make_node("Mul", ["n", "g"], ["ng"]), oh.make_node("Add", ["ng", "b"], ["y"])]
    return _onnx(nodes, {"two": _f(2.0), "eps": _f(1e-5), "g": rng.normal(1, 0.2, 40).astype(np.float32),
                         "b": rng.normal(0, 0.2, 40).astype(np.float32)}, (2, 6, 40))


def _gelu_erf() -> onnx.ModelProto:
    nodes = [oh.make_node("Div", ["x", "sq2"], ["a"]), oh.make_node("Erf", ["a"], ["e"]),
             oh.make_node("Add", ["e", "one"], ["e1"]), oh.make_node("Mul", ["x", "e1"], ["xm"]),
             oh.make_node("Mul", ["xm", "half"], ["y"])]
    return _onnx(nodes, {"sq2": _f(math.sqrt(2.0)), "one": _f(1.0), "half": _f(0.5)}, (4, 33))


def _gelu_tanh() -> onnx.ModelProto:
    nodes = [oh.make_node("Mul", ["x", "x"], ["x2"]), oh.make_node("Mul", ["x2", "x"], ["x3"]),
             oh.make_node("Mul", ["x3", "c"], ["x3c"]), oh.make_node("Add", ["x", "x3c"], ["p"]),
             oh.make_node("Mul", ["p", "k"], ["pk"]), oh.make_node("Tanh", ["pk"], ["t"]),
             oh.make_node("Add", ["t", "one"], ["t1"]), oh.make_node("Mul", ["x", "half"], ["xh"]),
             oh.make_node("Mul", ["xh", "t1"], ["y"])]
    return _onnx(nodes, {"c": _f(0.044715), "k": _f(math.sqrt(2.0 / math.pi)), "one": _f(1.0), "half": _f(0.5)},
                 (4, 33))


def _qk_transpose() -> onnx.ModelProto:
    """``softmax(q @ Transpose(k, [0, 2, 1]))``: batched Q*K^T as exporters write it."""
    nodes = [oh.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), oh.make_node("MatMul", ["q", "kt"], ["s"]),
             oh.make_node("Softmax", ["s"], ["y"], axis=-1)]
    return _onnx(nodes, {}, (2, 12, 16), inputs=("q", "k"))


def _fused_qkv_attention(seq: int = 10, heads: int = 2, d: int = 8) -> onnx.ModelProto:
    """timm's attention: one q/k/v projection, ``Reshape (1, seq, 3, heads, d) -> Transpose (2, 0, 3, 1, 4)
    -> Gather`` per part, K transposed by ``Transpose (0, 1, 3, 2)``, heads merged back."""
    rng = np.random.default_rng(4)
    dim = heads * d
    nodes = [oh.make_node("MatMul", ["x", "w"], ["p"]), oh.make_node("Add", ["b", "p"], ["qkv"]),
             oh.make_node("Reshape", ["qkv", "split"], ["r"]),
             oh.make_node("Transpose", ["r"], ["t"], perm=[2, 0, 3, 1, 4]),
             *(oh.make_node("Gather", ["t", f"i{i}"], [n], axis=0) for i, n in enumerate("qkv")),
             oh.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), oh.make_node("MatMul", ["q", "kt"], ["s"]),
             oh.make_node("Mul", ["s", "scale"], ["ss"]), oh.make_node("Softmax", ["ss"], ["a"], axis=-1),
             oh.make_node("MatMul", ["a", "v"], ["o"]), oh.make_node("Transpose", ["o"], ["om"], perm=[0, 2, 1, 3]),
             oh.make_node("Reshape", ["om", "merge"], ["y"])]
    inits = {"w": rng.normal(0, dim**-0.5, (dim, 3 * dim)).astype(np.float32),
             "b": rng.normal(0, 0.1, 3 * dim).astype(np.float32), "split": np.array([1, seq, 3, heads, d], np.int64),
             "merge": np.array([1, seq, dim], np.int64), "scale": _f(d**-0.5),
             **{f"i{i}": np.array(i, np.int64) for i in range(3)}}
    return _onnx(nodes, inits, (1, seq, dim))


ONNX_FORMS: dict[str, Callable[[], onnx.ModelProto]] = {
    "LayerNormalization": lambda: _onnx(
        [oh.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
        {"g": np.linspace(0.5, 1.5, 40, dtype=np.float32), "b": np.linspace(-1, 1, 40, dtype=np.float32)},
        (3, 40), opset=17),
    "decomposed_layer_norm_pow": lambda: _decomposed_layer_norm("pow"),
    "decomposed_layer_norm_mul": lambda: _decomposed_layer_norm("mul"),
    "Softmax": lambda: _onnx([oh.make_node("Softmax", ["x"], ["y"], axis=-1)], {}, (5, 3, 20)),
    "gelu_erf": _gelu_erf,
    "gelu_tanh": _gelu_tanh,
    "qk_transpose_softmax": _qk_transpose,
    "fused_qkv_attention": _fused_qkv_attention,
}


@pytest.mark.parametrize("form", ONNX_FORMS)
def test_exporter_form_runs_on_the_npu(form: str) -> None:
    model = ONNX_FORMS[form]()
    rng = np.random.default_rng(1)
    args = [rng.normal(0.0, 2.0, [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input]
    expected = rm.run(tvm_npu.build_reference(model), args)
    ex, info = tvm_npu.build_with_info(model, "npu")
    np.testing.assert_allclose(rm.run(ex, args), expected, rtol=RTOL, atol=ATOL)
    assert info.host_ops == {}, info.host_ops
    assert info.partitions == 1
    if "layer_norm" in form.lower():
        assert info.npu_ops == {"relax.nn.layer_norm": 1}


def test_layer_norm_with_other_constants_is_not_rewritten() -> None:
    """A decomposed-looking chain with the wrong exponent is not a layer norm: it is not rewritten into one, and
    runs as what it is, one row-wise operator of its own algebra (``mean((x - m)^3)``; rowwise_region.py)."""
    model = _decomposed_layer_norm("pow")
    for init in model.graph.initializer:
        if init.name == "two":
            init.CopyFrom(numpy_helper.from_array(_f(3.0), "two"))
    args = [np.random.default_rng(2).normal(0, 1, (2, 6, 40)).astype(np.float32)]
    ex, info = tvm_npu.build_with_info(model, "npu")
    np.testing.assert_allclose(rm.run(ex, args), rm.run(tvm_npu.build_reference(model), args), rtol=RTOL, atol=ATOL)
    assert "relax.nn.layer_norm" not in info.npu_ops and info.host_ops == {} and info.npu_ops["relax.mean"] == 2
    (spec,) = [o.spec for p in info.plans for o in p.ops]
    assert spec.kind == RowKind.PROGRAM and [s.op.name for s in spec.program][3:5] == ["VMUL", "VMUL"]  # d * d * d


def test_layer_norm_too_wide_for_the_sram_falls_back_with_a_warning() -> None:
    mod = _single(lambda x, rng: R.nn.layer_norm(x, _const(rng, 768), _const(rng, 768), axes=[-1]), (4, 768))
    args = rm.inputs_for(mod)  # one row of 768 and its working copies need more than 4 KiB
    with pytest.warns(tvm_npu.HostFallbackWarning, match="layer_norm"):
        ex, info = tvm_npu.build_with_info(mod, "npu -max-sram-bytes=4096")
    np.testing.assert_allclose(rm.run(ex, args), rm.run(tvm_npu.build_reference(mod), args), rtol=RTOL, atol=ATOL)
    assert info.host_ops == {"relax.nn.layer_norm": 1}
