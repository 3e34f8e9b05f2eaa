"""The per-layer report (``tvm_npu.report.layers``) on small models with a known binding resource."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import relax_models as rm
import tvm
from tvm import relax
from tvm_npu.simulator import decode_program, isa

import tvm_npu
from tvm_npu.config import DType, parse_target
from tvm_npu.models.inputs import backend_inputs
from tvm_npu.models.light import tiny_convnet
from tvm_npu.report.layers import report
from tvm_npu.runtime.execute import PartitionRun
from tvm_npu.tools.bench import profile_model

#: tiny_convnet forms a group of 4 slices (conv2d_0 + max_pool2d_1) and one of a single slice here;
#: at -max-sram-bytes=65536 it forms none.
GROUPED = "npu -fusion=3 -max-sram-bytes=196608"


def _grouped(bias: bool) -> tvm.IRModule:
    """A 3x3 conv of 64 channels in 32 groups of 2: two channels per group keep the tensor
    engine's array mostly idle, so the tensor engine binds (its bias add is negligible). (A
    depthwise conv would run on the vector engine.)"""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64, 20, 20), "float32"))
    rng = np.random.default_rng(0)
    with bb.function("main", [x]):
        with bb.dataflow():
            w = relax.const(rng.standard_normal((64, 2, 3, 3)).astype("float32"))
            y = bb.emit(relax.op.nn.conv2d(x, w, padding=1, groups=32))
            if bias:
                y = bb.emit(relax.op.add(y, relax.const(rng.standard_normal((1, 64, 1, 1)).astype("float32"))))
            gv = bb.emit_output(y)
        bb.emit_func_output(gv)
    return bb.get()


def _profiled(mod: tvm.IRModule) -> tvm_npu.Profile:
    with tvm_npu.profile(trace=True) as prof:
        rm.run(tvm_npu.build(mod, "npu"), rm.inputs_for(mod))
    return prof


def test_an_engine_waiting_on_a_semaphore_is_not_busy() -> None:
    """With a bias epilogue the vector engine spends the layer waiting for the tensor engine;
    the report must still name the tensor engine as the binding resource."""
    for bias in (False, True):
        (layer,) = report(_profiled(_grouped(bias))).layers
        assert layer.op == "conv2d" and layer.bound_by == "tensor", (bias, layer.bound_by)
        assert 0 < layer.efficiency < 0.5  # 2 channels per group are far from the roofline on a 16x16 array


def test_layer_shares_add_up_to_the_run() -> None:
    """The shares split the run; the layers' own cycles overlap where neighbours work at the same time, and
    each layer's cycles lie within its span."""
    prof = _profiled(rm.convnet("NCHW"))
    rep = report(prof)
    assert sum(x.share_cycles for x in rep.layers) == rep.cycles == prof.total_cycles
    assert sum(x.cycles - x.overlap_cycles for x in rep.layers) <= rep.cycles <= sum(x.cycles for x in rep.layers)
    assert all(0 < x.efficiency <= x.engine_efficiency <= 1 for x in rep.layers if x.macs)
    assert all(x.overlap_cycles <= x.cycles <= x.end - x.start for x in rep.layers)


def _work(run: PartitionRun, layers: set[int]) -> list[tuple[int, int]]:
    """The (start, end) intervals in which instructions of ``layers`` run on an engine (waiting on or
    signalling a semaphore is not work; the DRAM channel's time lies inside its DMA instruction's)."""
    program = decode_program(run.artifact.program)
    mine = {i for k in layers for a, b in run.artifact.layers[k].ranges() for i in range(a, b)
            if not isinstance(program.instructions[i], isa.Wait | isa.Signal)}
    return [(e.start, e.end) for e in run.trace if e.index in mine and e.track != "DRAM" and e.end > e.start]


def _covered(intervals: list[tuple[int, int]], minus: list[tuple[int, int]]) -> int:
    """Cycles inside some interval of ``intervals`` and inside none of ``minus``."""
    points = sorted({t for iv in intervals + minus for t in iv})
    return sum(b - a for a, b in itertools.pairwise(points)
               if any(x <= a and b <= y for x, y in intervals) and not any(x <= a and b <= y for x, y in minus))


def test_layer_groups_in_the_report() -> None:
    """A group's cycles are those in which its members work; its bound the datasheet's for a fused group;
    its members' shares of the run at least the cycles in which only members work, at most the span from
    the end of the work before the group to the end of its own (idle cycles go to the layer that works
    next)."""
    model = tiny_convnet()
    _, prof, _ = profile_model(tvm_npu.build(model, GROUPED), list(backend_inputs(model).values()), trace=True,
                               timing_only=True)
    rep = report(prof)
    (run,) = prof.runs
    run_hw = parse_target(run.artifact.target).hw
    assert sum(x.share_cycles for x in rep.layers) == rep.cycles == prof.total_cycles
    assert len(rep.groups) == len(run.artifact.groups) > 0
    assert any(g.slices > 1 for g in rep.groups), "no group of several slices: the test needs another SRAM size"
    others = set(range(len(run.artifact.layers)))
    for g, info in zip(rep.groups, run.artifact.groups, strict=True):
        index = range(info.first, info.last + 1)
        assert g.members == tuple(run.artifact.layers[k].name for k in index)
        assert [x.name for x in rep.layers if x.group == g.label] == list(g.members)
        members = [x for x in rep.layers if x.group == g.label]
        assert g.share_cycles == sum(x.share_cycles for x in members)
        assert max(x.cycles for x in members) <= g.cycles <= sum(x.cycles for x in members)
        compute = sum(x.macs / run_hw.peak_macs_per_cycle(DType.from_str(x.dtype)) for x in members)
        dram = sum(x.input_bytes + x.weight_bytes + x.output_bytes for x in members) / run_hw.dram_bytes_per_cycle
        assert g.bound_cycles == pytest.approx(max(compute, dram))
        assert 0 < g.efficiency <= 1 and g.saved_bytes > 0 and g.sram_peak_bytes > 0
        if g.slices > 1:  # the members take turns slice by slice
            assert all(len(run.artifact.layers[k].ranges()) == g.slices for k in index)
        work, rest = _work(run, set(index)), _work(run, others - set(index))
        start, end = min(a for a, _ in work), max(b for _, b in work)
        before = max((b for _, b in rest if b <= start), default=0)
        assert _covered(work, rest) - len(index) <= g.share_cycles <= end - before + len(index), (g, start, end)
        assert g.cycles == _covered(work, [])
    data = json.loads(json.dumps(rep.to_json()))
    assert [x["label"] for x in data["groups"]] == [g.label for g in rep.groups]
    assert {x["group"] for x in data["layers"]} == {"", *(g.label for g in rep.groups)}
    table = rep.table()
    assert all(f"\n{g.label} " in table and " ".join(g.members) in table for g in rep.groups)
    assert "a group's cycles: those in which any member works" in table
