"""Transformer models on the NPU: cycles, efficiency, host operators and partitions.

Measures ``tvm_npu.models.registry.transformer_block`` and the bundled exporter-style transformers
(``tvm_npu.models.bundled``: BERT-base layer, ViT-Tiny, Swin-T stage) with ``tvm_npu.tools.bench.bench`` (NPU
build, one llvm run for the reference, a timing and a functional simulation). Writes
``results/transformer_ops.json``. ``--quick`` runs the block and small configurations only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tvm_npu.models import bundled as zoo
from tvm_npu.models.registry import transformer_block
from tvm_npu.tools.bench import bench, default_inputs, environment

RESULTS = Path(__file__).parent / "results"

FULL: dict[str, Callable[[], object]] = {
    "transformer_block": transformer_block,
    "bert_layer": zoo.bert_layer,
    "vit_tiny": zoo.vit_tiny,
    "swin_t_stage": zoo.swin_t_stage,
}
QUICK: dict[str, Callable[[], object]] = {
    "transformer_block": transformer_block,
    "bert_layer_small": lambda: zoo.bert_layer(seq=32, hidden=64, heads=2, ff=128),
    "vit_tiny_small": lambda: zoo.vit_tiny(resolution=32, depth=1),
}
FIELDS = ("npu_cycles", "bound_cycles", "efficiency", "geomean_efficiency", "host_ops", "partitions",
          "npu_mac_share", "max_rel_error")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the block and small configurations only")
    parser.add_argument("--target", default="npu", help="NPU target string (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results)")
    args = parser.parse_args(argv)
    rows = {}
    start = time.perf_counter()
    for name, load in (QUICK if args.quick else FULL).items():
        model = load()
        result = bench(name, model, args.target, default_inputs(model), repeat=1)
        rows[name] = {f: getattr(result, f) for f in FIELDS}
        print(name, rows[name], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"transformer_ops{'_quick' if args.quick else ''}.json"
    path.write_text(json.dumps({"environment": environment(), "target": args.target,
                                "total_seconds": time.perf_counter() - start, "models": rows}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
