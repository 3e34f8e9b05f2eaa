"""Whole models: ``tvm_npu.build`` (NPU partitions on the simulator, the rest on llvm) against
``tvm_npu.build_reference`` (everything on llvm) on the same inputs.

* small Relax models built with ``relax.BlockBuilder`` (conv/bias/relu/residual/pool/dense/
  elementwise chains, NCHW and NHWC) for every ``-pipeline-stages`` x ``-fusion`` x SRAM budget,
  checking the SRAM high-water mark of every NPU run against the budget;
* double buffering on a DMA-bound 1x1 conv (deterministic simulated cycles);
* the ONNX light models squeezenet and resnet50: their stored reference outputs, and with random
  weights against llvm (each model built once per weight set; these builds take tens of seconds).
  resnet50's stored reference (its shipped weights, every one the same value) runs under
  ``-m benchmark`` only: its random-weight build checks the same model more strictly, and squeezenet
  keeps the stored-reference check in the default suite.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import onnx
import pytest
import relax_models as rm
import tvm
from helpers import ATOL, RTOL
from model_helpers import reference_output
from tvm import relax

import tvm_npu
from tvm_npu.config import DType, parse_target
from tvm_npu.models.inputs import backend_inputs
from tvm_npu.models.light import light_model_path, randomize_weights

pytestmark = pytest.mark.slow  # whole ONNX models built for the NPU and llvm: the quick tier leaves it out

# ------------------------------------------------------------------------ BlockBuilder models
MODELS: dict[str, Callable[[], tvm.IRModule]] = {
    "convnet_nchw": lambda: rm.convnet("NCHW"),
    "convnet_nhwc": lambda: rm.convnet("NHWC"),
    "pools_nchw": lambda: rm.pools("NCHW"),
    "pools_nhwc": lambda: rm.pools("NHWC"),
    "mlp_bmm": rm.mlp,
    "eltwise_chain_nchw": lambda: rm.eltwise_chain("NCHW"),
    "eltwise_chain_nhwc": lambda: rm.eltwise_chain("NHWC"),
    "silu": rm.silu,
}
SMALL_SRAM = 16384
TARGETS = [
    *(f"npu -pipeline-stages={s} -fusion={f}" for f in (0, 1) for s in (1, 2, 3)),
    *(f"npu -pipeline-stages={s} -fusion={f} -max-sram-bytes={SMALL_SRAM}" for s, f in ((1, 1), (2, 0), (3, 1))),
    "npu -fusion=2",
    "npu -layout-pref=NHWC",
]


@dataclass(frozen=True)
class Reference:
    mod: tvm.IRModule
    args: list[np.ndarray]
    expected: np.ndarray


_REFERENCES: dict[str, Reference] = {}


def reference(name: str) -> Reference:
    """The model, its inputs and the llvm result (built once per model)."""
    if name not in _REFERENCES:
        mod = MODELS[name]()
        args = rm.inputs_for(mod)
        _REFERENCES[name] = Reference(mod, args, rm.run(tvm_npu.build_reference(mod), args))
    return _REFERENCES[name]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(MODELS))
def test_relax_model_matches_llvm(name: str, target: str) -> None:
    ref = reference(name)
    hw = parse_target(target).hw
    executable = tvm_npu.build(ref.mod, target)
    with tvm_npu.profile() as prof:
        out = rm.run(executable, ref.args)
    np.testing.assert_allclose(out, ref.expected, rtol=RTOL, atol=ATOL)
    assert prof.runs, f"nothing of {name} ran on the NPU with {target!r}"
    for run in prof.runs:
        assert run.stats.sram_high_water <= hw.max_sram_bytes, (run.symbol, run.stats.sram_high_water)
        assert run.artifact.target == str(parse_target(target))
        assert all(layer.sram_bytes <= hw.max_sram_bytes for layer in run.artifact.layers)


@pytest.mark.parametrize("name", ["dense_head", "conv_wide_pad"])
def test_edge_models_match_llvm(name: str) -> None:
    """A one-unit dense head (one-element output tile + epilogue) and a conv padded beyond its kernel."""
    mod = getattr(rm, name)()
    args = rm.inputs_for(mod)
    with tvm_npu.profile() as prof:
        out = rm.run(tvm_npu.build(mod, "npu"), args)
    np.testing.assert_allclose(out, rm.run(tvm_npu.build_reference(mod), args), rtol=RTOL, atol=ATOL)
    convs_on_npu = [x for run in prof.runs for x in run.artifact.layers if x.op == "conv2d"]
    if name == "conv_wide_pad":  # refused by the pattern check: it runs on the host
        assert not convs_on_npu
    else:
        assert prof.runs


# ------------------------------------------------------------------------- double buffering
def _conv_cycles(stages_: int) -> tuple[int, float, float]:
    """Simulated cycles of a 1x1 conv 16->32 on 112x112 (+ bias + relu), its MAC and DRAM bounds."""
    mod = rm.conv1x1(16, 32, 112)
    target = parse_target(f"npu -pipeline-stages={stages_}")
    executable = tvm_npu.build(mod, target)
    with tvm_npu.profile(timing_only=True) as prof:
        rm.run(executable, rm.inputs_for(mod))
    (run,) = prof.runs
    hw = target.hw
    macs = 16 * 32 * 112 * 112
    dram_bytes = 4 * (16 * 112 * 112 + 32 * 112 * 112 + 32 * 16 + 32)
    return run.stats.total_cycles, macs / hw.peak_macs_per_cycle(DType.FP32), dram_bytes / hw.dram_bytes_per_cycle


def test_double_buffering_hides_dma_on_a_dma_bound_conv() -> None:
    single, mac_bound, dram_bound = _conv_cycles(1)
    double, _, _ = _conv_cycles(2)
    triple, _, _ = _conv_cycles(3)
    print(f"\n1x1 conv 16->32 @112: 1 stage {single}, 2 stages {double}, 3 stages {triple} cycles; "
          f"bounds: MACs {mac_bound:.0f}, DRAM {dram_bound:.0f}")
    assert dram_bound > mac_bound, "the layer should be DMA-bound"
    assert single >= 1.5 * double, (single, double)
    assert double >= dram_bound and triple >= dram_bound  # nothing beats the datasheet's bound
    assert triple <= 1.02 * double


def test_double_buffering_result_is_the_same() -> None:
    mod = rm.conv1x1(16, 32, 112)
    args = rm.inputs_for(mod)
    expected = rm.run(tvm_npu.build_reference(mod), args)
    for s in (1, 2):
        np.testing.assert_allclose(rm.run(tvm_npu.build(mod, f"npu -pipeline-stages={s}"), args), expected,
                                   rtol=RTOL, atol=ATOL)


# ------------------------------------------------------------------------- ONNX light models
def with_logits(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with the input of its final Softmax added as a second graph output (the logits:
    a much stricter comparison than probabilities, which softmax squashes towards 1/1000)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"][-1]
    logits = onnx.ValueInfoProto()
    logits.CopyFrom(model.graph.output[0])  # softmax keeps the shape
    logits.name = softmax.input[0]
    model.graph.output.append(logits)
    return model


def _moves_data(composite: str) -> bool:
    """Views and concats are matched into partitions but are no layer (``relay_patterns/graph.py``)."""
    return composite.startswith("npu.view") or composite == "npu.concat"


def offload_counts(mod: tvm.IRModule) -> tuple[int, collections.Counter]:
    """(operators matched into NPU partitions, host operators by name) of a module as partitioned
    (``BuildInfo.partitioned``: the build's own, rather than a second run of the pipeline)."""
    npu, host = 0, collections.Counter()
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            v = b.value
            if not isinstance(v, relax.Call):
                continue
            if isinstance(v.op, tvm.ir.Op):
                host[v.op.name] += 1
            elif isinstance(v.op, relax.GlobalVar) and (mod[v.op].attrs or {}).get("Codegen") == "npu":
                bindings = [bb for blk in mod[v.op].body.blocks for bb in blk.bindings]
                local = {bb.var: bb.value for bb in bindings if isinstance(bb.value, relax.Function)}
                npu += sum(1 for bb in bindings if isinstance(bb.value, relax.Call) and bb.value.op in local
                           and not _moves_data(str(local[bb.value.op].attrs["Composite"])))
            else:
                host[str(v.op)] += 1
    return npu, host


@dataclass
class LightRun:
    """One light model (one weight set) built for the NPU and run once on its backend inputs."""

    name: str
    model: onnx.ModelProto
    outputs: list[np.ndarray]
    runs: list[tvm_npu.PartitionRun]
    inputs: list[np.ndarray]
    partitioned: tvm.IRModule  # the build's module after partitioning


def _outputs(value: object) -> list[np.ndarray]:
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    return [x.numpy() for x in value]


def _light(name: str, model: onnx.ModelProto) -> LightRun:
    feeds = backend_inputs(model)
    inputs = [feeds[i.name] for i in model.graph.input if i.name in feeds]
    executable, info = tvm_npu.build_with_info(model, "npu")
    vm = relax.VirtualMachine(executable, tvm.cpu())
    with tvm_npu.profile() as prof:
        out = vm["main"](*(tvm.runtime.tensor(x) for x in inputs))
    assert info.partitioned is not None
    return LightRun(name, model, _outputs(out), list(prof.runs), inputs, info.partitioned)


LIGHT = ["squeezenet", "resnet50"]


@pytest.fixture(scope="module", params=["squeezenet", pytest.param("resnet50", marks=pytest.mark.benchmark)])
def light_const(request: pytest.FixtureRequest) -> Iterator[LightRun]:
    """The light model as shipped (every weight one repeated value)."""
    name = request.param
    yield _light(name, onnx.load(str(light_model_path(name))))


@pytest.fixture(scope="module", params=LIGHT)
def light_random(request: pytest.FixtureRequest) -> Iterator[LightRun]:
    """The light model with seeded random weights and its logits as a second output."""
    name = request.param
    yield _light(name, with_logits(randomize_weights(onnx.load(str(light_model_path(name))), seed=0)))


def _report(run: LightRun) -> None:
    npu, host = offload_counts(run.partitioned)
    layers = sum(len(r.artifact.layers) for r in run.runs)
    fused = sum(len([f for f in layer.fused if f != "npu.copy"]) for r in run.runs for layer in r.artifact.layers)
    print(f"\n{run.name}: {npu} operators matched for the NPU ({fused} pattern matches in {layers} NPU layers "
          f"after fusion, {len(run.runs)} partitions); {sum(host.values())} host operators: {dict(host)}; "
          f"{sum(r.stats.total_cycles for r in run.runs)} NPU cycles")
    assert npu == fused, "every matched operator must run in some NPU layer"
    assert npu > sum(host.values()), "most operators of a CNN should run on the NPU"


@pytest.mark.slow
def test_light_model_matches_stored_reference(light_const: LightRun) -> None:
    expected = reference_output(light_const.name)
    (out,) = light_const.outputs
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
    assert all(r.stats.sram_high_water <= parse_target("npu").hw.max_sram_bytes for r in light_const.runs)
    _report(light_const)


@pytest.mark.slow
def test_light_model_random_weights_match_llvm(light_random: LightRun) -> None:
    reference_exe = tvm_npu.build_reference(light_random.model)
    vm = relax.VirtualMachine(reference_exe, tvm.cpu())
    expected = _outputs(vm["main"](*(tvm.runtime.tensor(x) for x in light_random.inputs)))
    probs, logits = light_random.outputs
    np.testing.assert_allclose(logits, expected[1], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(probs, expected[0], rtol=RTOL, atol=ATOL)
    assert np.ptp(logits) > 0.1, "random weights should give distinct logits"
    assert all(r.stats.sram_high_water <= parse_target("npu").hw.max_sram_bytes for r in light_random.runs)
    _report(light_random)
