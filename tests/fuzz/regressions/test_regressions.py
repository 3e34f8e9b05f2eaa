"""Minimal graphs of the bugs the differential fuzzer found, rebuilt with ``GraphBuilder`` (``onnx.helper``).

Each test runs its graph through the fuzzer's oracle (NPU build against llvm and onnxruntime) and
must not fail. A bug not fixed yet is marked ``xfail(strict=True)`` with its diagnosis, so the test
turns red (XPASS) the day it is fixed: then drop the mark and its entry in ``known_bugs.py``.

The same graphs are saved next to this file as ``<name>.onnx`` (a few hundred bytes each; rewrite
them with ``python tests/fuzz/regressions/test_regressions.py``); a test keeps the files in sync.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

import tvm_npu
from tvm_npu.testing.graphs import GraphBuilder
from tvm_npu.testing.known_bugs import KNOWN_BUGS
from tvm_npu.testing.oracle import run_case

HERE = Path(__file__).resolve().parent


# ------------------------------------------------------------------------------------ the graphs
def max_with_constant() -> onnx.ModelProto:
    """One ONNX Max of a tensor and a constant (TVM imports it as max(stack(...), axis=0))."""
    b = GraphBuilder(seed=0, opset=13)
    x0 = b.input((1, 2, 3, 3))
    b.binary_const(x0, "Max", shape=(1,), const_first=False)
    return b.model()


def conv_then_min() -> onnx.ModelProto:
    """A strided 1x1 conv (the auto layout vote picks NHWC for it) followed by a per-channel Min."""
    b = GraphBuilder(seed=0, opset=13)
    x0 = b.input((1, 16, 4, 4))
    t0 = b.conv(x0, out_channels=8, kernel=(1, 1), strides=(2, 2), dilations=(1, 1), pads=(0, 0, 0, 0),
                group=1, bias=True, batchnorm=False)
    b.binary_const(t0, "Min", shape=(8, 1, 1), const_first=False)
    return b.model()


def x_minus_x() -> onnx.ModelProto:
    """Sub(x, x) on the graph input."""
    b = GraphBuilder(seed=0, opset=13)
    x0 = b.input((1, 4))
    b.binary(x0, x0, "Sub")
    return b.model()


def conv_3_to_1() -> onnx.ModelProto:
    """A 1x1 conv from 3 channels to 1 (a reduction axis of 3: not a multiple of the 16-row array)."""
    b = GraphBuilder(seed=0, opset=13)
    x0 = b.input((1, 3, 1, 1))
    b.conv(x0, out_channels=1, kernel=(1, 1), strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), group=1,
           bias=False, batchnorm=False)
    return b.model()


def tiny_matmul() -> onnx.ModelProto:
    """MatMul of a (1, 1) input by a (1, 1) constant."""
    b = GraphBuilder(seed=0, opset=13)
    x0 = b.input((1, 1))
    b.matmul_const(x0, out_features=1, bias=False)
    return b.model()


def two_convs() -> onnx.ModelProto:
    """Two 1x1 convs in a chain (-fusion=2 keeps the intermediate in an on-chip region)."""
    b = GraphBuilder(seed=0, opset=13)
    x0 = b.input((1, 1, 1, 1))
    t0 = b.conv(x0, out_channels=1, kernel=(1, 1), strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), group=1,
                bias=False, batchnorm=False)
    b.conv(t0, out_channels=1, kernel=(1, 1), strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), group=1,
           bias=False, batchnorm=False)
    return b.model()


def conv_batchnorm_fp16() -> onnx.ModelProto:
    """A 1x1 conv and a BatchNormalization, converted to fp16 (onnxconverter_common)."""
    b = GraphBuilder(seed=0, opset=13)
    x0 = b.input((1, 1, 1, 1))
    b.conv(x0, out_channels=1, kernel=(1, 1), strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), group=1,
           bias=False, batchnorm=True)
    b.precision("fp16")
    return b.model()


def conv_batchnorm_residual_fp16() -> onnx.ModelProto:
    """The same with a residual Add of the input, in fp16."""
    b = GraphBuilder(seed=0, opset=13)
    x0 = b.input((1, 1, 1, 1))
    t1 = b.conv(x0, out_channels=1, kernel=(1, 1), strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), group=1,
                bias=False, batchnorm=True)
    b.binary(t1, x0, "Add")
    b.precision("fp16")
    return b.model()


def sigmoid_average_pool_uint8() -> onnx.ModelProto:
    """Sigmoid then a 2x2 average pool, quantized to uint8 (onnxruntime's quantizer, per tensor)."""
    b = GraphBuilder(seed=0, opset=13)
    x0 = b.input((1, 15, 4, 4))
    t0 = b.unary(x0, "Sigmoid")
    b.pool(t0, "AveragePool", kernel=(2, 2), strides=(1, 1), pads=(0, 0, 0, 0), count_include_pad=0, ceil_mode=0)
    b.precision("uint8", per_channel=False, calibration_seed=0)
    return b.model()


def sigmoid_padded_average_pool_uint8() -> onnx.ModelProto:
    """The same pool padding one column on the left without counting it (count_include_pad=0)."""
    b = GraphBuilder(seed=0, opset=13)
    x0 = b.input((1, 1, 4, 4))
    t0 = b.unary(x0, "Sigmoid")
    b.pool(t0, "AveragePool", kernel=(2, 2), strides=(1, 1), pads=(0, 1, 0, 0), count_include_pad=0, ceil_mode=0)
    b.precision("uint8", per_channel=False, calibration_seed=0)
    return b.model()


#: name -> (graph, target); the name is also the file name of the saved model
GRAPHS: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    "max_with_constant_nchw": (max_with_constant, "npu -layout-pref=NCHW"),
    "conv_then_min_auto": (conv_then_min, "npu"),
    "x_minus_x": (x_minus_x, "npu"),
    "conv_3_to_1_tile_max_2": (conv_3_to_1, "npu -tile-max=2"),
    "tiny_matmul_2_semaphores": (tiny_matmul, "npu -num-semaphores=2"),
    "two_convs_fusion2_sram4096": (two_convs, "npu -fusion=2 -max-sram-bytes=4096"),
    "conv_batchnorm_fp16": (conv_batchnorm_fp16, "npu"),
    "conv_batchnorm_residual_fp16": (conv_batchnorm_residual_fp16, "npu"),
    "sigmoid_average_pool_uint8": (sigmoid_average_pool_uint8, "npu"),
    "sigmoid_padded_average_pool_uint8": (sigmoid_padded_average_pool_uint8, "npu"),
}

_BUGS = {bug.id: bug for bug in KNOWN_BUGS}


def _xfail(bug_id: str, reason: str) -> pytest.MarkDecorator:
    """The mark of a regression test whose bug is not fixed yet (``bug_id`` is in ``known_bugs.py``)."""
    assert bug_id in _BUGS, bug_id
    return pytest.mark.xfail(strict=True, reason=reason)


def _check(name: str) -> None:
    build, target = GRAPHS[name]
    outcome = run_case(build(), target, seed=0, timeout=300)
    assert outcome.ok, f"{name} with {target!r}:\n{outcome.report()}"


# ------------------------------------------------------------------------------------ the tests
# Found by the fuzzer and fixed in f51b0e5 (relay_patterns/canonicalize.py turns max/min of a stack
# into maximum/minimum chains; tir_schedules/elementwise.py keeps an operand buffer for x op x).
def test_max_min_with_a_layout_conversion() -> None:
    """Was: relay_patterns/layout.py:_convert ran TVM's ConvertLayout over the max/min-of-stack that ONNX
    Max/Min import as (-layout-pref=NCHW/NHWC, or an auto vote for NHWC) and TVM raised InternalError
    'Invalid SLayout: can't find S in source layout ABCDE'."""
    for name in ("max_with_constant_nchw", "conv_then_min_auto"):
        _check(name)


def test_x_minus_x() -> None:
    """Was: Sub(x, x) went to the NPU as an elementwise op with a repeated operand; its TE body x - x
    folded to 0, the block read nothing and Elementwise.schedule's cache_read raised ScheduleError."""
    _check("x_minus_x")


# Found with documented target options beyond the brief's list (benchmarks/fuzz.py --extended-targets),
# fixed in c22dbb6.
def test_tile_max_below_an_axis() -> None:
    """Was: tir_schedules/cost.py:tile_extents left an axis longer than -tile-max with no candidate (the
    whole axis and multiples of the array size only) and planner.fits took v[0]: IndexError."""
    _check("conv_3_to_1_tile_max_2")


def test_fewer_than_twelve_semaphores() -> None:
    """Was: config.py accepted -num-semaphores=2..11, partitioning put operators on the NPU, then
    codegen/sync.py:insert_semaphores (one semaphore per ordered engine pair: 12) raised a ValueError.
    Now such a target is refused when parsed, naming the key (the documented error for a bad value)."""
    _, target = GRAPHS["tiny_matmul_2_semaphores"]
    try:
        tvm_npu.parse_target(target)
    except ValueError as e:
        assert "-num-semaphores" in str(e)
        return
    _check("tiny_matmul_2_semaphores")


def test_fusion2_on_the_smallest_sram() -> None:
    """Was: tir_schedules/plan.py:_plan_op planned an operator below the on-chip regions of -fusion=2 with
    replace(hw, max_sram_bytes=limit), and HardwareConfig refused limit < 4096: ValueError
    '-max-sram-bytes=4032 is out of range' for a target with -max-sram-bytes=4096."""
    _check("two_convs_fusion2_sram4096")


# Found by the fuzzer's fp16 and 8-bit graphs (benchmarks/fuzz.py --precision), fixed in d76ab2e
# (relay_patterns: the llvm reference decomposes batch-norm in the model's type; 8-bit average pools).
def test_fp16_batch_norm_in_the_reference() -> None:
    """Was: tvm_npu.build_reference handed the fp16 batch_norm to relax.build, whose legalization returns
    float32: the reference's output was float32 where the model declares float16 (oracle:
    reference-wrong-dtype) and, with the residual Add after it, relax.build raised TypeError 'Binary
    operators must have the same datatype' (reference-TypeError)."""
    for name in ("conv_batchnorm_fp16", "conv_batchnorm_residual_fp16"):
        _check(name)


def test_quantized_average_pool() -> None:
    """Was: the quantized AveragePool ran as an fp32 average on the NPU; 35 of its 135 averages are exactly
    half a step (x.5) and the NPU's and llvm's fp32 sums (6e-8 apart) rounded 4 of them apart: one step off
    llvm (mismatch-vs-llvm). Now both sum in 8 bits and round the exact average half to even; onnxruntime's
    float path still rounds 5 of the ties the other way, which the oracle's tie arbiter settles."""
    outcome = run_case(GRAPHS["sigmoid_average_pool_uint8"][0](), "npu", seed=0, timeout=300)
    assert outcome.status == "ill-conditioned" and outcome.kind == "ties", outcome.report()


# Found by the fuzzer's 8-bit graphs, fixed with a per-position multiplier for border windows.
def test_quantized_average_pool_not_counting_padding() -> None:
    """Was: with count_include_pad=0 and padding the pool fell back to fp32 (HostFallbackWarning) on the
    NPU; one of its 12 averages is a tie that the NPU's fp32 result rounded to 0.483713 and llvm's to
    0.487168, one step (0.003455) apart (mismatch-vs-llvm). Now it sums in 8 bits and divides each window
    by its count inside the image (a full-shape multiplier), bit-exact with llvm."""
    _check("sigmoid_padded_average_pool_uint8")


def test_saved_models_are_the_graphs() -> None:
    for name, (build, _) in GRAPHS.items():
        saved = onnx.load(str(HERE / f"{name}.onnx"))
        assert saved.SerializeToString() == build().SerializeToString(), f"{name}.onnx is stale: rewrite it"


def test_every_known_bug_has_a_regression_test() -> None:
    tests = {name for name in globals() if name.startswith("test_")}
    assert {bug.regression_test for bug in KNOWN_BUGS} <= tests


if __name__ == "__main__":
    for name, (build, _) in GRAPHS.items():
        onnx.save(build(), str(HERE / f"{name}.onnx"))
        print(f"wrote {HERE / name}.onnx")
