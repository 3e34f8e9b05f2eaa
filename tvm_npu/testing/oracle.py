"""The differential oracle: one ONNX model, one target string, one verdict.

``run_case(model, target, seed)`` runs the model three ways on the same seeded inputs:

* onnxruntime (CPUExecutionProvider): the independent reference;
* ``tvm_npu.build_reference`` (everything on llvm): the reference the project promises to match;
* ``tvm_npu.build(model, target)``, run under ``tvm_npu.profile()`` (NPU partitions on the simulator).

and classifies the outcome (:class:`Outcome`). What "the same numbers" means depends on the model's
precision (:func:`model_precision`, read off the model); the fp32 rules come first, the 8-bit and fp16
ones after the list.

``match``      the NPU result equals llvm (fp32 rtol 1e-4 / atol 1e-5) and onnxruntime (max error
               relative to the output's range <= 1e-4, where an element may in addition be off by
               1e-5 of its own magnitude: an output that is nearly constant has a range of a few
               ulps, e.g. ``((x + k) - x) @ W``, and a different summation order is not a bug);
``fallback``   the same, and the build raised ``tvm_npu.HostFallbackWarning`` (an operator stayed on the host);
``ill-conditioned``  the NPU disagrees with llvm or onnxruntime, but the model computed in float64
               (llvm) shows the NPU is as close to the exact result as the other fp32 result: rounding
               of an output made of cancelling large terms (the NPU sums in a wider accumulator);
``own-error``  the build or the run raised one of the project's own exception classes (defined in a
               ``tvm_npu`` module: ``PlanError``, ``EmitError``, ``NoTileFits``, the simulator's errors ...);
``failure``    anything else: a foreign exception (IndexError, TypeError, AssertionError, a TVM internal
               error ...), a wrong number (``mismatch-vs-llvm``, ``mismatch-vs-onnxruntime``), an
               output of another type than the model declares (``wrong-dtype``), the llvm reference
               itself failing, disagreeing with onnxruntime or of the wrong type (``reference-*``), a
               timeout, or (in ``benchmarks/fuzz.py``'s worker) a crashed process.

8-bit (QDQ) models: onnxruntime runs at ``ORT_ENABLE_BASIC``, the QDQ graph as written (float
arithmetic between QuantizeLinear and DequantizeLinear, the ONNX semantics; its default level fuses
QDQ into integer kernels that saturate uint8 products on x86 without VNNI). The llvm reference computes
the same integer kernels as the NPU (``build_reference`` runs the same semantic rewrites), so an
output that is dequantized from 8 bits must be bit-exact against llvm; against onnxruntime it is
compared in quantization steps of its DequantizeLinear: at least 99.9% of the elements equal and none
more than one step apart (integer kernels and the float path round differently on rare elements). An
output computed in float from dequantized tensors (operators the quantizer leaves in float: Sub, Max,
Min, Tanh, ReduceMean) follows the fp32 rule against llvm (those operators may run on the NPU in
fp32), and against onnxruntime may be off by one step of each quantized tensor it is computed from
(:func:`output_units`). Where the NPU is bit-exact with llvm and both are off onnxruntime, the tie
arbiter (:func:`tie_arbiter`) looks for the first quantized tensor llvm and onnxruntime differ in: when
every difference there is a value exactly half a step between two (an average pool's often are),
which the integer kernels round half to even and onnxruntime's fp32 float path to either side, the
case is ``ill-conditioned`` (kind ``ties``; a wrong number after such a tie would hide in that case).
The same arbiter settles a difference between the NPU and llvm (with llvm's float values) in a model with
a float operator left between dequantize and quantize (a ``HostFallbackWarning`` says so: it sums in
another order on the two); without one the NPU must be bit-exact.
Mixed 8/16-bit models (``int16`` / ``uint16``, A16W8) follow the same rules; a 16-bit step is 256 times
finer, so onnxruntime's own float32 sums decide more roundings and the tie band grows with a value's
size in steps (:data:`TIE_ROUNDINGS`).

fp16 models: the NPU against llvm only: no NaN or inf where llvm is finite, and every element within
:data:`FP16_ULPS` fp16 ulps of the output's largest magnitude (the constant says why); beyond that,
the float64 arbiter (the fp16 model evaluated in float64) may still find the NPU as close to the exact
result as llvm (``ill-conditioned``). Not onnxruntime: its CPU provider runs fp16 nodes it has no fp16
kernel for in fp32 and drops the casts between them, so it rounds a chain of nodes once where the
model rounds every node's result (MatMul -> Add: ``x @ w + k`` with ``x @ w`` also an output, onnxruntime
0.0004482, the model's fp16 semantics, numpy, llvm and the NPU 0.0004272: 48 ulps of that output).

Errors raised inside a Python callback that TVM calls (the codegen ``relax.ext.npu``, the simulator
behind the ``npu`` runtime module) cross TVM's FFI, which keeps only the registered exception
kinds; :func:`own_errors_cross_ffi` registers the project's classes while a case runs, so that their
type survives the crossing and the classification is exact.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import math
import pkgutil
import signal
import time
import traceback
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx
import tvm
from onnx import TensorProto
from onnx import numpy_helper as nh
from tvm import relax

import tvm_npu
from tvm_npu.simulator import HazardError

RTOL, ATOL = 1e-4, 1e-5  # against llvm (the project's promise)
ORT_RANGE_TOL = 1e-4  # against onnxruntime: max |error| / (max - min of the output) ...
ORT_ELEMENT_RTOL = 1e-5  # ... not counting 1e-5 of each element's own magnitude (near-constant outputs)
#: 8-bit against onnxruntime: the share of an output's elements that may differ (by one step at most)
QUANT_UNEQUAL_SHARE = 1e-3
#: a float value within this many quantization steps of half a step is a tie (:func:`tie_arbiter`): fp32
#: rounding of a few operations on values of up to 2**8 steps moves them by about 2**8 * 2**-24 * ops
TIE_STEPS = 1e-3
#: ... and in a tensor of values of more steps (a 16-bit tensor's reach 2**15), this many times 2**-24 of
#: its largest value in steps: the same allowance of about 64 fp32 roundings, TIE_STEPS at 2**8 steps (a
#: 16-bit step is 256 times finer, so float32 paths decide some roundings: docs, "16-bit activations"); of
#: the largest, not of the element's own value: a sum's float32 error follows its terms, and a small
#: result of large terms (a convolution's near zero) carries their error)
TIE_ROUNDINGS = 64
#: fp16 against llvm: every element within this many ulps of the output's largest magnitude (2**-10
#: of it per ulp). Both accumulate in fp32 and round once per operator, so an operator's result differs
#: by one ulp where the two fp32 sums (other order) straddle a rounding point; the NPU also rounds fewer
#: times (its epilogue applies bias, folded batch-norm, activation and residual add in
#: fp32 before one rounding; llvm rounds after each ONNX node), rounds batch-norm folded into fp16
#: weights, and approximates sigmoid/tanh within a few ulps. That is about one ulp per node of the
#: graph (at most 8), and the layers after it pass it on with gain about one (weights scaled by
#: fan-in, 1-Lipschitz activations): 8 ulps; a wrong operator is off by far more (it changes values
#: by their own size), fp16 accumulation instead of fp32 by about sqrt(fan-in) ulps.
FP16_ULPS = 8
FP16_ULP = 2.0**-10  # of a value's magnitude, an upper bound of its fp16 ulp
#: operators that change a value by at most as much as an operand changes (gain <= 1 per operand): an
#: output of float operators on dequantized tensors is off by at most one step of each such tensor
GAIN_ONE = frozenset({"Add", "Sub", "Max", "Min", "Relu", "Clip", "Sigmoid", "Tanh", "ReduceMean", "MaxPool",
                      "AveragePool", "GlobalAveragePool", "Flatten", "Reshape", "Identity"})
#: the words of the HostFallbackWarning of a quantized region left in float (:func:`run_case`)
FLOAT_REGION = "runs as float32 between dequantize and quantize"
#: graph outputs of these types are quantized values themselves (step 1)
INTEGER_OUTPUTS = (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16)
#: those of them whose second input is an operand too (not a bound or a shape)
BINARY_INPUTS = frozenset({"Add", "Sub", "Max", "Min"})
REPO = Path(__file__).resolve().parents[2]
STAGES = ("relay_patterns", "tir_schedules", "codegen", "simulator")
PROJECT_DIRS = tuple(str(REPO / d) for d in ("tvm_npu", *STAGES))


# ------------------------------------------------------------------------------- the project's errors
#: exceptions the planner uses for control flow inside its search: escaping, they are bugs, not errors
INTERNAL = frozenset({"Pruned"})


def project_errors() -> tuple[type[BaseException], ...]:
    """Every public exception class defined in a ``tvm_npu`` module (found by importing the package's
    modules), except warnings and the search's control flow (:data:`INTERNAL`, private classes)."""
    found: dict[str, type[BaseException]] = {}
    # the stage folders are subpackages installed from folders of their own: walk each
    packages = [("tvm_npu", tvm_npu.__path__)]
    for stage in STAGES:
        packages.append((f"tvm_npu.{stage}", importlib.import_module(f"tvm_npu.{stage}").__path__))
    names = [name for name, _ in packages]
    names += [info.name for prefix, path in packages for info in pkgutil.iter_modules(path, prefix + ".")]
    for name in names:
        if name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(name)
        except Exception:  # a module that needs an optional dependency
            continue
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if (issubclass(obj, Exception) and not issubclass(obj, Warning) and obj.__module__.startswith("tvm_npu")
                    and not obj.__name__.startswith("_") and obj.__name__ not in INTERNAL):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return tuple(found[k] for k in sorted(found))


OWN_ERRORS: tuple[type[BaseException], ...] = project_errors()


@functools.cache
def _reraisable(cls: type[BaseException]) -> type[BaseException]:
    """``cls`` or, when its constructor needs more than a message (InstructionError, HazardError ...), a
    subclass that TVM's FFI can rebuild from the message alone (``isinstance`` still holds)."""
    try:
        cls("probe")
        return cls
    except Exception:
        def init(self: BaseException, message: str = "") -> None:
            Exception.__init__(self, message)

        def text(self: BaseException) -> str:
            return str(self.args[0]) if self.args else ""

        return type(cls.__name__, (cls,), {"__init__": init, "__str__": text, "__module__": cls.__module__})


@contextlib.contextmanager
def own_errors_cross_ffi() -> Iterator[None]:
    """Register the project's exception classes with TVM's FFI for the duration (restored afterwards)."""
    from tvm_ffi import core

    saved = (dict(core.ERROR_NAME_TO_TYPE), dict(core.ERROR_TYPE_TO_NAME))
    try:
        for cls in OWN_ERRORS:
            name = f"tvm_npu.{cls.__qualname__}"
            core.ERROR_TYPE_TO_NAME[cls] = name
            core.ERROR_NAME_TO_TYPE[name] = _reraisable(cls)
        yield
    finally:
        core.ERROR_NAME_TO_TYPE.clear()
        core.ERROR_NAME_TO_TYPE.update(saved[0])
        core.ERROR_TYPE_TO_NAME.clear()
        core.ERROR_TYPE_TO_NAME.update(saved[1])


# ------------------------------------------------------------------------------------------ outcome
@dataclass
class Outcome:
    status: str  # match | fallback | ill-conditioned | own-error | failure
    kind: str  # match, fallback, the exception class, mismatch-vs-llvm, timeout, ...
    detail: str = ""  # message, error figures, or the head of the traceback
    location: str = ""  # innermost project frame (file:function) of an exception, for grouping
    npu_runs: int = 0  # NPU partition executions in the run
    npu_layers: tuple[str, ...] = ()  # operator kinds the NPU ran (one per layer)
    fallbacks: tuple[str, ...] = ()  # HostFallbackWarning messages
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status != "failure"

    @property
    def signature(self) -> str:
        """What distinguishes one bug from another: verdict, kind and where it was raised."""
        return f"{self.status}:{self.kind}@{self.location}" if self.location else f"{self.status}:{self.kind}"

    def to_dict(self) -> dict:
        return asdict(self)

    def report(self) -> str:
        lines = [f"{self.status}: {self.kind}" + (f" at {self.location}" if self.location else "")]
        if self.fallbacks:
            lines.append("host fallbacks: " + "; ".join(self.fallbacks))
        if self.detail:
            lines.append(self.detail)
        return "\n".join(lines)


@dataclass
class Timeout(Exception):
    seconds: float = 0.0

    def __str__(self) -> str:
        return f"the case did not finish within {self.seconds:.0f} s"


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`Timeout` after ``seconds`` (main thread only: SIGALRM; no limit elsewhere)."""
    import threading

    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_signum: int, _frame: object) -> None:
        raise Timeout(seconds)

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------------------------------ running
def model_precision(model: onnx.ModelProto) -> str:
    """``fp16`` (fp16 inputs), ``int16`` / ``uint16`` (QDQ with a 16-bit QuantizeLinear: 8/16-bit
    activations), ``int8`` / ``uint8`` (QDQ: the type of its QuantizeLinear's zero point, uint8 without
    one, as ONNX says) or ``fp32`` (also a model the quantizer left as it was, finding nothing to
    quantize): which rules judge the case."""
    inits = {i.name: i for i in model.graph.initializer}
    if any(i.type.tensor_type.elem_type == TensorProto.FLOAT16 for i in model.graph.input if i.name not in inits):
        return "fp16"
    types = [inits[n.input[2]].data_type if len(n.input) > 2 and n.input[2] in inits else TensorProto.UINT8
             for n in model.graph.node if n.op_type == "QuantizeLinear"]
    for wide, name in ((TensorProto.INT16, "int16"), (TensorProto.UINT16, "uint16")):
        if wide in types:
            return name
    return ("int8" if types[0] == TensorProto.INT8 else "uint8") if types else "fp32"


def random_inputs(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """Seeded standard-normal arrays, in each input's type (fp32 or fp16), for the graph inputs
    (initializers excluded)."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        shape = tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type)
        feeds[inp.name] = rng.standard_normal(shape).astype(np.float32).astype(dtype)
    return feeds


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray], basic: bool = False) -> list[np.ndarray]:
    """The model's outputs from onnxruntime's CPU provider; ``basic``: at ``ORT_ENABLE_BASIC``, which
    leaves QDQ nodes as written (the default level fuses them into integer kernels)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    if basic:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [np.asarray(a) for a in session.run(None, feeds)]


def _flatten(value: object) -> list[np.ndarray]:
    if hasattr(value, "numpy"):
        return [value.numpy()]
    return [a for v in value for a in _flatten(v)]  # type: ignore[attr-defined]


def run_vm(executable: relax.VMExecutable, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    inits = {i.name for i in model.graph.initializer}
    args = [tvm.runtime.tensor(feeds[i.name]) for i in model.graph.input if i.name not in inits]
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return _flatten(vm["main"](*args))


def _location(exc: BaseException) -> str:
    """The innermost frame of the traceback in the project's sources (else the innermost frame at all)."""
    frames = traceback.extract_tb(exc.__traceback__)
    for fr in reversed(frames):
        if fr.filename.startswith(PROJECT_DIRS):
            return f"{Path(fr.filename).relative_to(REPO)}:{fr.name}"
    if frames:
        fr = frames[-1]
        return f"{Path(fr.filename).name}:{fr.name}"
    return ""


def traceback_head(exc: BaseException, frames: int = 8) -> str:
    """The exception line and the innermost ``frames`` frames (TVM appends the C++/Python backtrace)."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    msg = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    if len(msg) > 1500:
        msg = msg[:1500] + " ..."
    body = "".join(lines[1:-1]).rstrip().splitlines()
    return "\n".join([msg, "innermost frames:", *body[-2 * frames:]])


def _layout_mismatch(got: Sequence[np.ndarray], want: Sequence[np.ndarray], names: Sequence[str]) -> str:
    """'' when both runs give as many outputs of the same shapes, else what differs."""
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    return next((f"output {name}: shape {g.shape}, expected {w.shape}"
                 for g, w, name in zip(got, want, names, strict=True) if g.shape != w.shape), "")


def _compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray], names: Sequence[str],
             relative_to_range: bool) -> str:
    """'' when every output matches, else a one-line description of the worst output."""
    if off := _layout_mismatch(got, want, names):
        return off
    for g, w, name in zip(got, want, names, strict=True):
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        if not np.isfinite(g64).all() and not np.array_equal(np.isfinite(g64), np.isfinite(w64)):
            return f"output {name}: {int((~np.isfinite(g64)).sum())} non-finite values"
        err = np.abs(g64 - w64)
        if relative_to_range:
            span = float(np.ptp(w64)) if w64.size else 0.0
            span = span or float(np.abs(w64).max(initial=0.0)) or 1.0
            # a nearly constant output has a range of a few ulps: there an element may also be off by
            # ORT_ELEMENT_RTOL of its own magnitude (fp32 rounding of a different summation order)
            excess = err - ORT_ELEMENT_RTOL * np.abs(w64)
            worst = float(err.max(initial=0.0)) / span
            if float(excess.max(initial=0.0)) / span > ORT_RANGE_TOL:
                i = np.unravel_index(int(np.argmax(excess)), err.shape)
                return (f"output {name} {tuple(g.shape)}: max error / range = {worst:.3g} > {ORT_RANGE_TOL} "
                        f"(at {tuple(int(j) for j in i)}: {g64[i]:.6g} vs {w64[i]:.6g}; range {span:.4g})")
        elif not np.allclose(g64, w64, rtol=RTOL, atol=ATOL, equal_nan=True):
            bad = err > ATOL + RTOL * np.abs(w64)
            i = np.unravel_index(int(np.argmax(np.where(bad, err, -1))), err.shape)
            return (f"output {name} {tuple(g.shape)}: {int(bad.sum())}/{bad.size} elements off "
                    f"(worst at {tuple(int(j) for j in i)}: {g64[i]:.6g} vs {w64[i]:.6g}; "
                    f"max abs error {float(err.max()):.3g})")
    return ""


def run_case(model: onnx.ModelProto, target: str, seed: int = 0, timeout: float | None = 600.0) -> Outcome:
    """Build and run ``model`` for ``target`` and for llvm and onnxruntime; classify (see the module doc).

    The model must be valid (onnxruntime runs it): a failure there is the generator's bug and raises.
    """
    t0 = time.perf_counter()
    precision = model_precision(model)
    feeds = random_inputs(model, seed)
    expected = None if precision == "fp16" else run_onnxruntime(model, feeds, basic=precision != "fp32")
    try:
        with time_limit(timeout), warnings.catch_warnings():
            # the reference warns about the QDQ regions it leaves in float too: the NPU build's warnings count
            warnings.simplefilter("ignore", tvm_npu.HostFallbackWarning)
            reference = run_vm(tvm_npu.build_reference(model), model, feeds)
    except Timeout as e:
        return Outcome("failure", "reference-timeout", str(e), seconds=time.perf_counter() - t0)
    except Exception as e:
        return Outcome("failure", f"reference-{type(e).__name__}", traceback_head(e), _location(e),
                       seconds=time.perf_counter() - t0)
    runs: list[tvm_npu.PartitionRun] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with own_errors_cross_ffi(), time_limit(timeout):
                executable = tvm_npu.build(model, target)
                with tvm_npu.profile() as prof:
                    got = run_vm(executable, model, feeds)
                runs = list(prof.runs)
        except Timeout as e:
            return Outcome("failure", "timeout", str(e), seconds=time.perf_counter() - t0)
        except OWN_ERRORS as e:
            # a hazard in a program the compiler made is a compiler bug (a missing semaphore), not a refusal
            status = "failure" if isinstance(e, HazardError) else "own-error"
            return Outcome(status, type(e).__name__, traceback_head(e), _location(e),
                           seconds=time.perf_counter() - t0)
        except Exception as e:
            return Outcome("failure", type(e).__name__, traceback_head(e), _location(e),
                           seconds=time.perf_counter() - t0)
    fallbacks = tuple(str(w.message) for w in caught if issubclass(w.category, tvm_npu.HostFallbackWarning))
    layers = tuple(layer.op for r in runs for layer in r.artifact.layers)
    common = {"npu_runs": len(runs), "npu_layers": layers, "fallbacks": fallbacks}
    for who, results in (("reference-", reference), ("", got)):
        typed = _types(model, results)
        if typed:
            return Outcome("failure", f"{who}wrong-dtype", f"{'llvm reference' if who else 'NPU'}: {typed}",
                           seconds=time.perf_counter() - t0, **common)
    if expected is None:
        status, kind, detail = _judge_fp16(model, feeds, got, reference)
    elif precision == "fp32":
        status, kind, detail = _judge_fp32(model, feeds, got, reference, expected)
    else:
        # a float region between dequantize and quantize may round a tie apart from llvm; integer ones may not
        float_region = any(FLOAT_REGION in f for f in fallbacks)
        status, kind, detail = _judge_quantized(model, feeds, got, reference, expected,
                                                target if float_region else None)
    seconds = time.perf_counter() - t0
    if status == "match" and fallbacks:
        return Outcome("fallback", "HostFallbackWarning", seconds=seconds, **common)
    return Outcome(status, kind, detail, seconds=seconds, **common)


Verdict = tuple[str, str, str]  # Outcome.status, .kind, .detail
MATCH: Verdict = ("match", "match", "")


def _types(model: onnx.ModelProto, results: Sequence[np.ndarray]) -> str:
    """'' when every result has the element type its graph output declares (else what differs)."""
    for out, value in zip(model.graph.output, results, strict=False):  # (a count that differs is judged later)
        declared = onnx.helper.tensor_dtype_to_np_dtype(out.type.tensor_type.elem_type)
        if value.dtype != declared:
            return f"output {out.name} is {value.dtype}, the model declares {declared}"
    return ""


def _judge_fp32(model: onnx.ModelProto, feeds: dict[str, np.ndarray], got: Sequence[np.ndarray],
                reference: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> Verdict:
    """fp32: llvm within rtol/atol, onnxruntime relative to the output's range, float64 arbiter."""
    names = [o.name for o in model.graph.output]
    off_llvm = _compare(got, reference, names, relative_to_range=False)
    off_ort = _compare(got, expected, names, relative_to_range=True)
    if not off_llvm and not off_ort:
        return MATCH
    ref_off_ort = _compare(reference, expected, names, relative_to_range=True)
    detail = (f"NPU vs llvm: {off_llvm or 'matches'}\nNPU vs onnxruntime: {off_ort or 'matches'}\n"
              f"llvm vs onnxruntime: {ref_off_ort or 'matches'}")
    verdict = float64_arbiter(model, feeds, got, reference if off_llvm else expected)
    detail += f"\nfloat64 reference: {verdict}"
    if verdict.startswith("the NPU is as close"):
        return "ill-conditioned", "rounding", detail
    if off_llvm:
        return "failure", "mismatch-vs-llvm", detail
    return "failure", "reference-mismatch-vs-onnxruntime" if ref_off_ort else "mismatch-vs-onnxruntime", detail


# ------------------------------------------------------------------------------------------ 8-bit
def output_units(model: onnx.ModelProto) -> list[tuple[bool, float, float]]:
    """Per graph output (quantized, step, steps): whether it is an 8-bit value (dequantized from one,
    or an integer output: step 1), and else the largest quantization step among the dequantized tensors
    it is computed from in float and how many steps it may move when each of them moves by one (every
    operator on the way changes its result by at most as much as an operand moves: :data:`GAIN_ONE`;
    ``inf`` past any other operator)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    inits = {i.name: nh.to_array(i) for i in model.graph.initializer}

    def cone(name: str) -> tuple[float, float]:  # (largest step, steps) of a float tensor
        node = producer.get(name)
        if node is None:  # a graph input (not quantized) or a constant: no step
            return 0.0, 0.0
        if node.op_type == "DequantizeLinear":
            return float(np.max(inits[node.input[1]])), 1.0
        if node.op_type not in GAIN_ONE:
            return 0.0, math.inf
        parts = [cone(i) for i in node.input[:2 if node.op_type in BINARY_INPUTS else 1] if i]
        return max(p[0] for p in parts), sum(p[1] for p in parts)

    units = []
    for out in model.graph.output:
        node = producer.get(out.name)
        if out.type.tensor_type.elem_type in INTEGER_OUTPUTS:
            units.append((True, 1.0, 1.0))
        elif node is not None and node.op_type == "DequantizeLinear" and node.input[1] in inits \
                and inits[node.input[1]].size == 1:
            units.append((True, float(inits[node.input[1]]), 1.0))
        else:
            units.append((False, *cone(out.name)))
    return units


def _steps_apart(got: np.ndarray, want: np.ndarray, name: str, quantized: bool, step: float,
                 steps: float) -> str:
    """'' when at most :data:`QUANT_UNEQUAL_SHARE` of the elements differ and none by more than
    ``steps`` steps (quantized: counted in whole steps; float: beyond the fp32 tolerance against
    onnxruntime), else a description."""
    if got.shape != want.shape:
        return f"output {name}: shape {got.shape}, expected {want.shape}"
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore"):  # equal values (infinities, NaNs too) are 0 apart, a NaN against a number inf
        err = np.nan_to_num(np.where((g64 == w64) | (np.isnan(g64) & np.isnan(w64)), 0.0, np.abs(g64 - w64)),
                            nan=np.inf)
    if quantized:
        err = np.rint(err / step)  # a difference of dequantized values is a whole number of steps
        unequal, allowed = err > 0, steps
    else:
        finite = w64[np.isfinite(w64)]
        span = float(np.ptp(finite)) if finite.size else 0.0
        slack = ORT_RANGE_TOL * (span or float(np.abs(finite).max(initial=0.0)) or 1.0) + ORT_ELEMENT_RTOL * np.abs(w64)
        unequal = err > slack
        err = np.where(unequal, (err - slack) / (step or 1.0), 0.0)
        allowed = steps if step else 0.0
    share = float(unequal.mean()) if unequal.size else 0.0
    worst = float(err.max(initial=0.0))
    if share <= QUANT_UNEQUAL_SHARE and worst <= allowed:
        return ""
    i = np.unravel_index(int(np.argmax(err)), err.shape)
    unit = f"steps of {step:.4g}" if step else "(no quantized input: fp32 tolerance)"
    return (f"output {name} {tuple(got.shape)}: {int(unequal.sum())}/{unequal.size} elements differ, up to "
            f"{worst:.3g} {unit} (allowed: {QUANT_UNEQUAL_SHARE:.1%} of them, by {allowed:g}; worst at "
            f"{tuple(int(j) for j in i)}: {g64[i]:.6g} vs {w64[i]:.6g})")


def _bit_exact(got: Sequence[np.ndarray], reference: Sequence[np.ndarray], model: onnx.ModelProto,
               units: Sequence[tuple[bool, float, float]]) -> str:
    """'' when every 8-bit output equals llvm's bit for bit and every float one is within rtol/atol."""
    names = [o.name for o in model.graph.output]
    if off := _layout_mismatch(got, reference, names):
        return off
    for g, r, name, (quantized, step, _) in zip(got, reference, names, units, strict=True):
        if not quantized:
            off = _compare([g], [r], [name], relative_to_range=False)
            if off:
                return off
        elif not np.array_equal(g, r):
            diff = g.astype(np.float64) != r.astype(np.float64)
            i = np.unravel_index(int(np.argmax(diff)), diff.shape)
            worst = float(np.abs(g.astype(np.float64) - r).max()) / step
            return (f"output {name} {tuple(g.shape)}: {int(diff.sum())}/{diff.size} elements differ, up to "
                    f"{worst:.3g} steps of {step:.4g} (first at {tuple(int(j) for j in i)}: {g[i]} vs {r[i]})")
    return ""


def _judge_quantized(model: onnx.ModelProto, feeds: dict[str, np.ndarray], got: Sequence[np.ndarray],
                     reference: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                     target: str | None = None) -> Verdict:
    """Quantized: bit-exact against llvm, within a step on rare elements against onnxruntime (module doc);
    beyond that, the tie arbiter: between the NPU (built for ``target``, given when the model has a float
    region between dequantize and quantize) and llvm where they differ, else between llvm and onnxruntime."""
    units = output_units(model)
    names = [o.name for o in model.graph.output]
    if len(got) != len(expected):
        return "failure", "mismatch-vs-onnxruntime", f"{len(got)} outputs, expected {len(expected)}"

    def vs_ort(results: Sequence[np.ndarray]) -> str:
        return next((off for r, e, name, unit in zip(results, expected, names, units, strict=True)
                     if (off := _steps_apart(r, e, name, *unit))), "")

    off_llvm = _bit_exact(got, reference, model, units)
    off_ort = vs_ort(got)
    if not off_llvm and not off_ort:
        return MATCH
    ref_off_ort = vs_ort(reference)
    producer = {o: n for n in model.graph.node for o in n.output}
    requantized = dict.fromkeys(producer[n.input[0]].op_type for n in model.graph.node
                                if n.op_type == "QuantizeLinear" and n.input[0] in producer)
    detail = (f"NPU vs llvm: {off_llvm or 'bit-exact'}\nNPU vs onnxruntime: {off_ort or 'matches'}\n"
              f"llvm vs onnxruntime: {ref_off_ort or 'matches'}\n"
              f"quantized operators (results that go through QuantizeLinear): {', '.join(requantized) or 'none'}")
    if off_llvm and target is None:
        return "failure", "mismatch-vs-llvm", detail
    if off_llvm:
        verdict = tie_arbiter(model, feeds, target)
        detail += f"\nties (NPU vs llvm): {verdict}"
        return ("ill-conditioned", "ties", detail) if verdict.startswith("rounding at ties") else \
            ("failure", "mismatch-vs-llvm", detail)
    verdict = tie_arbiter(model, feeds)
    detail += f"\nties: {verdict}"
    if verdict.startswith("rounding at ties"):
        return "ill-conditioned", "ties", detail
    return "failure", "reference-mismatch-vs-onnxruntime" if ref_off_ort else "mismatch-vs-onnxruntime", detail


def _with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also returns the intermediate tensors ``names`` (typed by shape inference)."""
    m = onnx.ModelProto.FromString(model.SerializeToString())
    known = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(known[name] for name in names if name not in have)
    return m


def tie_arbiter(model: onnx.ModelProto, feeds: dict[str, np.ndarray], target: str | None = None) -> str:
    """Settle a quantized disagreement with onnxruntime that llvm shares (the NPU being bit-exact with it),
    or, given ``target``, one of the NPU with llvm: the two run the model with every QuantizeLinear's
    result as an output too (and onnxruntime, resp. llvm, its float input as well), and the first one, in
    graph order, where they differ decides. When every difference there is one step where that float
    value is within :data:`TIE_STEPS` (:data:`TIE_ROUNDINGS` for a tensor of many steps) of half a step, the
    value is a tie in exact arithmetic (a k x k average of values on one grid often is x.5), which the
    integer kernels round half to even and a float path's fp32 rounding pushes to either side (a float
    operator left between dequantize and quantize sums in another order on the NPU than in llvm, which at
    16 bits decides a tie now and then): rounding at ties, and every later difference follows from it."""
    inits = {i.name: i for i in model.graph.initializer}
    quantize = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    pair = ("llvm", "onnxruntime") if target is None else ("the NPU", "llvm")
    try:
        probe = _with_outputs(model, [n.output[0] for n in quantize])
        wide = _with_outputs(probe, [n.input[0] for n in quantize if n.input[0] not in feeds])
        names = [o.name for o in wide.graph.output]
        llvm = dict(zip(names, run_vm(tvm_npu.build_reference(wide), wide, feeds), strict=True)) | feeds
        if target is None:
            ort = dict(zip(names, run_onnxruntime(wide, feeds, basic=True), strict=True)) | feeds
            first, second = llvm, ort
        else:
            with own_errors_cross_ffi():
                npu = run_vm(tvm_npu.build(probe, target), probe, feeds)
            first, second = dict(zip([o.name for o in probe.graph.output], npu, strict=True)), llvm
    except Exception as e:  # the arbiter is optional: without it the mismatch stands
        return f"not available ({type(e).__name__}: {str(e)[:200]})"
    for node in quantize:
        ours, theirs = first[node.output[0]].astype(np.int64), second[node.output[0]].astype(np.int64)
        if np.array_equal(ours, theirs):
            continue
        steps = second[node.input[0]].astype(np.float64) / float(nh.to_array(inits[node.input[1]]))
        band = max(TIE_STEPS, float(np.abs(steps).max(initial=0.0)) * 2.0**-24 * TIE_ROUNDINGS)
        tie = np.abs(steps - np.floor(steps) - 0.5) <= band
        off = ours != theirs
        where = f"the first quantized tensor {pair[0]} and {pair[1]} differ in is {node.output[0]}: " \
                f"{int(off.sum())}/{off.size} elements differ"
        if np.all(np.abs(ours - theirs)[off] == 1) and np.all(tie[off]):
            return f"rounding at ties: {where}, each a tie"
        return f"not ties: {where}, {int((off & ~tie).sum())} of them not at a tie"
    return f"{pair[0]} and {pair[1]} agree on every quantized tensor"


# ------------------------------------------------------------------------------------------ fp16
def _fp16_apart(got: Sequence[np.ndarray], reference: Sequence[np.ndarray], names: Sequence[str]) -> str:
    """'' when the NPU is finite wherever llvm is and within :data:`FP16_ULPS` ulps of each output's
    largest magnitude (elements where llvm overflowed are not compared), else a description."""
    if off := _layout_mismatch(got, reference, names):
        return off
    for g, r, name in zip(got, reference, names, strict=True):
        g64, r64 = g.astype(np.float64), r.astype(np.float64)
        finite = np.isfinite(r64)
        lost = finite & ~np.isfinite(g64)
        if lost.any():
            i = np.unravel_index(int(np.argmax(lost)), lost.shape)
            return (f"output {name} {tuple(g.shape)}: {int(lost.sum())} NaN/inf where llvm is finite "
                    f"(first at {tuple(int(j) for j in i)}: {g64[i]} vs {r64[i]})")
        err = np.where(finite, np.abs(g64 - r64), 0.0)
        ulp = FP16_ULP * float(np.abs(r64[finite]).max(initial=0.0))
        worst = float(err.max(initial=0.0))
        if worst > FP16_ULPS * ulp:
            i = np.unravel_index(int(np.argmax(err)), err.shape)
            return (f"output {name} {tuple(g.shape)}: {int((err > FP16_ULPS * ulp).sum())}/{err.size} elements "
                    f"off by more than {FP16_ULPS} ulps of its largest magnitude (worst at "
                    f"{tuple(int(j) for j in i)}: {g64[i]:.6g} vs {r64[i]:.6g}, {worst / (ulp or 1.0):.3g} ulps)")
    return ""


def _judge_fp16(model: onnx.ModelProto, feeds: dict[str, np.ndarray], got: Sequence[np.ndarray],
                reference: Sequence[np.ndarray]) -> Verdict:
    """fp16: llvm within :data:`FP16_ULPS`; beyond, the float64 arbiter with that tolerance."""
    off = _fp16_apart(got, reference, [o.name for o in model.graph.output])
    if not off:
        return MATCH
    atol = [FP16_ULPS * FP16_ULP * float(np.abs(r[np.isfinite(r)].astype(np.float64)).max(initial=0.0))
            for r in reference]
    verdict = float64_arbiter(model, feeds, got, reference, rtol=0.0, atol=atol)
    detail = f"NPU vs llvm: {off}\nfloat64 reference: {verdict}"
    if verdict.startswith("the NPU is as close"):
        return "ill-conditioned", "rounding", detail
    return "failure", "mismatch-vs-llvm", detail


def to_float64(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model computing in float64: fp32 and fp16 initializers, inputs, outputs, value infos and
    casts become double (an fp16 model's weights are exact in float64)."""
    m = onnx.ModelProto.FromString(model.SerializeToString())
    narrow = (TensorProto.FLOAT, TensorProto.FLOAT16)
    for i, init in enumerate(m.graph.initializer):
        array = nh.to_array(init)
        if array.dtype in (np.float32, np.float16):
            m.graph.initializer[i].CopyFrom(nh.from_array(array.astype(np.float64), init.name))
    for v in [*m.graph.input, *m.graph.output, *m.graph.value_info]:
        if v.type.tensor_type.elem_type in narrow:
            v.type.tensor_type.elem_type = TensorProto.DOUBLE
    for node in m.graph.node:
        for a in node.attribute:
            if node.op_type == "Cast" and a.name == "to" and a.i in narrow:
                a.i = TensorProto.DOUBLE
    return m


def float64_arbiter(model: onnx.ModelProto, feeds: dict[str, np.ndarray], got: Sequence[np.ndarray],
                    other: Sequence[np.ndarray], rtol: float = RTOL, atol: float | Sequence[float] = ATOL) -> str:
    """Settle a disagreement with the model computed in float64 (llvm): when the NPU is, element by
    element, as close to it as the other result (llvm or onnxruntime, in the model's precision), up to
    ``atol`` (per output, or one for all) + ``rtol`` of the exact value, the difference is rounding of an
    ill-conditioned output (a small number left by cancelling large terms; the NPU sums in a wider
    accumulator and rounds fewer times), not a wrong number."""
    try:
        m64 = to_float64(model)
        exact = run_vm(tvm_npu.build_reference(m64), m64, {k: v.astype(np.float64) for k, v in feeds.items()})
    except Exception as e:  # the arbiter is optional: without it the mismatch stands
        return f"not available ({type(e).__name__}: {str(e)[:200]})"
    atols = [atol] * len(exact) if isinstance(atol, float) else list(atol)
    worst, npu_err, other_err = 0.0, 0.0, 0.0
    for g, o, x, a in zip(got, other, exact, atols, strict=True):
        e_npu = np.abs(g.astype(np.float64) - x)
        e_other = np.abs(o.astype(np.float64) - x)
        excess = e_npu - e_other - (a + rtol * np.abs(x))
        worst = max(worst, float(excess.max(initial=-np.inf)))
        npu_err, other_err = max(npu_err, float(e_npu.max(initial=0))), max(other_err, float(e_other.max(initial=0)))
    figures = f"max error NPU {npu_err:.3g}, other result {other_err:.3g}"
    if worst <= 0:
        return f"the NPU is as close to it as the other result ({figures})"
    return f"the NPU is further from it than the other result ({figures})"


def case_repro(code: str, target: str, seed: int, outcome: Outcome | None = None) -> str:
    """A self-contained Python reproduction of one case (builder program + target + input seed)."""
    lines = [
        "from tvm_npu.testing.graphs import GraphBuilder",
        "from tvm_npu.testing.oracle import run_case",
        "",
        code,
        "model = b.model()",
        f"outcome = run_case(model, {target!r}, seed={seed})",
        "print(outcome.report())",
    ]
    if outcome is not None:
        lines = [f"# {line}" for line in outcome.report().splitlines()[:12]] + [""] + lines
    return "\n".join(lines) + "\n"


__all__ = ["OWN_ERRORS", "Outcome", "case_repro", "model_precision", "own_errors_cross_ffi", "run_case"]
