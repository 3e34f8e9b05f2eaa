"""ONNX ``LSTM`` / ``GRU`` / ``RNN`` unrolled by the import (``npu.import.recurrent``,
``tvm_npu.compiler.recurrent``): the rewritten model, run by onnxruntime itself, against onnxruntime on the
original layer, over directions, initial states, layouts, biases, peepholes, clip, coupled gates, activation
functions and output subsets; the shape the NPU wants (one input projection, one recurrent matmul per step,
one concat); and the one-line errors for what cannot be unrolled. Fast: onnxruntime only, no TVM build."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper
from recurrent_net import GATES, Layer, crnn, expected, feeds, layer_model, onnxruntime_outputs

from tvm_npu.compiler.onnx_import import prepare
from tvm_npu.compiler.recurrent import RecurrentImportError

RTOL, ATOL = 1e-5, 1e-6  # the rewrite computes the spec's equations in onnxruntime's own float32 kernels


def _unrolled(c: Layer) -> onnx.ModelProto:
    out = prepare(layer_model(c))
    assert not {"LSTM", "GRU", "RNN"} & {n.op_type for n in out.graph.node}
    onnx.checker.check_model(out, full_check=True)
    return out


def _check(c: Layer) -> onnx.ModelProto:
    """The unrolled layer computes onnxruntime's outputs of the layer."""
    out = _unrolled(c)
    values = feeds(out)
    got = onnxruntime_outputs(out, values)
    want = expected(c, values)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    return out


def _matmul_weights(model: onnx.ModelProto) -> list[tuple[int, ...]]:
    inits = {t.name: t.dims for t in model.graph.initializer}
    return [tuple(inits[n.input[1]]) for n in model.graph.node if n.op_type == "MatMul"]


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("initial", [False, True])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_layer_matches_onnxruntime(op: str, direction: str, initial: bool, layout: int) -> None:
    c = Layer(op, direction, initial=initial, layout=layout, linear_before_reset=1)
    out = _check(c)
    g, h, d = GATES[op], c.hidden, c.dirs
    weights = _matmul_weights(out)
    assert weights[0] == (c.inputs, d * g * h)  # the input projection: one matmul of all steps and directions
    recurrent = c.steps if initial else c.steps - 1  # a zero initial state has no product
    assert weights[1:] == [(h, g * h)] * (d * recurrent)
    concats = 1 + (d == 2) * (1 + (op == "LSTM"))  # Y; Y_h[, Y_c] of two directions
    assert [n.op_type for n in out.graph.node].count("Concat") == concats


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_reset_gate_before_and_after_the_product(linear_before_reset: int, bias: bool) -> None:
    """``linear_before_reset=0`` needs two recurrent products per step (z, r first; then ``(r (.) H) Rh^T``),
    ``=1`` one of all three gates."""
    c = Layer("GRU", "bidirectional", initial=True, bias=bias, linear_before_reset=linear_before_reset)
    h = c.hidden
    per_step = [(h, 3 * h)] if linear_before_reset else [(h, 2 * h), (h, h)]
    assert _matmul_weights(_check(c))[1:] == per_step * (c.dirs * c.steps)


@pytest.mark.parametrize("case", [
    Layer(peepholes=True, initial=True, direction="bidirectional"),
    Layer(peepholes=True),
    Layer(input_forget=1, initial=True),
    Layer(input_forget=1, peepholes=True, initial=True, direction="reverse"),
    Layer(clip=0.4, initial=True, direction="bidirectional"),
    Layer("GRU", clip=0.3, initial=True),
    Layer("RNN", clip=0.3, initial=True, direction="reverse"),
    Layer(activations=("HardSigmoid", "LeakyRelu", "Elu"), alpha=(0.3, 0.2, 0.9), beta=(0.4,), initial=True),
    Layer("GRU", activations=("Relu", "Softsign", "Sigmoid", "Tanh"), direction="bidirectional", initial=True),
    Layer("RNN", activations=("ThresholdedRelu",), alpha=(0.2,), initial=True),
    Layer("RNN", activations=("Softplus", "Relu"), direction="bidirectional"),
    Layer(outputs=("Y_c",), direction="bidirectional"),
    Layer(outputs=("Y_h",), layout=1),
    Layer("GRU", outputs=("Y",), direction="reverse", bias=False),
    Layer(sequence_lens=(3, 3)),
    Layer(opset=9, clip=0.5, initial=True),  # Slice and Clip with attributes
], ids=lambda c: "-".join(f"{k}={v}" for k, v in vars(c).items() if v != getattr(Layer(), k) or k == "op"))
def test_attributes(case: Layer) -> None:
    _check(case)


def test_clip_and_peepholes_take_effect() -> None:
    """The attribute cases above are not vacuous: without them the outputs differ."""
    base = Layer(initial=True)
    values = feeds(layer_model(base))
    plain = expected(base, values)
    for changed in (replace(base, clip=0.2), replace(base, peepholes=True), replace(base, input_forget=1)):
        got = onnxruntime_outputs(_unrolled(changed), values)
        assert not np.allclose(got[0], plain[0], rtol=1e-3, atol=1e-4), changed


def test_unread_outputs_are_not_computed() -> None:
    """An ``LSTM`` whose ``Y_h`` / ``Y_c`` nobody reads (torch writes all three) ends in Y's one concat."""
    out = _unrolled(Layer(outputs=("Y",), direction="bidirectional"))
    assert [n.op_type for n in out.graph.node].count("Concat") == 1
    assert [o.name for o in out.graph.output] == ["Y"]


def test_crnn_as_torch_writes_it() -> None:
    """The CRNN's zero initial states come from shape arithmetic (folded first), its LSTM has a bias: one
    input projection ``[8 steps, 32] x [32, 2 * 64]``, no product of the zero state, one concat for Y."""
    model = crnn(width=32)
    out = prepare(model)
    ops = [n.op_type for n in out.graph.node]
    assert "LSTM" not in ops and "ConstantOfShape" not in ops and ops.count("Concat") == 1
    assert _matmul_weights(out)[:2] == [(32, 128), (16, 64)] and ops.count("MatMul") == 1 + 2 * 7 + 1
    values = feeds(model)
    np.testing.assert_allclose(onnxruntime_outputs(out, values)[0], onnxruntime_outputs(model, values)[0],
                               rtol=RTOL, atol=ATOL)


def _one_line_error(model: onnx.ModelProto, *words: str) -> None:
    with pytest.raises(RecurrentImportError) as info:
        prepare(model)
    text = str(info.value)
    assert isinstance(info.value, ValueError) and "\n" not in text
    assert all(w in text for w in ("lstm_0", *words)), text


def test_partial_sequence_lengths_are_a_one_line_error() -> None:
    _one_line_error(layer_model(Layer(sequence_lens=(3, 2))), "sequence_lens", "equal to the sequence length 3")


def test_sequence_lengths_as_an_input_are_a_one_line_error() -> None:
    model = layer_model(Layer())
    model.graph.node[0].input.extend(["", "lens"][len(model.graph.node[0].input) - 3:])
    model.graph.input.append(helper.make_tensor_value_info("lens", onnx.TensorProto.INT32, [2]))
    _one_line_error(model, "sequence_lens 'lens'", "a constant")


def test_an_activation_that_is_no_onnx_operator_is_a_one_line_error() -> None:
    _one_line_error(layer_model(Layer(activations=("Affine", "Tanh", "Tanh"), alpha=(1.0,), beta=(0.0,))),
                    "'Affine'", "accepted: Relu, Tanh, Sigmoid")


def test_weights_that_are_not_constants_are_a_one_line_error() -> None:
    model = layer_model(Layer())
    w = next(t for t in model.graph.initializer if t.name == "W")
    model.graph.input.append(helper.make_tensor_value_info("W", onnx.TensorProto.FLOAT, list(w.dims)))
    model.graph.initializer.remove(w)
    _one_line_error(model, "W 'W' is not a constant")


def test_dynamic_shapes_are_a_one_line_error() -> None:
    model = layer_model(Layer())
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "seq"
    _one_line_error(model, "no static 3-D shape", "--input-shape")


@settings(max_examples=25, deadline=None)
@given(op=st.sampled_from(["LSTM", "GRU", "RNN"]), direction=st.sampled_from(["forward", "reverse", "bidirectional"]),
       steps=st.integers(1, 4), batch=st.integers(1, 3), inputs=st.integers(1, 6), hidden=st.integers(1, 6),
       layout=st.integers(0, 1), initial=st.booleans(), bias=st.booleans(), peepholes=st.booleans(),
       clip=st.sampled_from([None, 0.5, 2.0]), linear_before_reset=st.integers(0, 1), seed=st.integers(0, 99))
def test_random_configurations(op: str, direction: str, steps: int, batch: int, inputs: int, hidden: int, layout: int,
                               initial: bool, bias: bool, peepholes: bool, clip: float | None,
                               linear_before_reset: int, seed: int) -> None:
    _check(Layer(op, direction, steps, batch, inputs, hidden, layout, initial, bias, peepholes and op == "LSTM", clip,
                 linear_before_reset=linear_before_reset, seed=seed))


def test_zero_peepholes_and_zero_initial_states_add_nothing() -> None:
    """torch writes ``P`` and the initial states as zeros: no peephole products, no product of the state."""
    model = layer_model(Layer(peepholes=True))
    for t in model.graph.initializer:
        if t.name == "P":
            t.CopyFrom(numpy_helper.from_array(np.zeros(tuple(t.dims), np.float32), "P"))
    assert [n.op_type for n in prepare(model).graph.node].count("Mul") == \
        [n.op_type for n in prepare(layer_model(Layer())).graph.node].count("Mul")


def test_a_wrong_number_of_activations_is_a_one_line_error() -> None:
    _one_line_error(layer_model(Layer(activations=("Sigmoid", "Tanh"))), "2 activations given, 3 per direction")


def test_weights_of_another_shape_are_a_one_line_error() -> None:
    model = layer_model(Layer())
    next(a for a in model.graph.node[0].attribute if a.name == "hidden_size").i = 6  # R is of 5
    _one_line_error(model, "has shape (1, 20, 4); accepted: (1, 24, 4)", "hidden_size 6")


def test_stacked_layers_as_torch_writes_them() -> None:
    """torch's ``num_layers=2, bidirectional``: the second LSTM reads the first's Y through Transpose (0, 2, 1, 3)
    and Reshape ``[T, B, 2H]``; its input shape comes from shape inference on the unrolled first layer."""
    first = layer_model(Layer(direction="bidirectional", outputs=("Y",)))
    second = layer_model(Layer(direction="bidirectional", inputs=10, outputs=("Y",), seed=3))
    graph = first.graph
    graph.node.extend([helper.make_node("Transpose", ["Y"], ["Yt"], perm=[0, 2, 1, 3]),
                       helper.make_node("Reshape", ["Yt", "flat"], ["X2"])])
    graph.initializer.append(numpy_helper.from_array(np.array([0, 0, -1], np.int64), "flat"))
    node = second.graph.node[0]
    node.input[:] = ["X2", "W2", "R2", "B2"]
    node.output[:] = ["out"]
    node.name = "lstm_1"
    for t in second.graph.initializer:
        graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(t), f"{t.name}2"))
    graph.node.append(node)
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, [3, 2, 2, 5]))
    out = prepare(first)
    assert "LSTM" not in {n.op_type for n in out.graph.node}
    values = feeds(first)
    np.testing.assert_allclose(onnxruntime_outputs(out, values)[0], onnxruntime_outputs(first, values)[0],
                               rtol=RTOL, atol=ATOL)
