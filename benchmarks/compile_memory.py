"""Peak memory of compiling a model for the NPU, against the model's weight bytes.

Usage: ``python benchmarks/compile_memory.py [--models light_vgg19 light_resnet50]``.

Each model is compiled from its ONNX file (as ``tvm-npu compile`` does) in a fresh process;
the figure is that process's peak resident memory above the peak of an idle process that
only imported ``tvm_npu``, divided by the model's weight bytes (every constant of the Relax
module once canonicalised: the light models build their weights from small constant
nodes, so their file sizes say nothing). Goal (issue 14): at most 3x. Writes
``results/compile_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["light_vgg19", "light_resnet50"])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = []
    for name in args.models:
        r = measure(name)
        rows.append(r)
        print(f"{name:16s} weights {r['weight_bytes'] / 2**20:7.1f} MiB  peak above idle "
              f"{r['peak_above_idle_bytes'] / 2**20:7.1f} MiB = {r['ratio_to_weights']:.2f}x weights  "
              f"(goal <= 3x)  build {r['build_s']:.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compile_memory.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
