"""ONNX ``LpNormalization`` (p = 1 and 2, any axis), which TVM 0.27 cannot import: the import writes it as the
reductions onnxruntime computes (``npu.import.lp-norm``), one row-wise NPU operator, no host operator;
against onnxruntime (all-zero slices give zeros, as there) and llvm."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from helpers import check_against_references  # tests/ is on sys.path
from onnx import TensorProto, helper
from onnx_net import OnnxNet  # tests/ is on sys.path

import tvm_npu
from tvm_npu.compiler.lp_norm import LpNormImportError
from tvm_npu.compiler.onnx_import import prepare, supported_operators, unsupported_operators
from tvm_npu.core.ops import RowKind, RowwiseSpec

RTOL, ATOL = 1e-4, 1e-5


def _run(model: onnx.ModelProto, x: np.ndarray) -> tvm_npu.BuildInfo:
    """NPU vs onnxruntime and llvm on ``x``; no host operator, one partition, one row program."""
    info = check_against_references(model, x)
    programs = [o.spec for p in info.plans for o in p.ops if isinstance(o.spec, RowwiseSpec)]
    assert [s.kind for s in programs] == [RowKind.PROGRAM], programs
    return info


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [-1, 1])
def test_lp_norm_of_a_conv_output(p: int, axis: int) -> None:
    """Conv (NCHW) -> LpNormalization over the columns or the channels (a transposing view)."""
    net = OnnxNet()
    y = net.node("LpNormalization", [net.conv("x", 4, 8, 3, relu=False)], axis=axis, p=p)
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 10)).astype(np.float32)
    info = _run(net.model(y, [1, 4, 6, 10], [1, 8, 6, 10]), x)
    steps = [s.op.name for o in info.plans[0].ops if isinstance(o.spec, RowwiseSpec) for s in o.spec.program]
    assert "VRSUM" in steps and steps[-1] == "VMUL"


@pytest.mark.parametrize("p", [1, 2])
def test_zero_slices_give_zeros_as_in_onnxruntime(p: int) -> None:
    """No epsilon: a non-zero slice is ``x / norm`` exactly as written; an all-zero one is zeros, not nan."""
    graph = helper.make_graph([helper.make_node("LpNormalization", ["x"], ["y"], p=p)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])  # ReduceSum's axes: attribute
    x = np.random.default_rng(2).standard_normal((6, 16)).astype(np.float32)
    x[2] = 0.0
    x[4] *= 1e6
    _run(model, x)


def test_import_rewrite_is_listed_and_a_switch() -> None:
    net = OnnxNet()
    model = net.model(net.node("LpNormalization", ["x"], axis=0, p=2), [3, 5], [3, 5])
    assert "LpNormalization" in supported_operators()
    assert unsupported_operators(model) == {}
    assert "LpNormalization" not in [n.op_type for n in prepare(model).graph.node]
    with tvm.transform.PassContext(disabled_pass=["npu.import.lp-norm"]):
        assert [n.op_type for n in prepare(model).graph.node] == ["LpNormalization"]
        assert list(unsupported_operators(model)) == ["LpNormalization"]


def test_other_p_is_a_one_line_error() -> None:
    net = OnnxNet()
    model = net.model(net.node("LpNormalization", ["x"], p=3), [3, 5], [3, 5])
    with pytest.raises(LpNormImportError, match=r"p=3; accepted: p=1 or p=2"):
        prepare(model)
