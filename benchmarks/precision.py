"""int8 and fp16 against fp32: what the NPU's native precisions buy on real networks.

Usage: ``python benchmarks/precision.py [--models light_resnet50 light_squeezenet] [--out DIR]``;
``python benchmarks/precision.py --a16w8 [--models tiny_convnet]`` for the cost of 16-bit activations.

For each model (weights randomised with seed 0) the fp32 model and three variants of it
are built for the default target and run once in timing-only mode (cycles equal those of
a functional run):

* ``int8``: QDQ from onnxruntime's quantizer (``tvm_npu.tools.quantize``: per-channel int8
  weights, int8 activations, 8 seeded random calibration samples);
* ``fp16``: the model converted by ``onnxconverter_common.float16`` (fp16 in and out);
* ``fp32 -precision=fp16``: the fp32 model with its NPU operators in fp16.

Printed and written to ``precision.json``, each as a ratio against the fp32 run of the same
process: simulated cycles, DRAM bytes moved, the share of all MACs that run on the NPU in
the variant's type, the geo-mean per-layer efficiency (conv/matmul) against the bound of
the layer's own type, and the layers below 0.90 with what binds them. Goals (issue 9):
int8 <= 0.30x cycles and <= 0.30x DRAM bytes, fp16 <= 0.35x cycles and <= 0.55x DRAM bytes,
100% of MACs in the variant's type, geo-mean efficiency >= 0.90.

``--a16w8`` (issue 28): the model quantized by onnxruntime's ``quantize_static`` twice from the same
pre-processed graph and the same 8 seeded calibration samples, int8 activations (A8W8) and int16 activations
(A16W8), per-channel int8 weights both; printed and written to ``precision_a16w8.json``: cycles, DRAM bytes
and their A16W8 / A8W8 ratios (the tensor engine runs 16x8 at half the int8 rate, and every activation
moves twice the bytes, so 2x is the ceiling where either binds).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import onnx

from tvm_npu.models.light import randomize_weights
from tvm_npu.tools.bench import build_model, default_inputs, environment, model_report, profile_model, resolve_model
from tvm_npu.tools.quantize import quantize_model, random_samples

RESULTS = Path(__file__).parent / "results"
MODELS = ("light_resnet50", "light_squeezenet")
GOALS = {"int8": (0.30, 0.30), "fp16": (0.35, 0.55), "fp32 -precision=fp16": (0.35, 0.55)}
TYPES = {"fp32": ("float32",), "int8": ("int8", "uint8"), "fp16": ("float16",), "fp32 -precision=fp16": ("float16",),
         "a8w8": ("int8",), "a16w8": ("int16",)}
A16W8_MODELS = ("tiny_convnet",)


def variants(fp32: onnx.ModelProto, workdir: Path) -> dict[str, tuple[onnx.ModelProto, str]]:
    """(model, target) per variant name."""
    from onnxconverter_common import float16

    src = workdir / "fp32.onnx"
    onnx.save(fp32, src)
    int8 = onnx.load(quantize_model(src, workdir / "int8.onnx", random=8, seed=0))
    return {"fp32": (fp32, "npu"), "int8": (int8, "npu"), "fp16": (float16.convert_float_to_float16(fp32), "npu"),
            "fp32 -precision=fp16": (fp32, "npu -precision=fp16")}


def a16w8_variants(fp32: onnx.ModelProto, workdir: Path) -> dict[str, onnx.ModelProto]:
    """The A8W8 and A16W8 models of one graph (module docstring). onnxruntime's quantizer directly: both
    widths from one pre-processed graph with one calibration, so the two differ in activation width only."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src, prepared = workdir / "fp32.onnx", workdir / "prepared.onnx"
    onnx.save(fp32, src)
    quant_pre_process(str(src), str(prepared), skip_symbolic_shape=True)
    samples = random_samples(fp32, 8, seed=0)
    models = {}
    for name, activation in (("a8w8", QuantType.QInt8), ("a16w8", QuantType.QInt16)):
        out = workdir / f"{name}.onnx"
        quantize_static(str(prepared), str(out), _Samples(samples), quant_format=QuantFormat.QDQ,
                        activation_type=activation, weight_type=QuantType.QInt8, per_channel=True)
        models[name] = onnx.load(out)
    return models


class _Samples:
    """onnxruntime's calibration reader protocol over a list of samples."""

    def __init__(self, samples: list[dict[str, Any]]) -> None:
        self.samples = iter(samples)

    def get_next(self) -> dict[str, Any] | None:
        return next(self.samples, None)


def a16w8_main(models: list[str], out: Path) -> int:
    """``--a16w8``: A8W8 against A16W8 cycles and DRAM bytes per model."""
    results: dict[str, Any] = {"environment": environment(), "models": {}}
    for spec in models:
        name, proto = resolve_model(spec)
        fp32 = randomize_weights(proto, seed=0)  # as the other variants: a light model's own weights are not real
        with tempfile.TemporaryDirectory() as tmp:
            runs = {v: measure(m, "npu", TYPES[v]) for v, m in a16w8_variants(fp32, Path(tmp)).items()}
        a8, a16 = runs["a8w8"], runs["a16w8"]
        runs["cycles_a16w8_vs_a8w8"] = a16["cycles"] / a8["cycles"]
        runs["dram_a16w8_vs_a8w8"] = a16["dram_bytes"] / a8["dram_bytes"]
        for v in ("a8w8", "a16w8"):
            r = runs[v]
            print(f"{name:17s} {v:6s} cycles {r['cycles']:>11,}  DRAM {r['dram_bytes'] / 2**20:7.2f} MiB  MACs in "
                  f"{TYPES[v][0]} on the NPU {100 * r['typed_mac_share']:.1f}%  host ops {r['host_ops']}  "
                  f"partitions {r['partitions']}")
        print(f"{name:17s} A16W8 / A8W8: cycles {runs['cycles_a16w8_vs_a8w8']:.3f}x, DRAM bytes "
              f"{runs['dram_a16w8_vs_a8w8']:.3f}x")
        results["models"][name] = runs
    out.mkdir(parents=True, exist_ok=True)
    (out / "precision_a16w8.json").write_text(json.dumps(results, indent=1))
    print(f"wrote {out / 'precision_a16w8.json'}")
    return 0


def measure(model: onnx.ModelProto, target: str, types: tuple[str, ...]) -> dict[str, Any]:
    """One build and one timing-only run."""
    executable, info, build_s = build_model(model, target, progress=False)
    _, prof, _ = profile_model(executable, default_inputs(model), trace=True, timing_only=True)
    rep = model_report(prof, info)
    typed = sum(x.macs for x in rep.layers if x.dtype in types)
    partitions = {p: i for i, p in enumerate(dict.fromkeys(x.partition for x in rep.layers))}
    short = [{"layer": f"partition{partitions[x.partition]}/{x.name}", "op": x.description, "dtype": x.dtype,
              "efficiency": round(x.efficiency, 3), "bound_by": x.bound_by}
             for x in rep.layers if x.op in ("conv2d", "matmul") and x.efficiency < 0.90]
    return {
        "target": target, "build_s": build_s, "cycles": rep.cycles, "dram_bytes": rep.dram_bytes,
        "npu_macs": info.npu_macs, "host_macs": info.host_macs,
        "typed_mac_share": typed / max(info.npu_macs + info.host_macs, 1),
        "geomean_efficiency": rep.geomean_efficiency(), "model_bound_cycles": rep.model_bound_cycles,
        "host_ops": sum(info.host_ops.values()), "partitions": len(prof.runs), "short_layers": short,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", help="bundled names or .onnx paths (default: MODELS, or with "
                                                     "--a16w8 A16W8_MODELS)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results)")
    parser.add_argument("--a16w8", action="store_true", help="A8W8 against A16W8 cycles (default model tiny_convnet)")
    args = parser.parse_args(argv)
    if args.a16w8:
        return a16w8_main(args.models or list(A16W8_MODELS), args.out)
    results: dict[str, Any] = {"environment": environment(), "goals": GOALS, "models": {}}
    for spec in args.models or MODELS:
        name, proto = resolve_model(spec)
        fp32 = randomize_weights(proto, seed=0)
        runs: dict[str, Any] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for variant, (model, target) in variants(fp32, Path(tmp)).items():
                r = runs[variant] = measure(model, target, TYPES[variant])
                base = runs["fp32"]
                r["cycles_vs_fp32"] = r["cycles"] / base["cycles"]
                r["dram_vs_fp32"] = r["dram_bytes"] / base["dram_bytes"]
                goal = GOALS.get(variant)
                verdict = "" if goal is None else (
                    f"  goal cycles <= {goal[0]:.2f}x: {'met' if r['cycles_vs_fp32'] <= goal[0] else 'MISSED'}, "
                    f"DRAM <= {goal[1]:.2f}x: {'met' if r['dram_vs_fp32'] <= goal[1] else 'MISSED'}")
                print(f"{name:17s} {variant:21s} cycles {r['cycles']:>11,} ({r['cycles_vs_fp32']:.3f}x fp32)  "
                      f"DRAM {r['dram_bytes'] / 2**20:7.1f} MiB ({r['dram_vs_fp32']:.3f}x)  MACs in "
                      f"{'/'.join(TYPES[variant])} on the NPU {100 * r['typed_mac_share']:.1f}%  geomean eff "
                      f"{r['geomean_efficiency']:.3f}  host ops {r['host_ops']}  build {r['build_s']:.0f} s{verdict}")
                for s in r["short_layers"]:
                    print(f"{'':39s}below 0.90: {s['layer']} {s['op']} {s['efficiency']:.2f} ({s['bound_by']})")
                sys.stdout.flush()
        results["models"][name] = runs
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "precision.json").write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out / 'precision.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
