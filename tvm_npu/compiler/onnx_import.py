"""ONNX models as exporters write them, brought into the form TVM's importer and the pattern table take.

``torch.onnx.export`` and tf2onnx write graphs that are correct but awkward to import:

* **Shape arithmetic** (``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``) computes a
  static shape at run time; TVM's importer refuses a ``Reshape`` whose shape is not a constant.
  :func:`fold_shapes` evaluates every such node whose inputs are known once the graph inputs'
  static shapes are: ``Shape`` of a tensor with a static inferred shape, and any node of the
  shape-arithmetic operators in :data:`SHAPE_OPS` whose inputs are all constants.
* **Clip with min/max as inputs** (ReLU6 from both exporters) is imported by TVM as opaque
  ``call_tir(maximum)`` / ``call_tir(minimum)`` kernels that no pattern can see; as ``Max`` /
  ``Min`` nodes it imports as Relax operators, which the canonicalisation turns into one
  ``clip`` (:mod:`tvm_npu.relay_patterns.canonicalize`).
* **An explicit Pad** before a convolution or a pooling window (PyTorch's ``F.pad`` /
  ``ZeroPad2d``, TF's asymmetric "SAME" padding) is imported as an opaque ``call_tir(pad)``;
  :func:`fold_pads` moves it into the consumer's own ``pads`` where that is exact and the NPU
  can express it (see there). Any other pad stays a host operator.

Nothing here changes what the model computes, and quantized structure is left alone:
``QuantizeLinear`` / ``DequantizeLinear`` are never evaluated or moved (constant-folding
them would turn 8-bit weights into float ones, which the QDQ rewrite needs to see).

Why not onnxslim: it installs and works with onnx 1.23 here, but pulls in sympy (80 MB)
for symbolic shapes, which static input shapes do not need, and its default fusions rewrite
graphs beyond shape arithmetic (e.g. into ``com.microsoft`` operators TVM cannot import); the
folding needed here is a few rules on top of onnx's own shape inference and reference evaluator.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
import tvm
from onnx import helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from tvm_npu.compiler.conv_transpose_pads import explicit_conv_transpose_pads
from tvm_npu.compiler.lp_norm import lp_norms_as_reductions
from tvm_npu.compiler.recurrent import GATES, unroll_recurrent
from tvm_npu.compiler.shapes import Dim, declared_dim, resolve_shapes
from tvm_npu.compiler.upsample import upsample_as_broadcast
from tvm_npu.models.inputs import input_values
from tvm_npu.models.onnx_file import array
from tvm_npu.models.registry import opset

#: Operators folded when every input is a constant: the arithmetic of shapes and indices, and
#: pure data movement of constants. Quantize/dequantize are deliberately absent.
SHAPE_OPS = frozenset({
    "Shape", "Size", "Gather", "GatherElements", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Reshape",
    "Flatten", "Transpose", "Identity", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Floor", "Ceil", "Max",
    "Min", "Equal", "Less", "Greater", "Not", "And", "Or", "Where", "ConstantOfShape", "Range", "Expand", "Tile",
    "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "Split", "Sqrt",
})
#: Operators that create tensors from a shape: folded only when the result is small.
_GENERATORS = frozenset({"ConstantOfShape", "Range", "Expand", "Tile"})
_MAX_GENERATED = 4096  # shapes, index ranges, small broadcasts; not weights (light models make those so)
_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)


#: The named rewrites of :func:`prepare`, in order: ``tvm.transform.PassContext(disabled_pass=[name])`` skips one.
IMPORT_REWRITES: dict[str, str] = {
    "npu.import.fold-shapes": "shape subgraphs (Shape, Gather, Concat ... on static shapes) -> constants",
    "npu.import.recurrent": "LSTM / GRU / RNN unrolled into MatMul, gate activations, Slice and Concat",
    "npu.import.upsample": "Upsample (opsets 7-9) by integer factors -> Reshape, Expand, Reshape (a broadcast)",
    "npu.import.lp-norm": "LpNormalization (p = 1, 2) -> Abs or Mul, ReduceSum, Sqrt, Max, Div (onnxruntime's rule)",
    "npu.import.fold-pads": "a Pad before a Conv / pooling folded into its pads",
    "npu.import.clip-as-max-min": "Clip with min / max inputs -> Max / Min (TVM imports them as constants)",
}


def _disabled() -> set[str]:
    """The pass names the current ``PassContext`` disables (``required_pass`` wins)."""
    ctx = tvm.transform.PassContext.current()
    return {str(n) for n in ctx.disabled_pass} - {str(n) for n in ctx.required_pass}


def prepare(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with shape subgraphs folded, recurrent layers unrolled, Clip bounds as Max / Min and
    foldable pads folded (a new model; ``model`` is not modified). A rewrite named in the current
    ``PassContext``'s ``disabled_pass`` (:data:`IMPORT_REWRITES`) is skipped."""
    disabled = _disabled()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    explicit_conv_transpose_pads(out)  # not an optimisation: TVM's importer ignores output_shape
    for name, rewrite in (("npu.import.fold-shapes", fold_shapes), ("npu.import.recurrent", unroll_recurrent_layers),
                          ("npu.import.upsample", upsample_by_integer_factors),
                          ("npu.import.lp-norm", expand_lp_norms), ("npu.import.fold-pads", fold_pads),
                          ("npu.import.clip-as-max-min", clips_as_max_min)):
        if name not in disabled:
            rewrite(out)
    return out


def upsample_by_integer_factors(model: onnx.ModelProto) -> int:
    """``Upsample`` by integer factors as the broadcast it is (:mod:`tvm_npu.compiler.upsample`), in place;
    returns how many."""
    if not any(n.op_type == "Upsample" for n in model.graph.node):
        return 0
    return upsample_as_broadcast(model, _constants(model.graph), _static_shapes(model), opset(model))


def expand_lp_norms(model: onnx.ModelProto) -> int:
    """``LpNormalization`` (TVM has no converter) as the reductions onnxruntime computes
    (:mod:`tvm_npu.compiler.lp_norm`), in place; returns how many."""
    if not any(n.op_type == "LpNormalization" for n in model.graph.node):
        return 0
    return lp_norms_as_reductions(model, _elem_types(model), opset(model))


def unroll_recurrent_layers(model: onnx.ModelProto) -> int:
    """Unroll the main graph's ``LSTM`` / ``GRU`` / ``RNN`` nodes (:mod:`tvm_npu.compiler.recurrent`), in
    place, after the shapes are folded (a ``sequence_lens`` or initial state built from shapes is then a
    constant); returns how many. Clips it writes become Max / Min in the step after it."""
    if not any(n.op_type in GATES for n in model.graph.node):
        return 0
    used = {name for node in model.graph.node for name in _node_inputs(node)} | {o.name for o in model.graph.output}
    count = unroll_recurrent(model, _constants(model.graph), _static_shapes(model), opset(model), used)
    _drop_unused_initializers(model.graph)
    return count


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Initializers and Constant nodes' values, by name (an initializer that old exporters also list
    as a graph input is a constant too: TVM's importer binds it as one)."""
    values = {t.name: array(t) for t in graph.initializer}  # external data: a memmap, read only if used
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            try:
                values[node.output[0]] = ReferenceEvaluator(node).run(None, {})[0]
            except Exception:  # an attribute form the reference cannot evaluate: leave it
                continue
    return values


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Static shapes of the graph's values from onnx shape inference (dims with a value only)."""
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # inference fails on custom domains: fold nothing then
        return {}
    shapes: dict[str, tuple[int, ...]] = {}
    graph = inferred.graph
    for vi in (*graph.input, *graph.value_info, *graph.output):
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            continue
        dims = t.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = tuple(int(d.dim_value) for d in dims)
    return shapes


def _shape_value(node: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    """What ``Shape`` (with its optional start / end attributes) returns for a tensor of ``shape``."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return np.array(shape[slice(attrs.get("start"), attrs.get("end"))], dtype=np.int64)


def _evaluate(node: onnx.NodeProto, values: dict[str, np.ndarray], opset: int) -> list[np.ndarray] | None:
    """Outputs of ``node`` over constant inputs (None when the reference evaluator cannot run it)."""
    feeds = {name: values[name] for name in node.input if name}
    try:
        return list(ReferenceEvaluator(node, opsets={"": opset}).run(None, feeds))
    except Exception:  # an unsupported attribute combination: the node stays
        return None


def fold_shapes(model: onnx.ModelProto) -> int:
    """Replace shape-arithmetic nodes whose result is known statically by initializers, in place;
    returns how many nodes were folded. Repeats shape inference until nothing more folds (a
    folded Reshape shape makes the shapes after it static)."""
    graph, version = model.graph, opset(model)
    outputs_of_graph = {o.name for o in graph.output}
    folded_total = 0
    for _ in range(8):
        values = _constants(graph)
        shapes = _static_shapes(model)
        keep, folded = [], 0
        for node in graph.node:
            outputs = None
            if node.domain in ("", "ai.onnx") and node.op_type in SHAPE_OPS and \
                    not outputs_of_graph.intersection(node.output):
                if node.op_type == "Shape" and node.input[0] in shapes:
                    outputs = [_shape_value(node, shapes[node.input[0]])]
                elif node.op_type == "Size" and node.input[0] in shapes:
                    outputs = [np.array(math.prod(shapes[node.input[0]]), dtype=np.int64)]
                elif all(not name or name in values for name in node.input) and any(node.input) and \
                        (node.op_type not in _GENERATORS or math.prod(shapes.get(node.output[0], (1 << 62,)))
                         <= _MAX_GENERATED):  # sized before it is evaluated: a light model's weights are huge
                    outputs = _evaluate(node, values, version)
            if outputs is None or len(outputs) != len(node.output):
                keep.append(node)
                continue
            for name, value in zip(node.output, outputs, strict=True):
                if name:
                    values[name] = np.asarray(value)
                    graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
                    if model.ir_version < 4:  # old IR: every initializer is also a graph input
                        graph.input.append(helper.make_tensor_value_info(
                            name, helper.np_dtype_to_tensor_dtype(values[name].dtype), values[name].shape))
            folded += 1
        if not folded:
            break
        del graph.node[:]
        graph.node.extend(keep)
        folded_total += folded
    if folded_total:
        _drop_unused_initializers(graph)
    return folded_total


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    """Remove initializers and Constant nodes nothing reads any more (and the initializers' graph-input
    entries, which old exporters write)."""
    used = {name for node in graph.node for name in _node_inputs(node)} | {o.name for o in graph.output}
    live = [n for n in graph.node if n.op_type != "Constant" or n.output[0] in used]
    if len(live) != len(graph.node):
        del graph.node[:]
        graph.node.extend(live)
    dropped = {t.name for t in graph.initializer} - used
    if not dropped:
        return
    kept = [t for t in graph.initializer if t.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    inputs = [i for i in graph.input if i.name not in dropped]
    del graph.input[:]
    graph.input.extend(inputs)


def _node_inputs(node: onnx.NodeProto) -> Iterable[str]:
    """Every value a node reads, those of its subgraphs (If / Loop bodies) included."""
    yield from (n for n in node.input if n)
    for attr in node.attribute:
        for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            for inner in sub.node:
                yield from _node_inputs(inner)


def _consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    users: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in set(_node_inputs(node)):
            users.setdefault(name, []).append(node)
    return users


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _set_attr(node: onnx.NodeProto, name: str, value: object) -> None:
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute(name, value)])


def _pad_spec(node: onnx.NodeProto, values: dict[str, np.ndarray]) -> tuple[list[int], float] | None:
    """(pads of every axis as begin..., end..., constant value) of a constant-mode Pad whose pads
    and value are constants (None otherwise)."""
    attrs = _attrs(node)
    mode = attrs.get("mode", b"constant")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "constant":
        return None
    if "pads" in attrs:  # opset < 11
        return [int(p) for p in attrs["pads"]], float(attrs.get("value", 0.0))
    if len(node.input) < 2 or node.input[1] not in values:
        return None
    if len(node.input) > 3 and node.input[3]:  # Pad-18 axes: only the full-rank form
        return None
    pads = [int(p) for p in values[node.input[1]].reshape(-1)]
    value = 0.0
    if len(node.input) > 2 and node.input[2]:
        if node.input[2] not in values or values[node.input[2]].size != 1:
            return None
        value = float(values[node.input[2]].reshape(()))
    return pads, value


def _spatial(pads: list[int]) -> tuple[int, int, int, int] | None:
    """(top, left, bottom, right) of a 4-D pad that leaves N and C alone (None otherwise)."""
    if len(pads) != 8:
        return None
    begin, end = pads[:4], pads[4:]
    if begin[:2] != [0, 0] or end[:2] != [0, 0] or min(pads) < 0:
        return None
    return begin[2], begin[3], end[2], end[3]


def _window(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> tuple[int, int] | None:
    """The (dilated) window of a 2-D conv or pool, from its attributes or its weight's shape."""
    attrs = _attrs(node)
    kernel = attrs.get("kernel_shape")
    if kernel is None and node.op_type == "Conv" and node.input[1] in shapes:
        kernel = shapes[node.input[1]][2:]
    if kernel is None or len(kernel) != 2:
        return None
    dil = attrs.get("dilations", [1, 1])
    return (int(kernel[0]) - 1) * int(dil[0]) + 1, (int(kernel[1]) - 1) * int(dil[1]) + 1


def _nonnegative(graph: onnx.GraphProto, name: str, values: dict[str, np.ndarray]) -> bool:
    """Whether the value ``name`` is never negative by construction (relu, sigmoid, clip at >= 0)."""
    producer = next((n for n in graph.node if name in n.output), None)
    if producer is None:
        return False
    if producer.op_type in ("Relu", "Sigmoid", "HardSigmoid", "Softplus", "Abs"):
        return True
    if producer.op_type == "DequantizeLinear":  # (q - zp) * s >= 0 for every q when zp is the type's minimum
        zp = values.get(producer.input[2]) if len(producer.input) > 2 and producer.input[2] else None
        return zp is not None and np.size(zp) == 1 and np.issubdtype(np.asarray(zp).dtype, np.integer) and \
            int(np.asarray(zp).reshape(())) == np.iinfo(np.asarray(zp).dtype).min
    if producer.op_type == "Clip":
        lo = _attrs(producer).get("min")
        if lo is None and len(producer.input) > 1 and producer.input[1] in values:
            lo = float(values[producer.input[1]].reshape(-1)[0])
        return lo is not None and float(lo) >= 0.0
    return False


def _foldable_into(consumer: onnx.NodeProto, pad: tuple[int, int, int, int], value: float, data: str,
                   graph: onnx.GraphProto, values: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> bool:
    """Whether a zero-or-(-inf) pad of H / W folds exactly into ``consumer``'s own padding and the
    total stays within what the NPU pads inside a tile (at most the window minus one per side)."""
    attrs = _attrs(consumer)
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) != "NOTSET" or attrs.get("ceil_mode", 0):
        return False
    window = _window(consumer, shapes)
    if window is None:
        return False
    own = [int(p) for p in attrs.get("pads", [0, 0, 0, 0])]
    total = [a + b for a, b in zip(own, pad, strict=True)]
    if max(total[0], total[2]) > window[0] - 1 or max(total[1], total[3]) > window[1] - 1:
        return False  # wider than the window: the NPU cannot pad it, the pad stays on the host
    if consumer.op_type == "Conv":
        return value == 0.0
    if consumer.op_type == "AveragePool":  # the pad's zeros are counted: so must the pool's own padding be
        return value == 0.0 and (not any(own) or bool(attrs.get("count_include_pad", 0)))
    if consumer.op_type == "MaxPool":  # max pooling ignores padding: exact for -inf, or 0 below non-negatives
        return value == -math.inf or (value == 0.0 and _nonnegative(graph, data, values))
    return False


def _transposed(pads: list[int], node: onnx.NodeProto) -> list[int] | None:
    """The pads (begin..., end...) of a Transpose's output, the pad moved after it (None: rank differs)."""
    rank = len(pads) // 2
    perm = [int(p) for p in _attrs(node).get("perm", range(rank - 1, -1, -1))]
    if sorted(perm) != list(range(rank)):
        return None
    return [pads[p] for p in perm] + [pads[rank + p] for p in perm]


def _through_qdq(value: float, node: onnx.NodeProto, values: dict[str, np.ndarray]) -> float | None:
    """The pad value after a per-tensor QuantizeLinear / DequantizeLinear (None: not one of those, or
    not per tensor): a pad commutes with them, its value mapped as every other element is."""
    if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or len(node.input) < 2 or \
            node.input[1] not in values or values[node.input[1]].size != 1:
        return None
    scale = np.float32(values[node.input[1]].reshape(()))
    has_zp = len(node.input) > 2 and node.input[2]
    if has_zp and (node.input[2] not in values or values[node.input[2]].size != 1):
        return None
    zp = values[node.input[2]].reshape(()) if has_zp else np.uint8(0)
    if node.op_type == "DequantizeLinear":
        return float((np.float32(value) - np.float32(zp)) * scale)
    info = np.iinfo(zp.dtype)
    return float(np.clip(np.rint(np.float32(value) / scale) + int(zp), info.min, info.max))


def fold_pads(model: onnx.ModelProto) -> int:
    """Fold a constant ``Pad`` of H and W into the ``pads`` of the one Conv, AveragePool or MaxPool
    that reads it, in place; returns how many were folded.

    Exact cases only: a zero pad before a convolution or an average pool (which then counts the
    padding, ``count_include_pad=1``), and before a max pool a ``-inf`` pad, or a zero pad of a
    value that is never negative. Between the pad and its reader there may be per-tensor
    QuantizeLinear / DequantizeLinear nodes (a QDQ model): the pad moves past them with its value
    mapped, so an 8-bit tensor padded with its zero point arrives as 0.0 and folds (the QDQ rewrite
    then pads the integer convolution with the zero point). Asymmetric pads fold (the NPU pads top,
    left, bottom and right independently); reflect / edge pads, negative (cropping) pads, pads of N
    or C and pads wider than the window stay a host operator.
    """
    graph = model.graph
    values = _constants(graph)
    shapes = {**_static_shapes(model), **{name: v.shape for name, v in values.items()}}
    users = _consumers(graph)
    outputs = {o.name for o in graph.output}
    removed: list[onnx.NodeProto] = []
    reshaped: set[str] = set()  # values whose shape changes: the pad's and those of the Q / DQ after it
    for node in list(graph.node):
        if node.op_type != "Pad" or node.domain not in ("", "ai.onnx"):
            continue
        spec = _pad_spec(node, values)
        if spec is None:
            continue
        pads, value, chain, current = spec[0], spec[1], [], node.output[0]
        while current not in outputs and len(users.get(current, [])) == 1:
            reader = users[current][0]
            if reader.input[0] != current:
                break
            if reader.op_type == "Transpose":  # tf2onnx pads in NHWC, then transposes to NCHW
                pads = _transposed(pads, reader)
                if pads is None:
                    break
            else:
                mapped = _through_qdq(value, reader, values)
                if mapped is None:
                    break
                value = mapped
            current = reader.output[0]
            chain.append(reader)
        pad = _spatial(pads) if pads is not None else None
        readers = users.get(current, [])
        if pad is None:
            continue
        if current in outputs or len(readers) != 1 or readers[0].op_type not in ("Conv", "AveragePool", "MaxPool"):
            continue
        consumer = readers[0]
        if consumer.input[0] != current or \
                not _foldable_into(consumer, pad, value, node.input[0], graph, values, shapes):
            continue
        own = [int(p) for p in _attrs(consumer).get("pads", [0, 0, 0, 0])]
        _set_attr(consumer, "pads", [a + b for a, b in zip(own, pad, strict=True)])
        if consumer.op_type == "AveragePool" and any(pad):
            _set_attr(consumer, "count_include_pad", 1)
        (chain[0] if chain else consumer).input[0] = node.input[0]
        reshaped.update([node.output[0], *(n.output[0] for n in chain)])
        removed.append(node)
    if removed:
        kept = [n for n in graph.node if not any(n is r for r in removed)]
        del graph.node[:]
        graph.node.extend(kept)
        infos = [vi for vi in graph.value_info if vi.name not in reshaped]
        del graph.value_info[:]
        graph.value_info.extend(infos)
        _drop_unused_initializers(graph)
    return len(removed)


def clips_as_max_min(model: onnx.ModelProto) -> int:
    """Rewrite float ``Clip`` nodes with constant bounds (inputs or, before opset 11, attributes)
    as ``Max`` then ``Min`` with scalar initializers, in place; returns how many."""
    graph = model.graph
    values = _constants(graph)
    types = _elem_types(model)
    new_nodes: list[onnx.NodeProto] = []
    count = 0
    for node in graph.node:
        dtype = types.get(node.input[0]) if node.input else None
        bounds = _clip_bounds(node, values) if node.op_type == "Clip" and dtype in _FLOAT_TYPES else None
        if bounds is None:
            new_nodes.append(node)
            continue
        x = node.input[0]
        np_type = helper.tensor_dtype_to_np_dtype(dtype)
        steps = [(op, b) for op, b in (("Max", bounds[0]), ("Min", bounds[1])) if b is not None]
        if not steps:
            new_nodes.append(helper.make_node("Identity", [x], [node.output[0]], name=node.name))
        for i, (op, bound) in enumerate(steps):
            cname = f"{node.output[0]}__{op.lower()}_bound"
            graph.initializer.append(numpy_helper.from_array(np.array(bound, dtype=np_type), cname))
            out = node.output[0] if i == len(steps) - 1 else f"{node.output[0]}__{op.lower()}"
            new_nodes.append(helper.make_node(op, [x, cname], [out], name=f"{node.name}__{op.lower()}"))
            x = out
        count += 1
    if count:
        del graph.node[:]
        graph.node.extend(new_nodes)
        _drop_unused_initializers(graph)
    return count


def _clip_bounds(node: onnx.NodeProto, values: dict[str, np.ndarray]) -> tuple[float | None, float | None] | None:
    """(min, max) of a Clip whose given bounds are scalar constants; None when one is not."""
    attrs = _attrs(node)
    if "min" in attrs or "max" in attrs:  # opset < 11
        lo, hi = attrs.get("min"), attrs.get("max")
        return (None if lo is None else float(lo)), (None if hi is None else float(hi))
    bounds: list[float | None] = []
    for i in (1, 2):
        name = node.input[i] if len(node.input) > i else ""
        if not name:
            bounds.append(None)
        elif name in values and values[name].size == 1:
            bounds.append(float(values[name].reshape(())))
        else:
            return None
    return bounds[0], bounds[1]


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every value onnx type inference knows."""
    try:
        graph = shape_inference.infer_shapes(model).graph
    except Exception:  # a graph inference cannot type: fall back to the declared types
        graph = model.graph
    types = {t.name: t.data_type for t in graph.initializer}
    for vi in (*graph.input, *graph.value_info, *graph.output):
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    return types


# ------------------------------------------------------------------ symbolic input dimensions
def _declared(vi: onnx.ValueInfoProto) -> tuple[Dim, ...]:
    """An input's dimensions under :func:`tvm_npu.compiler.shapes.declared_dim`: a ``dim_value`` of -1 or 0
    (paddle2onnx), ``?``, an empty ``dim_param`` and a dimension with neither are anonymous."""
    return tuple(declared_dim(int(d.dim_value)) if d.HasField("dim_value") else declared_dim(d.dim_param)
                 for d in vi.type.tensor_type.shape.dim)


def bind_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None = None,
                      option: str = "shapes") -> onnx.ModelProto:
    """``model`` with static input shapes: its symbolic dimensions bound by ``shapes`` (input name -> full
    shape) or, for a batch dimension, to 1 with a warning (the rules of :mod:`tvm_npu.compiler.shapes`).

    A new model when a dimension changes (``model`` itself otherwise). The exporter's ``value_info``
    (tf2onnx writes ``unk__N`` dimensions there too) described the symbolic shapes and is dropped: onnx
    shape inference recomputes it for :func:`fold_shapes`; graph outputs get their inferred static shapes.
    ``option`` is how errors name what the user gave (``"shapes"`` or ``"--input-shape"``).
    """
    inputs = [vi for vi in input_values(model)
              if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")]
    declared = {vi.name: _declared(vi) for vi in inputs}
    static = resolve_shapes(declared, shapes, option)
    if all(static[n] == dims for n, dims in declared.items()):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in out.graph.input:
        if vi.name in static:
            for d, v in zip(vi.type.tensor_type.shape.dim, static[vi.name], strict=True):
                d.Clear()
                d.dim_value = v
    del out.graph.value_info[:]
    try:
        inferred = {o.name: o for o in shape_inference.infer_shapes(out).graph.output}
    except Exception:  # inference fails on custom domains: the outputs keep their declared dims
        inferred = {}
    for o in out.graph.output:
        new = inferred.get(o.name)
        if new is not None and new.type.tensor_type.HasField("shape") and \
                all(d.HasField("dim_value") for d in new.type.tensor_type.shape.dim):
            o.type.tensor_type.shape.CopyFrom(new.type.tensor_type.shape)
    return out


#: Operator domains TVM's ONNX importer reads: the standard one and the ``com.microsoft`` contrib
#: operators it converts (``Attention``, ``SkipLayerNormalization``, ...). It keys its converters by
#: operator type alone, so a node of any other domain is refused here whatever its type.
_FRONTEND_DOMAINS = frozenset({"", "ai.onnx", "com.microsoft"})
_NAMED_NODES = 3  # nodes named per operator in the error


class UnsupportedOperatorError(ValueError):
    """A one-line error for an ONNX model with operators TVM's ONNX importer cannot import:
    each operator (``domain.Type`` outside the standard domain), its first nodes and where the
    supported operators are listed. ``operators`` holds the operator names."""

    def __init__(self, message: str, operators: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.operators = tuple(operators)


def _frontend_operators() -> set[str]:
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    return {*_get_convert_map(), "If", "Constant"}


def supported_operators() -> list[str]:
    """The ONNX operator types the project imports, sorted: those TVM's ONNX importer converts (its
    converter table, ``If`` and ``Constant``) and the operators ``prepare`` writes in others (the recurrent
    layers ``LSTM``, ``GRU``, ``RNN`` and ``LpNormalization``; in the main graph). The importer picks per
    operator the newest converter no newer than the model's opset (the oldest when all are newer), so the
    list is the same for every opset;
    ``com.microsoft`` contrib operators are among them by type."""
    return sorted(_frontend_operators() | set(GATES) | {"LpNormalization"})


def unsupported_operators(model: onnx.ModelProto) -> dict[str, list[str]]:
    """Operator -> the nodes using it (names, else ``output 'x'``), in graph order, for every
    operator of ``model`` that the import cannot import, subgraphs (``If`` branches, ``Loop`` / ``Scan``
    bodies) included. Empty when every operator is known. Recurrent layers count as known in the main
    graph only (subgraph values have no static shapes to unroll them by), and not when the current
    ``PassContext`` disables ``npu.import.recurrent`` (``LpNormalization``: ``npu.import.lp-norm``)."""
    inner = _frontend_operators()
    disabled = _disabled()
    top = set(supported_operators()) - (set(GATES) if "npu.import.recurrent" in disabled else set())
    top -= {"LpNormalization"} if "npu.import.lp-norm" in disabled else set()
    found: dict[str, list[str]] = {}

    def walk(graph: onnx.GraphProto, supported: set[str]) -> None:
        for node in graph.node:
            domain = "" if node.domain == "ai.onnx" else node.domain
            if domain not in _FRONTEND_DOMAINS or node.op_type not in supported:
                op = f"{domain}.{node.op_type}" if domain else node.op_type
                label = repr(node.name) if node.name else f"output {next(iter(node.output), '?')!r}"
                found.setdefault(op, []).append(label)
            for a in node.attribute:
                for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    walk(g, inner)

    walk(model.graph, top)
    return found


def check_operators(model: onnx.ModelProto) -> None:
    """Raise :class:`UnsupportedOperatorError` when ``model`` has operators TVM's ONNX importer
    cannot import (:func:`unsupported_operators`), naming them and their first nodes."""
    found = unsupported_operators(model)
    if not found:
        return
    parts = []
    for op, nodes in found.items():
        more = f" and {len(nodes) - _NAMED_NODES} more" if len(nodes) > _NAMED_NODES else ""
        parts.append(f"{op} (node{'s' if len(nodes) > 1 else ''} {', '.join(nodes[:_NAMED_NODES])}{more})")
    raise UnsupportedOperatorError(
        f"TVM's ONNX importer does not support the operator{'s' if len(found) > 1 else ''} {'; '.join(parts)}; "
        f"supported: {len(supported_operators())} ONNX operators, see "
        f"tvm_npu.compiler.onnx_import.supported_operators()", list(found))


def frontend_error(e: BaseException) -> UnsupportedOperatorError:
    """TVM's ``OpNotImplemented`` (or ``NotImplementedError``) from its ONNX importer as one line."""
    lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
    return UnsupportedOperatorError(f"TVM's ONNX importer: {lines[0] if lines else type(e).__name__}; supported: "
                                    f"{len(supported_operators())} ONNX operators, see "
                                    f"tvm_npu.compiler.onnx_import.supported_operators()")
