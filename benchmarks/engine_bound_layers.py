"""Per-layer efficiency against the datasheet bound and against the engine bound, for the layers issue 27 names.

MobileNetV2's 8-bit depthwise convolutions (the bundled model quantized by onnxruntime's ``quantize_static``,
per-channel, 8 seeded random calibration samples, as ``benchmarks/precision.py`` does) and the ResNetV2-style
stride-2 shortcut max pools (``tvm_npu.testing.corpus.resnet_v2``, float32 and quantized alike): per layer its
cycles (those in which its instructions work), the datasheet bound and efficiency, the bound on the engines
that run it and the efficiency against that, DRAM bytes wasted on partial bursts. The table a schedule change
is measured by, before and after::

    .venv/bin/python benchmarks/engine_bound_layers.py [--out results/engine_bound_layers.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

from tvm_npu.models.registry import BUNDLED
from tvm_npu.report.layers import LayerReport
from tvm_npu.testing.corpus import resnet_v2
from tvm_npu.tools.bench import build_model, default_inputs, model_report, profile_model
from tvm_npu.tools.quantize import quantize_model

RESULTS = Path(__file__).parent / "results" / "engine_bound_layers.json"


def _int8(model: onnx.ModelProto) -> onnx.ModelProto:
    with tempfile.TemporaryDirectory() as tmp:
        return onnx.load(quantize_model(model, Path(tmp) / "int8.onnx", random=8, seed=0))


def _depthwise(x: LayerReport) -> bool:
    return x.op == "conv2d" and x.tile.get("engine") == "vector"


def _shortcut_pool(x: LayerReport) -> bool:
    """A 1x1 max pool of stride 2 (its description: ``maxpool1x1/s2 ...``)."""
    return x.op == "pool" and x.description.startswith("maxpool1x1/s2")


CASES: dict[str, tuple[Callable[[], onnx.ModelProto], Callable[[LayerReport], bool]]] = {
    "mobilenet_v2 int8": (lambda: _int8(BUNDLED["mobilenet_v2"]()), _depthwise),
    "resnet_v2 fp32": (resnet_v2, _shortcut_pool),
    "resnet_v2 int8": (lambda: _int8(resnet_v2()), _shortcut_pool),
}


def measure(case: str, target: str = "npu") -> list[dict[str, Any]]:
    """The rows of ``case``'s selected layers."""
    load, wanted = CASES[case]
    model = load()
    executable, info, _ = build_model(model, target, progress=False)
    _, prof, _ = profile_model(executable, default_inputs(model), trace=True, timing_only=True)
    return [{"layer": x.label, "description": x.description, "dtype": x.dtype, "cycles": x.cycles,
             "overlap_cycles": x.overlap_cycles, "bound_cycles": x.bound_cycles, "efficiency": x.efficiency,
             "engine_bound_cycles": x.engine_bound_cycles, "engine_efficiency": x.engine_efficiency,
             "engine_bound_by": x.engine_bound_by, "bound_by": x.bound_by, "wasted_bytes": x.wasted_bytes,
             "dram_bytes": x.dram_bytes + x.wasted_bytes}
            for x in model_report(prof, info).layers if wanted(x)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--target", default="npu")
    args = parser.parse_args(argv)
    out = {}
    for case in CASES:
        out[case] = rows = measure(case, args.target)
        print(f"\n{case} on '{args.target}'")
        print("| layer | layer | cycles | bound | eff | engine bound | eng eff | engine binds | waste % |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['layer']} | {r['description']} | {r['cycles']:,} | {r['bound_cycles']:,.0f} | "
                  f"{r['efficiency']:.2f} | {r['engine_bound_cycles']:,.0f} | {r['engine_efficiency']:.2f} | "
                  f"{r['engine_bound_by']} | {100 * r['wasted_bytes'] / max(r['dram_bytes'], 1):.0f} |")
    args.out.write_text(json.dumps({"target": args.target, "cases": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
