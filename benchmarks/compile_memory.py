"""Peak memory of compiling a model for the NPU, against the model's weight bytes.

Usage: ``python benchmarks/compile_memory.py [--models light_vgg19 light_resnet50] [--files vgg19 vgg19_external]``.

Each model is compiled from its ONNX file (as ``tvm-npu compile`` does) in a fresh process;
the figure is that process's peak resident memory above the peak of an idle process that
only imported ``tvm_npu`` (``ru_maxrss``, as issue 14 measured; they run first, while this process is
small: a child's ``ru_maxrss`` starts from its parent's), divided by the model's weight bytes (every
constant of the Relax module once canonicalised: the light models build their weights from small constant
nodes, so their file sizes say nothing). Goal (issue 14): at most 3x.

``--files``: ``tvm-npu compile`` of a VGG-19 ONNX file with real initializers (random weights, 548 MiB, as
trained models ship; written to a temporary directory), once with the weights inside the ``.onnx`` file
(``vgg19``) and once as an external-data model, ``.onnx`` + ``.onnx.data`` (``vgg19_external``); on request
(``--files vgg19_2gb_external``) a 2.25 GB external-data model (VGG-19 with a wider classifier). Each run is a
fresh process; its peak (``VmHWM``, reset after ``import tvm_npu`` through ``/proc/self/clear_refs``) above what
was resident then, divided by the file's weight bytes, per stage too. Goal (issue 26): at most 2x.
Writes ``results/compile_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RESULTS = Path(__file__).parent / "results"

_CHILD = r"""
import json, resource, sys
import tvm
import tvm_npu
from tvm import relax
from tvm_npu.compiler import driver
from tvm_npu.models.light import light_model_path
idle = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
name = sys.argv[1]
path = str(light_model_path(name.removeprefix("light_")))
ex, info = tvm_npu.build_with_info(path, "npu")
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
del ex
mod = driver.load_model(path)
for stage in driver.stages(tvm_npu.parse_target("npu")):
    mod = stage.run(mod)
    if stage.name == "canonicalize":
        break
weights = 0
def visit(e):
    global weights
    if isinstance(e, tvm.ir.expr.GenericConst):
        weights += e.value.numpy().nbytes
relax.analysis.post_order_visit(mod["main"], visit)
print(json.dumps({"model": name, "idle_kib": idle, "peak_kib": peak, "weight_bytes": weights,
                  "build_s": sum(info.stage_seconds.values())}))
"""


def measure(name: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, name], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"measuring {name} failed:\n{out.stderr[-2000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    above = (r["peak_kib"] - r["idle_kib"]) * 1024
    return {**r, "peak_above_idle_bytes": above, "ratio_to_weights": above / r["weight_bytes"]}


# ----------------------------------------------------------------------------- tvm-npu compile of files
_VGG19 = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M")


def vgg19(seed: int = 0, hidden: int = 4096) -> onnx.ModelProto:
    """torchvision's VGG-19 (224 x 224 input, 143.7 M parameters) as an ONNX graph with random He-scaled
    weights as initializers (Conv + Relu, MaxPool, Flatten, Gemm with transB as torch exports Linear);
    ``hidden`` is the classifier's width (4096 in VGG-19; 18432 makes a 2.25 GB model)."""
    rng = np.random.default_rng(seed)
    nodes, inits, x, channels = [], [], "input", 3

    def weight(name: str, shape: tuple[int, ...], fan_in: int) -> str:
        value = rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / fan_in))
        inits.append(numpy_helper.from_array(value, name))
        return name

    for i, v in enumerate(_VGG19):
        if v == "M":
            nodes.append(helper.make_node("MaxPool", [x], [f"pool{i}"], kernel_shape=[2, 2], strides=[2, 2]))
            x = f"pool{i}"
            continue
        w, b = weight(f"conv{i}.weight", (v, channels, 3, 3), channels * 9), weight(f"conv{i}.bias", (v,), 10**4)
        nodes += [helper.make_node("Conv", [x, w, b], [f"conv{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"])]
        x, channels = f"relu{i}", v
    nodes.append(helper.make_node("Flatten", [x], ["flat"]))
    x = "flat"
    for j, (n_in, n_out) in enumerate([(512 * 7 * 7, hidden), (hidden, 4096), (4096, 1000)]):
        w, b = weight(f"fc{j}.weight", (n_out, n_in), n_in), weight(f"fc{j}.bias", (n_out,), 10**4)
        out = "output" if j == 2 else f"fc{j}"
        nodes.append(helper.make_node("Gemm", [x, w, b], [out], transB=1))
        if j < 2:
            nodes.append(helper.make_node("Relu", [out], [f"fc_relu{j}"]))
            out = f"fc_relu{j}"
        x = out
    graph = helper.make_graph(nodes, "vgg19",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


_COMPILE_CHILD = r"""
import json, re, sys, time
import tvm_npu
from tvm_npu.compiler import driver
from tvm_npu.tools.cli import main
def status(key):
    return int(re.search(key + r":\s+(\d+)", open("/proc/self/status").read()).group(1))
open("/proc/self/clear_refs", "w").write("5")  # the peak restarts from what an idle import holds
idle = status("VmRSS")
stages = {}
def mark(name, run):
    def wrapped(mod):
        out = run(mod)
        stages[name] = status("VmHWM")
        return out
    return wrapped
stage_list = driver.stages
driver.stages = lambda *a, **k: [driver.Stage(s.name, mark(s.name, s.run)) for s in stage_list(*a, **k)]
start = time.perf_counter()
rc = main(["compile", sys.argv[1], "-o", sys.argv[2]])
print(json.dumps({"rc": rc, "idle_kib": idle, "peak_kib": status("VmHWM"), "stage_peak_kib": stages,
                  "compile_s": time.perf_counter() - start}))
"""


def write_files(root: Path, big: bool = False) -> tuple[dict[str, Path], dict[str, int]]:
    """The VGG-19 file and its external-data form in ``root`` and, with ``big``, an external-data model
    over 2 GB (VGG-19 with a 18432-wide classifier: a protobuf cannot hold it, so only that form exists);
    (name -> .onnx path, name -> weight bytes)."""
    paths = {"vgg19": root / "vgg19.onnx", "vgg19_external": root / "external" / "vgg19.onnx"}
    model = vgg19()
    weights = dict.fromkeys(paths, sum(int(np.prod(t.dims)) * 4 for t in model.graph.initializer))
    onnx.save(model, str(paths["vgg19"]))
    paths["vgg19_external"].parent.mkdir()
    onnx.save(model, str(paths["vgg19_external"]), save_as_external_data=True, all_tensors_to_one_file=True,
              location="vgg19.onnx.data", size_threshold=1024)
    if big:
        del model
        model = vgg19(hidden=18432)
        weights["vgg19_2gb_external"] = sum(int(np.prod(t.dims)) * 4 for t in model.graph.initializer)
        paths["vgg19_2gb_external"] = root / "big" / "vgg19_2gb.onnx"
        paths["vgg19_2gb_external"].parent.mkdir()
        onnx.save(model, str(paths["vgg19_2gb_external"]), save_as_external_data=True,
                  all_tensors_to_one_file=True, location="vgg19_2gb.onnx.data", size_threshold=1024)
    return paths, weights


def measure_file(name: str, path: Path, weights: int) -> dict:
    """``tvm-npu compile`` of ``path`` in a fresh process: peak above idle over ``weights``, also per stage."""
    out = subprocess.run([sys.executable, "-c", _COMPILE_CHILD, str(path), str(path.with_suffix(".so"))],
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"compiling {name} failed:\n{out.stderr[-2000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    above = (r["peak_kib"] - r["idle_kib"]) * 1024
    per_stage = {k: (v - r["idle_kib"]) * 1024 / weights for k, v in r["stage_peak_kib"].items()}
    return {"model": name, **r, "weight_bytes": weights, "peak_above_idle_bytes": above,
            "ratio_to_weights": above / weights, "stage_ratio": per_stage}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["light_vgg19", "light_resnet50"])
    parser.add_argument("--files", nargs="*", default=["vgg19", "vgg19_external"],
                        choices=["vgg19", "vgg19_external", "vgg19_2gb_external"])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = []
    for name in args.models:
        r = measure(name)
        rows.append(r)
        print(f"{name:16s} weights {r['weight_bytes'] / 2**20:7.1f} MiB  peak above idle "
              f"{r['peak_above_idle_bytes'] / 2**20:7.1f} MiB = {r['ratio_to_weights']:.2f}x weights  "
              f"(goal <= 3x)  build {r['build_s']:.0f} s", flush=True)
    if args.files:
        with tempfile.TemporaryDirectory() as tmp:
            paths, weights = write_files(Path(tmp), big="vgg19_2gb_external" in args.files)
            for name in args.files:
                r = measure_file(name, paths[name], weights[name])
                rows.append(r)
                stages = ", ".join(f"{k} {v:.2f}" for k, v in r["stage_ratio"].items())
                print(f"{name:16s} weights {weights[name] / 2**20:7.1f} MiB  tvm-npu compile: peak above idle "
                      f"{r['peak_above_idle_bytes'] / 2**20:7.1f} MiB = {r['ratio_to_weights']:.2f}x weights "
                      f"(goal <= 2x)  {r['compile_s']:.0f} s; peak after each stage (x weights): {stages}",
                      flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compile_memory.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
