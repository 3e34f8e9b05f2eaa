"""Issue 25, the remaining goals: an FPN with symbolic H and W builds once and runs every valid shape; a JIT
partition gets the layout a static build votes for at the call's sizes (the same programs); a repeated shape
goes straight to its program.

Models from ``tvm_npu.testing.dynamic_models`` (``onnx.helper``, the exporters' styles); outputs against llvm built
for the shape and onnxruntime, programs against a static build by SHA-256 (as ``benchmarks/fingerprint.py``)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import tvm
from onnx_net import OnnxNet  # tests/ is on sys.path
from tvm import relax
from tvm_npu.relay_patterns.symbolic import evaluate

import tvm_npu
from tvm_npu.compiler.shape_relations import import_related
from tvm_npu.runtime import jit
from tvm_npu.testing.dynamic_models import classifier, detector
from tvm_npu.tools.bench import profile_model

RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path) -> Iterator[jit.JitCache]:
    with jit.use_cache(jit.JitCache(jit.DiskCache(tmp_path / "cache"))) as cache:
        yield cache


def _programs(executable: object, x: np.ndarray) -> list[str]:
    """SHA-256 of every NPU program a run executes, in call order."""
    _, prof, _ = profile_model(executable, [x], timing_only=True)
    return [hashlib.sha256(r.artifact.program).hexdigest() for r in prof.runs]


def _against_references(model: onnx.ModelProto, out: np.ndarray, x: np.ndarray) -> None:
    ref = tvm_npu.run(tvm_npu.build_reference(model, shapes={"x": x.shape}), x)
    (expected,) = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


def _x(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


def test_import_relates_sizes_tvm_cannot_prove_equal() -> None:
    """The FPN's sum of a lateral map ((H - 1) // 4 + 1 rows) and an upsampled one (2 * ((H - 1) // 8 + 1)) has
    the lateral map's shape (TVM's own importer gives it none); the upsampled sizes are integer expressions."""
    main = import_related(detector())["main"]
    adds, resizes = [], []

    def visit(e: relax.Expr) -> None:
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
            {"relax.add": adds, "relax.image.resize2d": resizes}.get(e.op.name, []).append(e)

    relax.analysis.post_order_visit(main.body, visit)
    assert all(isinstance(a.ty.shape, relax.ShapeExpr) for a in adds)
    for r, stride in zip(resizes, (8, 4), strict=True):
        rows = r.args[1].values[0]
        assert isinstance(rows, tvm.tirx.Mul)  # no float32 round trip left
        assert [evaluate(rows, {"H": h}) for h in (8, 37, 64)] == [2 * ((h - 1) // stride + 1) for h in (8, 37, 64)]


def test_import_of_static_sizes_is_tvms() -> None:
    """With every size static nothing is related: the module is TVM's import."""
    model = detector()
    for d, n in zip(model.graph.input[0].type.tensor_type.shape.dim[2:], (32, 48), strict=True):
        d.Clear()
        d.dim_value = n
    from tvm.relax.frontend.onnx import from_onnx

    tvm.ir.assert_structural_equal(import_related(model), from_onnx(model, keep_params_in_input=False))


def test_fpn_with_symbolic_h_and_w_builds_once(private_cache: jit.JitCache) -> None:
    """Built without shapes=: one NPU partition (the upsampling a broadcast view), the static build's programs,
    outputs of llvm and onnxruntime at two shapes; a size at which the FPN's maps disagree is one line."""
    model = detector()
    ex, info = tvm_npu.build_with_info(model)
    assert info.partitions == 1 and info.host_ops == {}
    for shape in ((1, 3, 32, 48), (1, 3, 56, 40)):
        x = _x(shape)
        _against_references(model, tvm_npu.run(ex, x), x)
    x = _x((1, 3, 32, 48))
    assert _programs(ex, x) == _programs(tvm_npu.build(model, shapes={"x": x.shape}), x)
    with pytest.raises(ValueError, match=r"^input sizes H=36, W=32: two tensors the model combines .* do not agree"):
        tvm_npu.run(ex, _x((1, 3, 36, 32)))


def test_jit_partition_takes_the_static_layout_vote() -> None:
    """At 16 x 16 a static build of the classifier converts to NHWC (transposes inserted, then folded): the JIT
    compile of that shape votes the same and runs the same program; at 32 x 32 both keep NCHW."""
    model = classifier()
    ex = tvm_npu.build(model)
    for shape, converts in (((1, 3, 16, 16), True), ((1, 3, 32, 32), False)):
        static, info = tvm_npu.build_with_info(model, shapes={"x": shape})
        assert (info.transforms_inserted > 0) == converts
        x = _x(shape)
        assert _programs(ex, x) == _programs(static, x)
        _against_references(model, tvm_npu.run(ex, x), x)


def test_a_repeated_shape_goes_straight_to_its_program(monkeypatch: pytest.MonkeyPatch,
                                                       private_cache: jit.JitCache) -> None:
    """The first call of a shape finds its program (sizes, policy, cache); later calls of that shape look it up
    by the arguments' shapes alone, still counted as memory hits; a shape compiled ahead is not a cache hit."""
    model = classifier()
    ex = tvm_npu.build(model, shapes={"x": [(1, 3, 24, 24), (1, 3, 16, 16)]})
    calls = []
    real = jit._dispatch
    monkeypatch.setattr(jit, "_dispatch", lambda *a: calls.append(a[1]) or real(*a))
    for shape in ((1, 3, 24, 24), (1, 3, 24, 24), (1, 3, 20, 28), (1, 3, 20, 28), (1, 3, 20, 28)):
        x = _x(shape)
        np.testing.assert_allclose(tvm_npu.run(ex, x), tvm_npu.run(tvm_npu.build(model, shapes={"x": shape}), x),
                                   rtol=RTOL, atol=ATOL)
    assert len(calls) == 2 and private_cache.compiles == 1 and private_cache.memory_hits == 2


def test_a_neck_concatenating_an_upsampled_map_builds_once() -> None:
    """YOLOv8's neck: a map of H // 4 rows upsampled 2x and concatenated with one of H // 2 rows (equal for every
    H the model accepts, not provably): one NPU partition, the outputs of llvm and onnxruntime."""
    net = OnnxNet()
    c1 = net.node("MaxPool", [net.conv("x", 3, 8, 3)], kernel_shape=[2, 2], strides=[2, 2])
    c2 = net.node("MaxPool", [net.conv(c1, 8, 8, 3)], kernel_shape=[2, 2], strides=[2, 2])
    up = net.node("Resize", [c2, "", net.const([1.0, 1.0, 2.0, 2.0])], mode="nearest",
                  coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    model = net.model(net.conv(net.node("Concat", [c1, up], axis=1), 16, 8), [1, 3, "H", "W"], [1, 8, "h", "w"])
    ex, info = tvm_npu.build_with_info(model)
    assert info.partitions == 1 and info.host_ops == {}
    x = _x((1, 3, 24, 40))
    _against_references(model, tvm_npu.run(ex, x), x)


def test_a_partition_is_called_with_its_tensors_alone() -> None:
    """The R.Shape([W]) parameters Relax adds per composite carry sizes the partition's input shapes define: bound
    inside it, so the host passes tensors only (each shape argument cost the call ~2 us) and the programs stay."""
    ex = tvm_npu.build(classifier())
    (prog,) = jit.programs_of(ex)
    assert [kind for part in prog.partitions.values() for kind, _ in part.params] == ["tensor"]
    x = _x((1, 3, 24, 40))
    _against_references(classifier(), tvm_npu.run(ex, x), x)
