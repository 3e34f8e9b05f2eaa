"""The plan stage: what it decides, its JSON form, and that the codegen lowers exactly it."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import tvm
from helpers import conv, eltwise, matmul, pool
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import relax
from tvm_npu.codegen.partition import PlanError, lower_plan
from tvm_npu.tir_schedules import tile_search
from tvm_npu.tir_schedules.scheduler import RESIDENT_SHARE

import tvm_npu
from tvm_npu.compiler.driver import is_npu_function, partition_plans, stages
from tvm_npu.compiler.relax_ext import npu_codegen
from tvm_npu.config import CompilerOptions, HardwareConfig, parse_target
from tvm_npu.core.artifact import Artifact
from tvm_npu.core.ops import TensorRef
from tvm_npu.core.plan import PLAN_ATTR, OpPlan, PartitionPlan, SramRegion, dump_stem
from tvm_npu.core.tiles import ConvTile, tile_to_json
from tvm_npu.models.inputs import backend_inputs
from tvm_npu.models.light import tiny_convnet
from tvm_npu.runtime.npu_module import module_blob

TARGETS = ("npu", "npu -fusion=0", "npu -fusion=2", "npu -fusion=2 -max-sram-bytes=131072 -pipeline-stages=3")


def _planned_module(model, target: str) -> tvm.IRModule:
    """``model`` after every stage up to and including ``plan``."""
    mod = tvm_npu.load_model(model)
    for stage in stages(parse_target(target)):
        if stage.name == "codegen":
            return mod
        mod = stage.run(mod)
    raise AssertionError("no codegen stage")


@pytest.mark.parametrize("target", TARGETS)
def test_plan_round_trips_through_json(target: str) -> None:
    plans = partition_plans(tiny_convnet(), target)
    assert plans
    for plan in plans:
        assert PartitionPlan.from_json(plan.to_json()) == plan
        assert plan.target == str(parse_target(target))


@pytest.mark.parametrize("target", TARGETS)
def test_plan_respects_the_sram(target: str) -> None:
    """Every operator's tile fits below the regions live while it runs; regions live at the
    same time never overlap and stay inside the SRAM."""
    hw = parse_target(target).hw
    for plan in partition_plans(tiny_convnet(), target):
        for k, op in enumerate(plan.ops):
            live = [r for r in plan.resident if r.live_at(k)]
            assert op.sram_limit == min((r.addr for r in live), default=hw.max_sram_bytes)
            assert op.sram_bytes == tile_search.footprint(op.spec, op.tile, hw) <= op.sram_limit
        for a in plan.resident:
            assert a.addr >= 0 and a.addr + a.nbytes <= hw.max_sram_bytes
            assert a.nbytes <= hw.max_sram_bytes // RESIDENT_SHARE
            for b in plan.resident:
                overlap_in_time = a.producer <= b.last_use and b.producer <= a.last_use
                if a is not b and overlap_in_time:
                    assert a.addr + a.nbytes <= b.addr or b.addr + b.nbytes <= a.addr, (a, b)


def test_fusion_levels_shape_the_plan() -> None:
    (p0, *_), (p1, *_), (p2, *_) = (partition_plans(tiny_convnet(), f"npu -fusion={f}") for f in (0, 1, 2))
    assert len(p0.ops) > len(p1.ops) == len(p2.ops)  # fusion folds elementwise operators into producers
    assert not p0.resident and not p1.resident and p2.resident  # only -fusion=2 keeps intermediates on chip
    # at -fusion=0 every operator writes DRAM: no epilogue on a conv; at 1 the bias and activations fold in
    assert all(not op.spec.epilogue for op in p0.ops if op.spec.name.startswith("conv2d"))
    assert all(op.spec.epilogue for op in p1.ops if op.spec.name.startswith("conv2d"))


def _codegen(func, target) -> Artifact:
    """The artifact ``relax.ext.npu`` compiles ``func`` into, as ``RunCodegen`` would call it."""
    return Artifact.decode(module_blob(npu_codegen([func], {"target": str(target)}, [])[0]))


def test_plan_stage_attaches_the_plan_and_the_codegen_lowers_it() -> None:
    """The codegen follows the attached plan, not its own choice: a plan edited to another
    legal tile compiles to that tile (and still computes the right answer)."""
    mod = _planned_module(tiny_convnet(), "npu")
    target = parse_target("npu")
    funcs = [f for _, f in mod.functions.items() if is_npu_function(f)]
    func = next(f for f in funcs if any(op.spec.name.startswith("conv2d")
                                        for op in PartitionPlan.from_json(str(f.attrs[PLAN_ATTR])).ops))
    plan = PartitionPlan.from_json(str(func.attrs[PLAN_ATTR]))
    k, op = next((k, op) for k, op in enumerate(plan.ops) if isinstance(op.tile, ConvTile))
    other = next(t for t, _ in tile_search.legal(op.spec, target.hw, target.options) if t != op.tile)
    edited = replace(plan, ops=(*plan.ops[:k], replace(op, tile=other), *plan.ops[k + 1:]))
    artifact = _codegen(func.with_attr(PLAN_ATTR, edited.to_json()), target)
    assert artifact.layers[k].tile == json.loads(json.dumps(tile_to_json(other)))


def test_a_plan_for_another_target_or_partition_is_refused() -> None:
    mod = _planned_module(tiny_convnet(), "npu")
    func = next(f for _, f in mod.functions.items() if is_npu_function(f))
    plan = PartitionPlan.from_json(str(func.attrs[PLAN_ATTR]))
    with pytest.raises(ValueError, match="made for target"):
        _codegen(func.with_attr(PLAN_ATTR, replace(plan, target="npu -fusion=0").to_json()), parse_target("npu"))
    stranger = TensorRef("nowhere", plan.ops[0].spec.out.shape, plan.ops[0].spec.out.dtype)
    bad = replace(plan, ops=(replace(plan.ops[0], spec=replace(plan.ops[0].spec, data=stranger)), *plan.ops[1:]))
    with pytest.raises(PlanError, match="'nowhere'"):
        lower_plan(bad, {}, parse_target("npu").hw)


@pytest.mark.parametrize("text", ["", "{", "[]", '{"version": 99}', '{"version": 1, "symbol": "x"}'])
def test_malformed_plans_give_one_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match="plan"):
        PartitionPlan.from_json(text)


_SPECS = [conv(8, 16, 9, k=3, pad=1, epi=("bias", "relu")), conv(6, 6, 7, k=3, groups=6, layout="NHWC"),
          matmul(20, 33, 17, epi=("bias", "gelu")), matmul(5, 7, 9, batch=2, transpose_b=True),
          pool(10, 9, kind="avg", k=3, stride=2, pad=1, count_include_pad=True),
          eltwise((2, 5, 6, 7), "NHWC", ("bias", "clip"))]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(_SPECS), st.integers(1, 3), st.floats(0, 1e9, allow_nan=False), st.data())
def test_any_plan_of_known_specs_round_trips(spec, stages: int, cycles: float, data) -> None:
    hw, opts = HardwareConfig(), CompilerOptions(pipeline_stages=stages)
    tile = data.draw(st.sampled_from([t for t, _ in tile_search.legal(spec, hw, opts)]))
    region = SramRegion(spec.out.name, hw.max_sram_bytes - 4096, 4096, 0, 1)
    plan = PartitionPlan("p", "npu", spec.inputs, (spec.out.name,),
                         (OpPlan(spec, tile, ("npu.x",), hw.max_sram_bytes - 4096, cycles, 64),), (region,))
    assert PartitionPlan.from_json(plan.to_json()) == plan


def test_dump_writes_plans_with_short_stable_names(tmp_path) -> None:
    """Partition symbols name every fused op and can exceed a file name's limit: dump files
    are a short stem plus a hash, and the full symbol is inside the plan."""
    long_symbol = "fused_" + "relax_nn_conv2d_relax_add_relax_nn_relu_" * 10 + "npu"
    assert len(dump_stem(long_symbol)) < 64 and dump_stem(long_symbol) == dump_stem(long_symbol)
    assert dump_stem(long_symbol) != dump_stem(long_symbol + "2")
    model = tiny_convnet()
    ex = tvm_npu.build(model, "npu -fusion=2", dump_dir=tmp_path)
    plans = sorted(tmp_path.glob("*.plan.json"))
    assert plans and sorted(tmp_path.glob("*.plan.txt"))
    assert all(len(p.name) < 100 for p in tmp_path.iterdir())
    symbols = {PartitionPlan.from_json(p.read_text()).symbol for p in plans}
    assert any(len(s) > 64 for s in symbols)  # this model's partitions do have long symbols
    args = [tvm.runtime.tensor(v) for v in backend_inputs(model).values()]
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*args).numpy()
    ref = relax.VirtualMachine(tvm_npu.build_reference(model), tvm.cpu())["main"](*args).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
