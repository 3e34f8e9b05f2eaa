"""Post-training int8 quantization of ONNX models into the QDQ form the NPU compiles.

A thin, checked front end to onnxruntime's ``quantize_static`` (``QuantFormat.QDQ``):
the quantizer itself is onnxruntime's, well kept and what users already trust; this
module chooses the settings the NPU wants (symmetric int8 weights, per output channel
by default; int8 or uint8 activations), prepares the model (opset 13, batch-norm folded)
and turns the usual mistakes with calibration data into one-line errors that name the
input. Whatever fails inside onnxruntime's quantizer is a one-line :class:`QuantizationError`
naming the node it concerns and what to try; the output file is written only on success.
The input helpers (:func:`random_samples`, :func:`npz_samples`; the graph's inputs are
:func:`tvm_npu.models.inputs.graph_inputs`) are shared with :mod:`tvm_npu.tools.quant_error`.

onnxruntime is an optional dependency (``pip install "tvm-npu[quantize]"``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
from onnx import helper, version_converter

from tvm_npu.compiler.onnx_import import bind_input_shapes
from tvm_npu.compiler.shapes import check_shapes
from tvm_npu.models.inputs import InputSpec, graph_inputs, random_arrays  # InputSpec, graph_inputs: re-exported
from tvm_npu.models.registry import load_onnx, opset  # re-exported: their old home
from tvm_npu.report.text import first_line

#: The lowest opset with per-axis QuantizeLinear/DequantizeLinear (per-channel weights).
MIN_OPSET = 13
#: The lowest opset whose QuantizeLinear/DequantizeLinear take 16-bit integers (``int16=`` activations).
INT16_OPSET = 21
ACTIVATIONS = ("int8", "uint8")
INSTALL_HINT = 'pip install "tvm-npu[quantize]"'

#: One calibration sample: an array per graph input, without a sample axis.
Sample = dict[str, np.ndarray]
CalibrationSource = Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]] | str | os.PathLike


def require_onnxruntime() -> ModuleType:
    """``onnxruntime``, or an ImportError whose one line says how to install it."""
    try:
        import onnxruntime
    except ImportError:
        raise ImportError(f"onnxruntime is not installed: {INSTALL_HINT}") from None
    return onnxruntime


# ------------------------------------------------------------------------- model inputs
def _fits(shape: tuple[int, ...], expected: tuple[int | str, ...]) -> bool:
    """Whether ``shape`` has ``expected``'s rank and static dimensions (symbolic ones match anything)."""
    if len(shape) != len(expected):
        return False
    return all(isinstance(e, str) or e == d for d, e in zip(shape, expected, strict=True))


def input_shapes(specs: Mapping[str, InputSpec],
                 overrides: Mapping[str, Sequence[int]] | None = None) -> dict[str, tuple[int | str, ...]]:
    """The shape every input must have: the graph's, with symbolic dimensions fixed by ``overrides``
    (checked as :func:`tvm_npu.compiler.shapes.check_shapes` checks ``--input-shape``; symbolic dimensions without an
    override stay symbolic, so calibration arrays may choose them).
    """
    shapes: dict[str, tuple[int | str, ...]] = {n: s.shape for n, s in specs.items()}
    shapes.update(check_shapes({n: s.shape for n, s in specs.items()}, overrides, "--input-shape"))
    return shapes


def random_samples(model: onnx.ModelProto, count: int, seed: int = 0,
                   overrides: Mapping[str, Sequence[int]] | None = None) -> list[Sample]:
    """``count`` seeded standard-normal samples of every real input, at its static shape."""
    if count < 1:
        raise ValueError(f"the number of random samples must be at least 1, not {count}")
    specs = graph_inputs(model)
    shapes = input_shapes(specs, overrides)
    for name, shape in shapes.items():
        if not all(isinstance(d, int) and d > 0 for d in shape):
            raise ValueError(f"input {name!r} has symbolic dimensions ({', '.join(map(str, shape))}): give its "
                             f"shape with --input-shape {name}=d0,d1,... or pass arrays")
        if not np.issubdtype(specs[name].dtype, np.floating):
            raise ValueError(f"input {name!r} takes {specs[name].dtype}; random inputs are floating-point only: "
                             f"pass arrays")
    rng = np.random.default_rng(seed)  # one generator, drawing sample after sample
    bound = [InputSpec(n, shapes[n], specs[n].dtype) for n in specs]
    return [dict(zip(specs, random_arrays(bound, rng), strict=True)) for _ in range(count)]


def check_samples(arrays: Mapping[str, np.ndarray], model: onnx.ModelProto, source: str = "calibration",
                  overrides: Mapping[str, Sequence[int]] | None = None) -> list[Sample]:
    """Per-sample feeds from one array per input, each a single sample or samples along a leading axis.

    Every message is one line naming the input and what it accepts: the users of this
    are people whose arrays came from somewhere else.
    """
    specs = graph_inputs(model)
    shapes = input_shapes(specs, overrides)
    for name in arrays:
        if name not in specs:
            raise ValueError(f"{source}: array {name!r} is not an input of the model; its inputs are {list(specs)}")
    missing = [n for n in specs if n not in arrays]
    if missing:
        raise ValueError(f"{source}: no array for input {missing[0]!r}; the model's inputs are {list(specs)}")
    batched: dict[str, np.ndarray] = {}
    for name, spec in specs.items():
        a = np.asarray(arrays[name])
        want = f"({', '.join(map(str, shapes[name]))})"
        floating = np.issubdtype(spec.dtype, np.floating)
        if not np.issubdtype(a.dtype, np.floating) if floating else a.dtype != spec.dtype:
            raise ValueError(f"{source}: array {name!r} is {a.dtype}; input {name!r} takes "
                             f"{'floating-point values' if floating else spec.dtype}")
        if _fits(a.shape, shapes[name]):
            a = a[None]
        elif not (a.ndim and a.shape[0] and _fits(a.shape[1:], shapes[name])):
            raise ValueError(f"{source}: array {name!r} has shape {a.shape}; input {name!r} takes {want} or "
                             f"(samples, {want[1:]} with a leading sample axis")
        batched[name] = a.astype(spec.dtype, copy=False)
    counts = {n: len(a) for n, a in batched.items()}
    if len(set(counts.values())) > 1:
        raise ValueError(f"{source}: the arrays hold different numbers of samples {counts}; give every input "
                         f"the same")
    return [{n: a[i] for n, a in batched.items()} for i in range(next(iter(counts.values())))]


def npz_samples(path: str | os.PathLike, model: onnx.ModelProto,
                overrides: Mapping[str, Sequence[int]] | None = None) -> list[Sample]:
    """:func:`check_samples` of the arrays of an ``.npz`` file, named by input (pickles are refused)."""
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    return check_samples(arrays, model, str(path), overrides)


def calibration_samples(model: onnx.ModelProto, calibration: CalibrationSource | None = None, *,
                        random: int | None = None, seed: int = 0,
                        overrides: Mapping[str, Sequence[int]] | None = None) -> list[Sample]:
    """The checked calibration samples from exactly one source: arrays, an ``.npz`` path or ``random`` draws."""
    if (calibration is None) == (random is None):
        raise ValueError("give exactly one calibration source: arrays or an .npz file, or a number of random samples")
    if random is not None:
        return random_samples(model, random, seed, overrides)
    if isinstance(calibration, str | os.PathLike):
        return npz_samples(calibration, model, overrides)
    if isinstance(calibration, Mapping):
        return check_samples(calibration, model, overrides=overrides)
    return [s for sample in calibration for s in check_samples(sample, model, overrides=overrides)]


# ---------------------------------------------------------------------------- quantize
def _load_or(path: Path, fallback: onnx.ModelProto) -> onnx.ModelProto:
    """The model at ``path`` (without its external data), or ``fallback`` when it cannot be read."""
    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception:
        return fallback


def qdq_counts(model: onnx.ModelProto) -> tuple[int, int]:
    """(QuantizeLinear nodes, DequantizeLinear nodes) of the main graph."""
    ops = [n.op_type for n in model.graph.node]
    return ops.count("QuantizeLinear"), ops.count("DequantizeLinear")


def _prepare(model: onnx.ModelProto, min_opset: int = MIN_OPSET) -> onnx.ModelProto:
    """A copy of ``model`` at opset ``min_opset`` (13, or 21 for 16-bit activations) or later, its weights no
    longer listed as graph inputs.

    Old IR versions list every initializer as an input too; onnxruntime's optimiser then
    shares equal initializers and leaves the others' input entries behind as inputs the
    calibration run is asked to feed.
    """
    if opset(model) < min_opset:
        need = "16-bit activations need" if min_opset >= INT16_OPSET else "per-axis quantization needs"
        try:
            model = version_converter.convert_version(model, min_opset)
        except Exception as e:
            raise ValueError(f"cannot upgrade the model from opset {opset(model)} to {min_opset}, which "
                             f"{need}: {first_line(e)}") from None
    else:
        model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    model.ir_version = max(model.ir_version, helper.find_min_ir_version_for(model.opset_import, ignore_unknown=True))
    _name_nodes(model)
    return model


def _name_nodes(model: onnx.ModelProto) -> None:
    """Name every unnamed node of the main graph after its first output, so that errors can name
    it and ``exclude`` (onnxruntime's ``nodes_to_exclude``, which matches node names) can select it."""
    taken = {n.name for n in model.graph.node if n.name}
    for i, node in enumerate(model.graph.node):
        if not node.name:
            base = next((o for o in node.output if o), f"{node.op_type}_{i}")
            name, k = base, 1
            while name in taken:
                name, k = f"{base}_{k}", k + 1
            node.name = name
            taken.add(name)


# ------------------------------------------------------------------ quantizer failures
class QuantizationError(ValueError):
    """onnxruntime's quantizer failed: one line saying what failed, the node it concerns when it can be
    found and what to try; onnxruntime's own exception is chained (``__cause__``)."""


#: Suffixes onnxruntime's quantizer appends to a tensor's name for the tensors it makes from it.
_ORT_SUFFIXES = ("_scale", "_zero_point", "_quantized", "_QuantizeLinear_Output", "_DequantizeLinear_Output",
                 "_QuantizeLinear", "_DequantizeLinear", "_ReduceMin", "_ReduceMax", "_Reshape", "_output_0")


def _mentioned_names(e: BaseException) -> list[str]:
    """The tensor or node names an exception names: a KeyError's key, or the quoted words of its message."""
    if isinstance(e, KeyError) and e.args and isinstance(e.args[0], str):
        found = [e.args[0]]
    else:
        found = [a or b for a, b in re.findall(r"'([^'\n]+)'|\"([^\"\n]+)\"", str(e))]
    names = []
    for name in found:
        stripped = name
        while True:  # "140_scale", "140_QuantizeLinear_Output_scale", ... -> "140"
            shorter = next((stripped[:-len(s)] for s in _ORT_SUFFIXES
                            if stripped.endswith(s) and len(stripped) > len(s)), None)
            if shorter is None:
                break
            stripped = shorter
        names += [n for n in (name, stripped) if n not in names]
    return names


def failed_node(e: BaseException, model: onnx.ModelProto) -> onnx.NodeProto | None:
    """The node of ``model`` an exception from onnxruntime's quantizer concerns: the one it names, or the one
    producing (else the first consuming) a tensor it names; None when it names none of them."""
    nodes = list(model.graph.node)
    for name in _mentioned_names(e):
        for found in ([n for n in nodes if n.name == name], [n for n in nodes if name in n.output],
                      [n for n in nodes if name in n.input]):
            if found:
                return found[0]
    return None


def quantization_error(e: BaseException, stage: str, model: onnx.ModelProto, *, per_channel: bool = True,
                       activations: str = "int8") -> QuantizationError:
    """``e``, raised by onnxruntime's ``stage`` on ``model``, as one line: what failed, the node it concerns and
    what to try (the CLI's options; in Python ``exclude=[...]``, ``per_channel=False``, ``activations=``)."""
    node = failed_node(e, model)
    where = f" at {node.op_type} node {node.name!r}" if node is not None else ""
    tries = [f"--exclude {node.name} to keep that node in float" if node is not None
             else "--exclude NODE to keep the node it concerns in float"]
    if per_channel:
        tries.append("--per-tensor")
    tries.append(f"--activations {'uint8' if activations == 'int8' else 'int8'}")
    what = f"{type(e).__name__}: {first_line(e)}"
    return QuantizationError(f"onnxruntime's {stage} failed{where} ({what}); try {', '.join(tries[:-1])} or "
                             f"{tries[-1]} (--verbose shows onnxruntime's traceback)")


def quantize_model(model: str | os.PathLike | onnx.ModelProto, output: str | os.PathLike, *,
                   calibration: CalibrationSource | None = None, random: int | None = None, seed: int = 0,
                   activations: str = "int8", per_channel: bool = True,
                   input_shapes: Mapping[str, Sequence[int]] | None = None,
                   exclude: Sequence[str] = (), int16: Sequence[str] | None = None,
                   target_sqnr: float | None = None) -> Path:
    """Quantize ``model`` to QDQ int8 with onnxruntime's ``quantize_static``; returns ``output``.

    Calibration data is ``calibration`` (arrays by input name, each one sample or samples
    along a leading axis; a list of such mappings; or an ``.npz`` path) or ``random``
    seeded standard-normal samples. ``input_shapes`` binds the model's symbolic input dimensions first
    (:func:`tvm_npu.compiler.onnx_import.bind_input_shapes`: without it a symbolic batch is 1, with a warning), so
    the quantized model has static input shapes, as the NPU compiles them. Weights
    are symmetric int8, per output channel unless ``per_channel=False``; activations are
    asymmetric ``int8`` or ``uint8``. The fp32 tensor names are kept, which
    :func:`tvm_npu.tools.quant_error.compare_models` relies on. ``exclude`` names nodes to leave in
    float (onnxruntime's ``nodes_to_exclude``): a node's name or, for an unnamed node, its first output's.
    ``int16`` names activation tensors to quantize to 16 bits (int16, or uint16 beside ``uint8``) through
    onnxruntime's ``TensorQuantOverrides``; given at all (even empty), the model is upgraded to opset 21 first,
    so that the models made with different ``int16`` lists name their tensors alike (onnxruntime's
    pre-processing names the tensors it makes differently at different opsets). ``target_sqnr`` (dB)
    chooses them instead: :func:`tvm_npu.tools.precision_search.choose_precisions` moves the tensors that add
    most output error per NPU cycle to 16 bits or fp16 (their producers left in float, their QDQ pairs
    removed: compile with ``-precision=fp16``) until the output's SQNR against the fp32 model on the
    calibration samples and on as many held-out seeded samples reaches it.

    A failure inside onnxruntime's quantizer (pre-processing, calibration, quantization) is a
    :class:`QuantizationError` (a ValueError) of one line naming the node it concerns and what to
    try, onnxruntime's exception chained. ``output`` is written only on success (through a temporary
    file beside it); the input model file is only read.
    """
    require_onnxruntime()
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if activations not in ACTIVATIONS:
        raise ValueError(f"activations must be one of {ACTIVATIONS}, not {activations!r}")
    proto = bind_input_shapes(load_onnx(model), input_shapes)
    samples = calibration_samples(proto, calibration, random=random, seed=seed)
    if target_sqnr is not None:
        if int16:
            raise ValueError("give the 16-bit tensors (int16=) or a target SQNR that chooses them, not both")
        held_out = random_samples(proto, random, seed + 1) if random is not None else None  # (for data: none)
        return _search(proto, samples, held_out, output, target_sqnr, activations=activations,
                       per_channel=per_channel, exclude=exclude)
    proto = _prepare(proto, MIN_OPSET if int16 is None else INT16_OPSET)
    _check_excluded(proto, exclude)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._samples = iter(samples)

        def get_next(self) -> Sample | None:
            return next(self._samples, None)

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tvm-npu-quantize.") as tmp:
        source, prepared = Path(tmp) / "model.onnx", Path(tmp) / "prepared.onnx"
        onnx.save(proto, str(source))
        # onnxruntime's basic graph optimisation folds batch-norm (and constant chains) into
        # the convolutions before calibration, so each conv gets one quantization step on its
        # final output, as the NPU computes it, instead of one before and one after the BN;
        # it keeps the tensor names. Given a path, not a ModelProto: for a ModelProto it moves
        # the initializers out of the model, and then cannot read a ConstantOfShape's shape.
        # Symbolic shape inference is skipped: it needs sympy and only helps transformer-style
        # dynamic shapes; onnx shape inference still runs.
        options = {"per_channel": per_channel, "activations": activations}
        try:
            quant_pre_process(source, prepared, skip_symbolic_shape=True)
        except Exception as e:
            raise quantization_error(e, "model preparation (quant_pre_process)", proto, **options) from e
        _check_tensors(_load_or(prepared, proto), int16 or ())  # pre-processing inlines functions: their tensors count
        with _replacing(output) as partial:
            try:
                quantize_static(
                    str(prepared), str(partial), Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=QuantType.QInt8 if activations == "int8" else QuantType.QUInt8,
                    weight_type=QuantType.QInt8, nodes_to_exclude=list(exclude),
                    # the defaults, stated: the NPU's int8 weights carry no zero point
                    extra_options={"WeightSymmetric": True, "ActivationSymmetric": False,
                                   **_wide_overrides(int16 or (), activations)},
                )
            except Exception as e:
                raise quantization_error(e, "quantize_static", _load_or(prepared, proto), **options) from e
    return output


def _search(proto: onnx.ModelProto, samples: list[Sample], held_out: list[Sample] | None, output: str | os.PathLike,
            target_sqnr: float, *, exclude: Sequence[str], **settings: str | bool) -> Path:
    """:func:`tvm_npu.tools.precision_search.choose_precisions` with :func:`quantize_model` as its mechanics."""
    from tvm_npu.tools.precision_search import choose_precisions  # the search; the mechanics stay here

    quantize = functools.partial(quantize_model, proto, calibration=samples, **settings)
    return choose_precisions(quantize, proto, samples, output, target_sqnr, exclude=exclude, held_out=held_out).output


def _check_excluded(proto: onnx.ModelProto, exclude: Sequence[str]) -> None:
    """A one-line error for a name in ``exclude`` that is no node of ``proto``."""
    names = {n.name for n in proto.graph.node}
    unknown = [n for n in exclude if n not in names]
    if unknown:
        raise ValueError(f"--exclude {unknown[0]!r}: the model has no node of that name; its nodes are "
                         f"{', '.join(n.name for n in proto.graph.node[:12])}{', ...' * (len(names) > 12)}")


def _check_tensors(proto: onnx.ModelProto, int16: Sequence[str]) -> None:
    """A one-line error for a name in ``int16`` that is no activation tensor of ``proto`` (as prepared)."""
    tensors = {*(i.name for i in proto.graph.input), *(o for n in proto.graph.node for o in n.output)}
    unknown = [t for t in int16 if t not in tensors]
    if unknown:
        raise ValueError(f"int16 tensor {unknown[0]!r}: the model has no activation tensor of that name "
                         f"(name graph inputs or node outputs)")


def _wide_overrides(int16: Sequence[str], activations: str) -> dict[str, dict]:
    """onnxruntime's per-tensor override making each tensor of ``int16`` a 16-bit activation of the same
    signedness as ``activations``; empty without any (``TensorQuantOverrides`` then stays unset)."""
    if not int16:
        return {}
    from onnxruntime.quantization import QuantType

    wide = QuantType.QInt16 if activations == "int8" else QuantType.QUInt16
    return {"TensorQuantOverrides": {t: [{"quant_type": wide}] for t in dict.fromkeys(int16)}}


@contextlib.contextmanager
def _replacing(output: Path) -> Iterator[Path]:
    """A temporary file beside ``output`` to write, moved over ``output`` only when the block completes: a
    failure leaves no partial file, and an existing output stays as it was."""
    fd, partial = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".partial", dir=output.parent)
    os.close(fd)
    try:
        yield Path(partial)
        os.replace(partial, output)
    finally:
        Path(partial).unlink(missing_ok=True)
