"""The build side of one executable for every input size, without building: which models take the JIT route,
what ``shapes=`` lists and profiles compile ahead and bound, anonymous dimensions, and the probe sizes the
pattern checks read symbolic dimensions at."""

from __future__ import annotations

import pytest
import tvm
from onnx import TensorProto
from onnx import helper as oh
from tvm_npu.relay_patterns.symbolic import evaluate, probe_dim, probing

from tvm_npu.compiler.dynamic import declared_inputs, for_every_shape, named_onnx, plan_shapes, probe_values

DECLARED = {"x": (1, 3, 48, "W"), "m": ("N", "K")}


def _model(*dims: list) -> object:
    inputs = [oh.make_tensor_value_info(f"i{k}", TensorProto.FLOAT, d) for k, d in enumerate(dims)]
    graph = oh.make_graph([oh.make_node("Identity", ["i0"], ["y"])], "g", inputs,
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


@pytest.mark.parametrize(("dims", "shapes", "route"), [
    ([1, 3, 48, "W"], None, True),  # a symbolic width
    (["N", 3, "H", "W"], None, True),
    ([-1, 3, "?", "?"], None, True),
    (["N", 3, 48, 64], None, False),  # a symbolic batch alone is bound to 1, as before
    ([1, 3, 48, 64], None, False),
    ([1, 3, 48, "W"], {"i0": (1, 3, 48, 64)}, False),  # one shape: a static build, as before
    ([1, 3, 48, "W"], {"i0": [(1, 3, 48, 64), (1, 3, 48, 80)]}, True),
    ([1, 3, 48, "W"], {"i0": {"min": (1, 3, 48, 8), "opt": (1, 3, 48, 64), "max": (1, 3, 48, 80)}}, True),
])
def test_which_builds_take_the_jit_route(dims: list, shapes: object, route: bool) -> None:
    assert for_every_shape(_model(dims), shapes) is route


def test_anonymous_dimensions_get_a_name_each() -> None:
    named = named_onnx(_model([-1, 3, "?", ""], ["B", 0]))
    assert declared_inputs(named) == {"i0": ("i0_dim0", 3, "i0_dim2", "i0_dim3"), "i1": ("B", "i1_dim1")}
    static = _model([1, 3])
    assert named_onnx(static) is static


def test_listed_shapes_and_profiles() -> None:
    aot, bounds = plan_shapes(DECLARED, {"x": [(1, 3, 48, 32), (1, 3, 48, 64)], "m": (2, 7)})  # m's one shape: both
    assert aot == [{"W": 32, "N": 2, "K": 7}, {"W": 64, "N": 2, "K": 7}] and bounds == {}
    profile = {"min": (1, 3, 48, 8), "opt": (1, 3, 48, 64), "max": (1, 3, 48, 99)}
    aot, bounds = plan_shapes({"x": DECLARED["x"]}, {"x": profile})
    assert aot == [{"W": 64}] and bounds == {"W": (8, 99)}
    with pytest.raises(ValueError, match=r"input 'm' of shape \(N, K\): dimension 1 \('K'\) is symbolic"):
        plan_shapes(DECLARED, {"x": profile})  # compiling ahead needs every size
    assert plan_shapes(DECLARED, None) == ([], {})


@pytest.mark.parametrize(("shapes", "words"), [
    ({"x": [(1, 3, 48, 32), (1, 3, 48, 64)], "m": [(1, 2), (1, 3), (1, 4)]}, "different numbers of shapes"),
    ({"x": {"min": (1, 3, 48, 8), "max": (1, 3, 48, 9)}}, "exactly the keys 'min', 'opt', 'max'"),
    ({"x": {"min": (1, 3, 48, 80), "opt": (1, 3, 48, 64), "max": (1, 3, 48, 99)}}, "min <= opt <= max"),
    ({"x": [(1, 3, 50, 32)]}, "dimension 2 is static 48, not 50"),
    ({"x": "wide"}, "a shape, a list of shapes or a profile"),
])
def test_bad_shape_lists_are_one_line_errors(shapes: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words) as e:
        plan_shapes(DECLARED, shapes)
    assert "\n" not in str(e.value)


def test_probe_sizes() -> None:
    assert probe_values(DECLARED, []) == {"W": 224, "N": 1, "K": 224}
    assert probe_values(DECLARED, [{"W": 32, "N": 2}]) == {"W": 32, "N": 2}


def test_symbolic_dimensions_read_at_the_probe_sizes_only_while_probing() -> None:
    w = tvm.tirx.Var("W", "int64")
    expr = tvm.tirx.max((w + 1) // 2 - 3, 1) * 4 % 1000
    assert evaluate(expr, {"W": 64}) == 116
    assert probe_dim(expr) is None
    with probing({"W": 64}):
        assert probe_dim(expr) == 116
        assert probe_dim(w - 64) is None  # not a positive size
    with pytest.raises(ValueError, match="symbolic dimension 'W' has no value"):
        evaluate(w, {})
