"""What the exporter-style import handling (``tvm_npu.compiler.onnx_import`` + the activation canonicalisation)
buys on whole models: host operator calls and partitions with it and without it.

Usage: ``python benchmarks/exporter_forms.py [--models mobilenet_v2,efficientnet_b0] [--resolution 224]
[--simulate]``.

"Without" builds the same model with both turned off (the ONNX model imported as it is, activations
left in the importer's form), so the difference is this part's alone; the rest of the compiler (the
depthwise, squeeze-and-excitation and data-movement work) is the same in both columns. Only the
partitioner's decisions are measured, and with ``--simulate`` also the NPU cycles of one run (the sum
over partitions; host operators are not timed). Writes ``results/exporter_forms.json``.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import tvm

import tvm_npu
from tvm_npu.compiler.onnx_import import IMPORT_REWRITES
from tvm_npu.models import bundled as zoo
from tvm_npu.tools.bench import profile_model

RESULTS = Path(__file__).parent / "results"


#: The switches of this part (``tvm_npu.compiler.driver.SWITCHES``): every rewrite of the ONNX import and the
#: activation canonicalisation.
EXPORTER_SWITCHES = [*IMPORT_REWRITES, "npu.canonicalize.activations"]


def exporter_handling(enabled: bool) -> tvm.transform.PassContext:
    """A context with the ONNX preprocessing and the activation canonicalisation off (``enabled=False``)."""
    return tvm.transform.PassContext(disabled_pass=[] if enabled else EXPORTER_SWITCHES)


def _steps(info: tvm_npu.BuildInfo) -> dict[str, int]:
    """How often each epilogue step kind runs on the NPU."""
    counts: dict[str, int] = {}
    for plan in info.plans:
        for op in plan.ops:
            for step in op.spec.epilogue:
                counts[step.kind.value] = counts.get(step.kind.value, 0) + 1
    return counts


def measure(model: onnx.ModelProto, enabled: bool, simulate: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    with exporter_handling(enabled), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ex, info = tvm_npu.build_with_info(model)
        except (tvm.error.TVMError, ValueError) as e:  # e.g. a shape subgraph the importer refuses
            return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    cycles = None
    if simulate:
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        _, prof, _ = profile_model(ex, [x], timing_only=True)  # the same cycles as a functional run
        cycles = sum(run.stats.total_cycles for run in prof.runs)
    return {
        "npu_cycles": cycles,
        "host_calls": sum(info.host_ops.values()),
        "host_ops": dict(sorted(info.host_ops.items(), key=lambda kv: -kv[1])),
        "partitions": info.partitions,
        "npu_layers": sum(len(plan.ops) for plan in info.plans),  # operators after epilogue fusion
        "epilogue_steps": dict(sorted(_steps(info).items())),
        "npu_mac_share": info.npu_macs / max(1, info.npu_macs + info.host_macs),
        "build_seconds": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2,efficientnet_b0")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--simulate", action="store_true", help="also run once on the simulator (NPU cycles)")
    args = parser.parse_args()
    rows = {}
    for name in args.models.split(","):
        model = getattr(zoo, name)(resolution=args.resolution)
        rows[name] = {which: measure(model, which == "with", args.simulate) for which in ("without", "with")}
        for which in ("without", "with"):
            r = rows[name][which]
            text = r.get("error") or (f"{r['host_calls']} host calls {r['host_ops']}, {r['partitions']} partitions, "
                                      f"{r['npu_layers']} NPU layers, {100 * r['npu_mac_share']:.2f}% of MACs on "
                                      f"the NPU, epilogue steps {r['epilogue_steps']}, NPU cycles {r['npu_cycles']}")
            print(f"{name} {which:>7}: {text}", flush=True)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "exporter_forms.json"
    out.write_text(json.dumps({"resolution": args.resolution, "models": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
