"""The differential oracle: one ONNX model, one target string, one verdict.

``run_case(model, target, seed)`` runs the model three ways on the same seeded inputs:

* onnxruntime (CPUExecutionProvider): the independent reference;
* ``tvm_npu.build_reference`` (everything on llvm): the reference the project promises to match;
* ``tvm_npu.build(model, target)``, run under ``tvm_npu.profile()`` (NPU partitions on the simulator).

and classifies the outcome (:class:`Outcome`):

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
               error ...), a wrong number (``mismatch-vs-llvm``, ``mismatch-vs-onnxruntime``), the
               llvm reference itself failing or disagreeing with onnxruntime (``reference-*``), a
               timeout, or (in ``benchmarks/fuzz.py``'s worker) a crashed process.

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
from tvm import relax
from tvm_npu.simulator import HazardError

import tvm_npu

RTOL, ATOL = 1e-4, 1e-5  # against llvm (the project's promise)
ORT_RANGE_TOL = 1e-4  # against onnxruntime: max |error| / (max - min of the output) ...
ORT_ELEMENT_RTOL = 1e-5  # ... not counting 1e-5 of each element's own magnitude (near-constant outputs)
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
def random_inputs(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """Seeded standard-normal fp32 arrays for the graph inputs (initializers excluded)."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        shape = tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)
        feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
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


def _compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray], names: Sequence[str],
             relative_to_range: bool) -> str:
    """'' when every output matches, else a one-line description of the worst output."""
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for g, w, name in zip(got, want, names, strict=True):
        if g.shape != w.shape:
            return f"output {name}: shape {g.shape}, expected {w.shape}"
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
    feeds = random_inputs(model, seed)
    names = [o.name for o in model.graph.output]
    expected = run_onnxruntime(model, feeds)
    try:
        with time_limit(timeout):
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
    off_llvm = _compare(got, reference, names, relative_to_range=False)
    off_ort = _compare(got, expected, names, relative_to_range=True)
    ref_off_ort = _compare(reference, expected, names, relative_to_range=True)
    if off_llvm or off_ort:
        detail = (f"NPU vs llvm: {off_llvm or 'matches'}\nNPU vs onnxruntime: {off_ort or 'matches'}\n"
                  f"llvm vs onnxruntime: {ref_off_ort or 'matches'}")
        verdict = float64_arbiter(model, feeds, got, reference if off_llvm else expected)
        detail += f"\nfloat64 reference: {verdict}"
        seconds = time.perf_counter() - t0
        if verdict.startswith("the NPU is as close"):
            return Outcome("ill-conditioned", "rounding", detail, seconds=seconds, **common)
        if off_llvm:
            return Outcome("failure", "mismatch-vs-llvm", detail, seconds=seconds, **common)
        kind = "reference-mismatch-vs-onnxruntime" if ref_off_ort else "mismatch-vs-onnxruntime"
        return Outcome("failure", kind, detail, seconds=seconds, **common)
    seconds = time.perf_counter() - t0
    if fallbacks:
        return Outcome("fallback", "HostFallbackWarning", seconds=seconds, **common)
    return Outcome("match", "match", seconds=seconds, **common)


def to_float64(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model computing in float64: float initializers, inputs, outputs and value infos become double."""
    m = onnx.ModelProto.FromString(model.SerializeToString())
    for i, init in enumerate(m.graph.initializer):
        array = onnx.numpy_helper.to_array(init)
        if array.dtype == np.float32:
            m.graph.initializer[i].CopyFrom(onnx.numpy_helper.from_array(array.astype(np.float64), init.name))
    for v in [*m.graph.input, *m.graph.output, *m.graph.value_info]:
        if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            v.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    return m


def float64_arbiter(model: onnx.ModelProto, feeds: dict[str, np.ndarray], got: Sequence[np.ndarray],
                    other: Sequence[np.ndarray]) -> str:
    """Settle an fp32 disagreement with the model computed in float64 (llvm): when the NPU is, element by
    element, as close to it as the other fp32 result (llvm or onnxruntime), up to the fp32 tolerance, the
    difference is rounding of an ill-conditioned output (a small number left by cancelling large terms;
    the NPU sums in a wider accumulator), not a wrong number."""
    try:
        m64 = to_float64(model)
        exact = run_vm(tvm_npu.build_reference(m64), m64, {k: v.astype(np.float64) for k, v in feeds.items()})
    except Exception as e:  # the arbiter is optional: without it the mismatch stands
        return f"not available ({type(e).__name__}: {str(e)[:200]})"
    worst, npu_err, other_err = 0.0, 0.0, 0.0
    for g, o, x in zip(got, other, exact, strict=True):
        e_npu = np.abs(g.astype(np.float64) - x)
        e_other = np.abs(o.astype(np.float64) - x)
        excess = e_npu - e_other - (ATOL + RTOL * np.abs(x))
        worst = max(worst, float(excess.max(initial=-np.inf)))
        npu_err, other_err = max(npu_err, float(e_npu.max(initial=0))), max(other_err, float(e_other.max(initial=0)))
    figures = f"max error NPU {npu_err:.3g}, fp32 reference {other_err:.3g}"
    if worst <= 0:
        return f"the NPU is as close to it as the fp32 reference ({figures})"
    return f"the NPU is further from it than the fp32 reference ({figures})"


def case_repro(code: str, target: str, seed: int, outcome: Outcome | None = None) -> str:
    """A self-contained Python reproduction of one case (builder program + target + input seed)."""
    lines = [
        "from graphs import GraphBuilder",
        "from oracle import run_case",
        "",
        code,
        "model = b.model()",
        f"outcome = run_case(model, {target!r}, seed={seed})",
        "print(outcome.report())",
    ]
    if outcome is not None:
        lines = [f"# {line}" for line in outcome.report().splitlines()[:12]] + [""] + lines
    return "\n".join(lines) + "\n"


__all__ = ["OWN_ERRORS", "Outcome", "case_repro", "own_errors_cross_ffi", "run_case"]
