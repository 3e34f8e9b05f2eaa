"""Issue 15, part 1: models whose inputs have symbolic dimensions, as tf2onnx and torch export them.

A symbolic batch is bound to 1 with a ``SymbolicShapeWarning``, ``shapes=`` / ``--input-shape`` bind any
dimension, everything else is a one-line ``ValueError`` (never the ``TypeError`` of an unbound ``tirx.Var``).
The models are a few operators built with ``onnx.helper``, so each build takes about a second.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from inspect import signature
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from tvm import relax
from tvm.script import relax as R

import tvm_npu
from tvm_npu.compiler.onnx_import import bind_input_shapes
from tvm_npu.compiler.shapes import parse_input_shapes
from tvm_npu.tools import bench
from tvm_npu.tools.bench import to_numpy
from tvm_npu.tools.cli import build_parser, main
from tvm_npu.tools.inspection import inspect_model
from tvm_npu.tuning import tuner as tuning

RTOL, ATOL = 1e-4, 1e-5


def tf_style(batch: str = "unk__12", height: int | str = 8) -> onnx.ModelProto:
    """tf2onnx's form: NHWC input ``input_1`` with an ``unk__N`` batch, transposed to NCHW for the conv and
    back; ``unk__N`` dimensions in the graph output and the value_info too."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.1, (4,)).astype(np.float32), "b")]
    nodes = [oh.make_node("Transpose", ["input_1"], ["nchw"], perm=[0, 3, 1, 2]),
             oh.make_node("Conv", ["nchw", "w", "b"], ["conv"], pads=[1, 1, 1, 1]),
             oh.make_node("Relu", ["conv"], ["relu"]),
             oh.make_node("Transpose", ["relu"], ["output_1"], perm=[0, 2, 3, 1])]
    graph = oh.make_graph(
        nodes, "tf2onnx", [oh.make_tensor_value_info("input_1", TensorProto.FLOAT, [batch, height, 8, 3])],
        [oh.make_tensor_value_info("output_1", TensorProto.FLOAT, ["unk__13", "unk__14", 8, 4])], inits,
        value_info=[oh.make_tensor_value_info("nchw", TensorProto.FLOAT, ["unk__15", 3, "unk__16", 8]),
                    oh.make_tensor_value_info("conv", TensorProto.FLOAT, ["unk__17", 4, "unk__18", 8])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


def torch_style(batch: str = "batch_size") -> onnx.ModelProto:
    """torch.onnx.export's form with a dynamic batch axis: NCHW conv -> relu -> global pool, flattened by
    a Reshape whose shape is computed from ``Shape`` (batch, -1), then a Gemm."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "conv.weight"),
             numpy_helper.from_array(rng.normal(0, 0.3, (5, 8)).astype(np.float32), "fc.weight"),
             numpy_helper.from_array(rng.normal(0, 0.1, (5,)).astype(np.float32), "fc.bias"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    nodes = [oh.make_node("Conv", ["input", "conv.weight"], ["conv"], pads=[1, 1, 1, 1]),
             oh.make_node("Relu", ["conv"], ["relu"]),
             oh.make_node("GlobalAveragePool", ["relu"], ["pool"]),
             oh.make_node("Shape", ["pool"], ["shape"]),
             oh.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
             oh.make_node("Unsqueeze", ["n"], ["n1"], axes=[0]),
             oh.make_node("Concat", ["n1", "minus_one"], ["flat_shape"], axis=0),
             oh.make_node("Reshape", ["pool", "flat_shape"], ["flat"]),
             oh.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], transB=1)]
    graph = oh.make_graph(nodes, "torch", [oh.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 8, 8])],
                          [oh.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 5])], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 12)])


MODELS = {"tf2onnx": (tf_style, "input_1", "unk__12", (8, 8, 3)),
          "torch": (torch_style, "input", "batch_size", (3, 8, 8))}


def run(ex: relax.VMExecutable, x: np.ndarray) -> np.ndarray:
    return to_numpy(relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)))[0]


@contextmanager
def no_symbolic_warning() -> Iterator[None]:
    """A context in which a SymbolicShapeWarning fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", tvm_npu.SymbolicShapeWarning)
        yield


@pytest.mark.parametrize("style", MODELS)
def test_symbolic_batch_is_bound_to_one_with_a_warning(style: str) -> None:
    make, name, dim, rest = MODELS[style]
    model = make()
    words = re.escape(f"input {name!r}: symbolic batch dimension {dim!r} bound to 1")
    with pytest.warns(tvm_npu.SymbolicShapeWarning, match=words) as caught:
        ex, info = tvm_npu.build_with_info(model, "npu")
    assert f"shapes={{{name!r}: (1, " in str(caught[0].message) and f"--input-shape {name}=1," in str(caught[0].message)
    assert sum(info.npu_ops.values()) > 0 and info.host_macs == 0, (info.npu_ops, info.host_ops)
    with pytest.warns(tvm_npu.SymbolicShapeWarning):
        reference = tvm_npu.build_reference(model)
    x = np.random.default_rng(2).standard_normal((1, *rest)).astype(np.float32)
    got, want = run(ex, x), run(reference, x)
    assert got.shape[0] == 1
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("style", MODELS)
def test_shapes_bind_without_a_warning(style: str) -> None:
    make, name, _, rest = MODELS[style]
    model = make()
    x = np.random.default_rng(3).standard_normal((2, *rest)).astype(np.float32)
    with no_symbolic_warning():
        ex = tvm_npu.build(model, "npu", shapes={name: (2, *rest)})
        reference = tvm_npu.build_reference(model, shapes={name: x.shape})
    got, want = run(ex, x), run(reference, x)
    assert got.shape[0] == 2
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    # batch 1 given explicitly: the same program as the default binding, and no warning
    with no_symbolic_warning():
        mod = tvm_npu.load_model(model, shapes={name: (1, *rest)})
    with pytest.warns(tvm_npu.SymbolicShapeWarning):
        default = tvm_npu.load_model(model)
    tvm.ir.assert_structural_equal(mod, default)


def test_binding_refreshes_value_info_and_outputs() -> None:
    bound = bind_input_shapes(tf_style(), {"input_1": (3, 8, 8, 3)})
    dims = [[d.dim_value for d in o.type.tensor_type.shape.dim] for o in bound.graph.output]
    assert dims == [[3, 8, 8, 4]]
    assert not any(d.dim_param for vi in bound.graph.value_info for d in vi.type.tensor_type.shape.dim)
    assert tf_style().graph.input[0].type.tensor_type.shape.dim[0].dim_param == "unk__12"  # the given is not modified
    static = bind_input_shapes(bound)
    assert static is bound  # nothing symbolic left: the model itself


def test_inputs_sharing_a_dimension_name_share_its_value() -> None:
    nodes = [oh.make_node("Add", ["a", "b"], ["c"])]
    graph = oh.make_graph(nodes, "two", [oh.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4]),
                                         oh.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 4])],
                          [oh.make_tensor_value_info("c", TensorProto.FLOAT, ["N", 4])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    with no_symbolic_warning():
        bound = bind_input_shapes(model, {"a": (3, 4)})
    assert [i.type.tensor_type.shape.dim[0].dim_value for i in bound.graph.input] == [3, 3]
    with pytest.raises(ValueError, match="dimension 0 \\('N'\\) is 2, but 'N' is 3 at dimension 0 of input 'a'"):
        bind_input_shapes(model, {"a": (3, 4), "b": (2, 4)})


def test_symbolic_height_is_a_one_line_value_error() -> None:
    """Binding to static shapes (load_model, and build with shapes=) needs the height; build without shapes= makes
    one executable for every height instead (issue 25; tests/e2e/test_dynamic_shapes.py)."""
    model = tf_style(height="height")
    with no_symbolic_warning(), pytest.raises(ValueError) as e:  # the error alone, not the batch's warning first
        tvm_npu.load_model(model)
    text = str(e.value)
    assert "\n" not in text
    for words in ("input 'input_1'", "dimension 1 ('height')", "symbolic",
                  "shapes={'input_1': (1, 224, 8, 3)}", "--input-shape input_1=1,224,8,3",
                  "your sizes in place of the example 224 (dimension 1 of 'input_1')"):
        assert words in text, text
    ex = tvm_npu.build(model, "npu", shapes={"input_1": (1, 6, 8, 3)})  # given, it builds
    x = np.random.default_rng(4).standard_normal((1, 6, 8, 3)).astype(np.float32)
    assert run(ex, x).shape == (1, 6, 8, 4)
    with no_symbolic_warning():
        every = tvm_npu.build(model, "npu")  # not given: built for every size, the NPU part compiled per call
    np.testing.assert_allclose(run(every, x), run(ex, x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shapes, words", [
    ({"image": (1, 8, 8, 3)}, ("no input 'image'", "['input_1']")),
    ({"input_1": (1, 8, 8)}, ("shapes['input_1']=(1, 8, 8)", "rank 3", "rank 4")),
    ({"input_1": (1, 8, 9, 3)}, ("does not fit input 'input_1'", "(unk__12, 8, 8, 3)", "dimension 2 is static 8")),
    ({"input_1": (0, 8, 8, 3)}, ("shapes['input_1']=(0, 8, 8, 3)", "positive integers")),
    ({"input_1": (1.5, 8, 8, 3)}, ("shapes['input_1']=(1.5, 8, 8, 3)", "positive integers")),
    ({"input_1": "1,8,8,3"}, ("shapes['input_1']='1,8,8,3'", "sequence of positive integers")),
], ids=["unknown-name", "rank", "static-conflict", "non-positive", "not-integer", "string"])
def test_bad_shapes_are_one_line_value_errors(shapes: dict, words: tuple[str, ...]) -> None:
    with pytest.raises(ValueError) as e:
        tvm_npu.load_model(tf_style(), shapes=shapes)
    assert "\n" not in str(e.value)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_relax_module_with_symbolic_dimensions() -> None:
    n, h = tvm.tirx.Var("n", "int64"), tvm.tirx.Var("h", "int64")
    w = np.random.default_rng(5).normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)

    def module(height: tvm.tirx.PrimExpr) -> tvm.IRModule:
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType((n, 3, height, 8), "float32"))
        with bb.function("main", [x]):
            with bb.dataflow():
                y = bb.emit(R.nn.relu(R.nn.conv2d(x, relax.const(w), padding=1)))
                out = bb.emit_output(y)
            bb.emit_func_output(out)
        return bb.get()

    with pytest.warns(tvm_npu.SymbolicShapeWarning, match="input 'x': symbolic batch dimension 'n' bound to 1"):
        ex = tvm_npu.build(module(tvm.tirx.IntImm("int64", 8)), "npu")
    x = np.random.default_rng(6).standard_normal((1, 3, 8, 8)).astype(np.float32)
    reference = tvm_npu.build_reference(module(tvm.tirx.IntImm("int64", 8)), shapes={"x": (1, 3, 8, 8)})
    np.testing.assert_allclose(run(ex, x), run(reference, x), rtol=RTOL, atol=ATOL)
    with no_symbolic_warning(), pytest.raises(ValueError, match=r"input 'x' .* dimension 2 \('h'\) is symbolic"):
        tvm_npu.load_model(module(h))
    bound = tvm_npu.load_model(module(h), shapes={"x": (2, 3, 5, 8)})
    assert [int(d) for d in bound["main"].params[0].ty.shape.values] == [2, 3, 5, 8]


# ------------------------------------------------------------------------------ every entry point
ENTRY_POINTS = {
    "build": tvm_npu.build, "build_with_info": tvm_npu.build_with_info, "build_reference": tvm_npu.build_reference,
    "load_model": tvm_npu.load_model, "partition_plans": tvm_npu.compiler.driver.partition_plans,
    "partition_for_npu": tvm_npu.partition_for_npu, "inspect_model": inspect_model, "bench": bench.bench,
    "compare": bench.compare, "build_model": bench.build_model, "tune": tuning.tune,
}


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_every_model_entry_point_takes_shapes(name: str) -> None:
    assert "shapes" in signature(ENTRY_POINTS[name]).parameters


def test_shapes_reach_partitioning_planning_and_inspection() -> None:
    shapes = {"input_1": (2, 8, 8, 3)}
    with no_symbolic_warning():
        mod = tvm_npu.partition_for_npu(tf_style(), "npu", codegen=False, shapes=shapes)
        plans = tvm_npu.compiler.driver.partition_plans(tf_style(), "npu", shapes=shapes)
        info = inspect_model(tf_style(), "npu", shapes=shapes)
    assert [int(d) for d in mod["main"].params[0].ty.shape.values] == [2, 8, 8, 3]
    assert plans and plans[0].ops[0].spec.out.shape[0] == 2
    assert info.inputs[0].shape == (2, 8, 8, 3) and info.outputs[0].shape == (2, 8, 8, 4)


def test_bench_binds_shapes_before_building_and_making_inputs() -> None:
    with no_symbolic_warning():
        result = bench.bench("torch", torch_style(), "npu", repeat=1, progress=False, shapes={"input": (2, 3, 8, 8)})
    assert result.partition_runs >= 1 and result.max_rel_error < RTOL, result


# ------------------------------------------------------------------------------ command line
#: The subcommands that take a model (or, for ``run``, a library compiled from one).
MODEL_COMMANDS = ("compile", "inspect", "run", "profile", "bench", "tune", "quantize", "compare")


def subcommands() -> dict:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return dict(action.choices)


def test_every_model_command_is_known() -> None:
    assert set(subcommands()) == {*MODEL_COMMANDS, "demo"}  # a new command must be classified here


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_every_model_command_takes_input_shape(command: str) -> None:
    p = subcommands()[command]
    option = next((a for a in p._actions if "--input-shape" in a.option_strings), None)
    assert option is not None and option.default == [] and option.metavar == "NAME=D0,D1,..."
    assert parse_input_shapes(["x=1,3,8,8", "y=2,4"]) == {"x": (1, 3, 8, 8), "y": (2, 4)}
    with pytest.raises(ValueError, match="given twice"):
        parse_input_shapes(["x=1,3", "x=1,4"])


def test_cli_compile_and_run_a_symbolic_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, lib = tmp_path / "tf.onnx", tmp_path / "tf.so"
    onnx.save(tf_style(), str(path))
    assert main(["compile", str(path), "-o", str(lib), "--input-shape", "input_1=2,8,8,3"]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err and f"wrote {lib}" in captured.out
    assert main(["run", str(lib), "--random-inputs", "0"]) == 0
    assert "output_0: float32 (2, 8, 8, 4)" in capsys.readouterr().out
    assert main(["run", str(lib), "--random-inputs", "0", "--input-shape", "input_1=1,8,8,3"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "does not fit input 'input_1'" in err and "dimension 0 is static 2" in err
    assert main(["compile", str(path), "-o", str(lib), "--input-shape", "input_1=1,8,8"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tvm-npu compile: error: --input-shape input_1=1,8,8 does not fit"), err
    assert main(["inspect", str(path)]) == 0  # no shape: the batch is 1, with a warning
    captured = capsys.readouterr()
    assert "warning: input 'input_1': symbolic batch dimension 'unk__12' bound to 1" in captured.err
    assert "(1, 8, 8, 3)" in captured.out
