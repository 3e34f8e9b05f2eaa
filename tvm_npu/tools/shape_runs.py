"""The command line's side of one executable for every input size (:mod:`tvm_npu.compiler.dynamic`).

* ``--input-shape`` may repeat an input: several shapes for a model with symbolic dimensions
  (:func:`shape_options`). One shape per input binds the model statically, as before; without any, a model
  whose symbolic dimensions are not only a batch is built once for every shape (the JIT route), as
  ``tvm_npu.build(model)`` builds it.
* Per shape, the first call (which compiles the NPU partitions for that shape, or finds them in the
  disk cache) against the steady state (:func:`measure_shape`): compile seconds per partition, wall times,
  simulated NPU time, the measured host part.
* What a JIT executable holds (:func:`jit_lines`): its symbolic dimensions and where they are, a profile's
  bounds, the shapes compiled ahead of time, the policy and the tuning records.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import tvm
from tvm import relax

from tvm_npu.compiler.driver import build_reference
from tvm_npu.compiler.dynamic import as_model, declared_inputs, for_every_shape, named_onnx, probe_values
from tvm_npu.compiler.onnx_import import bind_input_shapes
from tvm_npu.compiler.shapes import parse_input_shape, resolve_shapes
from tvm_npu.config import parse_target
from tvm_npu.models.inputs import TensorSpec, random_arrays
from tvm_npu.report.profiling import profile
from tvm_npu.runtime import jit

#: Input name -> the shapes given for it, in order.
ShapeLists = dict[str, list[tuple[int, ...]]]


def parse_shape_options(texts: Sequence[str]) -> ShapeLists:
    """Every ``--input-shape`` by input name, repeats kept in order (one shape given twice is an error)."""
    shapes: ShapeLists = {}
    for text in texts:
        name, shape = parse_input_shape(text)
        if shape in shapes.get(name, []):
            raise ValueError(f"--input-shape {name}={','.join(map(str, shape))}: given twice; give each shape once")
        shapes.setdefault(name, []).append(shape)
    return shapes


@dataclass(frozen=True)
class ShapeOptions:
    """What ``--input-shape`` asks for: a statically bound ``model`` (``jit`` False) or the model as it is,
    built for every shape, with the ``listed`` shapes per input (maybe none)."""

    model: Any
    jit: bool
    listed: ShapeLists = field(default_factory=dict)

    def build_shapes(self) -> dict[str, list[tuple[int, ...]]] | None:
        """``shapes=`` of the build: the listed shapes, compiled ahead of time (None: no shape listed)."""
        return dict(self.listed) or None

    def measured_shapes(self) -> dict[str, list[tuple[int, ...]]] | None:
        """``shapes=`` of a build whose first calls are measured: None where the model is built for every shape
        without it (each listed shape then compiles on its first call), else the listed ones (compiled ahead: a
        model whose only symbolic dimension is a batch)."""
        return None if for_every_shape(self.model, None) else self.build_shapes()


def shape_options(model: Any, texts: Sequence[str]) -> ShapeOptions:
    """``model`` with the ``--input-shape`` options ``texts`` applied (see the module docstring)."""
    listed = parse_shape_options(texts)
    several = any(len(v) > 1 for v in listed.values())
    if not several and (listed or not for_every_shape(model, None)):
        return ShapeOptions(bind_input_shapes(model, {k: v[0] for k, v in listed.items()}, "--input-shape"), False)
    if several:
        counts = {len(v) for v in listed.values()} - {1}
        declared = declared_inputs(as_model(model))
        static = [n for n, v in listed.items() if len(v) > 1 and all(isinstance(d, int) for d in declared.get(n, ()))]
        if len(counts) > 1:
            raise ValueError(f"--input-shape: inputs given different numbers of shapes "
                             f"({ {n: len(v) for n, v in listed.items()} }); give each the same number "
                             f"(the k-th shapes go together) or one shape")
        if static:
            raise ValueError(f"--input-shape {static[0]}: given several times, but the input's shape is static "
                             f"{tuple(declared[static[0]])}; several shapes need a symbolic dimension")
    return ShapeOptions(model, True, listed)


def run_shapes(model: Any, listed: ShapeLists) -> list[dict[str, tuple[int, ...]]]:
    """The shapes to run a model built for every shape on: the k-th listed shape of each input, else one
    example (a batch of 1, :data:`~tvm_npu.compiler.shapes.EXAMPLE_DIM` for every other symbolic dimension)."""
    declared = declared_inputs(named_onnx(model) if isinstance(model, onnx.ModelProto) else model)
    if not listed:
        values = probe_values(declared, [])
        return [{name: tuple(values.get(d, d) if isinstance(d, str) else d for d in dims)
                 for name, dims in declared.items()}]
    count = max(len(v) for v in listed.values())
    runs = []
    for k in range(count):
        given = {name: v[min(k, len(v) - 1)] for name, v in listed.items()}
        runs.append(dict(resolve_shapes(declared, given)))
    return runs


def shapes_text(shapes: Mapping[str, Sequence[int]]) -> str:
    """``x=(1, 3, 32, 320)``: the shape a figure or a report describes."""
    return ", ".join(f"{name}=({', '.join(map(str, s))})" for name, s in shapes.items())


def _dims_lines(prog: jit.Program) -> list[str]:
    names = sorted({d for dims in prog.inputs.values() for d in dims if isinstance(d, str)})
    lines = []
    for var in names:
        where = "; ".join(f"input {n!r} dimension {i}" for n, dims in prog.inputs.items()
                          for i, d in enumerate(dims) if d == var)
        lo_hi = prog.bounds.get(var)
        bounds = f"bounds {lo_hi[0]}..{lo_hi[1]} (profile)" if lo_hi else "no bounds (any size)"
        lines.append(f"  {var}: {where}; {bounds}")
    return lines


def _head(prog: jit.Program, ahead: str) -> list[str]:
    policy = "compiled on first call, then cached" if prog.jit == "on" else "refused (jit='off')"
    return ["one executable for every input size (NPU partitions compiled for the shapes of each call):",
            "symbolic dimensions:", *_dims_lines(prog), f"compiled ahead of time: {ahead}", f"other shapes: {policy}"]


def jit_lines(programs: Sequence[jit.Program]) -> list[str]:
    """What ``inspect`` prints of JIT programs: symbolic dimensions, bounds, compiled shapes, policy, tuning."""
    lines: list[str] = []
    for prog in programs:
        compiled = sorted({prog.input_shapes(dict(v)) for _, v in prog.compiled})
        tuning = prog.tuning or {}
        lines += [*_head(prog, "; ".join(compiled) if compiled else "none"),
                  f"NPU partitions: {len(prog.partitions)}; tuning records kept for run-time compiles: "
                  f"{len(tuning.get('tiles', {}))} tiles, {len(tuning.get('plans', {}))} plans"]
    return lines


def model_jit_lines(model: Any, listed: ShapeLists) -> list[str]:
    """:func:`jit_lines` for a model not built yet: its symbolic dimensions, the ``listed`` shapes (which a
    build compiles ahead)."""
    declared = declared_inputs(named_onnx(model) if isinstance(model, onnx.ModelProto) else model)
    prog = jit.Program("", {}, inputs={k: list(v) for k, v in declared.items()})
    runs = run_shapes(model, listed) if listed else []
    return _head(prog, "; ".join(shapes_text(s) for s in runs) or "none (every shape compiles on its first call)")


@dataclass(frozen=True)
class ShapeRun:
    """One shape of a JIT executable: its first call against the steady state."""

    shape: str  # x=(1, 3, 32, 320)
    source: str  # where the first call found its NPU programs: compiled, disk cache, or ahead of time / memory
    compile_s: dict[str, float]  # partition label (p0, p1, ...) -> seconds compiled during the first call
    first_s: float  # wall seconds of the first call (compiles included)
    steady_s: float  # median wall seconds of the later calls
    npu_cycles: int
    npu_s: float  # simulated at the configured clock
    outputs: list[np.ndarray] = field(repr=False, default_factory=list)

    def line(self) -> str:
        compiled = ", ".join(f"{k} {v:.3f} s" for k, v in self.compile_s.items())
        return (f"{self.shape}: first call {self.first_s:.3f} s wall ({self.source}"
                f"{': ' + compiled if compiled else ''}), steady state {self.steady_s:.3f} s wall; "
                f"NPU {self.npu_s * 1e3:.3f} ms simulated ({self.npu_cycles:,} cycles)")

    def to_json(self) -> dict[str, Any]:
        return {"shape": self.shape, "source": self.source, "compile_s": self.compile_s, "first_s": self.first_s,
                "steady_s": self.steady_s, "npu_cycles": self.npu_cycles, "npu_s": self.npu_s}


def _call(vm: relax.VirtualMachine, arrays: Sequence[np.ndarray]) -> tuple[list[np.ndarray], Any, float]:
    tensors = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in arrays]
    with profile() as prof:
        start = time.perf_counter()
        out = vm["main"](*tensors)
        seconds = time.perf_counter() - start
    return ([out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]), prof, seconds


def measure_shape(executable: Any, shapes: Mapping[str, Sequence[int]], inputs: Sequence[np.ndarray],
                  repeat: int = 3) -> ShapeRun:
    """The first call of ``executable`` on ``inputs`` (of ``shapes``) and ``repeat`` calls after it."""
    labels = {symbol: f"p{i}" for prog in jit.programs_of(executable) for i, symbol in enumerate(prog.partitions)}
    cache = jit.cache()
    before = (cache.compiles, cache.disk_hits, set(cache.compile_seconds))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    outputs, prof, first_s = _call(vm, inputs)
    new = {k: v for k, v in cache.compile_seconds.items() if k not in before[2]}
    source = ("compiled" if cache.compiles > before[0] else "disk cache" if cache.disk_hits > before[1]
              else "nothing compiled: ahead of time or in memory")
    steady = [_call(vm, inputs)[2] for _ in range(max(1, repeat))]
    hw = parse_target(prof.runs[0].artifact.target).hw if prof.runs else None
    return ShapeRun(shapes_text(shapes), source, {labels.get(s, s): v for (s, _), v in new.items()}, first_s,
                    statistics.median(steady), prof.total_cycles,
                    hw.cycles_to_seconds(prof.total_cycles) if hw else 0.0, outputs)


def shape_inputs(model: Any, shapes: Mapping[str, Sequence[int]], seed: int = 0) -> list[np.ndarray]:
    """Seeded random arrays of ``shapes`` for the model's inputs, in order."""
    declared = declared_inputs(as_model(model))
    dtypes = {vi.name: onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name
              for vi in model.graph.input} if isinstance(model, onnx.ModelProto) else {}
    specs = [TensorSpec(name, tuple(shapes[name]), dtypes.get(name, "float32")) for name in declared]
    return random_arrays(specs, seed)


@dataclass(frozen=True)
class ShapeBench:
    """``bench`` of a JIT executable at one shape: first call and steady state, and the error against llvm."""

    run: ShapeRun
    llvm_s: float  # median wall seconds of TVM's llvm build of this shape
    max_abs_error: float  # max |NPU - llvm|

    def line(self) -> str:
        return f"{self.run.line()}; llvm {self.llvm_s:.4f} s, max |NPU - llvm| {self.max_abs_error:.3g}"


def bench_shape(executable: Any, model: Any, shapes: Mapping[str, Sequence[int]], repeat: int,
                host: Any = None) -> ShapeBench:
    """:func:`measure_shape` at ``shapes`` (seeded inputs) against llvm built for that shape."""
    inputs = shape_inputs(model, shapes)
    run = measure_shape(executable, shapes, inputs, repeat)
    reference = build_reference(model, shapes=dict(shapes), host=host)
    vm = relax.VirtualMachine(reference, tvm.cpu())
    expected, _, _ = _call(vm, inputs)
    llvm = statistics.median(_call(vm, inputs)[2] for _ in range(max(1, repeat)))
    error = max((float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(run.outputs, expected, strict=True)
                 if a.size), default=0.0)
    return ShapeBench(run, llvm, error)
