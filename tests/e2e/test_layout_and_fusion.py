"""Layout planning (transforms folded into NPU operators) and the fusion levels, on whole models."""

from __future__ import annotations

import numpy as np
import pytest
import relax_models as rm
import tvm
from tvm import relax
from tvm_npu.relay_patterns.layout import preferred_layout

import tvm_npu
from tvm_npu.config import parse_target
from tvm_npu.models.inputs import backend_inputs
from tvm_npu.models.light import tiny_convnet


def _run(model, target: str) -> tuple[np.ndarray, tvm_npu.Profile, tvm_npu.BuildInfo]:
    ex, info = tvm_npu.build_with_info(model, target)
    args = [tvm.runtime.tensor(v) for v in backend_inputs(model).values()]
    with tvm_npu.profile() as prof:
        out = relax.VirtualMachine(ex, tvm.cpu())["main"](*args).numpy()
    return out, prof, info


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    model = tiny_convnet()
    args = [tvm.runtime.tensor(v) for v in backend_inputs(model).values()]
    return relax.VirtualMachine(tvm_npu.build_reference(model), tvm.cpu())["main"](*args).numpy()


@pytest.mark.parametrize("pref", ["NCHW", "NHWC", "auto"])
def test_layout_transforms_fold_into_npu_operators(pref: str, reference: np.ndarray) -> None:
    out, prof, info = _run(tiny_convnet(), f"npu -layout-pref={pref}")
    np.testing.assert_allclose(out, reference, rtol=1e-4, atol=1e-5)
    assert info.layout_transforms == 0  # none left for the host
    if pref == "NHWC":  # the NCHW model input needed one, and it was folded into the first conv's DMA
        assert info.transforms_inserted >= 1
    layouts = {x.layout_out for run in prof.runs for x in run.artifact.layers if x.op == "conv2d"}
    if pref != "auto":
        assert layouts == {pref}


def test_auto_layout_is_no_slower_than_either_forced_layout() -> None:
    cycles = {pref: _run(tiny_convnet(), f"npu -layout-pref={pref}")[1].total_cycles
              for pref in ("NCHW", "NHWC", "auto")}
    assert cycles["auto"] <= min(cycles["NCHW"], cycles["NHWC"]) * 1.02


def test_fusion_levels_cut_dram_traffic(reference: np.ndarray) -> None:
    traffic = {}
    for level in (0, 1, 2):
        out, prof, _ = _run(tiny_convnet(), f"npu -fusion={level}")
        np.testing.assert_allclose(out, reference, rtol=1e-4, atol=1e-5)
        traffic[level] = sum(r.stats.dma_load_bytes + r.stats.dma_store_bytes for r in prof.runs)
    assert traffic[1] < traffic[0]  # epilogues fused: intermediates never written
    assert traffic[2] < traffic[1]  # small intermediates kept in SRAM between operators


@pytest.mark.parametrize("stages", [1, 2, 3])
@pytest.mark.parametrize("fusion", [0, 1, 2])
@pytest.mark.parametrize("pref", ["NCHW", "NHWC", "auto"])
def test_every_layout_fusion_pipeline_combination(pref: str, fusion: int, stages: int,
                                                  reference: np.ndarray) -> None:
    """tiny_convnet (conv/bn/relu, a residual add, pools, dense) under all 27 combinations."""
    target = f"npu -layout-pref={pref} -fusion={fusion} -pipeline-stages={stages}"
    out, prof, info = _run(tiny_convnet(), target)
    np.testing.assert_allclose(out, reference, rtol=1e-4, atol=1e-5, err_msg=target)
    assert info.host_macs == 0 and info.layout_transforms == 0
    assert prof.runs and all(r.stats.sram_high_water <= parse_target(target).hw.max_sram_bytes for r in prof.runs)


def test_auto_layout_weighs_transforms_it_cannot_fold() -> None:
    """Around a channel shuffle the conv vote alone prefers NHWC; the shuffle's reshape / transpose and
    the layout transforms next to them are views on the NPU (DMA strides), so whichever layout is
    chosen, nothing is left on the host."""
    mod = rm.channel_shuffle()
    vote = preferred_layout(mod, parse_target("npu"))
    assert vote is not None and vote[0] == "NHWC"  # the scenario: the convs alone would convert
    args = rm.inputs_for(mod)
    expected = rm.run(tvm_npu.build_reference(mod), args)
    left = {}
    for pref in ("auto", "NHWC"):
        ex, info = tvm_npu.build_with_info(mod, f"npu -layout-pref={pref}")
        np.testing.assert_allclose(rm.run(ex, args), expected, rtol=1e-4, atol=1e-5)
        left[pref] = (info.layout_transforms, sum(info.host_ops.values()))
    assert left == {"auto": (0, 0), "NHWC": (0, 0)}
