"""Symbolic dimensions as exporters write them (issue 15).

paddle2onnx declares ``[-1, 3, '?', '?']`` or ``['p2o.DynamicDimension.0', 3, 48, '?']``, tf2onnx ``unk__612``,
ultralytics ``['batch', 3, 'height', 'width']``, torch ``batch_size``; some models carry a ``dim_value`` of 0,
an empty ``dim_param`` or a dimension with neither. ``?``, ``''``, no value, ``-1`` and ``0`` are anonymous
(each its own dimension); names are shared across inputs. Every error is one line whose suggested
``shapes=`` is valid Python and whose ``--input-shape`` parses, and pasting it makes the model load.
The models are a conv and a relu built with ``onnx.helper`` (about a second per build).
"""

from __future__ import annotations

import ast
import re
import shlex
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from tvm import relax

import tvm_npu
from tvm_npu.compiler.shapes import declared_dim, parse_input_shape, parse_input_shapes
from tvm_npu.tools.bench import to_numpy
from tvm_npu.tools.cli import main

RTOL, ATOL = 1e-4, 1e-5


def conv_model(dims: Sequence[object], name: str = "x", out_dims: Sequence[object] | None = None) -> onnx.ModelProto:
    """NCHW ``Conv(3 -> 4, 3x3, pad 1) -> Relu`` whose input is declared with ``dims`` as an exporter wrote them."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.1, (4,)).astype(np.float32), "b")]
    nodes = [oh.make_node("Conv", [name, "w", "b"], ["conv"], pads=[1, 1, 1, 1]),
             oh.make_node("Relu", ["conv"], ["y"])]
    out = list(out_dims) if out_dims is not None else [dims[0], 4, dims[2], dims[3]]
    graph = oh.make_graph(nodes, "exported", [oh.make_tensor_value_info(name, TensorProto.FLOAT, list(dims))],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


def concat_model(dims_a: Sequence[object], dims_b: Sequence[object]) -> onnx.ModelProto:
    """Two inputs ``a`` and ``b`` concatenated along their last axis (whose sizes may differ)."""
    graph = oh.make_graph([oh.make_node("Concat", ["a", "b"], ["c"], axis=2)], "two",
                          [oh.make_tensor_value_info("a", TensorProto.FLOAT, list(dims_a)),
                           oh.make_tensor_value_info("b", TensorProto.FLOAT, list(dims_b))],
                          [oh.make_tensor_value_info("c", TensorProto.FLOAT, [1, 4, None])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


#: exporter style -> (declared input dims, the shape given, the symbolic non-batch dims a missing shape names)
STYLES = {
    "paddle2onnx-cls": ([-1, 3, "?", "?"], (1, 3, 16, 24), (2, 3)),
    "paddle2onnx-ocr": (["p2o.DynamicDimension.0", 3, 8, "?"], (1, 3, 8, 20), (3,)),
    "tf2onnx": (["unk__612", 3, "unk__613", 8], (2, 3, 6, 8), (2,)),
    "ultralytics": (["batch", 3, "height", "width"], (1, 3, 16, 16), (2, 3)),
    "torch": (["batch_size", 3, 8, 8], (2, 3, 8, 8), ()),
    "dim-value-0": ([0, 3, 8, 0], (1, 3, 8, 12), (3,)),
    "empty": ([None, 3, "", 8], (1, 3, 10, 8), (2,)),
}


def param_shapes(mod: tvm.IRModule) -> list[tuple[int, ...]]:
    return [tuple(int(d) for d in p.ty.shape.values) for p in mod["main"].params]


def run(ex: relax.VMExecutable, x: np.ndarray) -> np.ndarray:
    return to_numpy(relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)))[0]


@contextmanager
def no_warning() -> Iterator[None]:
    """A context in which a SymbolicShapeWarning fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", tvm_npu.SymbolicShapeWarning)
        yield


def suggestions(text: str) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """The ``shapes=`` and the ``--input-shape`` options a message suggests, as what Python and the CLI read."""
    assert "\n" not in text, text
    python = re.search(r"shapes=(\{.*?\}) \(Python\) or ", text)
    cli = re.search(r" \(Python\) or (.*?) \(command line\)", text)
    assert python and cli, text
    shapes = ast.literal_eval(python.group(1))
    words = shlex.split(cli.group(1))
    assert words[::2] == ["--input-shape"] * (len(words) // 2) and len(words) % 2 == 0, text
    options = parse_input_shapes(words[1::2])
    assert options == {n: tuple(s) for n, s in shapes.items()}, text  # both forms say the same
    return shapes, options


# ------------------------------------------------------------------------------ the rules
@pytest.mark.parametrize("written, dim", [(-1, None), (0, None), ("?", None), ("", None), (None, None), (" ", None),
                                          (7, 7), ("batch", "batch"), ("unk__612", "unk__612"),
                                          ("p2o.DynamicDimension.0", "p2o.DynamicDimension.0")])
def test_declared_dims(written: object, dim: object) -> None:
    assert declared_dim(written) == dim


@pytest.mark.parametrize("style", STYLES)
def test_shapes_bind_every_style(style: str) -> None:
    dims, shape, _ = STYLES[style]
    with no_warning():
        mod = tvm_npu.load_model(conv_model(dims), shapes={"x": shape})
    assert param_shapes(mod) == [shape]
    assert [int(d) for d in mod["main"].ret_ty.shape.values] == [shape[0], 4, *shape[2:]]


@pytest.mark.parametrize("style", STYLES)
def test_without_shapes_batch_is_one_and_others_are_errors(style: str) -> None:
    dims, _, needed = STYLES[style]
    model = conv_model(dims)
    if not needed:
        with pytest.warns(tvm_npu.SymbolicShapeWarning, match="input 'x': symbolic batch dimension") as caught:
            mod = tvm_npu.load_model(model)
        assert param_shapes(mod) == [(1, 3, 8, 8)]
        shapes, _ = suggestions(str(caught[0].message))
        assert shapes == {"x": (1, 3, 8, 8)}
        return
    with no_warning(), pytest.raises(ValueError) as e:  # the error comes alone, without the batch's warning
        tvm_npu.load_model(model)
    text = str(e.value)
    assert text.startswith("input 'x' of shape (") and "symbolic" in text, text
    named = " and ".join(f"{i} ({declared_dim(dims[i]) or '?'!r})" for i in needed)
    many = len(needed) > 1
    assert f"dimension{'s' if many else ''} {named} {'are' if many else 'is'} symbolic" in text, text
    shapes, _ = suggestions(text)
    example = shapes["x"]
    assert all(example[i] == 224 for i in needed) and example[0] == 1, text
    assert "in place of the example 224" in text
    mod = tvm_npu.load_model(model, shapes=shapes)  # pasted, it loads (with the example sizes)
    assert param_shapes(mod) == [example]


def test_anonymous_batch_is_bound_to_one_with_the_warning() -> None:
    for dims in ([-1, 3, 8, 8], [0, 3, 8, 8], ["?", 3, 8, 8], [None, 3, 8, 8], ["", 3, 8, 8]):
        with pytest.warns(tvm_npu.SymbolicShapeWarning, match=re.escape("input 'x': symbolic batch dimension '?'")):
            mod = tvm_npu.load_model(conv_model(dims))
        assert param_shapes(mod) == [(1, 3, 8, 8)], dims


def test_two_question_marks_of_one_input_are_independent() -> None:
    """The reported bug: ``[-1, 3, '?', '?']`` given ``(1, 3, 48, 320)`` was 'inputs sharing a dimension name
    must agree', and ``-1`` was 'dimension 0 is static -1'."""
    mod = tvm_npu.load_model(conv_model([-1, 3, "?", "?"]), shapes={"x": (1, 3, 48, 320)})
    assert param_shapes(mod) == [(1, 3, 48, 320)]
    mod = tvm_npu.load_model(conv_model([-1, 3, "?", "?"]), shapes={"x": (3, 3, 20, 12)})
    assert param_shapes(mod) == [(3, 3, 20, 12)]


def test_named_dims_are_shared_and_anonymous_ones_are_not() -> None:
    named = concat_model([1, 4, "w"], [1, 4, "w"])
    with pytest.raises(ValueError) as e:
        tvm_npu.load_model(named, shapes={"a": (1, 4, 3), "b": (1, 4, 5)})
    text = str(e.value)
    assert "dimension 2 ('w') is 5, but 'w' is 3 at dimension 2 of input 'a'" in text, text
    shapes, _ = suggestions(text)
    assert shapes == {"a": (1, 4, 3), "b": (1, 4, 3)}
    assert param_shapes(tvm_npu.load_model(named, shapes=shapes)) == [(1, 4, 3), (1, 4, 3)]
    assert param_shapes(tvm_npu.load_model(named, shapes={"a": (1, 4, 6)})) == [(1, 4, 6), (1, 4, 6)]  # b follows

    for anonymous in (["?", "?"], [-1, -1], [None, None], ["", 0]):
        model = concat_model([1, 4, anonymous[0]], [1, 4, anonymous[1]])
        both = tvm_npu.load_model(model, shapes={"a": (1, 4, 3), "b": (1, 4, 5)})
        assert param_shapes(both) == [(1, 4, 3), (1, 4, 5)]
        with pytest.raises(ValueError) as e:  # giving a says nothing about b
            tvm_npu.load_model(model, shapes={"a": (1, 4, 3)})
        text = str(e.value)
        assert "input 'b' of shape (1, 4, ?): dimension 2 ('?') is symbolic" in text, text
        shapes, _ = suggestions(text)
        assert shapes == {"a": (1, 4, 3), "b": (1, 4, 224)}
        assert param_shapes(tvm_npu.load_model(model, shapes=shapes)) == [(1, 4, 3), (1, 4, 224)]


def test_a_named_dim_repeated_in_one_input_is_one_dim() -> None:
    model = conv_model(["n", 3, "s", "s"])
    assert param_shapes(tvm_npu.load_model(model, shapes={"x": (1, 3, 12, 12)})) == [(1, 3, 12, 12)]
    with pytest.raises(ValueError, match=r"dimension 3 \('s'\) is 10, but 's' is 12 at dimension 2 of input 'x'"):
        tvm_npu.load_model(model, shapes={"x": (1, 3, 12, 10)})


# ------------------------------------------------------------------------------ every error can be pasted
BAD_SHAPES = {
    "minus-one": ({"x": (-1, 3, 48, 320)}, "positive integers", {"x": (1, 3, 48, 320)}),
    "zero": ({"x": (1, 3, 0, 320)}, "positive integers", {"x": (1, 3, 224, 320)}),
    "rank": ({"x": (1, 3, 48)}, "rank 3", {"x": (1, 3, 224, 224)}),
    "static": ({"x": (1, 4, 48, 320)}, "dimension 1 is static 3, not 4", {"x": (1, 3, 48, 320)}),
    "unknown-name": ({"image": (1, 3, 48, 320)}, "no input 'image'", {"x": (1, 3, 48, 320)}),
    "not-integers": ({"x": (1, 3, 48.0, 320)}, "positive integers", {"x": (1, 3, 224, 320)}),
}


@pytest.mark.parametrize("case", BAD_SHAPES)
def test_bad_shapes_suggest_what_to_paste(case: str) -> None:
    given, words, fix = BAD_SHAPES[case]
    model = conv_model([-1, 3, "?", "?"])
    with pytest.raises(ValueError) as e:
        tvm_npu.load_model(model, shapes=given)
    text = str(e.value)
    assert words in text, text
    shapes, _ = suggestions(text)
    assert shapes == fix, text
    assert param_shapes(tvm_npu.load_model(model, shapes=shapes)) == [fix["x"]]


def test_shapes_not_a_mapping_suggests_one() -> None:
    with pytest.raises(TypeError) as e:
        tvm_npu.load_model(conv_model([-1, 3, "?", "?"]), shapes=[(1, 3, 48, 320)])
    assert suggestions(str(e.value))[0] == {"x": (1, 3, 224, 224)}


@pytest.mark.parametrize("text, fix", [
    ("x=-1,3,48,320", "x=1,3,48,320"), ("x=1,3,?,?", "x=1,3,224,224"), ("x=0,3,48,320", "x=1,3,48,320"),
    ("x=1,3,,320", "x=1,3,224,320"), ("x:-1,3,48,320", "x=1,3,48,320"),
])
def test_input_shape_is_concrete(text: str, fix: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_input_shape(text)
    message = str(e.value)
    assert "\n" not in message and ("not a positive integer" in message or "not positive integers" in message), message
    assert "concrete" in message and f"--input-shape {fix}" in message, message
    assert parse_input_shape(fix) == ("x", tuple(int(d) for d in fix[2:].split(",")))


def test_input_shape_forms() -> None:
    assert parse_input_shape("x=1,3,48,320") == ("x", (1, 3, 48, 320))
    assert parse_input_shape("x:1,3,48,320") == ("x", (1, 3, 48, 320))  # trtexec's / onnxruntime's separator
    assert parse_input_shape("input_1:0=1,224,224,3") == ("input_1:0", (1, 224, 224, 3))  # tf2onnx's names
    assert parse_input_shape("input_1:0:1,224,224,3") == ("input_1:0", (1, 224, 224, 3))
    with pytest.raises(ValueError, match="expected NAME=D0,D1"):
        parse_input_shape("x")


def test_cli_with_an_exported_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cls.onnx"
    onnx.save(conv_model([-1, 3, "?", "?"]), str(path))
    assert main(["inspect", str(path), "--input-shape", "x:1,3,16,24"]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err and "(1, 3, 16, 24)" in captured.out
    assert main(["inspect", str(path), "--input-shape", "x=-1,3,16,24"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("tvm-npu inspect: error: "), err
    fix = re.findall(r"--input-shape (x=[0-9,]*[0-9])", err)[-1]  # the suggestion comes after what was given
    assert parse_input_shape(fix)[0] == "x", err
    assert main(["inspect", str(path), "--input-shape", fix]) == 0, err
    capsys.readouterr()
    # without --input-shape: one executable for every size, its three anonymous dimensions listed
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert all(f"x_dim{d}: input 'x' dimension {d}" in out for d in (0, 2, 3)), out


# ------------------------------------------------------------------------------ built and run on the NPU
@pytest.mark.parametrize("style", ["paddle2onnx-cls", "paddle2onnx-ocr", "ultralytics"])
def test_exported_model_builds_and_runs_on_the_npu(style: str) -> None:
    dims, shape, _ = STYLES[style]
    model = conv_model(dims)
    with no_warning():
        ex, info = tvm_npu.build_with_info(model, "npu", shapes={"x": shape})
        reference = tvm_npu.build_reference(model, shapes={"x": shape})
    assert sum(info.npu_ops.values()) > 0 and info.host_macs == 0, (info.npu_ops, info.host_ops)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    got, want = run(ex, x), run(reference, x)
    assert got.shape == (shape[0], 4, *shape[2:])
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
