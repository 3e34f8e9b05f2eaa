"""Bounds that cannot be beaten: no layer and no partition runs faster than its lower bound.

Operators are drawn by hypothesis (strides up to 4, dilations, groups, layouts, epilogue
chains, a tensor used as several operands, intermediates kept on chip at ``-fusion=2``),
compiled with a random legal tile, run on the simulator and reported as the per-layer
report does. Efficiency above 1.0 would mean a bound counted bytes the operator never
needs, or counted a tensor twice. The same check over the benchmark models runs under
``-m benchmark``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import conv, eltwise, pool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import conv_specs, eltwise_specs, matmul_specs, pool_specs
from tvm_npu.codegen.partition import lower_plan
from tvm_npu.simulator import Simulator, decode_program
from tvm_npu.tir_schedules import tile_search
from tvm_npu.tir_schedules.scheduler import schedule_partition

from tvm_npu.config import CompilerOptions, HardwareConfig, NpuTarget, parse_target
from tvm_npu.core.artifact import Artifact
from tvm_npu.core.ops import EpiKind, Epilogue, OpSpec, TensorRef
from tvm_npu.core.plan import GraphOp, OpPlan, PartitionGraph, PartitionPlan
from tvm_npu.report.layers import report
from tvm_npu.runtime.execute import PartitionRun, Profile

HW = HardwareConfig()


def _inputs(specs: list[OpSpec]) -> tuple[TensorRef, ...]:
    produced = {s.out.name for s in specs}
    seen: dict[str, TensorRef] = {}
    for s in specs:
        for t in s.inputs:
            if t.name not in produced:
                seen.setdefault(t.name, t)
    return tuple(seen.values())


def _check(plan: PartitionPlan) -> list[float]:
    """Compile and run ``plan``; assert every layer's and the partition's efficiency <= 1."""
    hw = parse_target(plan.target).hw
    artifact = Artifact.decode(lower_plan(plan, {}, hw))
    result = Simulator(hw).run(decode_program(artifact.program), timing_only=True, trace=True)
    rep = report(Profile(runs=[PartitionRun(plan.symbol, artifact, result.stats, result.trace)]))
    assert sum(x.share_cycles for x in rep.layers) == result.stats.total_cycles  # the attribution adds up
    for x in rep.layers:
        assert x.cycles > 0, x  # no layer drops out
        assert x.efficiency <= 1.0, (x.description, x.tile, x.cycles, x.bound_cycles)
        assert x.engine_efficiency <= 1.0, (x.description, x.tile, x.cycles, x.engine_bound_cycles)
    assert result.stats.efficiency <= 1.0, (result.stats.lower_bound_cycles, result.stats.total_cycles)
    return [x.efficiency for x in rep.layers]


def _single(spec: OpSpec, tile, stages: int) -> PartitionPlan:
    target = NpuTarget(HW, CompilerOptions(pipeline_stages=stages))
    op = OpPlan(spec, tile, ("npu.test",), HW.max_sram_bytes, 0.0, tile_search.footprint(spec, tile, HW))
    return PartitionPlan("p", str(target), _inputs([spec]), (spec.out.name,), (op,))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=st.one_of(conv_specs(strides=(1, 2, 3, 4)), matmul_specs(), pool_specs(), eltwise_specs()),
       stages=st.sampled_from((1, 2, 3)), data=st.data())
def test_no_operator_beats_its_bound(spec: OpSpec, stages: int, data: st.DataObject) -> None:
    legal = tile_search.legal(spec, HW, CompilerOptions(pipeline_stages=stages))
    tile, _ = data.draw(st.sampled_from(legal), label="tile")
    _check(_single(spec, tile, stages))


@pytest.mark.parametrize("stride", [2, 4])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_strided_1x1_conv_counts_only_the_input_it_reads(stride: int, layout: str) -> None:
    """The audit's case: 1.607 (stride 2) and 2.9 (stride 4) before the bound counted only
    the rows and columns a strided 1x1 convolution reads."""
    spec = conv(64, 64, 56, k=1, stride=stride, pad=0, layout=layout)
    eff = _check(_single(spec, tile_search.choose(spec, HW, CompilerOptions()), 2))
    assert 0.2 < eff[0] <= 1.0


def test_x_plus_x_counts_x_once() -> None:
    spec = eltwise((1, 64, 28, 28), "NCHW", ())
    spec = type(spec)("add", spec.out, data=spec.data, epilogue=(Epilogue(EpiKind.ADD, spec.data),))
    (eff,) = _check(_single(spec, tile_search.choose(spec, HW, CompilerOptions()), 2))
    assert eff > 0.6  # x loaded once and counted once: close to the bound


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=st.integers(4, 48), h=st.integers(6, 20), stride=st.sampled_from([1, 2]), second=st.sampled_from(
    ["pool", "conv", "eltwise"]), fusion=st.sampled_from([1, 2]))
def test_chains_with_on_chip_intermediates_do_not_beat_their_bounds(c: int, h: int, stride: int, second: str,
                                                                    fusion: int) -> None:
    """At ``-fusion=2`` the intermediate never reaches DRAM: neither layer may count it."""
    first = conv(c, c, h, k=3, stride=stride, pad=1, epi=("bias", "relu"))
    mid = first.out
    if second == "pool":
        nxt: OpSpec = pool(c, mid.dim("H"), k=2, stride=2)
    elif second == "conv":
        nxt = conv(c, 2 * c, mid.dim("H"), k=1)
    else:
        nxt = eltwise(mid.shape, "NCHW", ("sigmoid",))
    nxt = _reading(nxt, mid)
    target = parse_target(f"npu -fusion={fusion}")
    graph = PartitionGraph("p", _inputs([first, nxt]), (nxt.out.name,),
                           (GraphOp(first, ("a",)), GraphOp(nxt, ("b",))))
    plan = schedule_partition(graph, target)
    assert bool(plan.resident) == (fusion == 2 and second != "eltwise")  # eltwise: fused instead
    _check(plan)


def _reading(spec: OpSpec, data: TensorRef) -> OpSpec:
    """``spec`` with its data input replaced by ``data`` (and its output renamed apart)."""
    return replace(spec, data=data, out=replace(spec.out, name="y2"))


BENCHMARK_TARGETS = ("npu", "npu -max-sram-bytes=262144", "npu -fusion=0", "npu -fusion=2",
                     "npu -layout-pref=NCHW", "npu -layout-pref=NHWC")


@pytest.mark.benchmark
@pytest.mark.parametrize("target", BENCHMARK_TARGETS)
def test_no_layer_of_a_benchmark_model_beats_its_bound(target: str) -> None:
    """Every layer and partition of the eleven benchmark models (weights randomised), at
    every target of benchmarks/roofline.py."""
    from tvm_npu.models.registry import benchmark_models
    from tvm_npu.tools.bench import build_model, default_inputs, model_report, profile_model

    worst = []
    for name, load in benchmark_models(quick=False).items():
        model = load()
        executable, info, _ = build_model(model, target, progress=False)
        _, prof, _ = profile_model(executable, default_inputs(model), trace=True, timing_only=True)
        rep = model_report(prof, info)
        assert sum(x.share_cycles for x in rep.layers) == rep.cycles
        for run in prof.runs:
            assert run.stats.efficiency <= 1.0, (name, run.symbol, run.stats.efficiency)
        for x in rep.layers:
            # a layer whose operands all stay on chip and which has no MACs has a datasheet bound of 0 (a softmax
            # at -fusion=2); its engine bound, the vector work, is still positive
            assert 0 <= x.efficiency <= x.engine_efficiency <= 1.0 and x.engine_efficiency > 0, (
                name, x.name, x.description, x.efficiency, x.engine_efficiency)
        for g in rep.groups:
            assert 0 < g.efficiency <= 1.0, (name, g.label, g.efficiency)
        worst.append((max(x.efficiency for x in rep.layers), name))
    print(target, sorted(worst)[-3:])
