"""Random valid ONNX graphs of the operators the NPU supports, for differential fuzzing (NNSmith style).

Two layers:

* :class:`GraphBuilder` is a small, deterministic ONNX graph builder (``onnx.helper`` underneath): one
  method per operator, each taking every attribute explicitly, tracking the static shape of every
  tensor it creates and drawing weights from its own seeded generator (scaled by fan-in so that
  activations stay O(1)). Every call is also recorded as a line of Python, so a generated graph
  prints as the program that rebuilds it exactly (the regression tests are such programs).
* :func:`graphs` is a hypothesis strategy that drives the builder: 1-8 ONNX nodes, fp32 (or another
  precision, below), static shapes, batch 1-2, opset 13-17. It picks an operator applicable to the
  tensors built so far and a source tensor (usually the latest, sometimes an earlier one: fan-out),
  draws its attributes so that the graph stays valid, and returns a :class:`FuzzGraph`. Every graph
  is checked with ``onnx.checker.check_model(full_check=True)`` and strict shape inference must agree
  with the shapes the builder tracked. Shrinking goes towards fewer nodes, chains instead of fan-out,
  smaller tensors and the default attributes.

Precisions (:data:`PRECISIONS`, ``graphs(precisions=...)``): the fp32 graph as built, or that graph
converted the way users convert theirs, as one last recorded call (``b.precision(...)``):
``int8`` / ``uint8`` quantize it with ``tvm_npu.tools.quantize.quantize_model`` (onnxruntime's
``quantize_static``, QDQ: symmetric int8 weights per output channel or per tensor, asymmetric 8-bit
activations calibrated on seeded random samples; the model keeps its float inputs and dequantized
outputs) and ``fp16`` converts it with ``onnxconverter_common.float16.convert_float_to_float16``
(fp16 weights, inputs and outputs). ``int16`` / ``uint16`` quantize it the same way with each activation
tensor (graph input and every node's output) drawn 8 or 16 bits (int8/int16 or uint8/uint16; A16W8 as
onnxruntime's ``TensorQuantOverrides`` make it, opset 21), so the 8 <-> 16-bit boundaries fall between any
two operators and all-8 / all-16 graphs are drawn too. The precision and its parameters are drawn after
the graph, so a graph shrinks the same in every precision.

Inputs: (N, C, H, W) with N 1-2, C 1-16 and H, W 1-16 (H = W half the time, for the square
MatMul), one draw in eight up to C 64 / H, W 40 so that the planner has to tile; one graph in five
starts from a 2-D (N, F) input (an MLP).

Operators: Conv (kernel 1-7 per axis, strides 1-3, dilations 1-2, explicit and asymmetric pads up to
kernel-1 per side, dense / grouped / depthwise, 1-24 (rarely 96) outputs, with or without bias),
BatchNormalization after a conv, Relu / Clip (bounds as inputs, either may be omitted; ReLU6 as
exporters write it) / Sigmoid / Tanh, Add / Sub / Mul / Max / Min of two tensors of
one shape (residual blocks with fan-out, and repeated operands such as ``Add(x, x)``) or with a
per-channel / scalar / full constant (either operand order), MaxPool / AveragePool (kernel, strides,
pads, count_include_pad, occasionally ceil_mode), GlobalAveragePool and its ReduceMean spelling,
Flatten, Gemm (transB 0/1, alpha/beta, optional bias) and MatMul with constant weights (+ bias Add),
and MatMul of a tensor with itself on square matrices (a 4-D tensor reshaped to 3-D and back).
The graph's outputs are the tensors nothing reads and, one graph in four, an intermediate that
other nodes read as well (fusion must still write it out).

Targets (:func:`targets`): ``npu`` plus any combination of ``-fusion=0|2|3``, ``-pipeline-stages=1|3``,
``-layout-pref=NHWC|NCHW`` and ``-max-sram-bytes=65536|16384|8192``; ``targets(extended=True)`` also
draws the other documented options of :data:`EXTENDED_TARGET_OPTIONS`.
"""

from __future__ import annotations

import math
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh

OPSETS = (13, 14, 15, 16, 17)
IR_VERSION = 8  # opset <= 17 needs no newer IR; onnxruntime accepts it
UNARY = ("Relu", "Clip", "Sigmoid", "Tanh")
BINARY = ("Add", "Sub", "Mul", "Max", "Min")
#: the rough magnitude above which the builder's strategy stops squaring tensors (fp32 stays far from inf)
MAX_SCALE = 30.0
#: the largest Flatten a dense layer follows (its weight stays below a few MB)
MAX_FEATURES = 4096
#: the model precisions :func:`graphs` can draw (see the module docstring)
PRECISIONS = ("fp32", "int8", "uint8", "fp16", "int16", "uint16")
QUANTIZED = ("int8", "uint8", "int16", "uint16")
#: the mixed 8/16-bit precisions and the 8-bit activation type beside their 16-bit tensors
WIDE = {"int16": "int8", "uint16": "uint8"}
#: seeded standard-normal samples the quantizer calibrates activation ranges on (as ``tvm-npu quantize
#: --random 8`` does; the cases then run on other seeded inputs, which may leave the calibrated range)
CALIBRATION_SAMPLES = 8

#: target options the fuzzer draws, each independently (the first choice, no option, is what shrinking
#: aims at); every documented combination of the brief plus a tight SRAM budget that forces fallbacks
TARGET_OPTIONS: dict[str, tuple[str | None, ...]] = {
    "fusion": (None, "0", "2", "3"),
    "pipeline-stages": (None, "1", "3"),
    "layout-pref": (None, "NHWC", "NCHW"),
    "max-sram-bytes": (None, "65536", "16384", "8192"),
}

#: more documented target options (``benchmarks/fuzz.py --extended-targets``): other machines (array
#: shape, vector width, burst, alignment, the fewest semaphores the codegen can use) and the tile
#: search's bounds; every combination is a valid target
EXTENDED_TARGET_OPTIONS: dict[str, tuple[str | None, ...]] = {
    "max-sram-bytes": (None, "65536", "16384", "8192", "4096"),
    "tile-min": (None, "2"),
    "tile-max": (None, "2", "8", "32"),
    "mac-rows": (None, "4", "32"),
    "mac-cols": (None, "4", "32"),
    "vector-lanes": (None, "8", "128"),
    "sram-align-bytes": (None, "256"),
    "dram-burst-bytes": (None, "16", "256"),
    "num-semaphores": (None, "12", "16"),
    "dma-latency": (None, "0"),
}


@dataclass(frozen=True)
class T:
    """A tensor of the graph under construction: its name, static shape and rough RMS magnitude."""

    name: str
    shape: tuple[int, ...]
    scale: float = 1.0

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return self.name


def conv_out(size: int, k: int, stride: int, dilation: int, lo: int, hi: int) -> int:
    return (size + lo + hi - dilation * (k - 1) - 1) // stride + 1


def pool_out(size: int, k: int, stride: int, lo: int, hi: int, ceil_mode: bool) -> int:
    """ONNX pooling output size (floor, or ceil with ``ceil_mode``)."""
    if not ceil_mode:
        return (size + lo + hi - k) // stride + 1
    return -(-(size + lo + hi - k) // stride) + 1


def ceil_mode_is_ambiguous(size: int, k: int, stride: int, lo: int, hi: int) -> bool:
    """Whether ceil_mode's last window would start in the right padding: onnx's shape inference keeps
    it, PyTorch (and newer onnxruntime) drop it; the generator avoids the case."""
    return (pool_out(size, k, stride, lo, hi, True) - 1) * stride >= size + lo


class GraphBuilder:
    """Builds one ONNX graph; ``code`` holds the calls that rebuild it (``b`` being the builder)."""

    def __init__(self, seed: int = 0, opset: int = 13) -> None:
        self.seed, self.opset = seed, opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[T] = []
        self.tensors: list[T] = []  # every activation, in creation order
        self.visible: list[T] = []  # those the builder program names (inputs and the results of calls)
        self.extra_outputs: list[T] = []  # read by nodes and graph outputs too
        self.consumers: dict[str, int] = {}
        self.code: list[str] = [f"b = GraphBuilder(seed={seed}, opset={opset})"]
        self._names: dict[str, int] = {}
        self._precision: tuple[str, bool, int, tuple[str, ...]] = ("fp32", True, 0, ())

    # ------------------------------------------------------------------------------- plumbing
    def _name(self, prefix: str) -> str:
        i = self._names.get(prefix, 0)
        self._names[prefix] = i + 1
        return f"{prefix}{i}"

    def _log(self, out: T, call: str) -> T:
        self.code.append(f"{out.name} = b.{call}")
        self.visible.append(out)
        return out

    def _const(self, array: np.ndarray, prefix: str = "c") -> str:
        name = self._name(prefix)
        self.initializers.append(nh.from_array(np.asarray(array), name))
        return name

    def _f32(self, shape: Sequence[int], std: float = 1.0) -> np.ndarray:
        return (self.rng.standard_normal(tuple(shape)) * std).astype(np.float32)

    def _node(self, op: str, inputs: Sequence[str], shape: Sequence[int], scale: float, **attrs: object) -> T:
        out = T(self._name("t"), tuple(int(d) for d in shape), float(scale))
        for i in inputs:
            if i:
                self.consumers[i] = self.consumers.get(i, 0) + 1
        self.nodes.append(oh.make_node(op, list(inputs), [out.name], name=f"{op.lower()}_{len(self.nodes)}", **attrs))
        self.tensors.append(out)
        return out

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    def unused(self) -> list[T]:
        """Activations no node reads (the graph's outputs)."""
        return [t for t in self.tensors if t.name not in self.consumers]

    def output(self, t: T) -> None:
        """Make ``t`` a graph output although nodes read it (fusion must still write it out)."""
        if t not in self.extra_outputs:
            self.extra_outputs.append(t)
            self.code.append(f"b.output({t})")

    # ------------------------------------------------------------------------------- operators
    def input(self, shape: Sequence[int]) -> T:
        t = T(self._name("x"), tuple(int(d) for d in shape), 1.0)
        self.inputs.append(t)
        self.tensors.append(t)
        return self._log(t, f"input({tuple(t.shape)})")

    def conv(self, x: T, out_channels: int, kernel: tuple[int, int], strides: tuple[int, int] = (1, 1),
             dilations: tuple[int, int] = (1, 1), pads: tuple[int, int, int, int] = (0, 0, 0, 0), group: int = 1,
             bias: bool = True, batchnorm: bool = False) -> T:
        """Conv (pads as ONNX orders them: top, left, bottom, right), optionally followed by BatchNormalization."""
        n, c, h, w = x.shape
        assert c % group == 0 and out_channels % group == 0, (c, out_channels, group)
        kh, kw = kernel
        ho = conv_out(h, kh, strides[0], dilations[0], pads[0], pads[2])
        wo = conv_out(w, kw, strides[1], dilations[1], pads[1], pads[3])
        assert ho >= 1 and wo >= 1, (x.shape, kernel, strides, dilations, pads)
        fan_in = c // group * kh * kw
        inputs = [x.name, self._const(self._f32((out_channels, c // group, kh, kw), 1 / math.sqrt(fan_in)), "w")]
        if bias:
            inputs.append(self._const(self._f32((out_channels,), 0.2), "bias"))
        y = self._node("Conv", inputs, (n, out_channels, ho, wo), x.scale, kernel_shape=list(kernel),
                       strides=list(strides), dilations=list(dilations), pads=list(pads), group=group)
        if batchnorm:
            o = out_channels
            params = [
                self._const(self.rng.uniform(0.5, 1.5, o).astype(np.float32), "gamma"),
                self._const(self._f32((o,), 0.2), "beta"),
                self._const(self._f32((o,), 0.2), "mean"),
                self._const(self.rng.uniform(0.5, 1.5, o).astype(np.float32), "var"),
            ]
            y = self._node("BatchNormalization", [y.name, *params], y.shape, y.scale, epsilon=1e-5)
        return self._log(y, f"conv({x}, out_channels={out_channels}, kernel={kernel}, strides={strides}, "
                            f"dilations={dilations}, pads={pads}, group={group}, bias={bias}, "
                            f"batchnorm={batchnorm})")

    def unary(self, x: T, op: str, lo: float | None = None, hi: float | None = None) -> T:
        """Relu / Sigmoid / Tanh, or Clip with its bounds as scalar constant inputs (None: input omitted)."""
        inputs = [x.name]
        if op == "Clip":
            inputs.append(self._const(np.array(lo, np.float32), "lo") if lo is not None else "")
            if hi is not None:
                inputs.append(self._const(np.array(hi, np.float32), "hi"))
            scale = min(x.scale, max(abs(lo or 0.0), abs(hi if hi is not None else x.scale)))
        else:
            scale = 1.0 if op in ("Sigmoid", "Tanh") else x.scale
        y = self._node(op, inputs, x.shape, scale)
        args = f", lo={lo!r}, hi={hi!r}" if op == "Clip" else ""
        return self._log(y, f"unary({x}, {op!r}{args})")

    def binary(self, a: T, b: T, op: str) -> T:
        """``op(a, b)`` of two tensors of one shape (``a`` may be ``b``)."""
        assert a.shape == b.shape, (a.shape, b.shape)
        scale = a.scale * b.scale if op == "Mul" else a.scale + b.scale
        return self._log(self._node(op, [a.name, b.name], a.shape, scale), f"binary({a}, {b}, {op!r})")

    def binary_const(self, x: T, op: str, shape: tuple[int, ...], const_first: bool = False) -> T:
        """``op(x, constant)`` (or ``op(constant, x)``); the constant's ``shape`` broadcasts to x's."""
        if op == "Mul":
            value = self.rng.uniform(0.5, 1.5, shape) * self.rng.choice([-1.0, 1.0], shape)
            scale = 1.5 * x.scale
        else:
            value = self.rng.standard_normal(shape) * 0.5 * x.scale
            scale = 1.5 * x.scale
        c = self._const(np.asarray(value, np.float32), "k")
        y = self._node(op, [c, x.name] if const_first else [x.name, c], x.shape, scale)
        return self._log(y, f"binary_const({x}, {op!r}, shape={shape}, const_first={const_first})")

    def pool(self, x: T, op: str, kernel: tuple[int, int], strides: tuple[int, int] = (1, 1),
             pads: tuple[int, int, int, int] = (0, 0, 0, 0), count_include_pad: int = 0, ceil_mode: int = 0) -> T:
        """MaxPool / AveragePool."""
        n, c, h, w = x.shape
        ho = pool_out(h, kernel[0], strides[0], pads[0], pads[2], bool(ceil_mode))
        wo = pool_out(w, kernel[1], strides[1], pads[1], pads[3], bool(ceil_mode))
        assert ho >= 1 and wo >= 1, (x.shape, kernel, strides, pads)
        attrs: dict[str, object] = {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads)}
        if ceil_mode:
            attrs["ceil_mode"] = 1
        if op == "AveragePool":
            attrs["count_include_pad"] = count_include_pad
        y = self._node(op, [x.name], (n, c, ho, wo), x.scale, **attrs)
        return self._log(y, f"pool({x}, {op!r}, kernel={kernel}, strides={strides}, pads={pads}, "
                            f"count_include_pad={count_include_pad}, ceil_mode={ceil_mode})")

    def global_pool(self, x: T, op: str = "GlobalAveragePool") -> T:
        """GlobalAveragePool, or ReduceMean over the spatial axes with keepdims (opset < 18: axes attribute)."""
        n, c, _, _ = x.shape
        attrs: dict[str, object] = {"axes": [2, 3], "keepdims": 1} if op == "ReduceMean" else {}
        y = self._node(op, [x.name], (n, c, 1, 1), x.scale, **attrs)
        return self._log(y, f"global_pool({x}, {op!r})")

    def flatten(self, x: T) -> T:
        y = self._node("Flatten", [x.name], (x.shape[0], math.prod(x.shape[1:])), x.scale, axis=1)
        return self._log(y, f"flatten({x})")

    def reshape(self, x: T, shape: tuple[int, ...]) -> T:
        assert math.prod(shape) == math.prod(x.shape), (x.shape, shape)
        s = self._const(np.array(shape, np.int64), "shape")
        return self._log(self._node("Reshape", [x.name, s], shape, x.scale), f"reshape({x}, {shape})")

    def gemm(self, x: T, out_features: int, trans_b: int = 1, bias: bool = True, alpha: float = 1.0,
             beta: float = 1.0) -> T:
        """Gemm with a constant weight ((M, K) with transB=1, as exporters write a Linear; else (K, M))."""
        n, k = x.shape
        w = self._f32((out_features, k) if trans_b else (k, out_features), 1 / math.sqrt(k))
        inputs = [x.name, self._const(w, "w")]
        if bias:
            inputs.append(self._const(self._f32((out_features,), 0.2), "bias"))
        attrs: dict[str, object] = {"transB": trans_b}
        if alpha != 1.0:
            attrs["alpha"] = alpha
        if beta != 1.0:
            attrs["beta"] = beta
        y = self._node("Gemm", inputs, (n, out_features), x.scale * max(1.0, abs(alpha)), **attrs)
        return self._log(y, f"gemm({x}, out_features={out_features}, trans_b={trans_b}, bias={bias}, "
                            f"alpha={alpha!r}, beta={beta!r})")

    def matmul_const(self, x: T, out_features: int, bias: bool = False) -> T:
        """MatMul by a constant (K, M) weight (x of rank 2 or more), plus a separate bias Add."""
        k = x.shape[-1]
        w = self._const(self._f32((k, out_features), 1 / math.sqrt(k)), "w")
        y = self._node("MatMul", [x.name, w], (*x.shape[:-1], out_features), x.scale)
        if bias:
            y = self._node("Add", [y.name, self._const(self._f32((out_features,), 0.2), "bias")], y.shape, y.scale)
        return self._log(y, f"matmul_const({x}, out_features={out_features}, bias={bias})")

    def matmul(self, a: T, b: T) -> T:
        """MatMul of two activations (``matmul(x, x)`` on square matrices)."""
        assert a.shape[:-2] == b.shape[:-2] and a.shape[-1] == b.shape[-2], (a.shape, b.shape)
        shape = (*a.shape[:-1], b.shape[-1])
        scale = a.scale * b.scale * math.sqrt(a.shape[-1])
        return self._log(self._node("MatMul", [a.name, b.name], shape, scale), f"matmul({a}, {b})")

    # ------------------------------------------------------------------------------- the model
    def precision(self, precision: str, per_channel: bool = True, calibration_seed: int = 0,
                  wide: Sequence[str] = ()) -> None:
        """Make :meth:`model` return the graph in ``precision`` (:func:`convert_precision`); the
        quantization parameters matter for the quantized precisions only (and are recorded only then),
        ``wide`` (the activation tensors of 16 bits) for ``int16`` / ``uint16`` only."""
        assert precision in PRECISIONS, precision
        assert not wide or precision in WIDE, (precision, wide)
        self._precision = (precision, per_channel, calibration_seed, tuple(wide))
        args = f", per_channel={per_channel}, calibration_seed={calibration_seed}" if precision in QUANTIZED else ""
        args += f", wide={tuple(wide)!r}" if precision in WIDE else ""
        self.code.append(f"b.precision({precision!r}{args})")

    def model(self, outputs: Sequence[T] | None = None) -> onnx.ModelProto:
        """The ONNX model; its outputs are ``outputs``, or every activation nothing reads and those
        made outputs with :meth:`output`; in the precision :meth:`precision` chose."""
        if outputs is None:
            outs = self.unused()
            outs += [t for t in self.extra_outputs if t not in outs]
        else:
            outs = list(outputs)
        graph = oh.make_graph(
            self.nodes, "fuzz",
            [oh.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.shape)) for t in self.inputs],
            [oh.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.shape)) for t in outs],
            initializer=self.initializers,
        )
        model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", self.opset)], ir_version=IR_VERSION,
                              producer_name="tvm-npu-fuzz")
        check(model)
        return convert_precision(model, *self._precision)


def convert_precision(model: onnx.ModelProto, precision: str, per_channel: bool = True,
                      calibration_seed: int = 0, wide: Sequence[str] = ()) -> onnx.ModelProto:
    """``model`` (fp32) as a user would convert it to ``precision``: quantized by
    ``tvm_npu.tools.quantize.quantize_model`` (QDQ, 8-bit activations of that type, calibrated on
    :data:`CALIBRATION_SAMPLES` random samples drawn with ``calibration_seed``; for ``int16`` / ``uint16``
    the activation tensors ``wide`` of 16 bits, the others of 8), or converted to fp16 by
    ``onnxconverter_common``; checked by the onnx checker."""
    if precision == "fp32":
        return model
    if precision == "fp16":
        from onnxconverter_common import float16

        with warnings.catch_warnings():  # it warns about every weight below fp16's smallest normal
            warnings.simplefilter("ignore", UserWarning)
            converted = float16.convert_float_to_float16(onnx.ModelProto.FromString(model.SerializeToString()))
            try:
                onnx.checker.check_model(converted, full_check=True)
                return converted
            except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
                # it keeps Max/Min in fp32 between casts, but leaves out the cast of an input that is a
                # graph output too (an invalid model); they are exact in fp16: convert them as well
                kept = [op for op in float16.DEFAULT_OP_BLOCK_LIST if op not in ("Max", "Min")]
                converted = float16.convert_float_to_float16(model, op_block_list=kept)
    else:
        from tvm_npu.tools.quantize import quantize_model

        with tempfile.TemporaryDirectory(prefix="tvm-npu-fuzz.") as tmp:
            wide = _surviving(model, wide, tmp) if precision in WIDE else ()
            path = quantize_model(model, f"{tmp}/model.onnx", random=CALIBRATION_SAMPLES, seed=calibration_seed,
                                  activations=WIDE.get(precision, precision), per_channel=per_channel,
                                  int16=list(wide) if precision in WIDE else None)
            converted = onnx.load(str(path))
    onnx.checker.check_model(converted, full_check=True)
    return converted


def _surviving(model: onnx.ModelProto, wide: Sequence[str], tmp: str) -> list[str]:
    """Those of ``wide`` that onnxruntime's pre-processing keeps (it folds a batch norm into its conv,
    whose output tensor then no longer exists): the quantizer takes overrides for existing tensors only,
    and a drawn tensor folded away simply has no precision of its own."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    onnx.save(model, f"{tmp}/fp32.onnx")
    quant_pre_process(f"{tmp}/fp32.onnx", f"{tmp}/prepared.onnx", skip_symbolic_shape=True)
    prepared = onnx.load(f"{tmp}/prepared.onnx")
    names = {*(i.name for i in prepared.graph.input), *(o for n in prepared.graph.node for o in n.output)}
    return [t for t in wide if t in names]


def check(model: onnx.ModelProto) -> None:
    """Full checker, and strict shape inference must give every output exactly the declared shape."""
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    known = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    for out in model.graph.output:
        got = [d.dim_value for d in known[out.name].type.tensor_type.shape.dim]
        want = [d.dim_value for d in out.type.tensor_type.shape.dim]
        assert got == want, f"shape inference gives {out.name} {got}, the builder tracked {want}"


@dataclass
class FuzzGraph:
    """A generated graph: the model and the builder program that rebuilds it (printed by hypothesis)."""

    model: onnx.ModelProto = field(repr=False)
    code: tuple[str, ...]
    ops: tuple[str, ...]
    precision: str = "fp32"

    def __repr__(self) -> str:
        return "FuzzGraph(\n    " + "\n    ".join(self.code) + "\n)"

    @property
    def source(self) -> str:
        return "\n".join([*self.code, "model = b.model()"])


def rebuild(code: str) -> onnx.ModelProto:
    """The model of a builder program (``FuzzGraph.source`` or a regression test's lines)."""
    env: dict[str, object] = {"GraphBuilder": GraphBuilder}
    exec(code, env)
    model = env.get("model")
    if model is None:
        model = env["b"].model()  # type: ignore[attr-defined]
    return model  # type: ignore[return-value]


# ----------------------------------------------------------------------------------- strategies
def _size(usual: int, rare: int) -> st.SearchStrategy[int]:
    """1..usual, one time in eight usual+1..rare (larger tensors make the planner tile; shrinks small)."""
    return st.integers(0, 7).flatmap(lambda r: st.integers(usual + 1, rare) if r == 7 else st.integers(1, usual))


def _pads(draw: st.DrawFn, size: int, k: int, dilation: int) -> tuple[int, int]:
    """(lo, hi) padding of one axis, each at most k-1, such that at least one window fits: lo + hi must
    reach ``dilation*(k-1) + 1 - size``, which is at most 2*(k-1) for dilation <= 2 and size >= 1."""
    cap = k - 1
    need = dilation * (k - 1) + 1 - size
    assert need <= 2 * cap, (size, k, dilation)
    lo = draw(st.integers(max(0, need - cap), cap))
    hi = draw(st.integers(max(0, need - lo), cap))
    return lo, hi


@st.composite
def _conv_args(draw: st.DrawFn, x: T, same_shape: bool = False, batchnorm: bool = True) -> dict[str, object]:
    _, c, h, w = x.shape
    mode = draw(st.sampled_from(["dense", "dense", "depthwise", "grouped"]))
    divisors = [g for g in range(2, c) if c % g == 0]
    if mode == "depthwise" and c > 1:
        group, out_channels = c, c * (1 if same_shape else draw(st.sampled_from([1, 1, 2])))
    elif mode == "grouped" and divisors:
        group = draw(st.sampled_from(divisors))
        out_channels = c if same_shape else group * draw(st.integers(1, 4))
    else:
        group, out_channels = 1, c if same_shape else draw(_size(24, 96))
    if same_shape:  # stride 1, odd kernel, lo + hi = dilated extent - 1 (asymmetric allowed)
        kernel, strides, dilations, pads = [], (1, 1), [], [[0, 0], [0, 0]]
        for axis in range(2):
            k = draw(st.sampled_from([1, 3, 3, 5, 7]))
            d = draw(st.sampled_from([1, 1, 2])) if k > 1 else 1
            total = d * (k - 1)
            lo = draw(st.integers(max(0, total - (k - 1)), min(k - 1, total)))
            kernel.append(k)
            dilations.append(d)
            pads[axis] = [lo, total - lo]
        p = (pads[0][0], pads[1][0], pads[0][1], pads[1][1])
    else:
        kernel, strides, dilations, lohi = [], [], [], []
        for size in (h, w):
            k = draw(st.integers(1, 7))
            d = draw(st.sampled_from([1, 1, 2])) if k > 1 else 1
            kernel.append(k)
            dilations.append(d)
            strides.append(draw(st.sampled_from([1, 1, 2, 3])))
            lohi.append(_pads(draw, size, k, d))
        p = (lohi[0][0], lohi[1][0], lohi[0][1], lohi[1][1])
    return {"out_channels": out_channels, "kernel": tuple(kernel), "strides": tuple(strides),
            "dilations": tuple(dilations), "pads": p, "group": group, "bias": draw(st.booleans()),
            "batchnorm": batchnorm and draw(st.integers(0, 3)) == 3}


def _unary(draw: st.DrawFn, b: GraphBuilder, x: T) -> T:
    op = draw(st.sampled_from(UNARY))
    if op != "Clip":
        return b.unary(x, op)
    bounds = draw(st.sampled_from(["relu6", "relu6", "random", "min-only", "max-only"]))
    if bounds == "relu6":
        return b.unary(x, "Clip", 0.0, 6.0)
    lo = round(draw(st.floats(-2.0, 0.5)), 3)
    hi = round(lo + draw(st.floats(0.1, 3.0)), 3)
    if bounds == "min-only":
        return b.unary(x, "Clip", lo, None)
    if bounds == "max-only":
        return b.unary(x, "Clip", None, hi)
    return b.unary(x, "Clip", lo, hi)


def _const_shape(draw: st.DrawFn, x: T) -> tuple[int, ...]:
    """A per-channel constant (the usual), a scalar, or one of the tensor's own shape (minus the batch)."""
    kind = draw(st.sampled_from(["channel", "channel", "channel", "scalar", "full"]))
    if kind == "scalar":
        return draw(st.sampled_from([(), (1,)]))
    if kind == "full":
        return x.shape[1:]
    if x.rank == 4:
        return draw(st.sampled_from([(x.shape[1], 1, 1), (1, x.shape[1], 1, 1)]))
    return (x.shape[-1],)


def _pool(draw: st.DrawFn, b: GraphBuilder, x: T) -> T:
    _, _, h, w = x.shape
    op = draw(st.sampled_from(["MaxPool", "AveragePool"]))
    ceil_mode = int(draw(st.integers(0, 9)) == 9)
    kernel, strides, lohi = [], [], []
    for size in (h, w):
        k = draw(st.integers(1, min(5, size + 2)))
        stride = draw(st.sampled_from([1, 1, 2, 3]))
        lo, hi = _pads(draw, size, k, 1)
        kernel.append(k)
        strides.append(stride)
        lohi.append((lo, hi))
    pads = (lohi[0][0], lohi[1][0], lohi[0][1], lohi[1][1])
    if any(ceil_mode_is_ambiguous(s, k, st_, lo, hi) for s, k, st_, (lo, hi) in zip((h, w), kernel, strides, lohi,
                                                                                      strict=True)):
        ceil_mode = 0
    return b.pool(x, op, tuple(kernel), tuple(strides), pads, count_include_pad=draw(st.sampled_from([0, 1])),
                  ceil_mode=ceil_mode)


def _partner(draw: st.DrawFn, b: GraphBuilder, x: T) -> T:
    """The second operand of a binary op: x itself (a repeated operand) or another tensor of its shape."""
    others = [t for t in b.visible if t.shape == x.shape and t is not x]
    if not others or draw(st.booleans()):
        return x
    return others[len(others) - 1 - draw(st.integers(0, len(others) - 1))]


def _kinds(b: GraphBuilder, x: T, budget: int) -> list[str]:
    """Operators applicable to ``x`` with ``budget`` nodes left, repeated by weight (the first shrinks best)."""
    if x.rank == 4:
        kinds = ["conv"] * 4 + ["unary"] * 2 + ["pool"] * 2 + ["binary_const", "binary"]
        if x.shape[2] * x.shape[3] > 1:
            kinds.append("global_pool")
        if budget >= 2:
            kinds += ["residual"] * 2
            if math.prod(x.shape[1:]) <= MAX_FEATURES:
                kinds.append("flatten_dense")
        if budget >= 3 and x.shape[2] == x.shape[3] and x.scale <= MAX_SCALE:
            kinds.append("square_matmul")
        if budget >= 3:
            kinds.append("matmul_3d")
    else:  # 2-D (after Flatten), or a 3-D reshape of a 4-D tensor picked again (fan-out)
        kinds = ["matmul_const"] * 2 + ["unary"] * 2 + ["binary_const", "binary"]
        if x.rank == 2:
            kinds += ["gemm"] * 2
        if x.shape[-1] == x.shape[-2] and x.scale <= MAX_SCALE:
            kinds.append("square_matmul")
    return kinds


def _apply(draw: st.DrawFn, b: GraphBuilder, kind: str, x: T, budget: int) -> None:
    if kind == "unary":
        _unary(draw, b, x)
    elif kind == "binary_const":
        b.binary_const(x, draw(st.sampled_from(["Mul", "Add", "Sub", "Max", "Min"])), _const_shape(draw, x),
                       const_first=draw(st.integers(0, 3)) == 3)
    elif kind == "binary":
        y = _partner(draw, b, x)
        ops = [op for op in BINARY if op != "Mul" or x.scale * y.scale <= MAX_SCALE]
        b.binary(x, y, draw(st.sampled_from(ops)))
    elif kind == "conv":
        b.conv(x, **draw(_conv_args(x, batchnorm=budget >= 2)))
    elif kind == "pool":
        _pool(draw, b, x)
    elif kind == "global_pool":
        b.global_pool(x, draw(st.sampled_from(["GlobalAveragePool", "GlobalAveragePool", "ReduceMean"])))
    elif kind == "flatten_dense":
        _dense(draw, b, b.flatten(x), budget=budget - 1)
    elif kind == "residual":  # x -> conv (same shape) [-> act] -> add(x, .): x fans out to both
        args = draw(_conv_args(x, same_shape=True, batchnorm=budget >= 3))
        y = b.conv(x, **args)
        if budget - (2 + args["batchnorm"]) >= 1 and draw(st.booleans()):
            y = _unary(draw, b, y)
        b.binary(*((x, y) if draw(st.booleans()) else (y, x)), "Add")
    elif kind == "square_matmul":
        if x.rank == 4:
            n, c, h, w = x.shape
            r = b.reshape(x, (n * c, h, w))
            b.reshape(b.matmul(r, r), (n, c, h, h))
        else:
            b.matmul(x, x)
    elif kind == "matmul_3d":  # batched matmul by a constant weight
        n, c, h, w = x.shape
        r = b.reshape(x, (n * c, h, w))
        m = draw(st.integers(1, 16))
        b.reshape(b.matmul_const(r, m), (n, c, h, m))
    elif kind in ("gemm", "matmul_const"):
        _dense(draw, b, x, budget, kind)
    else:  # pragma: no cover
        raise AssertionError(kind)


def _dense(draw: st.DrawFn, b: GraphBuilder, x: T, budget: int, kind: str | None = None) -> T:
    kind = kind or draw(st.sampled_from(["gemm", "matmul_const"]))
    m = draw(_size(32, 256))
    if kind == "gemm":
        alpha, beta = draw(st.sampled_from([(1.0, 1.0), (1.0, 1.0), (1.0, 1.0), (0.5, 1.0), (1.0, 2.0)]))
        return b.gemm(x, m, trans_b=draw(st.sampled_from([1, 1, 0])), bias=draw(st.integers(0, 3)) != 3,
                      alpha=alpha, beta=beta)
    return b.matmul_const(x, m, bias=budget >= 2 and draw(st.booleans()))


@st.composite
def graphs(draw: st.DrawFn, max_nodes: int = 8, precisions: Sequence[str] = ("fp32",)) -> FuzzGraph:
    """A random valid ONNX graph with 1..``max_nodes`` nodes in one of ``precisions`` (see the module
    docstring)."""
    b = GraphBuilder(seed=draw(st.integers(0, 2**16)), opset=draw(st.sampled_from(OPSETS)))
    batch = draw(st.integers(1, 2))
    if draw(st.integers(0, 4)) == 4:
        b.input((batch, draw(_size(64, 512))))
    else:
        h = draw(_size(16, 40))
        w = h if draw(st.booleans()) else draw(_size(16, 40))
        b.input((batch, draw(_size(16, 64)), h, w))
    ops: list[str] = []
    # one operator, then another while a draw says so (not a count drawn up front: hypothesis shrinks
    # a graph best by deleting the draws of one operator, and a "more" flag keeps the rest aligned)
    while b.n_nodes < max_nodes and (not ops or draw(st.integers(0, 4)) > 0):
        budget = max_nodes - b.n_nodes
        tensors = b.visible
        x = tensors[-1]
        if len(tensors) > 1 and draw(st.integers(0, 3)) == 3:  # fan-out: an earlier tensor gets another reader
            x = tensors[len(tensors) - 1 - draw(st.integers(0, len(tensors) - 1))]
        kind = draw(st.sampled_from(_kinds(b, x, budget)))
        _apply(draw, b, kind, x, budget)
        ops.append(kind)
    read = [t for t in b.visible if t not in b.inputs and t.name in b.consumers]
    if read and draw(st.integers(0, 3)) == 3:  # an intermediate is a graph output too
        b.output(read[len(read) - 1 - draw(st.integers(0, len(read) - 1))])
    precision = draw(st.sampled_from(precisions))  # last: the graph's draws do not depend on it
    if precision in QUANTIZED:
        b.precision(precision, per_channel=draw(st.booleans()), calibration_seed=draw(st.integers(0, 2**16)),
                    wide=_wide_tensors(draw, b) if precision in WIDE else ())
    elif precision != "fp32":
        b.precision(precision)
    return FuzzGraph(b.model(), tuple(b.code), tuple(ops), precision)


def _wide_tensors(draw: st.DrawFn, b: GraphBuilder) -> tuple[str, ...]:
    """The activation tensors of a mixed 8/16-bit graph that are 16 bits: all of them, none, or each
    drawn (the all-16 draw first, which shrinking aims at: the plain A16W8 model)."""
    names = [t.name for t in b.tensors]
    mode = draw(st.sampled_from(["all", "each", "each", "none"]))
    if mode == "each":
        return tuple(n for n in names if draw(st.booleans()))
    return tuple(names) if mode == "all" else ()


@st.composite
def targets(draw: st.DrawFn, extended: bool = False) -> str:
    """``npu`` with a random combination of the options in :data:`TARGET_OPTIONS` (and, ``extended``,
    of :data:`EXTENDED_TARGET_OPTIONS` too)."""
    parts = ["npu"]
    options = {**TARGET_OPTIONS, **EXTENDED_TARGET_OPTIONS} if extended else TARGET_OPTIONS
    for key, values in options.items():
        value = draw(st.sampled_from(values))
        if value is not None:
            parts.append(f"-{key}={value}")
    return " ".join(parts)
