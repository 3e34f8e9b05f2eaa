"""Bundled models in exporter style (the table of every model known by name is :mod:`.registry`).

The generators write ONNX the way exporters do, not the way a hand-written graph would
look: PyTorch's ``torch.onnx.export`` (opset 17; opset 14 for the BERT layer, as older
torch and transformers releases wrote it) and, for MobileNetV2's padding, tf2onnx. So
they carry what real exported models carry and a compiler must cope with: ReLU6 as
``Clip`` with min/max given as initializer inputs, an explicit asymmetric ``Pad`` before
the stride-2 depthwise convolutions, swish as ``Sigmoid`` + ``Mul``, squeeze-and-excitation,
head split/merge ``Reshape`` whose shape is computed at run time by
``Shape -> Gather -> Unsqueeze -> Concat``, ``torch.roll`` as ``Slice`` + ``Concat``,
relative position bias gathered from a table, erf-GELU as ``Div, Erf, Add, Mul, Mul``
and LayerNorm either as ``LayerNormalization`` or decomposed into reductions.

Weights are seeded random values scaled by fan-in (He for layers followed by an
activation, LeCun for linear ones), batch-norm already folded into the convolutions as
eval-mode exports do. With standard-normal inputs every activation of every model here, at
full size and at the tiny sizes the tests use, has a scale (RMS, the std where the mean is
near 0) within [0.1, 10] -- at full size between about 0.15 and 5 -- (checked by
``tests/e2e/test_zoo.py`` with the activation statistics of ``tests/model_helpers.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT
#: He-style gain for a layer followed by swish: 1 / E[swish(z)^2] for z ~ N(0, 1) (ReLU's is 2).
SWISH_GAIN = 2.81


class _Graph:
    """Collects nodes and initializers with unique names, and the seeded weight generator."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._used: dict[str, int] = {}

    def name(self, base: str) -> str:
        n = self._used.get(base, 0)
        self._used[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def const(self, base: str, values: np.ndarray | float | Sequence[int], dtype: type = np.float32) -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def i64(self, base: str, values: int | Sequence[int]) -> str:
        return self.const(base, values, np.int64)

    def op(self, op_type: str, inputs: Sequence[str], scope: str = "", outputs: int = 1, **attrs: object
           ) -> str:
        """Add one node; returns its (first) output, named ``scope/op_type`` like torch's exporter."""
        base = self.name(f"{scope}/{op_type}" if scope else op_type)
        outs = [f"{base}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=base, **attrs))
        return outs[0]

    # ------------------------------------------------------------------ weighted layers
    def conv(self, x: str, cin: int, cout: int, k: int, scope: str, *, stride: int = 1, groups: int = 1,
             pads: Sequence[int] | None = None, gain: float = 2.0, bias_std: float = 0.05,
             bias_mean: float = 0.0) -> str:
        """A convolution with batch-norm folded in (weight and bias), as eval-mode exports write it."""
        fan_in = cin // groups * k * k
        w = self.const(f"{scope}.weight", self.rng.normal(0.0, math.sqrt(gain / fan_in), (cout, cin // groups, k, k)))
        b = self.const(f"{scope}.bias", self.rng.normal(bias_mean, bias_std, cout))
        return self.op("Conv", [x, w, b], scope, dilations=[1, 1], group=groups, kernel_shape=[k, k],
                       pads=list(pads) if pads is not None else [k // 2] * 4, strides=[stride, stride])

    def linear(self, x: str, din: int, dout: int, scope: str, *, gain: float | np.ndarray = 1.0) -> str:
        """``nn.Linear`` on a 3-D or 4-D tensor: ``MatMul`` with the transposed weight, then ``Add``
        (``gain`` may differ per output column)."""
        w = self.const(f"onnx::MatMul_{scope}", self.rng.normal(0.0, np.sqrt(np.asarray(gain) / din), (din, dout)))
        b = self.const(f"{scope}.bias", self.rng.normal(0.0, 0.02, dout))
        return self.op("Add", [b, self.op("MatMul", [x, w], scope)], scope)

    def gemm(self, x: str, din: int, dout: int, scope: str) -> str:
        """``nn.Linear`` on a 2-D tensor: ``Gemm`` with ``transB=1``."""
        w = self.const(f"{scope}.weight", self.rng.normal(0.0, math.sqrt(1.0 / din), (dout, din)))
        b = self.const(f"{scope}.bias", self.rng.normal(0.0, 0.02, dout))
        return self.op("Gemm", [x, w, b], scope, alpha=1.0, beta=1.0, transB=1)

    def layer_norm(self, x: str, dim: int, scope: str, eps: float = 1e-6) -> str:
        """``nn.LayerNorm`` as opset 17 exports it: one ``LayerNormalization``."""
        scale = self.const(f"{scope}.weight", self.rng.uniform(0.8, 1.2, dim))
        bias = self.const(f"{scope}.bias", self.rng.normal(0.0, 0.05, dim))
        return self.op("LayerNormalization", [x, scale, bias], scope, axis=-1, epsilon=eps)

    def layer_norm_decomposed(self, x: str, dim: int, scope: str, eps: float = 1e-12) -> str:
        """LayerNorm as older torch exported it (opset <= 16): mean, variance, sqrt and divide."""
        mean = self.op("ReduceMean", [x], scope, axes=[-1], keepdims=1)
        centred = self.op("Sub", [x, mean], scope)
        square = self.op("Pow", [centred, self.const(f"{scope}.pow_exponent", 2.0)], scope)
        var = self.op("ReduceMean", [square], scope, axes=[-1], keepdims=1)
        std = self.op("Sqrt", [self.op("Add", [var, self.const(f"{scope}.eps", eps)], scope)], scope)
        normed = self.op("Div", [centred, std], scope)
        scaled = self.op("Mul", [normed, self.const(f"{scope}.weight", self.rng.uniform(0.8, 1.2, dim))], scope)
        return self.op("Add", [scaled, self.const(f"{scope}.bias", self.rng.normal(0.0, 0.05, dim))], scope)

    # --------------------------------------------------------------------- activations
    def relu6(self, x: str, scope: str) -> str:
        """``nn.ReLU6`` as torch exports it at opset >= 11: ``Clip`` with min/max as inputs."""
        return self.op("Clip", [x, self.const(f"{scope}.min", 0.0), self.const(f"{scope}.max", 6.0)], scope)

    def swish(self, x: str, scope: str) -> str:
        """``nn.SiLU`` as torch exports it before opset 24: ``x * Sigmoid(x)``."""
        return self.op("Mul", [x, self.op("Sigmoid", [x], scope)], scope)

    def gelu(self, x: str, scope: str) -> str:
        """Exact GELU as torch exports it before opset 20: ``x * 0.5 * (1 + erf(x / sqrt 2))``."""
        erf = self.op("Erf", [self.op("Div", [x, self.const(f"{scope}.sqrt2", math.sqrt(2.0))], scope)], scope)
        one_plus = self.op("Add", [erf, self.const(f"{scope}.one", 1.0)], scope)
        return self.op("Mul", [self.op("Mul", [x, one_plus], scope), self.const(f"{scope}.half", 0.5)], scope)

    # ------------------------------------------------------------------ shape arithmetic
    def computed_shape(self, x: str, dims: Sequence[int], tail: Sequence[int], scope: str) -> str:
        """A reshape target as torch writes ``x.view(x.size(0), ..., *tail)``: the leading
        sizes read from ``x`` at run time (``Shape -> Gather -> Unsqueeze``), ``Concat`` with
        the constant tail."""
        parts = []
        for d in dims:
            size = self.op("Gather", [self.op("Shape", [x], scope), self.i64(f"{scope}.dim{d}", d)], scope, axis=0)
            parts.append(self.op("Unsqueeze", [size, self.i64(f"{scope}.axes", [0])], scope))
        parts += [self.i64(f"{scope}.size", [t]) for t in tail]
        return self.op("Concat", parts, scope, axis=0)

    def roll(self, x: str, shift: int, axis: int, size: int, scope: str) -> str:
        """``torch.roll(x, shift, axis)`` as torch exports it: two ``Slice`` and a ``Concat``."""
        cut = (-shift) % size

        def piece(start: int, end: int) -> str:
            return self.op("Slice", [x, self.i64(f"{scope}.starts", [start]), self.i64(f"{scope}.ends", [end]),
                                     self.i64(f"{scope}.axes", [axis]), self.i64(f"{scope}.steps", [1])], scope)

        return self.op("Concat", [piece(cut, size), piece(0, cut)], scope, axis=axis)

    def model(self, name: str, inputs: Sequence[tuple[str, Sequence[int]]],
              outputs: Sequence[tuple[str, Sequence[int]]], opset: int) -> onnx.ModelProto:
        """The finished model, checked (``full_check``: types and shapes too)."""
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(n, FLOAT, list(s)) for n, s in inputs],
            [helper.make_tensor_value_info(n, FLOAT, list(s)) for n, s in outputs],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="tvm_npu.models.bundled")
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def _divisible(v: float, divisor: int = 8) -> int:
    """Channel rounding of the reference MobileNetV2/EfficientNet code: nearest multiple of
    ``divisor``, never below it nor more than 10% below ``v``."""
    rounded = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * v else rounded


def _depth(n: int, depth: float) -> int:
    return max(1, math.ceil(n * depth))


# ----------------------------------------------------------------------- MobileNetV2
#: (expansion t, output channels c, repeats n, first stride s) of MobileNetV2 (width 1.0).
MOBILENET_V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2(resolution: int = 224, width: float = 1.0, depth: float = 1.0, num_classes: int = 1000,
                 seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 (Sandler et al. 2018; torchvision's channel plan), about 300 M MACs at 224x224.

    Inverted residuals (1x1 expand, depthwise 3x3, 1x1 project; residual add when stride
    is 1 and the channels match), BN folded, ReLU6 as ``Clip(x, min, max)`` with
    initializer bounds, and every stride-2 depthwise conv preceded by an explicit
    ``Pad`` of (0, 0, 1, 1) on (top, left, bottom, right), TF "SAME" as tf2onnx writes it,
    the conv itself unpadded. ``width`` scales channels, ``depth`` the repeats.
    """
    g = _Graph(seed)
    cin = _divisible(32 * width)
    x = g.relu6(g.conv("input", 3, cin, 3, "features.0.0", stride=2), "features.0.2")
    same_pad = g.i64("pad_same_stride2", [0, 0, 0, 0, 0, 0, 1, 1])
    block = 1
    for t, c, n, s in MOBILENET_V2_STAGES:
        cout = _divisible(c * width)
        for i in range(_depth(n, depth)):
            stride = s if i == 0 else 1
            scope = f"features.{block}.conv"
            hidden = cin * t
            h = x
            if t != 1:
                h = g.relu6(g.conv(h, cin, hidden, 1, f"{scope}.0.0"), f"{scope}.0.2")
            if stride == 2:
                h = g.op("Pad", [h, same_pad], f"{scope}.pad", mode="constant")
                h = g.conv(h, hidden, hidden, 3, f"{scope}.1.0", stride=2, groups=hidden, pads=[0, 0, 0, 0])
            else:
                h = g.conv(h, hidden, hidden, 3, f"{scope}.1.0", groups=hidden)
            h = g.relu6(h, f"{scope}.1.2")
            h = g.conv(h, hidden, cout, 1, f"{scope}.2", gain=1.0)
            x = g.op("Add", [x, h], f"features.{block}") if stride == 1 and cin == cout else h
            cin = cout
            block += 1
    last = _divisible(1280 * max(1.0, width))
    x = g.relu6(g.conv(x, cin, last, 1, f"features.{block}.0"), f"features.{block}.2")
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x], "pool")], "flatten", axis=1)
    out = g.gemm(x, last, num_classes, "classifier.1")
    return g.model("mobilenet_v2", [("input", (1, 3, resolution, resolution))], [(out, (1, num_classes))], 17)


# -------------------------------------------------------------------- EfficientNet-B0
#: (expansion, kernel, first stride, output channels, repeats) of EfficientNet-B0's MBConv stages.
EFFICIENTNET_B0_STAGES = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                          (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))


def efficientnet_b0(resolution: int = 224, width: float = 1.0, depth: float = 1.0, num_classes: int = 1000,
                    seed: int = 0) -> onnx.ModelProto:
    """EfficientNet-B0 (Tan & Le 2019), about 390 M MACs at 224x224.

    MBConv1/MBConv6 blocks with 3x3 and 5x5 depthwise convs, swish as ``Sigmoid`` + ``Mul``,
    squeeze-and-excitation with ratio 0.25 of the block's input channels
    (``GlobalAveragePool -> Conv 1x1 -> swish -> Conv 1x1 -> Sigmoid -> Mul`` with the
    block's map), residual adds where shapes match, head conv to 1280, pool, ``Gemm``.
    Symmetric padding (torchvision's export). ``width``/``depth`` scale channels/repeats.
    """
    g = _Graph(seed)
    cin = _divisible(32 * width)
    x = g.swish(g.conv("input", 3, cin, 3, "features.0.0", stride=2, gain=SWISH_GAIN), "features.0.2")
    block = 0
    for t, k, s, c, n in EFFICIENTNET_B0_STAGES:
        cout = _divisible(c * width)
        for i in range(_depth(n, depth)):
            stride = s if i == 0 else 1
            scope = f"blocks.{block}"
            hidden = cin * t
            h = x
            if t != 1:
                h = g.swish(g.conv(h, cin, hidden, 1, f"{scope}.expand", gain=SWISH_GAIN), f"{scope}.expand_act")
            h = g.conv(h, hidden, hidden, k, f"{scope}.dw", stride=stride, groups=hidden, gain=SWISH_GAIN)
            h = g.swish(h, f"{scope}.dw_act")
            squeezed = max(1, cin // 4)
            se = g.op("GlobalAveragePool", [h], f"{scope}.se")
            se = g.swish(g.conv(se, hidden, squeezed, 1, f"{scope}.se.fc1", gain=SWISH_GAIN), f"{scope}.se.act")
            # a positive bias opens the gates (sigmoid near 0.8), as in trained networks; centred
            # gates would halve the map's scale in every block
            se = g.op("Sigmoid", [g.conv(se, squeezed, hidden, 1, f"{scope}.se.fc2", gain=1.0, bias_mean=1.5)],
                      f"{scope}.se")
            h = g.op("Mul", [h, se], f"{scope}.se")
            residual = stride == 1 and cin == cout
            # a residual branch adds to the stream: a smaller gain (as a trained network's small
            # last batch-norm scale) keeps four repeats from growing it fourfold
            h = g.conv(h, hidden, cout, 1, f"{scope}.project", gain=0.5 if residual else 1.0)
            x = g.op("Add", [h, x], scope) if residual else h
            cin = cout
            block += 1
    head = _divisible(1280 * max(1.0, width))
    x = g.swish(g.conv(x, cin, head, 1, "head.conv", gain=SWISH_GAIN), "head.act")
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x], "pool")], "flatten", axis=1)
    out = g.gemm(x, head, num_classes, "classifier.1")
    return g.model("efficientnet_b0", [("input", (1, 3, resolution, resolution))], [(out, (1, num_classes))], 17)


# -------------------------------------------------------------------------- ViT-Tiny
#: Gains of the query, key and value projections: halved for q and k so the unscaled
#: scores q.k^T (std about sqrt(head_dim) * gain) stay well inside the checked range;
#: doubled for v because near-flat attention of random weights averages the values over
#: many tokens, shrinking them.
QKV_GAIN = np.array([0.5, 0.5, 2.0])

def _attention_core(g: _Graph, q: str, k: str, v: str, scope: str, head_dim: int, *,
                    bias: str | None = None, mask: tuple[str, int, int, int] | None = None) -> str:
    """``softmax(q k^T * scale + bias (+ mask)) v`` on (batch, heads, tokens, head_dim) tensors;
    ``mask`` is (name, windows, heads, tokens) of Swin's per-window mask."""
    scores = g.op("MatMul", [q, g.op("Transpose", [k], scope, perm=[0, 1, 3, 2])], scope)
    scores = g.op("Mul", [scores, g.const(f"{scope}.scale", head_dim ** -0.5)], scope)
    if bias is not None:
        scores = g.op("Add", [scores, bias], scope)
    if mask is not None:  # Swin: view the windows per image, add the mask, view back
        name, windows, heads, tokens = mask
        per_image = g.op("Reshape", [scores, g.i64(f"{scope}.mask_view", [-1, windows, heads, tokens, tokens])],
                         scope)
        per_image = g.op("Add", [per_image, name], scope)
        scores = g.op("Reshape", [per_image, g.i64(f"{scope}.unmask_view", [-1, heads, tokens, tokens])], scope)
    probs = g.op("Softmax", [scores], scope, axis=-1)
    return g.op("MatMul", [probs, v], scope)


def _vit_attention(g: _Graph, x: str, dim: int, heads: int, scope: str) -> str:
    """timm's ``Attention``: fused qkv, head split by a run-time computed shape, merge back."""
    head_dim = dim // heads
    qkv = g.linear(x, dim, 3 * dim, f"{scope}.qkv", gain=QKV_GAIN.repeat(dim))
    qkv = g.op("Reshape", [qkv, g.computed_shape(x, (0, 1), (3, heads, head_dim), f"{scope}.qkv_shape")], scope)
    qkv = g.op("Transpose", [qkv], scope, perm=[2, 0, 3, 1, 4])
    q, k, v = (g.op("Gather", [qkv, g.i64(f"{scope}.qkv_index", i)], scope, axis=0) for i in range(3))
    out = _attention_core(g, q, k, v, scope, head_dim)
    out = g.op("Transpose", [out], scope, perm=[0, 2, 1, 3])
    out = g.op("Reshape", [out, g.computed_shape(x, (0, 1), (dim,), f"{scope}.merge_shape")], scope)
    return g.linear(out, dim, dim, f"{scope}.proj")


def _mlp(g: _Graph, x: str, dim: int, hidden: int, scope: str) -> str:
    return g.linear(g.gelu(g.linear(x, dim, hidden, f"{scope}.fc1"), f"{scope}.act"), hidden, dim, f"{scope}.fc2")


def vit_tiny(resolution: int = 224, patch: int = 16, dim: int = 192, depth: int = 12, heads: int = 3,
             mlp_ratio: int = 4, num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """ViT-Tiny/16 (DeiT-Ti's sizes), about 1.26 G MACs at 224x224, as timm's model exports.

    Patch conv, ``Reshape`` + ``Transpose`` to tokens, the class token ``Expand``-ed to the
    run-time batch and ``Concat``-ed in front, position embedding ``Add``, ``depth``
    pre-norm blocks (``LayerNormalization``; qkv ``MatMul`` + ``Add``; heads split and
    merged by ``Reshape`` to a shape computed by ``Shape -> Gather -> Unsqueeze -> Concat``
    and ``Transpose``; Q K^T, scale ``Mul``, ``Softmax``, ·V; projection; residual; MLP
    with erf-GELU; residual), final norm, ``Gather`` of the class token, head ``Gemm``.
    """
    g = _Graph(seed)
    grid = resolution // patch
    tokens = grid * grid
    x = g.conv("input", 3, dim, patch, "patch_embed.proj", stride=patch, pads=[0, 0, 0, 0], gain=1.0, bias_std=0.02)
    x = g.op("Reshape", [x, g.computed_shape(x, (0, 1), (-1,), "patch_embed.flatten")], "patch_embed")
    x = g.op("Transpose", [x], "patch_embed", perm=[0, 2, 1])
    cls = g.const("cls_token", g.rng.normal(0.0, 0.02, (1, 1, dim)))
    cls = g.op("Expand", [cls, g.computed_shape(x, (0,), (1, dim), "cls_shape")], "cls")
    x = g.op("Concat", [cls, x], "cls", axis=1)
    x = g.op("Add", [x, g.const("pos_embed", g.rng.normal(0.0, 0.02, (1, tokens + 1, dim)))], "pos")
    for i in range(depth):
        scope = f"blocks.{i}"
        x = g.op("Add", [x, _vit_attention(g, g.layer_norm(x, dim, f"{scope}.norm1"), dim, heads, f"{scope}.attn")],
                 scope)
        x = g.op("Add", [x, _mlp(g, g.layer_norm(x, dim, f"{scope}.norm2"), dim, dim * mlp_ratio, f"{scope}.mlp")],
                 scope)
    x = g.layer_norm(x, dim, "norm")
    x = g.op("Gather", [x, g.i64("cls_index", 0)], "pool", axis=1)
    out = g.gemm(x, dim, num_classes, "head")
    return g.model("vit_tiny", [("input", (1, 3, resolution, resolution))], [(out, (1, num_classes))], 17)


# ---------------------------------------------------------------------- Swin-T stage
def relative_position_index(window: int) -> np.ndarray:
    """Swin's (window^2, window^2) index into the (2*window-1)^2 bias table: the pair's
    row offset and column offset, each shifted to be non-negative, in row-major order."""
    rows, cols = np.meshgrid(np.arange(window), np.arange(window), indexing="ij")
    coords = np.stack([rows.ravel(), cols.ravel()])  # (2, window^2)
    rel = coords[:, :, None] - coords[:, None, :] + (window - 1)
    return (rel[0] * (2 * window - 1) + rel[1]).astype(np.int64)


def shifted_window_mask(side: int, window: int, shift: int) -> np.ndarray:
    """(windows, window^2, window^2) additive mask of shifted-window attention: 0 where two
    tokens of a window came from the same region of the unshifted map, -100 elsewhere."""
    region = np.zeros((side, side), np.int64)
    bands = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    for r, rows in enumerate(bands):
        for c, cols in enumerate(bands):
            region[rows, cols] = 3 * r + c
    per_window = region.reshape(side // window, window, side // window, window).transpose(0, 2, 1, 3)
    per_window = per_window.reshape(-1, window * window)
    return np.where(per_window[:, :, None] == per_window[:, None, :], 0.0, -100.0).astype(np.float32)


def _swin_block(g: _Graph, x: str, side: int, dim: int, heads: int, window: int, shift: int, mlp_ratio: int,
                scope: str) -> str:
    head_dim = dim // heads
    windows = (side // window) ** 2
    area = window * window
    h = g.layer_norm(x, dim, f"{scope}.norm1", eps=1e-5)
    h = g.op("Reshape", [h, g.i64(f"{scope}.grid", [-1, side, side, dim])], scope)
    if shift:
        h = g.roll(g.roll(h, -shift, 1, side, f"{scope}.roll"), -shift, 2, side, f"{scope}.roll")
    # window partition: (B, H/w, w, W/w, w, C) -> (B, H/w, W/w, w, w, C) -> (B*windows, w*w, C)
    h = g.op("Reshape", [h, g.i64(f"{scope}.partition", [-1, side // window, window, side // window, window, dim])],
             scope)
    h = g.op("Transpose", [h], scope, perm=[0, 1, 3, 2, 4, 5])
    h = g.op("Reshape", [h, g.i64(f"{scope}.windows", [-1, area, dim])], scope)
    attn = f"{scope}.attn"
    qkv = g.linear(h, dim, 3 * dim, f"{attn}.qkv", gain=QKV_GAIN.repeat(dim))
    qkv = g.op("Reshape", [qkv, g.i64(f"{attn}.qkv_shape", [-1, area, 3, heads, head_dim])], attn)
    qkv = g.op("Transpose", [qkv], attn, perm=[2, 0, 3, 1, 4])
    q, k, v = (g.op("Gather", [qkv, g.i64(f"{attn}.qkv_index", i)], attn, axis=0) for i in range(3))
    table = g.const(f"{attn}.relative_position_bias_table", g.rng.normal(0.0, 0.02, ((2 * window - 1) ** 2, heads)))
    bias = g.op("Gather", [table, g.i64(f"{attn}.relative_position_index", relative_position_index(window).ravel())],
                attn, axis=0)
    bias = g.op("Reshape", [bias, g.i64(f"{attn}.bias_shape", [area, area, heads])], attn)
    bias = g.op("Unsqueeze", [g.op("Transpose", [bias], attn, perm=[2, 0, 1]), g.i64(f"{attn}.bias_axes", [0])], attn)
    mask = None
    if shift:
        mask_value = g.const(f"{attn}.attn_mask", shifted_window_mask(side, window, shift)[:, None])
        mask = (mask_value, windows, heads, area)
    h = _attention_core(g, q, k, v, attn, head_dim, bias=bias, mask=mask)
    h = g.op("Reshape", [g.op("Transpose", [h], attn, perm=[0, 2, 1, 3]), g.i64(f"{attn}.merge", [-1, area, dim])],
             attn)
    h = g.linear(h, dim, dim, f"{attn}.proj")
    # window reverse: (B*windows, w*w, C) -> (B, H/w, W/w, w, w, C) -> (B, H, W, C)
    h = g.op("Reshape", [h, g.i64(f"{scope}.unwindows", [-1, side // window, side // window, window, window, dim])],
             scope)
    h = g.op("Transpose", [h], scope, perm=[0, 1, 3, 2, 4, 5])
    h = g.op("Reshape", [h, g.i64(f"{scope}.ungrid", [-1, side, side, dim])], scope)
    if shift:
        h = g.roll(g.roll(h, shift, 1, side, f"{scope}.unroll"), shift, 2, side, f"{scope}.unroll")
    x = g.op("Add", [x, g.op("Reshape", [h, g.i64(f"{scope}.tokens", [-1, side * side, dim])], scope)], scope)
    mlp = _mlp(g, g.layer_norm(x, dim, f"{scope}.norm2", eps=1e-5), dim, dim * mlp_ratio, f"{scope}.mlp")
    return g.op("Add", [x, mlp], scope)


def swin_t_stage(side: int = 56, dim: int = 96, heads: int = 3, window: int = 7, depth: int = 2, mlp_ratio: int = 4,
                 seed: int = 0) -> onnx.ModelProto:
    """Stage 1 of Swin-T (Liu et al. 2021) on (1, side*side, dim) tokens, as timm's model exports.

    ``depth`` blocks alternating regular and shifted windows (shift ``window // 2``): LN,
    cyclic shift as ``torch.roll`` exports it (``Slice`` + ``Concat`` per axis), window
    partition and reverse by ``Reshape``/``Transpose``, windowed attention with relative
    position bias (``Gather`` from the table with a constant index, ``Add`` to the
    scores) and, in shifted blocks, the -100 attention mask ``Add``; MLP with erf-GELU.
    """
    if side % window:
        raise ValueError(f"swin_t_stage: side {side} must be a multiple of the window {window}")
    g = _Graph(seed)
    x = "tokens"
    for i in range(depth):
        x = _swin_block(g, x, side, dim, heads, window, window // 2 if i % 2 else 0, mlp_ratio, f"blocks.{i}")
    return g.model("swin_t_stage", [("tokens", (1, side * side, dim))], [(x, (1, side * side, dim))], 17)


# ------------------------------------------------------------------------ BERT layer
def bert_layer(seq: int = 128, hidden: int = 768, heads: int = 12, ff: int = 3072, seed: int = 0) -> onnx.ModelProto:
    """One BERT-base encoder layer (``BertLayer``) as torch exported it at opset 14.

    Inputs ``hidden_states`` (1, seq, hidden) and the additive ``attention_mask``
    (1, 1, 1, seq: 0 to attend, -10000 to mask) that transformers passes to its layers.
    Separate Q, K, V ``MatMul`` + ``Add``; heads split by a ``Reshape`` to a computed
    shape; scores ``Div`` by sqrt(head_dim), mask ``Add``, ``Softmax``; output dense,
    residual and post-norm with LayerNorm decomposed (ReduceMean, Sub, Pow, ReduceMean,
    Add, Sqrt, Div, Mul, Add); FF with erf-GELU; residual and LayerNorm.
    """
    g = _Graph(seed)
    head_dim = hidden // heads
    x, mask = "hidden_states", "attention_mask"

    def split(t: str, name: str) -> str:
        shape = g.computed_shape(t, (0, 1), (heads, head_dim), f"attention.self.{name}_shape")
        return g.op("Reshape", [t, shape], "attention.self")

    q, k, v = (split(g.linear(x, hidden, hidden, f"attention.self.{n}", gain=gain), n)
               for n, gain in zip(("query", "key", "value"), QKV_GAIN, strict=True))
    q = g.op("Transpose", [q], "attention.self", perm=[0, 2, 1, 3])
    k = g.op("Transpose", [k], "attention.self", perm=[0, 2, 3, 1])
    v = g.op("Transpose", [v], "attention.self", perm=[0, 2, 1, 3])
    scores = g.op("MatMul", [q, k], "attention.self")
    scores = g.op("Div", [scores, g.const("attention.self.sqrt_head_dim", math.sqrt(head_dim))], "attention.self")
    scores = g.op("Add", [scores, mask], "attention.self")
    ctx = g.op("MatMul", [g.op("Softmax", [scores], "attention.self", axis=-1), v], "attention.self")
    ctx = g.op("Transpose", [ctx], "attention.self", perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, g.computed_shape(ctx, (0, 1), (hidden,), "attention.self.merge_shape")],
               "attention.self")
    attn = g.linear(ctx, hidden, hidden, "attention.output.dense")
    x = g.layer_norm_decomposed(g.op("Add", [attn, x], "attention.output"), hidden, "attention.output.LayerNorm")
    inter = g.gelu(g.linear(x, hidden, ff, "intermediate.dense"), "intermediate.act")
    out = g.linear(inter, ff, hidden, "output.dense")
    out = g.layer_norm_decomposed(g.op("Add", [out, x], "output"), hidden, "output.LayerNorm")
    inputs = [("hidden_states", (1, seq, hidden)), (mask, (1, 1, 1, seq))]
    return g.model("bert_layer", inputs, [(out, (1, seq, hidden))], 14)
