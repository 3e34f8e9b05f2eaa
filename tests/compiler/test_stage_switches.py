"""Stages with switches: ``tvm.transform.PassContext(disabled_pass=[...])`` turns a named stage or rewrite of
the driver off (``tvm_npu.compiler.driver.SWITCHES``), ``pipeline=`` replaces the stage list, and a build
without any switch is what it was."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax
from tvm.script import relax as R
from tvm_npu.relay_patterns import canonicalize_passes

import tvm_npu
from tvm_npu.compiler import driver
from tvm_npu.compiler.onnx_import import prepare
from tvm_npu.config import DepthwiseEngine, parse_target
from tvm_npu.core.tiles import ConvEngine
from tvm_npu.models.light import tiny_convnet


def _disabled(*names: str) -> tvm.transform.PassContext:
    return tvm.transform.PassContext(disabled_pass=list(names))


def _lrn_model(c: int = 8, h: int = 4, w: int = 6) -> onnx.ModelProto:
    """LRN -> max pool (tests/e2e/test_lrn.py's form without the conv)."""
    nodes = [helper.make_node("LRN", ["x"], ["n"], size=3, alpha=0.5, beta=0.6, bias=2.0),
             helper.make_node("MaxPool", ["n"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    graph = helper.make_graph(nodes, "lrn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, h // 2, w // 2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(ex: relax.VMExecutable, x: np.ndarray) -> np.ndarray:
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def test_disabled_lrn_rewrite_leaves_the_importer_form_on_the_host() -> None:
    model = _lrn_model()
    x = (np.random.default_rng(1).standard_normal((1, 8, 4, 6)) * 3).astype(np.float32)
    ex, info = tvm_npu.build_with_info(model, "npu")
    assert info.host_ops == {}, info.host_ops
    with _disabled("npu.canonicalize.lrn"):
        ex_off, off = tvm_npu.build_with_info(model, "npu")
    assert "relax.nn.avg_pool3d" in off.host_ops, off.host_ops
    np.testing.assert_allclose(_run(ex_off, x), _run(ex, x), rtol=1e-4, atol=1e-5)  # both compute LRN


def test_disabled_activation_rewrite_keeps_max_min() -> None:
    @tvm.script.ir_module
    class Relu6:
        @R.function
        def main(x: R.Tensor((1, 8), "float32")) -> R.Tensor((1, 8), "float32"):
            with R.dataflow():
                y = R.minimum(R.maximum(x, R.const(0.0, "float32")), R.const(6.0, "float32"))
                R.output(y)
            return y

    def canonical(mod: tvm.IRModule) -> str:
        return tvm.transform.Sequential(canonicalize_passes())(mod).script()

    assert "R.clip" in canonical(Relu6) and "R.maximum" not in canonical(Relu6)
    with _disabled("npu.canonicalize.activations"):
        text = canonical(Relu6)
    assert "R.maximum" in text and "R.minimum" in text and "R.clip" not in text


def test_import_rewrites_are_switches() -> None:
    """An ONNX Pad before a Conv is folded into its pads, a Clip with bound inputs becomes Max / Min;
    each can be turned off by name."""
    w = numpy_helper.from_array(np.ones((4, 4, 3, 3), np.float32), "w")
    pads = numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")
    lo, hi = numpy_helper.from_array(np.float32(0.0), "lo"), numpy_helper.from_array(np.float32(6.0), "hi")
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"]), helper.make_node("Conv", ["p", "w"], ["c"]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], [w, pads, lo, hi])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])

    def ops(m: onnx.ModelProto) -> list[str]:
        return [n.op_type for n in m.graph.node]

    assert "Pad" not in ops(prepare(model)) and "Clip" not in ops(prepare(model))
    with _disabled("npu.import.fold-pads"):
        assert "Pad" in ops(prepare(model)) and "Clip" not in ops(prepare(model))
    with _disabled("npu.import.clip-as-max-min"):
        assert "Pad" not in ops(prepare(model)) and "Clip" in ops(prepare(model))
    with tvm.transform.PassContext(disabled_pass=["npu.import.fold-pads"], required_pass=["npu.import.fold-pads"]):
        assert "Pad" not in ops(prepare(model))  # required wins, as in TVM


def test_unknown_names_are_harmless_and_default_builds_are_unchanged() -> None:
    model = tiny_convnet()
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    ex, info = tvm_npu.build_with_info(model, "npu")
    with _disabled("npu.no-such-switch", "NoSuchTvmPass"):
        ex2, info2 = tvm_npu.build_with_info(model, "npu")
    assert info2.target == info.target == "npu"  # no new key in the default target string (hashed into programs)
    assert [p.to_json() for p in info2.plans] == [p.to_json() for p in info.plans]
    np.testing.assert_array_equal(_run(ex2, x), _run(ex, x))
    assert str(parse_target("npu")) == "npu"
    assert str(parse_target("npu -depthwise-engine=tensor")) == "npu -depthwise-engine=tensor"


@pytest.mark.parametrize("stage", driver.REQUIRED_STAGES)
def test_disabling_a_required_stage_is_a_clear_error(stage: str) -> None:
    with _disabled(f"npu.{stage}"), pytest.raises(ValueError, match=rf"npu\.{stage}.*may be disabled: npu\."):
        tvm_npu.build(tiny_convnet(), "npu")


def test_disabled_partition_runs_everything_on_the_host_and_pipeline_replaces_stages() -> None:
    model = _lrn_model()
    with _disabled("npu.partition"):
        _, info = tvm_npu.build_with_info(model, "npu")
    assert info.partitions == 0 and info.npu_ops == {} and "partition" not in info.stage_seconds

    seen: list[str] = []

    def spy(stage_list: list[driver.Stage]) -> list[driver.Stage]:
        def layout(mod: tvm.IRModule) -> tvm.IRModule:
            seen.append("layout")
            return mod  # the model's own layout, nothing planned

        return [driver.Stage("layout", layout) if s.name == "layout" else s for s in stage_list]

    _, info = tvm_npu.build_with_info(model, "npu", pipeline=spy)
    assert seen == ["layout"] and info.partitions == 1, info
    with pytest.raises(ValueError, match="no 'codegen' stage"):
        tvm_npu.build(model, "npu", pipeline=lambda s: [x for x in s if x.name != "codegen"])


def _depthwise() -> tvm.IRModule:
    c = 32
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, c, 11, 11), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            w = relax.const(rng.standard_normal((c, 1, 3, 3)).astype("float32"))
            out = bb.emit_output(relax.op.nn.relu(relax.op.nn.conv2d(x, w, strides=2, padding=1, groups=c)))
        bb.emit_func_output(out)
    return bb.get()


def test_depthwise_vector_engine_switch() -> None:
    def engines(plans: list) -> list[ConvEngine]:
        return [op.tile.engine for p in plans for op in p.ops if hasattr(op.tile, "engine")]

    assert engines(driver.partition_plans(_depthwise(), "npu")) == [ConvEngine.VECTOR]
    assert engines(driver.partition_plans(_depthwise(), "npu -depthwise-engine=tensor")) == [ConvEngine.TENSOR]
    with _disabled(driver.DEPTHWISE_VECTOR):
        plans = driver.partition_plans(_depthwise(), "npu")
        assert driver.with_switches(parse_target("npu")).options.depthwise_engine == DepthwiseEngine.TENSOR
    assert engines(plans) == [ConvEngine.TENSOR]
    assert {p.target for p in plans} == {"npu -depthwise-engine=tensor"}


def test_every_switch_is_documented_and_the_context_is_carried() -> None:
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for name in driver.SWITCHES:
        assert name in driver.__doc__, name
        assert name in readme or f"`.{name.rsplit('.', 1)[1]}`" in readme, name
    with tvm.transform.PassContext(config={"relax.backend.use_cuda_graph": True}, disabled_pass=["a"],
                                   required_pass=["b"]):
        ctx = driver._context()  # what the driver's pass sequences run in
    assert list(ctx.disabled_pass) == ["a"] and list(ctx.required_pass) == ["b"] and ctx.opt_level == 3
    assert bool(ctx.config["relax.backend.use_cuda_graph"])
