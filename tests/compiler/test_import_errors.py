"""Import errors are the project's: an ONNX operator the import lacks is a one-line
``UnsupportedOperatorError`` (a ``ValueError``) naming the operator and its nodes, raised before the
importer runs, never TVM's ``OpNotImplemented``. The models are a few nodes built with ``onnx.helper``.
Recurrent layers, which TVM's importer lacks too, are imported by the project (``npu.import.recurrent``,
``tests/compiler/test_recurrent_import.py``): they are errors only in a subgraph or with the rewrite off.
"""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

import tvm_npu
from tvm_npu.compiler import onnx_import
from tvm_npu.compiler.onnx_import import UnsupportedOperatorError, supported_operators, unsupported_operators
from tvm_npu.models.light import tiny_convnet
from tvm_npu.tools.cli import main

SEQ, BATCH, INPUT, HIDDEN = 4, 1, 8, 16


def _const(name: str, shape: tuple[int, ...], seed: int = 0) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def recurrent(op: str, gates: int) -> onnx.ModelProto:
    """``X [seq, batch, input] -> op (W, R constant) -> Y [seq, 1, batch, hidden] -> Relu``."""
    x = oh.make_tensor_value_info("X", TensorProto.FLOAT, [SEQ, BATCH, INPUT])
    y = oh.make_tensor_value_info("out", TensorProto.FLOAT, [SEQ, 1, BATCH, HIDDEN])
    nodes = [oh.make_node(op, ["X", "W", "R"], ["Y"], name=f"{op.lower()}_0", hidden_size=HIDDEN),
             oh.make_node("Relu", ["Y"], ["out"], name="relu_0")]
    inits = [_const("W", (1, gates * HIDDEN, INPUT)), _const("R", (1, gates * HIDDEN, HIDDEN), 1)]
    model = oh.make_model(oh.make_graph(nodes, op.lower(), [x], [y], inits), opset_imports=[oh.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def determinant() -> onnx.ModelProto:
    """``X [2, 3, 3] -> Det -> Relu``: ``Det`` is a standard operator TVM's importer has no converter for."""
    x = oh.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3, 3])
    y = oh.make_tensor_value_info("out", TensorProto.FLOAT, [2])
    nodes = [oh.make_node("Det", ["X"], ["d"], name="det_0"), oh.make_node("Relu", ["d"], ["out"], name="relu_0")]
    model = oh.make_model(oh.make_graph(nodes, "det", [x], [y]), opset_imports=[oh.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def custom_domain() -> onnx.ModelProto:
    """``Relu -> com.example.MadeUp -> Relu``: an operator of a domain no importer knows."""
    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    nodes = [oh.make_node("Relu", ["x"], ["a"], name="relu_in"),
             oh.make_node("MadeUp", ["a"], ["b"], name="made_up_0", domain="com.example"),
             oh.make_node("Relu", ["b"], ["y"], name="relu_out")]
    return oh.make_model(oh.make_graph(nodes, "custom", [x], [y]),
                         opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.example", 1)])


def in_if_branch() -> onnx.ModelProto:
    """An ``If`` whose then-branch holds an ``RNN`` node (TVM imports ``If`` itself)."""
    x = oh.make_tensor_value_info("X", TensorProto.FLOAT, [SEQ, BATCH, INPUT])
    c = oh.make_tensor_value_info("cond", TensorProto.BOOL, [])
    y = oh.make_tensor_value_info("out", TensorProto.FLOAT, None)
    then = oh.make_graph([oh.make_node("RNN", ["X", "W", "R"], ["t"], name="rnn_in_branch", hidden_size=HIDDEN)],
                         "then", [], [oh.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = oh.make_graph([oh.make_node("Relu", ["X"], ["e"], name="relu_else")],
                          "else", [], [oh.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    node = oh.make_node("If", ["cond"], ["out"], name="if_0", then_branch=then, else_branch=other)
    inits = [_const("W", (1, HIDDEN, INPUT)), _const("R", (1, HIDDEN, HIDDEN), 1)]
    return oh.make_model(oh.make_graph([node], "if", [c, x], [y], inits), opset_imports=[oh.make_opsetid("", 17)])


CASES = {
    "det": (determinant, "Det", "det_0"),
    "custom-domain": (custom_domain, "com.example.MadeUp", "made_up_0"),
}


def _one_line(e: BaseException, *words: str) -> str:
    text = str(e)
    assert "\n" not in text.strip(), text
    assert all(w in text for w in words), text
    return text


@pytest.mark.parametrize("case", CASES)
def test_unsupported_operator_is_one_line(case: str) -> None:
    make, op, node = CASES[case]
    with pytest.raises(UnsupportedOperatorError) as info:
        tvm_npu.load_model(make())
    assert isinstance(info.value, ValueError) and not isinstance(info.value, tvm.error.OpNotImplemented)
    assert info.value.operators == (op,)
    text = _one_line(info.value, op, repr(node), f"supported: {len(supported_operators())} ONNX operators",
                     "tvm_npu.compiler.onnx_import.supported_operators()")
    assert "Relu" not in text  # only what the importer lacks
    assert tvm_npu.UnsupportedOperatorError is UnsupportedOperatorError


def test_build_raises_it_too() -> None:
    with pytest.raises(UnsupportedOperatorError, match=r"Det \(node 'det_0'\)"):
        tvm_npu.build(determinant(), "npu")


@pytest.mark.parametrize(("op", "gates"), [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
def test_recurrent_layers_are_imported_unless_the_rewrite_is_off(op: str, gates: int) -> None:
    """The project unrolls recurrent layers (``npu.import.recurrent``); with it disabled they are the
    importer's gap again, reported as such."""
    model = recurrent(op, gates)
    assert unsupported_operators(model) == {}
    assert isinstance(tvm_npu.load_model(model), tvm.IRModule)
    with tvm.transform.PassContext(disabled_pass=["npu.import.recurrent"]):
        assert unsupported_operators(model) == {op: [f"'{op.lower()}_0'"]}
        with pytest.raises(UnsupportedOperatorError, match=rf"{op} \(node '{op.lower()}_0'\)"):
            tvm_npu.load_model(model)


def test_subgraph_nodes_are_checked() -> None:
    model = in_if_branch()
    assert unsupported_operators(model) == {"RNN": ["'rnn_in_branch'"]}
    with pytest.raises(UnsupportedOperatorError, match=r"RNN \(node 'rnn_in_branch'\)"):
        tvm_npu.load_model(model)


def test_many_nodes_are_counted() -> None:
    """Unnamed nodes are named by their output; past three nodes of an operator, a count."""
    model = determinant()
    for i in range(4):
        model.graph.node.append(oh.make_node("Det", ["X"], [f"extra_{i}"]))
    with pytest.raises(UnsupportedOperatorError) as info:
        onnx_import.check_operators(model)
    _one_line(info.value, "Det (nodes 'det_0', output 'extra_0', output 'extra_1' and 2 more)")


def test_op_not_implemented_from_the_importer_is_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the check lets through, TVM's ``OpNotImplemented`` still arrives as the project's error
    (an LSTM with the recurrent rewrite off reaches TVM's importer, which has no converter for it)."""
    monkeypatch.setattr(onnx_import, "check_operators", lambda model: None)
    with pytest.raises(UnsupportedOperatorError) as info, \
            tvm.transform.PassContext(disabled_pass=["npu.import.recurrent"]):
        tvm_npu.load_model(recurrent("LSTM", 4))
    _one_line(info.value, "TVM's ONNX importer", "LSTM", "supported_operators()")


def test_supported_operators() -> None:
    ops = supported_operators()
    assert ops == sorted(set(ops)) and len(ops) > 100
    assert {"Conv", "Relu", "If", "Constant", "Attention"} <= set(ops)
    assert {"LSTM", "GRU", "RNN"} <= set(ops)  # unrolled by the project, not TVM's importer


@pytest.mark.parametrize("case", ["det", "custom-domain"])
def test_cli_prints_one_line(case: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    make, op, node = CASES[case]
    path = tmp_path / f"{case}.onnx"
    onnx.save(make(), str(path))
    capfd.readouterr()
    with warnings.catch_warnings():  # main installs its one-line warning printer: keep it to this command
        status = main(["compile", str(path), "-o", str(tmp_path / "out.so")])
    proc = subprocess.CompletedProcess(["tvm-npu"], status, *capfd.readouterr())
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("tvm-npu compile: error: TVM's ONNX importer does not support"), lines[0]
    assert op in lines[0] and repr(node) in lines[0]
    assert not (tmp_path / "out.so").exists()


def test_a_supported_model_still_builds() -> None:
    model = tiny_convnet()
    assert unsupported_operators(model) == {}
    assert isinstance(tvm_npu.load_model(model), tvm.IRModule)
    tvm_npu.build(model, "npu")
