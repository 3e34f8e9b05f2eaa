"""Per-layer cycles that the machine can deliver, and the engine-aware bound (``tvm_npu.report.occupancy``).

A layer's cycles are those in which its instructions work, so no layer is shown moving more DRAM bytes
per cycle than the channel carries or doing more MACs per cycle than the peak of its dtype (before, an
additive split of the run charged ``light_squeezenet``'s final average pool 42,500 cycles for 722,944
bytes: 17.0 B/cycle on a 16 B/cycle channel). Cycles are deterministic, so these are exact checks.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm_npu.simulator import decode_program, isa
from tvm_npu.simulator.timing import compute_cycles

import tvm_npu
from tvm_npu.config import DType, parse_target
from tvm_npu.models.inputs import backend_inputs
from tvm_npu.models.registry import BUNDLED
from tvm_npu.report.layers import ModelReport, report
from tvm_npu.report.occupancy import Occupancy, lane_ops, occupancy
from tvm_npu.runtime.execute import Profile
from tvm_npu.tools.bench import profile_model
from tvm_npu.tools.quantize import quantize_model


def test_occupancy_counts_each_layers_working_cycles_and_their_overlap() -> None:
    spans = [[(0, 10), (5, 20)],  # overlapping intervals of one layer count once
             [(18, 30), (40, 45)],  # 18-20 shared with layer 0; 30-40 nobody works
             [(30, 30)],  # an empty interval is no work
             [(45, 50)]]  # touching layer 1's end is no overlap
    assert occupancy(spans) == [Occupancy(20, 0, 20, 2), Occupancy(17, 18, 45, 2), Occupancy(0, 0, 0, 0),
                                Occupancy(5, 45, 50, 0)]


def _separable_int8() -> onnx.ModelProto:
    """QDQ int8: 3x3 conv + relu, depthwise 3x3 + relu, 2x2 max pool, 1x1 conv (quantize_static-style)."""
    rng = np.random.default_rng(0)
    c, e = 8, 64

    def init(name: str, shape: tuple[int, ...], scale: float) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=e),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w3", "b3"], ["y"], kernel_shape=[1, 1])]
    inits = [init("w1", (e, c, 3, 3), 0.12), init("b1", (e,), 0.1), init("w2", (e, 1, 3, 3), 0.33),
             init("b2", (e,), 0.1), init("w3", (16, e, 1, 1), 0.125), init("b3", (16,), 0.1)]
    graph = helper.make_graph(nodes, "separable", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 [1, c, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with tempfile.TemporaryDirectory() as tmp:
        return onnx.load(str(quantize_model(model, Path(tmp) / "q.onnx", random=4, seed=1)))


MODELS = {"light_squeezenet": (lambda: BUNDLED["light_squeezenet"](), "npu"),
          "tiny_convnet_grouped": (lambda: BUNDLED["tiny_convnet"](), "npu -fusion=3 -max-sram-bytes=196608"),
          "separable_int8": (_separable_int8, "npu")}


@pytest.fixture(scope="module", params=[pytest.param(m, marks=pytest.mark.slow) if m == "light_squeezenet" else m
                                        for m in MODELS])
def profiled(request: pytest.FixtureRequest) -> tuple[str, Profile, ModelReport]:
    load, target = MODELS[request.param]
    model = load()
    _, prof, _ = profile_model(tvm_npu.build(model, target), list(backend_inputs(model).values()), trace=True,
                               timing_only=True)
    return request.param, prof, report(prof)


def test_every_layers_bytes_and_macs_fit_its_cycles(profiled: tuple[str, Profile, ModelReport]) -> None:
    """Per layer and per group: DRAM bytes moved (waste included) / cycles <= the channel's rate, MACs /
    cycles <= the peak of the layer's dtype, neither bound beaten, and every engine's busy time inside."""
    name, prof, rep = profiled
    hw = parse_target(prof.runs[0].artifact.target).hw
    for x in rep.layers:
        what = (name, x.label, x.cycles)
        assert x.dram_bytes + x.wasted_bytes <= x.cycles * hw.dram_bytes_per_cycle, what
        assert x.macs <= x.cycles * hw.peak_macs_per_cycle(DType.from_str(x.dtype)), what
        assert 0 < x.efficiency <= x.engine_efficiency <= 1, (*what, x.efficiency, x.engine_efficiency)
        assert x.overlap_cycles <= x.cycles <= x.end - x.start, what
    for g in rep.groups:
        members = [x for x in rep.layers if x.group == g.label]
        assert g.dram_bytes <= g.cycles * hw.dram_bytes_per_cycle, (name, g.label)
        assert sum(x.macs for x in members) <= g.cycles * hw.peak_macs_per_cycle(DType.from_str(members[0].dtype))
        assert 0 < g.efficiency <= 1, (name, g)
    assert sum(x.share_cycles for x in rep.layers) == rep.cycles
    if name == "light_squeezenet":  # the issue's case: the final average pool, 722,944 bytes over the channel
        pool = next(x for x in rep.layers if x.op == "pool" and x.name.startswith("mean"))
        moved = pool.dram_bytes + pool.wasted_bytes
        assert moved > pool.bound_cycles * hw.dram_bytes_per_cycle  # waste: more than its bound's cycles carry
        assert pool.cycles >= moved / hw.dram_bytes_per_cycle


def test_the_engine_bound_holds_each_layer_to_the_engines_that_run_it(
        profiled: tuple[str, Profile, ModelReport]) -> None:
    """A layer on the vector engine (depthwise conv, pool) is held to the lanes, its MACs not counted at the
    tensor peak; a tensor-engine layer to the peak; both report forms carry the figure."""
    name, prof, rep = profiled
    hw = parse_target(prof.runs[0].artifact.target).hw
    for x in rep.layers:
        vector_layer = x.tile.get("engine") == "vector" or x.op == "pool"
        if vector_layer:
            assert x.engine_bound_cycles >= x.macs / hw.vector_lanes, (name, x.label)
        elif x.op == "conv2d":
            assert x.engine_bound_cycles >= x.bound_cycles
    if name == "separable_int8":
        dw = next(x for x in rep.layers if x.tile.get("engine") == "vector")
        assert dw.engine_bound_by == "vector" and dw.engine_bound_cycles > dw.bound_cycles  # lanes, not the peak
        assert dw.engine_bound_cycles >= dw.macs / hw.vector_lanes > dw.macs / hw.peak_macs_per_cycle(DType.INT8)
    data = json.loads(json.dumps(rep.to_json()))
    assert [x["engine_bound_cycles"] for x in data["layers"]] == [x.engine_bound_cycles for x in rep.layers]
    head = rep.table().splitlines()[1 if rep.shape else 0]
    assert {"span", "overlap", "engine bound", "eng eff"} <= {c.strip() for c in head.split("  ") if c.strip()}


def test_lane_ops_agree_with_the_simulators_vector_costs(profiled: tuple[str, Profile, ModelReport]) -> None:
    """``lane_ops / lanes`` never exceeds an instruction's cycles without issue, and equals them when its
    elements fill whole lane groups: the engine bound's vector part is the simulator's own arithmetic."""
    _, prof, _ = profiled
    hw = parse_target(prof.runs[0].artifact.target).hw
    seen = 0
    for ins in decode_program(prof.runs[0].artifact.program).instructions:
        if getattr(ins, "engine", None) != isa.Engine.VECTOR or isinstance(ins, isa.Wait | isa.Signal):
            continue
        work, cost = lane_ops(hw, ins), compute_cycles(hw, ins) - hw.vector_issue_cycles
        assert 0 < work / hw.vector_lanes <= cost, ins
        n = ins.channels * ins.out_h * ins.out_w if isinstance(ins, isa.Pool | isa.DwConv) else ins.nelems
        if n % hw.vector_lanes == 0 and not isinstance(ins, isa.VecReduce):
            assert work / hw.vector_lanes == cost, ins
            seen += 1
    assert seen  # every program here has vector instructions that fill whole lane groups
