"""Per-layer figures of the layer classes issue 27 names: strided one-row windows (a ResNetV2's 1x1 / 2
shortcut pool, downsampling 1x1 / 2 convolutions), first convolutions (3 input channels) and grouped
(non-depthwise) convolutions, with each model's cycles and efficiency.

Builds every model for the default target (weights randomised with seed 0; the ResNetV2 corpus model also
quantized to int8 by ``tvm_npu.tools.quantize`` with 4 random calibration samples, seed 0), runs it against
llvm and prints and writes ``results/layer_classes.json``::

    .venv/bin/python benchmarks/layer_classes.py [--models resnet_v2,resnet_v2_int8,light_shufflenet]

It uses only the public build / profile API, so the same command run on an older checkout gives the
"before" column of a comparison.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import onnx

from tvm_npu.models.light import randomize_weights
from tvm_npu.testing.corpus import resnet_v2
from tvm_npu.tools.bench import compare, default_inputs, resolve_model

RESULTS = Path(__file__).parent / "results" / "layer_classes.json"
DEFAULT = ("resnet_v2", "resnet_v2_int8", "light_shufflenet", "light_squeezenet")
_STRIDED = re.compile(r"^(conv|maxpool|avgpool)1x\d+/s[2-9] ")
_SHAPE_AND_GROUPS = re.compile(r"^conv\S+ \(\d+, (\d+), \d+, \d+\)->\S+ \S+ \S+ \S+(?: g(\d+))?")


def layer_class(description: str) -> str | None:
    """The class of a layer by the report's description (``conv1x1/s2 (1, 64, 16, 16)->(...) g4 +bias``)."""
    if _STRIDED.search(description):
        return "strided 1-row window"
    m = _SHAPE_AND_GROUPS.search(description)
    if m is None:
        return None
    channels, groups = int(m.group(1)), int(m.group(2) or 1)
    if channels == 3:
        return "first conv (3 channels)"
    return "grouped conv" if 1 < groups < channels else None


def _model(name: str, tmp: Path) -> tuple[str, onnx.ModelProto]:
    if name == "resnet_v2":
        return name, randomize_weights(resnet_v2(), seed=0)
    if name == "resnet_v2_int8":
        from tvm_npu.tools.quantize import quantize_model

        return name, onnx.load(quantize_model(resnet_v2(), tmp / "q.onnx", random=4, seed=0))
    display, model = resolve_model(name)
    return display, randomize_weights(model, seed=0)


def run(name: str, tmp: Path) -> dict:
    """One model: its figures and the rows of the layers of every class."""
    display, model = _model(name, tmp)
    cmp = compare(display, model, "npu", default_inputs(model), repeat=1, progress=False)
    r, rep = cmp.result, cmp.report
    rows = []
    for x in rep.layers:
        cls = layer_class(x.description)
        if cls is not None:
            rows.append({"class": cls, "name": x.name, "description": x.description, "tile": x.tile,
                         "cycles": x.cycles, "bound_cycles": x.bound_cycles, "efficiency": x.efficiency,
                         "dram_bytes": x.dram_bytes, "wasted_bytes": x.wasted_bytes})
    return {"npu_cycles": r.npu_cycles, "bound_cycles": r.bound_cycles, "efficiency": r.efficiency,
            "max_rel_error": r.max_rel_error, "layers": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(DEFAULT))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            out[name] = r = run(name, Path(tmp))
            print(f"{name:18s} cycles {r['npu_cycles']:>10,}  efficiency {r['efficiency']:.3f}  "
                  f"max rel error {r['max_rel_error']:.2g}")
            for x in r["layers"]:
                print(f"  {x['class']:24s} {x['name']:16s} {x['description'][:58]:58s} {x['cycles']:>9,} "
                      f"bound {x['bound_cycles']:>9,.0f} eff {x['efficiency']:.2f} DRAM {x['dram_bytes'] / 1024:7.1f} "
                      f"KiB waste {x['wasted_bytes'] / 1024:6.1f} KiB")
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
