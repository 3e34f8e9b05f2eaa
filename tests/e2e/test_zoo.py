"""The bundled exporter-style models (``tvm_npu.models.bundled``): valid ONNX, the exporter forms they
promise, activations of a sensible scale, the published networks' MAC counts, and
resolution by name from the CLI's table and ``tvm_npu.load_model``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import model_helpers as checks
import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tvm_npu.compiler.driver import load_model
from tvm_npu.models import bundled as zoo
from tvm_npu.models.inputs import random_inputs
from tvm_npu.models.registry import BUNDLED, ZOO
from tvm_npu.tools.bench import resolve_model

ort = pytest.importorskip("onnxruntime")  # an optional dependency (the test extra)

#: Small configurations of every generator: same structure, a fraction of the cost.
TINY: dict[str, Callable[[], onnx.ModelProto]] = {
    "mobilenet_v2": lambda: zoo.mobilenet_v2(resolution=32, width=0.25, depth=0.34, num_classes=10),
    # 96 px: at 32 px the last stages' 5x5 depthwise convs see a 1x1 map (one tap of 25)
    "efficientnet_b0": lambda: zoo.efficientnet_b0(resolution=96, width=0.25, depth=0.34, num_classes=10),
    "vit_tiny": lambda: zoo.vit_tiny(resolution=32, patch=8, dim=48, depth=2, heads=3, num_classes=10),
    "swin_t_stage": lambda: zoo.swin_t_stage(side=14, dim=24, heads=3, window=7),
    "bert_layer": lambda: zoo.bert_layer(seq=16, hidden=64, heads=4, ff=256),
}


def _ops(model: onnx.ModelProto) -> Counter[str]:
    return Counter(n.op_type for n in model.graph.node)


def _inits(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _producers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {o: n for n in model.graph.node for o in n.output}


@pytest.mark.parametrize("name", list(TINY))
def test_tiny_models_are_valid_and_keep_activations_in_scale(name: str) -> None:
    model = TINY[name]()
    onnx.checker.check_model(model, full_check=True)
    for seed in range(2):
        stats = checks.activation_stats(model, random_inputs(model, seed))
        assert len(stats) > len(model.graph.node) // 3  # the check saw the model, not a handful of tensors
        assert all(np.isfinite(s.std) for s in stats)
        outliers = checks.scale_outliers(stats)
        assert not outliers, [(s.name, s.op, s.mean, s.std) for s in outliers]


@pytest.mark.parametrize(("name", "macs", "tolerance"), [
    ("mobilenet_v2", 300e6, 0.02),  # Sandler et al. 2018: 300 M multiply-adds
    ("efficientnet_b0", 390e6, 0.02),  # Tan & Le 2019: 0.39 B FLOPs (multiply-adds)
    ("vit_tiny", 1.26e9, 0.02),  # DeiT-Ti: 1.3 G FLOPs; timm: 1.26 G
    # one BERT-base layer at 128 tokens: Q, K, V, output (4 * 128 * 768^2), FF (2 * 128 * 768 * 3072),
    # scores and context (2 * 12 * 128^2 * 64)
    ("bert_layer", 4 * 128 * 768**2 + 2 * 128 * 768 * 3072 + 2 * 12 * 128**2 * 64, 1e-9),
    # Swin-T stage 1, two blocks: qkv, proj, MLP (3 + 1 + 8) * 3136 * 96^2, attention 2 * 3136 * 49 * 96
    ("swin_t_stage", 2 * ((3 + 1 + 8) * 3136 * 96**2 + 2 * 3136 * 49 * 96), 1e-9),
])
def test_full_size_models_have_the_published_mac_counts_and_activation_scale(name: str, macs: float,
                                                                             tolerance: float) -> None:
    model = ZOO[name]()
    counted = sum(checks.count_macs(model).values())
    assert counted == pytest.approx(macs, rel=tolerance)
    outliers = checks.scale_outliers(checks.activation_stats(model, random_inputs(model)))
    assert not outliers, [(s.name, s.op, s.mean, s.std) for s in outliers]


def test_mobilenet_v2_is_written_as_exporters_write_it() -> None:
    model = zoo.mobilenet_v2()
    ops, inits, producers = _ops(model), _inits(model), _producers(model)
    assert model.opset_import[0].version == 17
    assert "BatchNormalization" not in ops  # folded
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    assert len(convs) == 52 and ops["Add"] == 10  # the published network: 52 convs, 10 residual adds
    clips = [n for n in model.graph.node if n.op_type == "Clip"]
    assert len(clips) == 35
    assert all(len(c.input) == 3 for c in clips)
    assert all(float(inits[c.input[1]]) == 0.0 and float(inits[c.input[2]]) == 6.0 for c in clips)
    depthwise = [c for c in convs if next(a.i for a in c.attribute if a.name == "group") > 1]
    strided = [c for c in depthwise if list(next(a.ints for a in c.attribute if a.name == "strides")) == [2, 2]]
    assert len(depthwise) == 17 and len(strided) == 4
    for conv in strided:  # tf2onnx's SAME padding: an explicit Pad, bottom/right only, and an unpadded conv
        pad = producers[conv.input[0]]
        assert pad.op_type == "Pad"
        assert inits[pad.input[1]].tolist() == [0, 0, 0, 0, 0, 0, 1, 1]
        assert list(next(a.ints for a in conv.attribute if a.name == "pads")) == [0, 0, 0, 0]
    assert [n.op_type for n in model.graph.node[-3:]] == ["GlobalAveragePool", "Flatten", "Gemm"]


def test_efficientnet_b0_has_swish_and_squeeze_excitation() -> None:
    model = zoo.efficientnet_b0()
    ops, producers = _ops(model), _producers(model)
    assert ops["GlobalAveragePool"] == 17  # 16 SE blocks and the head
    kernels = Counter(tuple(next(a.ints for a in n.attribute if a.name == "kernel_shape")) for n in model.graph.node
                      if n.op_type == "Conv" and next(a.i for a in n.attribute if a.name == "group") > 1)
    assert kernels == {(3, 3): 7, (5, 5): 9}
    swishes = [n for n in model.graph.node if n.op_type == "Mul" and producers.get(n.input[1]) is not None
               and producers[n.input[1]].op_type == "Sigmoid" and producers[n.input[1]].input[0] == n.input[0]]
    assert len(swishes) == 1 + 31 + 16 + 1  # stem, expand and depthwise of the blocks, SE hidden, head
    # every SE: pool -> conv -> swish -> conv -> sigmoid, multiplied with the map that was pooled
    gates = [n for n in model.graph.node if n.op_type == "Mul" and producers[n.input[1]].op_type == "Sigmoid"
             and producers[n.input[1]].input[0] != n.input[0]]
    assert len(gates) == 16
    for gate in gates:
        chain, t = [], producers[gate.input[1]]
        while t.op_type != "GlobalAveragePool":
            chain.append(t.op_type)
            t = producers[t.input[0]]
        assert chain == ["Sigmoid", "Conv", "Mul", "Conv"] and t.input[0] == gate.input[0]


def _computed_reshapes(model: onnx.ModelProto) -> int:
    """Reshapes whose shape is ``Concat`` of ``Unsqueeze(Gather(Shape(x)))`` and constants."""
    producers, count = _producers(model), 0
    for node in model.graph.node:
        concat = producers.get(node.input[1]) if node.op_type == "Reshape" else None
        if concat is None or concat.op_type != "Concat":
            continue
        dims = [producers[i] for i in concat.input if i in producers]
        count += bool(dims) and all(d.op_type == "Unsqueeze" and producers[d.input[0]].op_type == "Gather"
                                    and producers[producers[d.input[0]].input[0]].op_type == "Shape" for d in dims)
    return count


def test_vit_tiny_is_written_as_torch_writes_it() -> None:
    model = zoo.vit_tiny()
    ops = _ops(model)
    assert ops["LayerNormalization"] == 2 * 12 + 1 and ops["Softmax"] == 12 and ops["Erf"] == 12
    assert _computed_reshapes(model) == 1 + 2 * 12  # patch flatten, head split and merge per block
    assert ops["MatMul"] == 6 * 12  # qkv, Q K^T, .V, proj, fc1, fc2
    gelu = [n.op_type for n in model.graph.node if n.name.startswith("blocks.0.mlp.act/")]
    assert gelu == ["Div", "Erf", "Add", "Mul", "Mul"]
    assert [n.op_type for n in model.graph.node[-2:]] == ["Gather", "Gemm"]


def test_bert_layer_decomposes_layer_norm_at_opset_14() -> None:
    model = zoo.bert_layer()
    assert model.opset_import[0].version == 14
    ops = _ops(model)
    assert "LayerNormalization" not in ops and ops["ReduceMean"] == 4 and ops["Sqrt"] == 2 and ops["Pow"] == 2
    assert _computed_reshapes(model) == 4  # split Q, K, V and merge
    norm = [n.op_type for n in model.graph.node if n.name.startswith("output.LayerNorm/")]
    assert norm == ["ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add"]
    mask_add = next(n for n in model.graph.node if "attention_mask" in n.input)
    assert mask_add.op_type == "Add" and _producers(model)[mask_add.input[0]].op_type == "Div"


def test_roll_subgraph_is_numpy_roll() -> None:
    """``torch.roll`` as Slice + Concat, as the Swin stage writes it, for shifts both ways."""
    x = np.random.default_rng(0).standard_normal((1, 7, 7, 3)).astype(np.float32)
    for shift in (-3, 3, 7, 0):
        g = zoo._Graph(0)
        out = g.roll(g.roll("x", shift, 1, 7, "r"), shift, 2, 7, "r")
        model = g.model("roll", [("x", x.shape)], [(out, x.shape)], 17)
        got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        np.testing.assert_array_equal(got[0], np.roll(x, (shift, shift), axis=(1, 2)))


def test_swin_tables_match_their_definition() -> None:
    window, side, shift = 3, 6, 1
    index = zoo.relative_position_index(window)
    coords = [(i, j) for i in range(window) for j in range(window)]
    for a, (ai, aj) in enumerate(coords):
        for b, (bi, bj) in enumerate(coords):
            assert index[a, b] == (ai - bi + window - 1) * (2 * window - 1) + (aj - bj + window - 1)
    mask = zoo.shifted_window_mask(side, window, shift)
    # the region of each pixel of the rolled map, by where it came from in the unrolled one
    def region(k: int) -> int:
        return 0 if k < side - window else 1 if k < side - shift else 2

    for w in range(mask.shape[0]):
        wi, wj = divmod(w, side // window)
        pixels = [(wi * window + i, wj * window + j) for i in range(window) for j in range(window)]
        for a, (ai, aj) in enumerate(pixels):
            for b, (bi, bj) in enumerate(pixels):
                same = (region(ai), region(aj)) == (region(bi), region(bj))
                assert mask[w, a, b] == (0.0 if same else -100.0)
    model = zoo.swin_t_stage()
    ops = _ops(model)
    assert ops["Slice"] == 8 and ops["Softmax"] == 2  # two rolls of two axes each way, in the shifted block
    tables = [n for n in model.graph.node if n.op_type == "Gather" and n.input[0].endswith("bias_table")]
    assert len(tables) == 2


def test_bundled_names_resolve() -> None:
    for name in ZOO:
        assert name in BUNDLED
    display, model = resolve_model("bert_layer")
    assert display == "bert_layer" and model.graph.name == "bert_layer"
    mod = load_model("tiny_convnet")  # a bundled name through the driver
    assert "main" in [gv.name_hint for gv in mod.functions]
    with pytest.raises(FileNotFoundError, match="mobilenet_v2"):  # the error lists the bundled names
        load_model("no_such_model")


@pytest.mark.parametrize("factor", [0.1, 10.0])
def test_scale_check_catches_vanishing_and_exploding_weights(factor: float) -> None:
    model = TINY["vit_tiny"]()
    for t in model.graph.initializer:
        if t.name.startswith("onnx::MatMul_"):  # every linear layer's weight
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(factor), t.name))
    outliers = checks.scale_outliers(checks.activation_stats(model, random_inputs(model)))
    assert outliers and all((s.rms < 0.1) == (factor < 1) for s in outliers)
