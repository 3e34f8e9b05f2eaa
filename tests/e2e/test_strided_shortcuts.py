"""A ResNetV2's stride-2 shortcut (a 1x1 / 2 max pool, ``tvm_npu.testing.corpus.resnet_v2``) end to end: its
plan reads only the rows the pool uses (``tir_schedules/strided.py``) and the model still matches llvm and
onnxruntime (fp32 standard), and its int8 form is bit-exact with llvm."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from helpers import check_against_references
from tvm import relax

import tvm_npu
from tvm_npu.core.ops import PoolSpec
from tvm_npu.testing.corpus import resnet_v2


def _shortcut_tiles(info: tvm_npu.BuildInfo) -> list:
    return [op.tile for plan in info.plans for op in plan.ops
            if isinstance(op.spec, PoolSpec) and op.spec.kernel == (1, 1) and op.spec.strides == (2, 2)]


def test_resnet_v2_shortcut_skips_rows_and_matches_references() -> None:
    info = check_against_references(resnet_v2())
    tiles = _shortcut_tiles(info)
    assert len(tiles) == 1 and tiles[0].skip_rows, tiles


@pytest.mark.slow
def test_resnet_v2_int8_is_bit_exact(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from tvm_npu.tools.quantize import quantize_model

    path = quantize_model(resnet_v2(), tmp_path / "q.onnx", random=4, seed=0)
    model = onnx.load(path)
    x = np.random.default_rng(2).standard_normal((1, 3, 64, 64)).astype(np.float32)
    ex, info = tvm_npu.build_with_info(model, "npu")
    assert _shortcut_tiles(info), "the 8-bit shortcut pool runs on the NPU"

    def run(executable: object) -> np.ndarray:
        return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()

    np.testing.assert_array_equal(run(ex), run(tvm_npu.build_reference(model)))
