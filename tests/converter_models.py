"""int8 models in the form the TFLite converter + tf2onnx (``--tflite``, opset 17) write, built with
``onnx.helper`` (no tensorflow in the tests).

The form (from Keras ResNet-50 / MobileNetV2 quantized by the TFLite converter and exported by tf2onnx):

* the graph input is int8 NHWC ``[unk__12, H, W, C]`` (symbolic batch) and goes ``Transpose(0,3,1,2)``
  -> ``DequantizeLinear`` (per-tensor scale, int8 zero point) -> ``Conv``; ResNet pads it first:
  ``DQ(NHWC) -> Pad([0,3,3,0,0,3,3,0] int64 initializer) -> Q (same scale / zero point) -> Transpose -> DQ``;
* weights: int8 initializer -> ``DequantizeLinear(axis=0)``, per-channel float scales, int8 zero points 0;
  the bias: an int32 initializer through its own ``DequantizeLinear(axis=0)``, scale ``s_x * s_w`` per
  channel, int32 zero points 0, as the Conv's third input;
* ``Conv -> Relu -> Q``, ReLU6 as ``Conv -> Clip(0.0, 6.0 float initializers) -> Q``, or ``Conv -> Q``;
  every Q is read through one DQ of the same scale / zero point (shared by all its readers);
* depthwise convs (group = C), strided convs with TF's "SAME" padding as ``pads [0,0,1,1]``;
* residual ``Add(DQ(a), DQ(b)) [-> Relu] -> Q``; ResNet's stem pool ``DQ -> Pad(0,0,1,1,..) -> Q -> DQ ->
  MaxPool(3x3 s2) -> Q`` (same scale / zero point, -128 after the Relu);
* head ``DQ -> GlobalAveragePool -> Q -> Squeeze(axes [2,3]) -> DQ -> MatMul(DQ(W int8, axis=1)) -> Q ->
  DQ -> Softmax -> Q(1/256, -128)``, an int8 ``[N, classes]`` output; or a conv's int8 tensor as the
  output, NHWC again through ``Transpose(0,2,3,1)``.

Quantization is TFLite's, from the float twin's ranges on seeded calibration inputs: weights symmetric
per output channel (zero point 0), activations asymmetric int8 from their min / max (widened to hold 0,
the zero point nudged as TFLite does), bias ``round(b / (s_x * s_w))``; MaxPool, Pad and Transpose keep
their input's quantization, Softmax's output is 1/256 with zero point -128.

A network is described once, as calls on a :class:`ConverterNet`; :func:`converter_model` runs the
description twice: as the float network (every quantized tensor an output) under onnxruntime for the
ranges, then as the QDQ model with those ranges. Weights come from the seed in call order, so both
passes draw the same ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# TFLite's quantization rules, shared with the corpus's TFLite form (tvm_npu.testing.tflite_form)
from tvm_npu.testing.tflite_form import INT8_MIN, Quant, symmetric_per_channel, tflite_activation_quant

OPSET = 17
INPUT = "serving_default_keras_tensor:0"  # tf2onnx's name for a Keras model's input
#: tf2onnx's name for a symbolic batch dimension.
SYMBOLIC_BATCH = "unk__12"
#: The calibration images: TFLite's representative dataset, Keras-preprocessed values in [-1, 1]; the
#: input's quantization comes from that nominal range (2/255, zero point -1, as in the real models).
CALIBRATION_SAMPLES = 8
INPUT_RANGE = (-1.0, 1.0)
INT16_MAX = 32767
#: The TFLite 16x8 form (int16 activations, int8 weights): DequantizeLinear / QuantizeLinear of int16 need
#: opset 21, which tf2onnx writes for them.
OPSET_16X8 = 21


def tflite_int16_quant(lo: float, hi: float) -> Quant:
    """TFLite's 16x8 activation parameters for the range [lo, hi]: symmetric, zero point 0."""
    bound = max(abs(lo), abs(hi))
    return Quant(float(np.float32(bound / INT16_MAX)) if bound > 0 else 1.0, 0)


@dataclass(frozen=True)
class Act:
    """An activation: ``name`` is the float tensor in the twin, the int8 tensor in the QDQ model (with
    its ``quant``); ``shape`` as the graph holds it."""

    name: str
    shape: tuple[int | str, ...]
    layout: str  # "NHWC", "NCHW" or "NC"
    quant: Quant | None = None


class ConverterNet:
    """Records a network in one of two forms: ``ranges is None`` the float twin (every tensor TFLite
    quantizes is a graph output, for calibration), otherwise the converter's QDQ form using
    ``ranges`` (float tensor name -> (min, max)).

    The float values both forms compute (conv, activation, add, pool ... outputs) get the same names in
    both (:meth:`_value`), which is how the QDQ pass finds its ranges; weights are drawn in call order."""

    def __init__(self, seed: int, ranges: Mapping[str, tuple[float, float]] | None = None,
                 batch: int | str = 1, bits: int = 8) -> None:
        self.rng = np.random.default_rng(seed)
        self.ranges, self.batch = ranges, batch
        # 16: TFLite's 16x8 form, int16 activations (symmetric) and int8 weights
        self.act_type, self.act_quant = ((TensorProto.INT16, tflite_int16_quant) if bits == 16
                                         else (TensorProto.INT8, tflite_activation_quant))
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.observed: list[tuple[str, tuple[int | str, ...]]] = []  # twin: what calibration measures
        self._dequantized: dict[str, str] = {}  # QDQ: int8 tensor -> the one DQ its readers share
        self._values = self._others = 0

    @property
    def qdq(self) -> bool:
        return self.ranges is not None

    # ------------------------------------------------------------------ plumbing
    def _value(self, what: str) -> str:
        """A float value both forms compute: the same name in both."""
        self._values += 1
        return f"{what}_{self._values}"

    def _other(self, what: str) -> str:
        self._others += 1
        return f"{what}__{self._others}"

    def _const(self, what: str, value: np.ndarray) -> str:
        name = self._other(what)
        self.inits[name] = value
        return name

    def _node(self, op: str, inputs: Sequence[str], out: str, **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, list(inputs), [out], **attrs))
        return out

    def _qparams(self, quant: Quant) -> list[str]:
        return [self._const("scale", np.array(quant.scale, np.float32)),
                self._const("zero_point", np.array(quant.zero_point, helper.tensor_dtype_to_np_dtype(self.act_type)))]

    def _read(self, x: Act) -> str:
        """The float tensor readers of ``x`` use: in the QDQ model the (one, shared) DQ of its int8 tensor."""
        if not self.qdq:
            return x.name
        if x.name not in self._dequantized:
            self._dequantized[x.name] = self._node("DequantizeLinear", [x.name, *self._qparams(x.quant)],
                                                   self._other("dequant"))
        return self._dequantized[x.name]

    def _quantize(self, value: str, shape: tuple[int | str, ...], layout: str, *, same_as: Act | None = None,
                  quant: Quant | None = None) -> Act:
        """The float ``value`` quantized as ``same_as`` is (TFLite's Pad and MaxPool keep their input's
        quantization), with ``quant``, or else from its calibrated range (which the twin records)."""
        if not self.qdq:
            if same_as is None and quant is None:
                self.observed.append((value, shape))
            return Act(value, shape, layout)
        if same_as is not None:
            quant = same_as.quant
        elif quant is None:
            quant = self.act_quant(*self.ranges[value])
        return Act(self._node("QuantizeLinear", [value, *self._qparams(quant)], self._other("quant")),
                   shape, layout, quant)

    def _weight_dq(self, w: np.ndarray, axis: int) -> tuple[str, np.ndarray]:
        """(the DQ output, the per-channel scales): symmetric per channel along ``axis``, zero points 0."""
        wq, scale = symmetric_per_channel(w, axis)
        inputs = [self._const("weight", wq), self._const("scale", scale),
                  self._const("zero_point", np.zeros(scale.shape, np.int8))]
        return self._node("DequantizeLinear", inputs, self._other("weight_dequant"), axis=axis), scale

    def _transpose(self, x: Act, perm: Sequence[int], layout: str) -> Act:
        """A layout change; in the QDQ model of the int8 tensor, between its Q and DQ (where tf2onnx puts it)."""
        shape = tuple(x.shape[p] for p in perm)
        return Act(self._node("Transpose", [x.name], self._other("transpose"), perm=list(perm)), shape, layout, x.quant)

    # ------------------------------------------------------------------ layers
    def input(self, h: int, w: int, c: int) -> Act:
        """The NHWC image input: float in the twin, int8 (already quantized) in the QDQ model."""
        shape = (self.batch, h, w, c)
        if not self.qdq:
            self.inputs.append(helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, list(shape)))
            return Act(INPUT, shape, "NHWC")
        self.inputs.append(helper.make_tensor_value_info(INPUT, self.act_type, list(shape)))
        return Act(INPUT, shape, "NHWC", self.act_quant(*self.ranges[INPUT]))

    def to_nchw(self, x: Act) -> Act:
        """tf2onnx's layout change into the first conv: ``Transpose(0,3,1,2)``."""
        return self._transpose(x, (0, 3, 1, 2), "NCHW")

    def to_nhwc(self, x: Act) -> Act:
        """The NHWC graph output: ``Transpose(0,2,3,1)``."""
        return self._transpose(x, (0, 2, 3, 1), "NHWC")

    def pad(self, x: Act, pads: Sequence[int]) -> Act:
        """``DQ -> Pad(zeros; pads an int64 initializer in the tensor's own layout) -> Q`` with the input's
        quantization (TFLite's Pad keeps it)."""
        pads = [int(p) for p in pads]
        rank = len(x.shape)
        shape = tuple(d if isinstance(d, str) else d + pads[i] + pads[i + rank] for i, d in enumerate(x.shape))
        out = self._node("Pad", [self._read(x), self._const("pads", np.array(pads, np.int64))], self._value("pad"))
        return self._quantize(out, shape, x.layout, same_as=x)

    def conv(self, x: Act, out_c: int, k: int = 1, stride: int = 1, pads: Sequence[int] | None = None,
             group: int = 1, act: str | None = "relu") -> Act:
        """``Conv(DQ(x), DQ(W), DQ(B)) [-> Relu | Clip(0, 6)] -> Q``; weights He-scaled with a per-channel
        spread (batch-norm folded in); ``pads`` default TF "SAME": ``k // 2`` each side at stride 1,
        the odd one at the bottom / right at stride 2 (``[0, 0, 1, 1]`` for a 3x3)."""
        if act not in ("relu", "relu6", None):
            raise ValueError(f"activation {act!r}: expected 'relu', 'relu6' or None")
        n, c, h, w = x.shape
        if pads is None:  # TF "SAME" on a size divisible by the stride: k - stride in all, the extra one after
            total = max(k - stride, 0)
            pads = [total // 2] * 2 + [total - total // 2] * 2
        fan_in = c // group * k * k
        weight = (self.rng.standard_normal((out_c, c // group, k, k)) * np.sqrt(2.0 / fan_in)
                  * self.rng.uniform(0.5, 1.5, (out_c, 1, 1, 1))).astype(np.float32)
        bias = (self.rng.standard_normal(out_c) * 0.2).astype(np.float32)
        if not self.qdq:
            wd, bd = self._const("weight", weight), self._const("bias", bias)
        else:
            wd, w_scale = self._weight_dq(weight, axis=0)
            b_scale = (np.float32(x.quant.scale) * w_scale).astype(np.float32)
            inputs = [self._const("bias", np.round(bias / b_scale).astype(np.int32)), self._const("scale", b_scale),
                      self._const("zero_point", np.zeros(out_c, np.int32))]
            bd = self._node("DequantizeLinear", inputs, self._other("bias_dequant"), axis=0)
        y = self._node("Conv", [self._read(x), wd, bd], self._value("conv"), strides=[stride, stride],
                       dilations=[1, 1], kernel_shape=[k, k], pads=list(pads), group=group)
        if act == "relu":
            y = self._node("Relu", [y], self._value("relu"))
        elif act == "relu6":
            bounds = [self._const("min", np.array(0.0, np.float32)), self._const("max", np.array(6.0, np.float32))]
            y = self._node("Clip", [y, *bounds], self._value("relu6"))
        oh = (h + pads[0] + pads[2] - k) // stride + 1
        ow = (w + pads[1] + pads[3] - k) // stride + 1
        return self._quantize(y, (n, out_c, oh, ow), "NCHW")

    def add(self, a: Act, b: Act, relu: bool = False) -> Act:
        """A residual ``Add(DQ(a), DQ(b)) [-> Relu] -> Q``."""
        y = self._node("Add", [self._read(a), self._read(b)], self._value("add"))
        if relu:
            y = self._node("Relu", [y], self._value("relu"))
        return self._quantize(y, a.shape, a.layout)

    def max_pool(self, x: Act, k: int = 3, stride: int = 2) -> Act:
        """``MaxPool`` (no padding of its own: a :meth:`pad` before it) ``-> Q`` with the input's quantization."""
        n, c, h, w = x.shape
        shape = (n, c, (h - k) // stride + 1, (w - k) // stride + 1)
        y = self._node("MaxPool", [self._read(x)], self._value("maxpool"), kernel_shape=[k, k],
                       strides=[stride, stride])
        return self._quantize(y, shape, "NCHW", same_as=x)

    def classifier(self, x: Act, classes: int) -> Act:
        """``GlobalAveragePool -> Q -> Squeeze([2,3]) -> DQ -> MatMul(DQ(W, axis=1)) -> Q -> DQ -> Softmax ->
        Q(1/256, -128)``: the int8 probabilities."""
        n, c = x.shape[:2]
        weight = (self.rng.standard_normal((c, classes)) / np.sqrt(c)).astype(np.float32)
        pooled = self._quantize(self._node("GlobalAveragePool", [self._read(x)], self._value("mean")),
                                (n, c, 1, 1), "NCHW")
        axes = self._const("axes", np.array([2, 3], np.int64))
        flat = Act(self._node("Squeeze", [pooled.name, axes], self._other("squeeze")), (n, c), "NC", pooled.quant)
        wd = self._weight_dq(weight, axis=1)[0] if self.qdq else self._const("weight", weight)
        logits = self._quantize(self._node("MatMul", [self._read(flat), wd], self._value("matmul")),
                                (n, classes), "NC")
        probs = self._node("Softmax", [self._read(logits)], self._value("softmax"), axis=-1)
        unit = Quant(1.0 / 32768.0, 0) if self.act_type == TensorProto.INT16 else Quant(1.0 / 256.0, INT8_MIN)
        return self._quantize(probs, (n, classes), "NC", quant=unit)

    def output(self, y: Act) -> None:
        """The graph's output: the int8 tensor in the QDQ model; the float value (then every observed
        tensor) in the twin."""
        if self.qdq:
            self.outputs.append(helper.make_tensor_value_info(y.name, self.act_type, list(y.shape)))
            return
        self.outputs.append(helper.make_tensor_value_info(y.name, TensorProto.FLOAT, list(y.shape)))
        self.outputs += [helper.make_tensor_value_info(t, TensorProto.FLOAT, list(shape))
                         for t, shape in self.observed if t != y.name]

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "converter_int8", self.inputs, self.outputs,
                                  [numpy_helper.from_array(v, k) for k, v in self.inits.items()])
        sixteen = self.act_type == TensorProto.INT16
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET_16X8 if sixteen else OPSET)],
                                  producer_name="tf2onnx")
        model.ir_version = 10 if sixteen else 8  # what tf2onnx writes for opset 21 / 17
        onnx.checker.check_model(model)
        return model


Network = Callable[[ConverterNet], None]


def calibration_ranges(network: Network, seed: int, samples: int = CALIBRATION_SAMPLES
                       ) -> dict[str, tuple[float, float]]:
    """Every quantized tensor's (min, max) over ``samples`` seeded images in [-1, 1], from the float
    twin run by onnxruntime."""
    import onnxruntime as ort

    net = ConverterNet(seed)
    network(net)
    model = net.model()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    images = np.random.default_rng(seed + 1).uniform(*INPUT_RANGE, (samples, *shape[1:])).astype(np.float32)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = {name: [] for name in names}
    for image in images:
        for name, v in zip(names, session.run(None, {INPUT: image[None]}), strict=True):
            values[name].append(v)
    ranges = {name: (float(np.min(v)), float(np.max(v))) for name, v in values.items()}
    ranges[INPUT] = INPUT_RANGE
    return ranges


def converter_model(network: Network, seed: int = 0, batch: int | str = 1, bits: int = 8) -> onnx.ModelProto:
    """The QDQ model of ``network`` as the TFLite converter + tf2onnx write it; ``batch`` an int, or
    :data:`SYMBOLIC_BATCH` for their symbolic batch dimension; ``bits=16`` the 16x8 form (int16
    activations with zero point 0, int8 weights, int32 biases; the softmax at 1/32768)."""
    ranges = calibration_ranges(network, seed)
    net = ConverterNet(seed, ranges, batch, bits)
    network(net)
    return net.model()


# ---------------------------------------------------------------------------------- networks
def mobilenet_v2_like(size: int = 32, head: str = "softmax", classes: int = 10) -> Network:
    """MobileNetV2's converter form in small: the NHWC input's Transpose into a stride-2 3x3 conv with
    ``pads [0,0,1,1]``, inverted residual blocks (1x1 expand ReLU6, depthwise 3x3 ReLU6 at stride 1 and
    2, 1x1 project without activation, a residual Add without Relu), a last 1x1 ReLU6 conv, then the
    softmax classifier (``head="softmax"``) or the last conv's int8 tensor as NHWC (``head="nhwc"``)."""
    if head not in ("softmax", "nhwc"):
        raise ValueError(f"head {head!r}: expected 'softmax' or 'nhwc'")

    def network(net: ConverterNet) -> None:
        x = net.to_nchw(net.input(size, size, 3))
        x = net.conv(x, 16, 3, stride=2, act="relu6")
        x = net.conv(x, 16, 3, group=16, act="relu6")
        x = net.conv(x, 8, 1, act=None)
        x = net.conv(x, 32, 1, act="relu6")
        x = net.conv(x, 32, 3, stride=2, group=32, act="relu6")
        b = net.conv(x, 16, 1, act=None)
        x = net.conv(b, 48, 1, act="relu6")
        x = net.conv(x, 48, 3, group=48, act="relu6")
        x = net.add(b, net.conv(x, 16, 1, act=None))
        x = net.conv(x, 32, 1, act="relu6")
        net.output(net.classifier(x, classes) if head == "softmax" else net.to_nhwc(x))

    return network


def resnet50_like(size: int = 32, head: str = "softmax", classes: int = 10) -> Network:
    """ResNet-50's converter form in small: ``DQ -> Pad(NHWC, 3) -> Q -> Transpose -> DQ -> Conv 7x7 s2 ->
    Relu``, the stem's ``Pad(NCHW, 1) -> MaxPool 3x3 s2`` on the Relu's tensor (zero point -128), a
    bottleneck block with a projection shortcut and an identity block (``Add -> Relu -> Q``), then the
    classifier or the last block's tensor as NHWC."""
    if head not in ("softmax", "nhwc"):
        raise ValueError(f"head {head!r}: expected 'softmax' or 'nhwc'")

    def network(net: ConverterNet) -> None:
        x = net.pad(net.input(size, size, 3), [0, 3, 3, 0, 0, 3, 3, 0])
        x = net.conv(net.to_nchw(x), 16, 7, stride=2, pads=[0, 0, 0, 0])
        x = net.max_pool(net.pad(x, [0, 0, 1, 1, 0, 0, 1, 1]))
        for project in (True, False):
            h = net.conv(x, 8, 1)
            h = net.conv(h, 8, 3)
            h = net.conv(h, 32, 1, act=None)
            x = net.add(net.conv(x, 32, 1, act=None) if project else x, h, relu=True)
        net.output(net.classifier(x, classes) if head == "softmax" else net.to_nhwc(x))

    return network


def single_conv(size: int, channels: int, out_c: int, k: int, stride: int, pads: Sequence[int],
                depthwise: bool, act: str | None) -> Network:
    """One converter-form conv between the NHWC input's Transpose and the NHWC output's: the unit the
    larger networks repeat, for property tests over shapes, strides and padding."""

    def network(net: ConverterNet) -> None:
        x = net.to_nchw(net.input(size, size, channels))
        y = net.conv(x, channels if depthwise else out_c, k, stride=stride, pads=pads,
                     group=channels if depthwise else 1, act=act)
        net.output(net.to_nhwc(y))

    return network
