"""Post-training int8 quantization of ONNX models into the QDQ form the NPU compiles.

A thin, checked front end to onnxruntime's ``quantize_static`` (``QuantFormat.QDQ``):
the quantizer itself is onnxruntime's, well kept and what users already trust; this
module chooses the settings the NPU wants (symmetric int8 weights, per output channel
by default; int8 or uint8 activations), prepares the model (opset 13, batch-norm folded)
and turns the usual mistakes with calibration data into one-line errors that name the
input. The input helpers (:func:`random_samples`, :func:`npz_samples`; the graph's inputs are
:func:`tvm_npu.models.inputs.graph_inputs`) are shared with :mod:`tvm_npu.tools.quant_error`.

onnxruntime is an optional dependency (``pip install "tvm-npu[quantize]"``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
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
def qdq_counts(model: onnx.ModelProto) -> tuple[int, int]:
    """(QuantizeLinear nodes, DequantizeLinear nodes) of the main graph."""
    ops = [n.op_type for n in model.graph.node]
    return ops.count("QuantizeLinear"), ops.count("DequantizeLinear")


def _prepare(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` at opset 13 or later, its weights no longer listed as graph inputs.

    Old IR versions list every initializer as an input too; onnxruntime's optimiser then
    shares equal initializers and leaves the others' input entries behind as inputs the
    calibration run is asked to feed.
    """
    if opset(model) < MIN_OPSET:
        try:
            model = version_converter.convert_version(model, MIN_OPSET)
        except Exception as e:
            raise ValueError(f"cannot upgrade the model from opset {opset(model)} to {MIN_OPSET}, which "
                             f"per-axis quantization needs: {first_line(e)}") from None
    else:
        model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    model.ir_version = max(model.ir_version, helper.find_min_ir_version_for(model.opset_import, ignore_unknown=True))
    return model


def quantize_model(model: str | os.PathLike | onnx.ModelProto, output: str | os.PathLike, *,
                   calibration: CalibrationSource | None = None, random: int | None = None, seed: int = 0,
                   activations: str = "int8", per_channel: bool = True,
                   input_shapes: Mapping[str, Sequence[int]] | None = None) -> Path:
    """Quantize ``model`` to QDQ int8 with onnxruntime's ``quantize_static``; returns ``output``.

    Calibration data is ``calibration`` (arrays by input name, each one sample or samples
    along a leading axis; a list of such mappings; or an ``.npz`` path) or ``random``
    seeded standard-normal samples. ``input_shapes`` binds the model's symbolic input dimensions first
    (:func:`tvm_npu.compiler.onnx_import.bind_input_shapes`: without it a symbolic batch is 1, with a warning), so
    the quantized model has static input shapes, as the NPU compiles them. Weights
    are symmetric int8, per output channel unless ``per_channel=False``; activations are
    asymmetric ``int8`` or ``uint8``. The fp32 tensor names are kept, which
    :func:`tvm_npu.tools.quant_error.compare_models` relies on.
    """
    require_onnxruntime()
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if activations not in ACTIVATIONS:
        raise ValueError(f"activations must be one of {ACTIVATIONS}, not {activations!r}")
    proto = bind_input_shapes(load_onnx(model), input_shapes)
    samples = calibration_samples(proto, calibration, random=random, seed=seed)
    proto = _prepare(proto)

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
        quant_pre_process(source, prepared, skip_symbolic_shape=True)
        quantize_static(
            str(prepared), str(output), Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
            activation_type=QuantType.QInt8 if activations == "int8" else QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            # the defaults, stated: the NPU's int8 weights carry no zero point
            extra_options={"WeightSymmetric": True, "ActivationSymmetric": False},
        )
    return output
