"""One executable for every input size: what it costs and what it keeps (issue 25, "What must be shown").

Usage::

    python benchmarks/dynamic_shapes.py [--models recogniser yolo] [--repeat 5] [--out results/dynamic.json]

For each model of :data:`tvm_npu.testing.dynamic_models.MODELS` (built with ``onnx.helper`` in the exporters'
styles: a paddle2onnx-style recogniser, an FPN detector with symbolic H and W, an ultralytics-style YOLO, a
``[-1, 3, '?', '?']`` classifier):

* built once without ``shapes=``, run on 8 shapes: its outputs against a static build of each shape, llvm
  built for that shape and onnxruntime; the NPU programs of both builds compared by fingerprint (SHA-256 of
  each partition's program, as ``benchmarks/fingerprint.py`` hashes them) with their simulated cycles;
* the JIT compile of each new shape against the full static build of the model at that shape (each timed
  with the cost model's memo tables emptied, after a warm-up at another shape; the compiled-operator cache
  as the earlier shapes left it for both: the JIT compile does not reuse what the static build of the same
  shape just compiled);
* steady-state call time (``--repeat`` calls of each, interleaved, NPU numerics included) against the static
  build's: the median of the per-pair ratios, and the ratio of the fastest calls; and, not at the mercy of the
  load other processes put on a shared machine, what a call costs besides the NPU's work (the simulator
  stubbed out: the VM's host code and the dispatch), in microseconds against the static build's;
* a fresh process that loads the exported library with a warm disk cache: compile work on each first call;
* 4 threads x 3 new shapes at once: each shape compiled exactly once (counted), outputs right;
* a corrupted cache entry, a cache directory that cannot be written and a full disk (ENOSPC, simulated): each
  one warning, outputs right.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import timeit
import warnings
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import onnx
import onnxruntime
import tvm
from tvm import relax
from tvm_npu.codegen.operator import _COMPILED as compiled_operators
from tvm_npu.tir_schedules import cost

import tvm_npu
from tvm_npu.compiler.dynamic import compile_partition
from tvm_npu.runtime import jit
from tvm_npu.testing.dynamic_models import MODELS, DynamicModel
from tvm_npu.tools.bench import profile_model

RTOL, ATOL = 1e-4, 1e-5


def _inputs(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


def _steady(executables: list[Any], x: np.ndarray, repeat: int) -> list[list[float]]:
    """Wall seconds of ``repeat`` calls of each executable, the calls interleaved (a drift of the machine's
    speed hits every executable alike); each called once before."""
    calls = []
    for ex in executables:
        vm = relax.VirtualMachine(ex, tvm.cpu())
        arg = tvm.runtime.tensor(x)
        vm["main"](arg)
        calls.append((vm["main"], arg))
    times: list[list[float]] = [[] for _ in executables]
    for _ in range(repeat):
        for (fn, arg), samples in zip(calls, times, strict=True):
            start = time.perf_counter()
            fn(arg)
            samples.append(time.perf_counter() - start)
    return times


def _host_us(executables: list[Any], x: np.ndarray) -> list[float]:
    """Microseconds per call of each executable with the simulator stubbed out (every NPU program's run a no-op):
    what a call costs besides the NPU's work (the VM's host code, the dispatch to the program), the fastest of 5
    rounds of 200 calls."""
    calls = [(relax.VirtualMachine(ex, tvm.cpu())["main"], tvm.runtime.tensor(x)) for ex in executables]
    with mock.patch.object(jit, "run_artifact", lambda *_: None):  # the one path every NPU program runs through
        return [min(timeit.repeat(lambda f=f, a=a: f(a), number=200, repeat=5)) / 200 * 1e6 for f, a in calls]


def _cold() -> None:
    """Empty the cost model's memo tables, so that a timed compile does not reuse the search of another."""
    for fn in vars(cost).values():
        if callable(getattr(fn, "cache_clear", None)):
            fn.cache_clear()


def _warm_up(model: onnx.ModelProto, ex: Any, shape: tuple[int, ...]) -> None:
    """One static build and one JIT compile at ``shape`` in a throwaway cache: the process's one-time costs
    (imports, the runtime extension) are not charged to the first measured shape."""
    tvm_npu.build(model, shapes={"x": shape})
    with jit.use_cache(jit.JitCache(disk=None)):
        tvm_npu.run(ex, _inputs(shape))


def _fingerprint(executable: Any, x: np.ndarray) -> tuple[list[str], int]:
    """The SHA-256 of every NPU program a run executes (call order) and its simulated cycles."""
    _, prof, _ = profile_model(executable, [x], timing_only=True)
    return [hashlib.sha256(r.artifact.program).hexdigest()[:16] for r in prof.runs], prof.total_cycles


def _agree(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| (inf when the shapes differ)."""
    return float(np.max(np.abs(a.astype(np.float64) - b))) if a.shape == b.shape else float("inf")


def _one_shape(model: onnx.ModelProto, ex: Any, cache: jit.JitCache, shape: tuple[int, ...],
               ort: onnxruntime.InferenceSession, repeat: int) -> dict[str, Any]:
    """One shape: the JIT executable's first call and steady state against a static build, llvm and ORT."""
    x = _inputs(shape)
    seen = OrderedDict(compiled_operators)  # operators of earlier shapes: either compile may reuse them
    _cold()
    start = time.perf_counter()
    static = tvm_npu.build(model, shapes={"x": shape})
    static_build_s = time.perf_counter() - start
    static_out = tvm_npu.run(static, x)
    compiled_operators.clear()  # ... but not the ones the static build just compiled for this shape
    compiled_operators.update(seen)
    _cold()
    before = set(cache.compile_seconds)
    start = time.perf_counter()
    out = tvm_npu.run(ex, x)
    first_s = time.perf_counter() - start
    compile_s = sum(v for k, v in cache.compile_seconds.items() if k not in before)
    compiles = cache.compiles
    jit_t, static_t = _steady([ex, static], x, repeat)
    jit_us, static_us = _host_us([ex, static], x)
    jit_s, static_s = statistics.median(jit_t), statistics.median(static_t)
    (jit_fp, jit_cycles), (static_fp, static_cycles) = _fingerprint(ex, x), _fingerprint(static, x)
    llvm = tvm_npu.run(tvm_npu.build_reference(model, shapes={"x": shape}), x)
    (expected,) = ort.run(None, {"x": x})
    return {"shape": list(shape), "first_call_s": first_s, "compile_s": compile_s, "static_build_s": static_build_s,
            "compile_over_static_build": compile_s / static_build_s, "steady_s": jit_s, "static_steady_s": static_s,
            "steady_over_static": statistics.median(a / b for a, b in zip(jit_t, static_t, strict=True)),
            # the fastest call of each: what the work costs, without the load other processes add
            "steady_min_over_static": min(jit_t) / min(static_t),
            "host_us": jit_us, "static_host_us": static_us,
            "steady_compiles": cache.compiles - compiles,
            "same_programs": jit_fp == static_fp, "jit_cycles": jit_cycles, "static_cycles": static_cycles,
            "vs_static": _agree(out, static_out), "vs_llvm": _agree(out, llvm), "vs_ort": _agree(out, expected),
            "ok": bool(np.allclose(out, llvm, rtol=RTOL, atol=ATOL) and np.allclose(out, expected, rtol=RTOL,
                                                                                     atol=ATOL))}


def shapes_of(spec: DynamicModel, repeat: int, cache_dir: Path) -> dict[str, Any]:
    """Built once without ``shapes=``, run on the model's 8 shapes (:func:`_one_shape`)."""
    model = spec.build()
    with jit.use_cache(jit.JitCache(jit.DiskCache(cache_dir))) as cache:
        start = time.perf_counter()
        try:
            ex, info = tvm_npu.build_with_info(model)
        except Exception as e:  # reported, and the other models go on
            return {"model": spec.name, "error": f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}"}
        build_s = time.perf_counter() - start
        _warm_up(model, ex, spec.shapes[0])
        ort = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        rows = [_one_shape(model, ex, cache, shape, ort, repeat) for shape in spec.shapes]
    return {"model": spec.name, "jit_build_s": build_s, "partitions": info.partitions,
            "host_ops": dict(info.host_ops), "shapes": rows}


_FRESH = textwrap.dedent("""
    import json, sys, time, numpy as np, tvm_npu
    from tvm_npu.runtime import jit
    lib = tvm_npu.runtime.npu_module.load_module(sys.argv[1])
    spent = []
    real = jit.JitCache._load_or_compile
    def timed(self, *args):
        start = time.perf_counter()
        try:
            return real(self, *args)
        finally:
            spent.append(time.perf_counter() - start)
    jit.JitCache._load_or_compile = timed
    for shape in json.loads(sys.argv[2]):
        tvm_npu.run(lib, np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    c = jit.cache()
    print(json.dumps({"compiles": c.compiles, "disk_hits": c.disk_hits, "first_call_work_s": spent}))
""")


def fresh_process(spec: DynamicModel, work: Path) -> dict[str, Any]:
    """Two fresh processes load the exported library: the first compiles 3 shapes into an empty disk cache,
    the second finds them there; the time each first call spends finding or compiling its programs."""
    lib = work / f"{spec.name}.so"
    tvm_npu.build(spec.build()).export_library(str(lib))
    shapes = json.dumps([list(s) for s in spec.shapes[:3]])
    env = {"TVM_NPU_CACHE": str(work / f"{spec.name}-cache"), "PATH": "/usr/bin:/bin", "PYTHONSAFEPATH": "1"}
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", _FRESH, str(lib), shapes], capture_output=True, text=True,
                              env=env, timeout=900)
        if proc.returncode:
            return {"model": spec.name, "error": proc.stderr.strip().splitlines()[-1][:300]}
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {"model": spec.name, "cold": runs[0], "warm": runs[1]}


def threads(spec: DynamicModel, tmp: Path) -> dict[str, Any]:
    """4 threads each run the same 3 new shapes at once: compiles counted per shape, outputs against llvm."""
    model = spec.build()
    counted: Counter[str] = Counter()

    def counting(func_json: str, values: dict[str, int], target: str, symbol: str, *tuning: Any) -> Any:
        counted[json.dumps(sorted(values.items()))] += 1
        return compile_partition(func_json, values, target, symbol, *tuning)

    shapes = spec.shapes[3:6]
    expected = {s: tvm_npu.run(tvm_npu.build_reference(model, shapes={"x": s}), _inputs(s)) for s in shapes}
    errors: list[str] = []
    with jit.use_cache(jit.JitCache(jit.DiskCache(tmp / "threads"))) as cache:
        ex = tvm_npu.build(model)
        jit.set_compiler(counting)
        barrier = threading.Barrier(4)

        def work() -> None:
            barrier.wait()
            for s in shapes:
                if not np.allclose(tvm_npu.run(ex, _inputs(s)), expected[s], rtol=RTOL, atol=ATOL):
                    errors.append(str(s))

        pool = [threading.Thread(target=work) for _ in range(4)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        jit.set_compiler(compile_partition)
    return {"model": spec.name, "threads": 4, "shapes": [list(s) for s in shapes], "compiles": cache.compiles,
            "compiles_per_shape": sorted(counted.values()), "wrong_outputs": errors}


def _warned(ex: Any, cache: jit.JitCache, shapes: list[tuple[int, ...]],
            expected: dict[tuple[int, ...], np.ndarray]) -> dict[str, Any]:
    with jit.use_cache(cache), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        right = all(np.allclose(tvm_npu.run(ex, _inputs(s)), expected[s], rtol=RTOL, atol=ATOL) for s in shapes)
    mine = [str(w.message) for w in caught if issubclass(w.category, jit.JitCacheWarning)]
    return {"warnings": len(mine), "message": mine[0][:160] if mine else "", "outputs_right": right}


def faults(spec: DynamicModel, tmp: Path) -> dict[str, Any]:
    """A corrupted entry, an unwritable directory, a full disk: warnings and outputs, two shapes each."""
    model = spec.build()
    shapes = list(spec.shapes[:2])
    expected = {s: tvm_npu.run(tvm_npu.build_reference(model, shapes={"x": s}), _inputs(s)) for s in shapes}
    ex = tvm_npu.build(model)
    warm = tmp / "corrupt"
    with jit.use_cache(jit.JitCache(jit.DiskCache(warm))):
        tvm_npu.run(ex, _inputs(shapes[0]))
    (entry,) = warm.glob("*.npu")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    out = {"corrupted entry": _warned(ex, jit.JitCache(jit.DiskCache(warm)), shapes[:1], expected)}
    blocker = tmp / "a-file"
    blocker.write_text("not a directory")
    out["unwritable directory"] = _warned(ex, jit.JitCache(jit.DiskCache(blocker / "cache")), shapes, expected)
    with mock.patch.object(Path, "write_bytes", side_effect=OSError(28, "No space left on device")):
        out["full disk"] = _warned(ex, jit.JitCache(jit.DiskCache(tmp / "full")), shapes, expected)
    return {"model": spec.name, **out}


def _print_shapes(rec: dict[str, Any]) -> None:
    if "error" in rec:
        print(f"{rec['model']}: build for every shape FAILED: {rec['error']}")
        return
    print(f"{rec['model']}: built once in {rec['jit_build_s']:.2f} s, {rec['partitions']} NPU partition(s), "
          f"host ops {rec['host_ops'] or 'none'}")
    for r in rec["shapes"]:
        print(f"  {tuple(r['shape'])!s:18s} compile {r['compile_s']:6.3f} s = {r['compile_over_static_build']:.2f}x "
              f"static build ({r['static_build_s']:.2f} s); steady {r['steady_s'] * 1e3:8.2f} ms = "
              f"{r['steady_over_static']:.3f}x static (fastest {r['steady_min_over_static']:.3f}x; "
              f"{r['steady_compiles']} compiles; host {r['host_us']:.1f} vs {r['static_host_us']:.1f} us); "
              f"programs {'same' if r['same_programs'] else 'DIFFER'} "
              f"(cycles {r['jit_cycles']:,} vs {r['static_cycles']:,}); max err vs static {r['vs_static']:.2g}, "
              f"llvm {r['vs_llvm']:.2g}, ORT {r['vs_ort']:.2g}{'' if r['ok'] else '  WRONG'}")


def summary(rec: dict[str, Any]) -> str:
    """One line per model: the worst compile ratio, the steady-state ratios, programs and outputs."""
    rows = rec.get("shapes", [])
    if not rows:
        return f"{rec['model']}: no figures ({rec.get('error', 'not run')})"
    steady = sorted(r["steady_over_static"] for r in rows)
    same = [r["steady_over_static"] for r in rows if r["same_programs"]]
    worst = max(r["compile_over_static_build"] for r in rows)
    compile_median = statistics.median(r["compile_over_static_build"] for r in rows)
    fastest = statistics.median(r["steady_min_over_static"] for r in rows)
    extra = statistics.median(r["host_us"] - r["static_host_us"] for r in rows)
    return (f"{rec['model']}: JIT compile / static build median {compile_median:.2f}x, at most {worst:.2f}x; "
            f"steady / static fastest calls median {fastest:.3f}x; a call's cost besides the NPU's work "
            f"{extra:+.1f} us over a static build's (median); "
            f"steady / static median {statistics.median(steady):.3f}x (range {steady[0]:.3f}..{steady[-1]:.3f}; "
            f"median {statistics.median(same) if same else float('nan'):.3f}x over the {len(same)} shapes with the "
            f"same programs); programs same as static at {len(same)}/{len(rows)} shapes; outputs within rtol "
            f"{RTOL:g} / atol {ATOL:g} of llvm and ORT at {sum(r['ok'] for r in rows)}/{len(rows)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=[m.name for m in MODELS], help="default: all")
    parser.add_argument("--repeat", type=int, default=15, help="steady-state calls timed per shape (median)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    args = parser.parse_args(argv)
    specs = [m for m in MODELS if not args.models or m.name in args.models]
    start = time.perf_counter()
    result: dict[str, Any] = {"shapes": [], "fresh_process": [], "threads": [], "faults": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for spec in specs:
            rec = shapes_of(spec, args.repeat, work / f"{spec.name}-shapes")
            result["shapes"].append(rec)
            _print_shapes(rec)
            if "error" in rec:
                continue
            for key, fn in (("fresh_process", fresh_process), ("threads", threads), ("faults", faults)):
                (work / key / spec.name).mkdir(parents=True)
                result[key].append(fn(spec, work / key / spec.name))
                print(f"  {key}: {json.dumps(result[key][-1])}", flush=True)
    print("\n".join(summary(rec) for rec in result["shapes"]))
    print(f"{time.perf_counter() - start:.0f} s in all")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
