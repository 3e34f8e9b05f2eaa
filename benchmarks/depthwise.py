"""Depthwise convolutions on the tensor engine only, and with the planner free to use the vector engine.

Builds each model twice in this process (the tensor-engine-only build with the target option
``-depthwise-engine=tensor``, which ``PassContext(disabled_pass=["npu.schedule.depthwise-vector"])``
also sets), runs both on the simulator against llvm and writes the model
figures and the per-layer rows of every depthwise convolution to ``results/depthwise.json``::

    .venv/bin/python benchmarks/depthwise.py [light_shufflenet mobilenet_v2 ...]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from tvm_npu.models.light import randomize_weights
from tvm_npu.tools.bench import compare, default_inputs, resolve_model

RESULTS = Path(__file__).parent / "results" / "depthwise.json"
#: A conv2d layer's description names its input shape and its groups: ``... (1, 136, 28, 28)->... g136 ...``.
_DEPTHWISE = re.compile(r"\(\d+, (\d+), \d+, \d+\)->.* g(\d+)\b")


def depthwise(description: str) -> bool:
    """Whether a conv2d layer's description is a depthwise convolution (NCHW: as many groups as channels)."""
    m = _DEPTHWISE.search(description)
    return m is not None and m.group(1) == m.group(2)


def _run(name: str, vector: bool) -> dict:
    """One build and run; ``vector=False`` keeps every convolution on the tensor engine."""
    display, model = resolve_model(name)
    model = randomize_weights(model, seed=0)
    target = "npu" if vector else "npu -depthwise-engine=tensor"
    cmp = compare(display, model, target, default_inputs(model), repeat=1, progress=False)
    r, rep = cmp.result, cmp.report
    layers = [{"name": x.name, "description": x.description, "tile": x.tile, "cycles": x.cycles,
               "share_cycles": x.share_cycles,
               "bound_cycles": x.bound_cycles, "efficiency": x.efficiency, "predicted_cycles": x.predicted_cycles}
              for x in rep.layers if x.op == "conv2d" and depthwise(x.description)]
    return {"npu_cycles": r.npu_cycles, "bound_cycles": r.bound_cycles, "efficiency": r.efficiency,
            "max_rel_error": r.max_rel_error, "partitions": r.partitions, "host_ops": r.host_ops,
            "depthwise_cycles": sum(x["share_cycles"] for x in layers),  # shares add up; cycles overlap
            "depthwise_bound_cycles": sum(x["bound_cycles"] for x in layers), "depthwise_layers": layers}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=["light_shufflenet", "mobilenet_v2"])
    args = parser.parse_args(argv)
    out = {}
    for name in args.models:
        out[name] = {"tensor_only": _run(name, vector=False), "auto": _run(name, vector=True)}
        for mode, r in out[name].items():
            print(f"{name:18s} {mode:11s} cycles {r['npu_cycles']:>10,}  efficiency {r['efficiency']:.3f}  "
                  f"depthwise {r['depthwise_cycles']:>9,} cycles (bound {r['depthwise_bound_cycles']:,.0f})  "
                  f"max rel error {r['max_rel_error']:.2g}")
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
