"""Measurement helpers shared by the ``tvm-npu`` CLI and the scripts in ``benchmarks/``.

One implementation of each figure, so ``tvm-npu bench`` and ``benchmarks/compare_llvm.py``
cannot disagree: model lookup (a ``.onnx`` path or a bundled name), model inputs, a
build with a progress line, NPU and llvm runs, the end-to-end latency of an NPU build
(simulated NPU part + measured host part, :func:`host_latency`), its comparison with llvm
and onnxruntime (:func:`bench`), the whole-model Perfetto trace and the roofline plot.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import tvm
from tqdm import tqdm
from tvm import relax

from tvm_npu.compiler.driver import BuildInfo, HostTarget, build_reference, build_with_info, host_target
from tvm_npu.compiler.onnx_import import bind_input_shapes
from tvm_npu.compiler.shapes import Shapes, bind_relax_shapes, type_dims
from tvm_npu.config import parse_target
from tvm_npu.models.inputs import (  # TensorSpec, shape_text: re-exported, their old home
    TensorSpec,
    backend_inputs,
    graph_inputs,
    random_arrays,
    shape_text,  # noqa: F401
)
from tvm_npu.models.registry import BUNDLED, load_onnx, model_name  # noqa: F401  (BUNDLED: re-exported)
from tvm_npu.report.layers import ModelReport, report
from tvm_npu.report.memory import build_memory
from tvm_npu.report.profiling import profile
from tvm_npu.report.text import first_line, op_counts, wall_time
from tvm_npu.runtime.execute import Profile

#: A model in memory: what ``build_with_info`` and ``build_reference`` accept, minus paths.
LoadedModel = onnx.ModelProto | tvm.IRModule


# ------------------------------------------------------------------------------ models
def resolve_model(spec: str, *, lean: bool = False) -> tuple[str, onnx.ModelProto]:
    """``(display name, model)`` for a path to a ``.onnx`` file or a name in :data:`BUNDLED`
    (:func:`tvm_npu.models.registry.load_onnx`: a path that exists wins over a bundled name; ``lean``: a
    file's large weights stay in it, for a command that only compiles)."""
    model = load_onnx(spec, lean=lean)
    return model_name(spec), model


def input_names(model: LoadedModel) -> list[str]:
    """Names of the model's run-time inputs, in the order ``main`` takes them."""
    return [i.name for i in model_inputs(model)]


def model_inputs(model: LoadedModel) -> list[TensorSpec]:
    """The inputs of an ONNX model (graph inputs that are not initializers) or of a Relax module's ``main``."""
    if isinstance(model, onnx.ModelProto):
        return list(graph_inputs(model).values())

    def relax_input(p: relax.Var) -> TensorSpec:
        if not isinstance(p.ty, relax.TensorType) or not isinstance(p.ty.shape, relax.ShapeExpr):
            return TensorSpec(p.name, (), "?")
        return TensorSpec(p.name, type_dims(p.ty), str(p.ty.dtype))

    return [relax_input(p) for p in model["main"].params]


#: How the Relax VM states a parameter's type in the constant pool of an executable (its argument check).
_PARAM_CHECK = re.compile(r'ErrorContext\(fn=main, loc=param\[(\d+)\], param=([^,]+), '
                          r'annotation=R\.Tensor\(\(([^)]*)\), dtype="(\w+)"\)\)')


def library_inputs(library: tvm.runtime.Module) -> list[TensorSpec]:
    """The inputs of an exported model's ``main``, as the VM checks them.

    An exported executable keeps no typed signature, only the parameter names and, in its
    constant pool, the message each parameter's type check would raise (which states the
    annotated shape and dtype): that message is parsed here. A parameter without one (not
    a tensor) has an empty shape and dtype ``"?"``.
    """
    vm = relax.VirtualMachine(library, tvm.cpu())
    names = [vm._get_function_param_name("main", i) for i in range(vm._get_function_arity("main"))]
    found = {int(m[1]): m for m in _PARAM_CHECK.finditer(relax.VMExecutable(library).stats())}
    specs = []
    for i, name in enumerate(names):
        m = found.get(i)
        if m is None:
            specs.append(TensorSpec(name, (), "?"))
            continue
        dims = tuple(int(d) if d.strip().isdigit() else d.strip().strip('"') for d in m[3].split(",") if d.strip())
        specs.append(TensorSpec(name, dims, m[4]))
    return specs


def check_inputs(arrays: Sequence[np.ndarray], specs: Sequence[TensorSpec]) -> None:
    """``ValueError`` naming the first input whose array has another dtype or shape than the model takes."""
    for a, spec in zip(arrays, specs, strict=True):
        shape_ok = len(a.shape) == len(spec.shape) and all(
            not isinstance(d, int) or d == n for d, n in zip(spec.shape, a.shape, strict=True))
        if (spec.dtype != "?" and a.dtype.name != spec.dtype) or (spec.shape and not shape_ok):
            given = TensorSpec(spec.name, tuple(a.shape), a.dtype.name).text().split(": ", 1)[1]
            fix = f" (convert with .astype(np.{spec.dtype}))" if a.dtype.name != spec.dtype and shape_ok else ""
            raise ValueError(f"input {spec.name!r}: the model takes {spec.text().split(': ', 1)[1]}, "
                             f"given {given}{fix}")
    sizes: dict[str, tuple[str, int, int]] = {}  # a named dimension is one size wherever it appears
    for a, spec in zip(arrays, specs, strict=True):
        for i, (d, n) in enumerate(zip(spec.shape, a.shape, strict=False)):
            if isinstance(d, str) and d != "?" and sizes.setdefault(d, (spec.name, i, n))[2] != n:
                other, j, m = sizes[d]
                raise ValueError(f"input {spec.name!r} dimension {i} ({d!r}) is {n}, but input {other!r} dimension "
                                 f"{j} gives {d!r} = {m}; {d!r} names one size in every place")


#: Seeded arrays for input specs (:func:`tvm_npu.models.inputs.random_arrays`, the one generator).
random_inputs = random_arrays


def default_inputs(model: LoadedModel, seed: int = 0) -> list[np.ndarray]:
    """ONNX models: the ONNX backend-test inputs; Relax modules: seeded standard-normal arrays."""
    if isinstance(model, onnx.ModelProto):
        return list(backend_inputs(model).values())
    return random_inputs(model_inputs(model), seed)


def read_inputs(path: str | Path, names: Sequence[str]) -> list[np.ndarray]:
    """Arrays of an ``.npz`` file in the order of ``names``.

    Arrays are matched by name, or by position when the file was written with
    ``np.savez(path, *arrays)`` (keys ``arr_0``, ``arr_1``, ...). Pickled objects are refused.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"inputs file {str(path)!r} does not exist")
    with path.open("rb") as f:
        if f.read(4) != b"PK\x03\x04":  # every .npz is a zip archive
            raise ValueError(f"inputs file {str(path)!r} is not an .npz archive: write one with "
                             f"np.savez(path, name=array, ...)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except ValueError as e:  # an object array inside
        raise ValueError(f"inputs file {str(path)!r}: {first_line(e)}; accepted: numeric arrays") from None
    positional = [f"arr_{i}" for i in range(len(names))]
    if set(arrays) == set(names):
        return [arrays[n] for n in names]
    if set(arrays) == set(positional):
        return [arrays[k] for k in positional]
    raise ValueError(f"{path} holds arrays {sorted(arrays)}; the model takes {len(names)} input(s) "
                     f"{list(names)}: name the arrays so, or save exactly {len(names)} positionally "
                     f"(np.savez(path, *arrays))")


# --------------------------------------------------------------------------- progress
def show_progress(progress: bool | None) -> bool:
    """Whether to draw progress bars: as asked, or (``None``) only when stderr is a terminal."""
    return sys.stderr.isatty() if progress is None else progress


@contextmanager
def elapsed_bar(desc: str, progress: bool | None = None) -> Iterator[None]:
    """A stderr line counting the seconds of a step that reports no progress itself (a build).

    Shown only after two seconds and only on a terminal (``progress=None``), so quick
    steps and redirected output stay clean.
    """
    bar = tqdm(desc=desc, bar_format="{desc}: {elapsed}", file=sys.stderr, delay=2, disable=not show_progress(progress))
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.5):
            bar.update(0)  # redraws the elapsed time, honouring the delay

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()
        bar.close()


# ----------------------------------------------------------------------- build and run
def build_model(model: LoadedModel, target: str, *, dump_dir: str | Path | None = None,
                database: str | Path | None = None, progress: bool | None = None, desc: str = "building for the NPU",
                host: HostTarget = None, shapes: Shapes | None = None) -> tuple[relax.VMExecutable, BuildInfo, float]:
    """``build_with_info`` with a progress line; also returns the wall time in seconds."""
    start = time.perf_counter()
    with elapsed_bar(desc, progress):
        executable, info = build_with_info(model, target, dump_dir=dump_dir, database=database, host=host,
                                           shapes=shapes)
    return executable, info, time.perf_counter() - start


def to_numpy(value: Any) -> list[np.ndarray]:
    """The outputs of a VM call (a tensor or a nested tuple of tensors), flattened."""
    if hasattr(value, "numpy"):
        return [value.numpy()]
    return [a for v in value for a in to_numpy(v)]


def profile_model(executable: relax.VMExecutable | tvm.runtime.Module, inputs: Sequence[np.ndarray], *,
                  trace: bool = False, timing_only: bool = False) -> tuple[list[np.ndarray], Profile, float]:
    """Run ``main`` once under :func:`tvm_npu.profile`: (outputs, profile, wall seconds).

    With ``timing_only`` the NPU skips its numerics, so the outputs are meaningless.
    """
    vm = relax.VirtualMachine(executable, tvm.cpu())
    tensors = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in inputs]
    with profile(trace=trace, timing_only=timing_only) as prof:
        start = time.perf_counter()
        out = vm["main"](*tensors)
        seconds = time.perf_counter() - start
    return to_numpy(out), prof, seconds


def median_latency(executable: relax.VMExecutable, inputs: Sequence[np.ndarray], repeat: int,
                   progress: bool | None = None) -> tuple[list[np.ndarray], float]:
    """(outputs, median wall seconds of ``repeat`` calls after one warm-up call)."""
    vm = relax.VirtualMachine(executable, tvm.cpu())
    tensors = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in inputs]
    outputs = to_numpy(vm["main"](*tensors))
    times = []
    bar = tqdm(range(repeat), desc="llvm runs", unit="run", file=sys.stderr, delay=2,
               disable=not show_progress(progress))
    for _ in bar:
        start = time.perf_counter()
        vm["main"](*tensors)
        times.append(time.perf_counter() - start)
    return outputs, statistics.median(times)


def host_latency(executable: relax.VMExecutable | tvm.runtime.Module, inputs: Sequence[np.ndarray], repeat: int,
                 progress: bool | None = None, functional: bool = True
                 ) -> tuple[list[np.ndarray], Profile, float, float]:
    """The host's share of one inference of an NPU build, measured: (outputs, profile, simulator s, host s).

    One functional run (the outputs, its profile, and the wall time of its NPU calls: the simulator's
    cost), then ``repeat`` timing-only runs on the same VM. The host part of a run is its wall time
    minus the wall time spent inside NPU partition calls (each call times itself:
    :attr:`tvm_npu.runtime.PartitionRun.wall_s`): the host operators compiled for llvm plus the VM's
    dispatch, allocation and the calls into the NPU runtime, which a device's driver would also
    pay. The median over the timing-only runs is returned. They skip the NPU's numerics, so host
    operators read NPU outputs left in the VM's reused buffers by earlier runs: what llvm code does
    with them takes the same time (no data-dependent control flow in the operators offloaded or
    kept here), and the simulator's own wall time disturbs the host's caches less. With
    ``functional=False`` the first run skips the numerics too (no outputs: an empty list).
    """
    vm = relax.VirtualMachine(executable, tvm.cpu())
    tensors = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in inputs]
    with profile(timing_only=not functional) as first:
        result = vm["main"](*tensors)
        outputs = to_numpy(result) if functional else []
    samples = []
    bar = tqdm(range(repeat), desc="host part", unit="run", file=sys.stderr, delay=2,
               disable=not show_progress(progress))
    for _ in bar:
        with profile(timing_only=True) as prof:
            start = time.perf_counter()
            vm["main"](*tensors)
            wall = time.perf_counter() - start
        samples.append(max(0.0, wall - prof.npu_call_seconds))
    return outputs, first, first.npu_call_seconds, statistics.median(samples)


#: How to get onnxruntime for the reference column.
ORT_INSTALL = 'pip install "tvm-npu[benchmark]"'


def onnxruntime_threads() -> tuple[int, ...]:
    """The onnxruntime thread counts a benchmark reports: one, and every core of this machine."""
    return tuple(sorted({1, os.cpu_count() or 1}))


def onnxruntime_latency(model: onnx.ModelProto, inputs: Sequence[np.ndarray], threads: int, repeat: int) -> float:
    """Median wall seconds of ``repeat`` onnxruntime CPU runs (after one warm-up) with ``threads`` intra-op
    threads and one inter-op thread, all graph optimisations on (onnxruntime's default)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feed = {spec.name: np.ascontiguousarray(a) for spec, a in zip(model_inputs(model), inputs, strict=True)}
    session.run(None, feed)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def onnxruntime_column(model: LoadedModel, inputs: Sequence[np.ndarray], repeat: int) -> tuple[dict[str, float], str]:
    """({threads: median seconds}, note): the note says why the column is empty (``n/a`` for a Relax module,
    onnxruntime not installed, or its one-line error) or is ``"onnxruntime VERSION"``."""
    if not isinstance(model, onnx.ModelProto):
        return {}, "n/a (a Relax module, not an ONNX model)"
    try:
        import onnxruntime as ort
    except ImportError:
        return {}, f"not installed ({ORT_INSTALL})"
    try:
        return ({str(t): onnxruntime_latency(model, inputs, t, repeat) for t in onnxruntime_threads()},
                f"onnxruntime {ort.__version__}")
    except Exception as e:  # an operator or opset onnxruntime does not run: the column says so, the rest stands
        return {}, f"failed ({first_line(e)})"


def runnable_triple(target: tvm.target.Target) -> str | None:
    """The llvm target's triple when it names another architecture than this machine's (a cross build), else None."""
    triple = str(target.attrs.get("mtriple", ""))
    return triple if triple and triple.split("-")[0] != platform.machine() else None


def runnable_host(host: HostTarget) -> str:
    """The host target as text, after checking this machine can run what it compiles (a cross build cannot)."""
    target = host_target(host)
    triple = runnable_triple(target)
    if triple is not None:
        raise ValueError(f"host target {triple} cannot run on this {platform.machine()} machine: compile and export "
                         f"it ('tvm-npu compile MODEL --host-target ... -o model.tar') and run it on a {triple} host")
    return host_text(target)


def host_text(target: tvm.target.Target) -> str:
    """``llvm -mcpu=znver3 -num-cores=2``: the options a user gave, without TVM's derived features."""
    shown = {k: v for k, v in target.attrs.items() if not str(k).startswith("feature.")}
    return " ".join(["llvm", *(f"-{k}={v}" for k, v in shown.items())])


@dataclass(frozen=True)
class EndToEnd:
    """One inference of an NPU build: simulated NPU time plus the measured host part (:func:`host_latency`)."""

    npu_cycles: int
    npu_s: float  # npu_cycles at the configured clock
    partition_runs: int
    host_s: float  # median wall seconds of the host part
    host_repeat: int
    host_ops: dict[str, int]  # operator calls left on the host
    host_macs: int
    total_macs: int
    host: str  # the host target

    @property
    def total_s(self) -> float:
        return self.npu_s + self.host_s

    def lines(self) -> list[str]:
        """End-to-end first, then the NPU part alone and the host part with what it consists of."""
        share = self.host_macs / self.total_macs if self.total_macs else 0.0
        ops = op_counts(self.host_ops)
        what = (f"{ops} ({share:.1%} of the MACs) and the VM's dispatch" if self.host_ops
                else "no host operator: the VM's dispatch and allocation only")
        return [
            f"end-to-end   {self.total_s * 1e3:.3f} ms per inference = NPU {self.npu_s * 1e3:.3f} ms + host "
            f"{self.host_s * 1e3:.3f} ms",
            f"NPU part     {self.npu_s * 1e3:.3f} ms simulated ({self.npu_cycles:,} cycles, "
            f"{self.partition_runs} partition run{'s' * (self.partition_runs != 1)})",
            f"host part    {self.host_s * 1e3:.3f} ms measured on this CPU ({self.host}; median of "
            f"{self.host_repeat}, VM wall time minus NPU calls): {what}",
        ]


def end_to_end(prof: Profile, info: BuildInfo, host_s: float, repeat: int, host: HostTarget = None) -> EndToEnd:
    """The :class:`EndToEnd` figures of a run profiled with ``prof`` and its build's ``info``."""
    cycles = prof.total_cycles
    clock = parse_target(prof.runs[0].artifact.target).hw if prof.runs else None
    return EndToEnd(cycles, clock.cycles_to_seconds(cycles) if clock else 0.0, len(prof.runs), host_s, repeat,
                    dict(info.host_ops), info.host_macs, info.npu_macs + info.host_macs, host_text(host_target(host)))


# ------------------------------------------------------------------------------- bench
def environment() -> dict[str, Any]:
    """Where a benchmark ran, stored beside its figures (wall times depend on it)."""
    return {"python": platform.python_version(), "numpy": np.__version__, "tvm": tvm.__version__,
            "machine": platform.machine(), "processor": platform.processor(), "cpus": os.cpu_count()}


@dataclass(frozen=True)
class BenchResult:
    """One model end to end on the NPU build (simulated NPU part + measured host part) against references
    on this CPU: TVM's untuned default llvm build and onnxruntime, in one process."""

    model: str
    target: str
    host_target: str  # the llvm target of the NPU build's host part and of the llvm reference
    npu_build_s: float
    llvm_build_s: float
    e2e_latency_s: float  # npu_latency_s + host_latency_s: one inference of the NPU build
    npu_latency_s: float  # npu_cycles at the configured clock (host operators not included)
    host_latency_s: float  # measured host part (bench.host_latency): median of `repeat` runs
    llvm_latency_s: float  # TVM's untuned default llvm build: median of `repeat` runs on this machine's CPU
    onnxruntime_latency_s: dict[str, float]  # intra-op threads -> median of `repeat` runs (empty: see the note)
    onnxruntime_note: str  # "onnxruntime VERSION", or why there is no figure ("n/a ..." for a Relax module)
    repeat: int
    npu_cycles: int  # all NPU partition runs of one inference
    partition_runs: int
    speedup: float | None  # llvm latency / end-to-end latency (None: nothing ran on the NPU)
    npu_only_speedup: float | None  # llvm latency / simulated NPU latency alone
    max_abs_error: float  # between the NPU build's outputs and llvm's
    max_rel_error: float  # max_abs_error over the largest |llvm output|
    npu_macs: int
    host_macs: int
    npu_mac_share: float
    host_ops: int
    host_op_counts: dict[str, int]  # the host part's operators, by name
    partitions: int
    simulator_wall_s: float  # the NPU calls of one functional inference, programs already loaded
    bound_cycles: float
    efficiency: float  # roofline bound / simulated cycles, whole model
    geomean_efficiency: float  # conv2d and matmul layers
    dram_bytes: int
    stage_seconds: dict[str, float]

    @property
    def simulator_over_llvm(self) -> float:
        """How many llvm inferences fit in the wall time of one simulated inference."""
        return self.simulator_wall_s / self.llvm_latency_s

    @property
    def end_to_end(self) -> EndToEnd:
        return EndToEnd(self.npu_cycles, self.npu_latency_s, self.partition_runs, self.host_latency_s, self.repeat,
                        self.host_op_counts, self.host_macs, self.npu_macs + self.host_macs, self.host_target)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "simulator_over_llvm": self.simulator_over_llvm}

    def reference_lines(self) -> list[str]:
        """The references, each against the end-to-end latency (and the NPU part alone for llvm)."""

        def versus(seconds: float) -> str:
            if not self.npu_cycles:
                return "nothing ran on the NPU"
            ratio = seconds / self.e2e_latency_s
            return f"end-to-end {ratio:.2f}x {'faster' if ratio >= 1 else 'slower'}"

        npu_only = f", the NPU part alone {self.npu_only_speedup:.2f}x" if self.npu_only_speedup else ""
        ort = (", ".join(f"{t} thread{'s' * (t != '1')} {s * 1e3:.3f} ms ({versus(s)})"
                         for t, s in self.onnxruntime_latency_s.items())
               if self.onnxruntime_latency_s else "")
        return [
            f"vs llvm      {self.llvm_latency_s * 1e3:.3f} ms, TVM's untuned default llvm build (median of "
            f"{self.repeat}): {versus(self.llvm_latency_s)}{npu_only}",
            "vs ORT       onnxruntime on this CPU: "
            + (f"{ort} ({self.onnxruntime_note}, median of {self.repeat})" if ort else self.onnxruntime_note),
        ]

    def lines(self) -> list[str]:
        """The human-readable summary printed by ``tvm-npu bench``: end to end first."""
        stages = ", ".join(f"{k} {v:.1f}" for k, v in self.stage_seconds.items() if v >= 0.05)
        return [
            f"model        {self.model}   target: {self.target}",
            *self.end_to_end.lines(),
            *self.reference_lines(),
            f"build        NPU {self.npu_build_s:.1f} s ({stages}); llvm {self.llvm_build_s:.1f} s",
            f"error        max |NPU - llvm| = {self.max_abs_error:.3g} ({self.max_rel_error:.2g} of max |llvm|)"
            + ("; the NPU in fp16, llvm the fp32 model" if "-precision=fp16" in self.target else ""),
            f"MACs on NPU  {self.npu_mac_share:.1%} ({self.npu_macs / 1e9:.3f} G NPU, "
            f"{self.host_macs / 1e9:.3f} G host; {self.host_ops} host operator calls; {self.partitions} partitions)",
            f"simulator    {wall_time(self.simulator_wall_s)} wall per inference "
            f"({self.simulator_over_llvm:.3g}x the llvm latency)",
            f"roofline     efficiency {self.efficiency:.3f} (bound {self.bound_cycles:,.0f} cycles); "
            f"geomean conv/matmul {self.geomean_efficiency:.3f}; DRAM {self.dram_bytes / 2**20:.1f} MiB",
        ]


def max_abs_error(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    """Largest absolute difference over all outputs (inf if the outputs do not line up)."""
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
        return float("inf")
    return max((float(np.max(np.abs(x.astype(np.float64) - y))) for x, y in zip(a, b, strict=True) if x.size),
               default=0.0)


def max_magnitude(arrays: Sequence[np.ndarray]) -> float:
    """Largest absolute value over all arrays (0 for none)."""
    return max((float(np.max(np.abs(x.astype(np.float64)))) for x in arrays if x.size), default=0.0)


@dataclass(frozen=True)
class Comparison:
    """A :func:`compare` run: the figures, the per-layer report and both builds' outputs."""

    result: BenchResult
    report: ModelReport
    outputs: list[np.ndarray]  # NPU build
    expected: list[np.ndarray]  # llvm build
    info: BuildInfo  # the NPU build's (host operators by name, partitions, stage times)


def bench(name: str, model: LoadedModel | None = None, target: str = "npu",
          inputs: Sequence[np.ndarray] | None = None, *, repeat: int = 10, progress: bool | None = None,
          host: HostTarget = None, shapes: Shapes | None = None) -> BenchResult:
    """The figures of :func:`compare` (``bench("light_squeezenet")`` benchmarks a bundled model)."""
    return compare(name, model, target, inputs, repeat=repeat, progress=progress, host=host, shapes=shapes).result


def compare(name: str, model: LoadedModel | None = None, target: str = "npu",
            inputs: Sequence[np.ndarray] | None = None, *, repeat: int = 10, progress: bool | None = None,
            host: HostTarget = None, shapes: Shapes | None = None) -> Comparison:
    """Build ``model`` for the NPU and for llvm, run both on ``inputs`` and compare them.

    Without ``model``, ``name`` is a bundled model's name or an ``.onnx`` path; without
    ``inputs``, the model's :func:`default_inputs`. The NPU figures come from a timing-only
    traced run (the per-layer roofline report), one functional run (outputs and the
    simulator's wall time; the first run already loaded the programs, so program decoding
    is not counted) and ``repeat`` runs timing the host part (:func:`host_latency`). ``host``
    is the llvm target of the host part and of the llvm reference (it must run on this machine).
    References, each the median of ``repeat`` runs: the llvm build and onnxruntime on the CPU
    with one thread and with every core (:func:`onnxruntime_column`). ``shapes`` binds the model's symbolic
    input dimensions (:func:`tvm_npu.load_model`) before anything else, so every build and the inputs agree.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, not {repeat}")
    host_name = runnable_host(host)
    if model is None:
        name, model = resolve_model(name)
    model = bind_input_shapes(model, shapes) if isinstance(model, onnx.ModelProto) else bind_relax_shapes(model, shapes)
    if inputs is None:
        inputs = default_inputs(model)
    npu = parse_target(target)
    executable, info, npu_build_s = build_model(model, str(npu), progress=progress, desc=f"{name}: NPU build",
                                                host=host)
    start = time.perf_counter()
    with elapsed_bar(f"{name}: llvm build", progress):
        reference = build_reference(model, host=host)
    llvm_build_s = time.perf_counter() - start
    expected, llvm_s = median_latency(reference, inputs, repeat, progress)
    ort_s, ort_note = onnxruntime_column(model, inputs, repeat)
    _, timed, _ = profile_model(executable, inputs, trace=True, timing_only=True)
    rep = model_report(timed, info, input_shapes(model, inputs))
    with elapsed_bar(f"{name}: simulating", progress):
        outputs, functional, sim_s, host_s = host_latency(executable, inputs, repeat, progress)
    cycles = functional.total_cycles
    npu_s = npu.hw.cycles_to_seconds(cycles)
    total_macs = info.npu_macs + info.host_macs
    result = BenchResult(
        model=name, target=str(npu), host_target=host_name, npu_build_s=npu_build_s, llvm_build_s=llvm_build_s,
        e2e_latency_s=npu_s + host_s, npu_latency_s=npu_s, host_latency_s=host_s, llvm_latency_s=llvm_s,
        onnxruntime_latency_s=ort_s, onnxruntime_note=ort_note, repeat=repeat, npu_cycles=cycles,
        partition_runs=len(functional.runs), speedup=llvm_s / (npu_s + host_s) if cycles else None,
        npu_only_speedup=llvm_s / npu_s if cycles else None,
        max_abs_error=max_abs_error(outputs, expected), npu_macs=info.npu_macs, host_macs=info.host_macs,
        max_rel_error=max_abs_error(outputs, expected) / max(max_magnitude(expected), np.finfo(np.float32).tiny),
        npu_mac_share=info.npu_macs / total_macs if total_macs else 0.0, host_ops=sum(info.host_ops.values()),
        host_op_counts=dict(info.host_ops), partitions=info.partitions, simulator_wall_s=sim_s,
        bound_cycles=rep.bound_cycles, efficiency=rep.efficiency, geomean_efficiency=rep.geomean_efficiency(),
        dram_bytes=rep.dram_bytes, stage_seconds=dict(info.stage_seconds),
    )
    return Comparison(result, rep, outputs, expected, info)


def input_shapes(model: LoadedModel, inputs: Sequence[np.ndarray]) -> str:
    """``x=(1, 3, 224, 224)``: the shapes of a run's inputs by the model's input names (what a report names)."""
    return ", ".join(f"{s.name}=({', '.join(map(str, a.shape))})"
                     for s, a in zip(model_inputs(model), inputs, strict=False))


def model_report(prof: Profile, info: BuildInfo, shape: str = "") -> ModelReport:
    """The per-layer report of a traced run, with the host figures and the deployment memory of its build;
    ``shape`` names the input shapes of the run (``x=(1, 3, 224, 224)``)."""
    return report(prof, info.host_macs, info.layout_transforms, info.io_bytes, build_memory(info), shape)
