"""Mixed precision from an error budget (issue 28): what int8, 16-bit activations, fp16 and the
``--target-sqnr`` choice cost in output error and in NPU cycles.

Usage: ``python benchmarks/mixed_precision.py [--models mobilenet_v3 vit_encoder tiny_convnet] [--out DIR]``.

For each model (a hard-swish / squeeze-excitation network and a transformer encoder from
:data:`tvm_npu.testing.corpus.CORPUS`, the plain CNN ``tiny_convnet``), with 8 seeded standard-normal
calibration samples (seed 0), the variants:

* ``int8``: onnxruntime's ``quantize_static`` (``tvm_npu.tools.quantize``: per-channel int8 weights,
  int8 activations);
* ``int16``: the same with every activation tensor in 16 bits (A16W8, ``TensorQuantOverrides``);
* ``fp16``: ``onnxconverter_common.float16`` of the fp32 model;
* ``sqnr>=B``: ``quantize_model(target_sqnr=B)`` at two budgets between the int8 and int16 figures
  (half and 85% of the way, rounded to 0.1 dB), since a budget outside that range is met by int8 alone
  or by nothing (weights stay int8).

The search chooses int8, int16 or fp16 per activation tensor and must meet its budget on the calibration
samples and on 8 held-out samples (seed 1); a choice with fp16 tensors is built for the target it names
(``npu -precision=fp16``).

Figures per variant: the output SQNR against fp32 on the calibration samples and on the held-out
samples; the cost model's cycles (datasheet bound per layer, :mod:`tvm_npu.tools.layer_cost`); and the
build for the default target (or the search's), run once in timing-only mode: simulated NPU cycles and
the operators left on the host. Printed and written to ``mixed_precision.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import onnx

from tvm_npu.config import parse_target
from tvm_npu.models.registry import BUNDLED
from tvm_npu.report.text import first_line
from tvm_npu.testing.corpus import CORPUS
from tvm_npu.tools.bench import build_model, default_inputs, environment, model_report, profile_model
from tvm_npu.tools.layer_cost import layers, model_cycles
from tvm_npu.tools.precision_search import choose_precisions
from tvm_npu.tools.quantize import calibration_samples, quantize_model, random_samples
from tvm_npu.tools.sqnr import OrtModel, output_energy, quantized_tensors

RESULTS = Path(__file__).parent / "results"
MODELS = ("mobilenet_v3", "vit_encoder", "tiny_convnet")
SHARES = (0.5, 0.85)  # where the two budgets sit between the int8 and the int16 SQNR


def npu_figures(model: onnx.ModelProto, target: str = "npu") -> dict[str, Any]:
    """Build for ``target`` and run once, timing only: simulated cycles and host operators."""
    try:
        executable, info, build_s = build_model(model, target, progress=False)
        _, prof, _ = profile_model(executable, default_inputs(model), trace=True, timing_only=True)
    except Exception as e:  # a variant the compiler rejects is a figure too
        return {"error": first_line(e)}
    rep = model_report(prof, info)
    return {"npu_cycles": rep.cycles, "host_ops": sum(info.host_ops.values()), "host_op_kinds": info.host_ops,
            "host_macs": info.host_macs, "npu_macs": info.npu_macs, "build_s": round(build_s, 1)}


def variants(fp32: onnx.ModelProto, samples: list, held_out: list,
             tmp: Path) -> tuple[dict[str, Path | onnx.ModelProto], dict]:
    """The variants by name, and the searches' results (budget, table, target, cycles)."""
    from onnxconverter_common import float16

    quantize = partial(quantize_model, fp32, calibration=samples)
    int8 = quantize(tmp / "int8.onnx", int16=[])  # at opset 21, as every model of the search
    every = [t.name for t in quantized_tensors(onnx.load(str(int8))).values()]
    found: dict[str, Path | onnx.ModelProto] = {"int8": int8, "int16": quantize(tmp / "int16.onnx", int16=every),
                                                "fp16": float16.convert_float_to_float16(fp32)}
    searches = {}
    low = output_energy([OrtModel(fp32).run(s) for s in samples], onnx.load(str(int8)), samples).db
    high = output_energy([OrtModel(fp32).run(s) for s in samples], onnx.load(str(found["int16"])), samples).db
    for share in SHARES:
        budget = round(low + share * (high - low), 1)
        choice = choose_precisions(quantize, fp32, samples, tmp / f"sqnr{budget}.onnx", budget, held_out=held_out)
        found[f"sqnr>={budget:g}"] = choice.output
        searches[f"sqnr>={budget:g}"] = {
            "budget_db": budget, "quantizations": choice.quantizations, "target": choice.target,
            "cost_model_cycles": round(choice.cycles), "fp16_layers": list(choice.float_nodes),
            "tensors_fp16": sum(r.precision == "fp16" for r in choice.rows), "table": choice.table()}
    return found, searches


def measure(fp32: onnx.ModelProto, model: onnx.ModelProto, samples: list, held_out: list,
            cost: list, target: str = "npu") -> dict[str, Any]:
    """SQNR on both sample sets, cost-model cycles and the NPU build's figures of one variant."""
    def db(on: list) -> float:
        return round(output_energy([OrtModel(fp32).run(s) for s in on], model, on).db, 2)

    hw = parse_target("npu").hw
    tensors = quantized_tensors(model)
    if tensors:
        wide = {t.name: "int16" for t in tensors.values() if t.bits == 16}
        estimate, n16 = model_cycles(hw, cost, wide), len(wide)
    else:  # fp16: the int8 model's layers, every tensor in fp16
        estimate, n16 = model_cycles(hw, cost, "fp16"), 0
    return {"sqnr_db": db(samples), "sqnr_held_out_db": db(held_out), "cost_model_cycles": round(estimate),
            "tensors_16bit": n16, "tensors": len(tensors), **npu_figures(model, target)}


def run_model(name: str) -> dict[str, Any]:
    fp32 = (CORPUS.get(name) or BUNDLED[name])()
    samples = calibration_samples(fp32, random=8, seed=0)
    held_out = random_samples(fp32, 8, seed=1)
    runs: dict[str, Any] = {"fp32": npu_figures(fp32)}
    with tempfile.TemporaryDirectory() as tmp:
        found, searches = variants(fp32, samples, held_out, Path(tmp))
        cost = layers(onnx.load(str(found["int8"])))
        for variant, model in found.items():
            proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
            search = searches.get(variant, {})
            r = runs[variant] = measure(fp32, proto, samples, held_out, cost, search.get("target", "npu")) | search
            npu = (f"NPU cycles {r['npu_cycles']:>10,}  host ops {r['host_ops']:>3}" if "npu_cycles" in r
                   else f"build failed: {r['error']}")
            print(f"{name:13s} {variant:11s} SQNR {r['sqnr_db']:6.2f} dB (held-out {r['sqnr_held_out_db']:6.2f})  "
                  f"16-bit {r['tensors_16bit']:>3}/{r['tensors']:<3} cost model {r['cost_model_cycles']:>9,}  {npu}",
                  flush=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), help="corpus or bundled model names")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results)")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"environment": environment(), "models": {}}
    for name in args.models:
        runs = results["models"][name] = run_model(name)
        for variant, r in runs.items():
            if variant.startswith("sqnr>="):
                versus = [f"{'fewer' if r.get('npu_cycles', 0) < runs[v].get('npu_cycles', -1) else 'NOT fewer'} "
                          f"NPU cycles than {v}" for v in ("int16", "fp16")]
                met = min(r["sqnr_db"], r["sqnr_held_out_db"]) >= r["budget_db"]
                print(f"{name:13s} {variant}: budget {'met' if met else 'MISSED'} (calibration and held out), "
                      f"{', '.join(versus)}")
                r["fewer_npu_cycles_than"] = [v for v, text in zip(("int16", "fp16"), versus, strict=True)
                                              if not text.startswith("NOT")]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "mixed_precision.json").write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out / 'mixed_precision.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
