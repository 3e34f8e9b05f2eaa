"""tvm-npu against Arm's Vela on the same int8 networks and a machine of the same peak (issue 15).

Usage (from a venv with the ``vela`` extra: ``pip install -e ".[vela]"``, i.e. tensorflow-cpu,
tf2onnx, ethos-u-vela and onnxruntime beside tvm-npu; they share numpy, onnx and protobuf without
conflict: tested with tensorflow-cpu 2.21, tf2onnx 1.17, ethos-u-vela 5.2.0, onnx 1.23.2,
protobuf 7.36, numpy 2.4, ml_dtypes 0.7):

    python benchmarks/vela_compare.py [--models resnet50,mobilenet_v2] [--work-dir DIR]
        [--vela-config ../shared/peers/vela_tvmnpu.ini] [--target npu] [--no-numerics | --no-layers]

Per network: Keras builds it (``keras.applications``, random weights, seed 0); the TFLite converter
quantizes it to full-integer int8 with int8 input and output (representative dataset: 8 seeded
uniform(-1, 1) inputs); Vela compiles that ``.tflite`` for an Ethos-U65-256 with the peer config
(system config and memory mode ``TvmNpu``: 1 GHz, 16 B/cycle DRAM, 64 B bursts, 100-cycle latency,
1 MiB SRAM cache) and its summary CSV gives the total cycles, its per-layer CSV each layer's; tf2onnx
converts the same ``.tflite`` to ONNX (``--tflite``, opset 17) and tvm-npu builds that for
``--target`` (the symbolic batch bound with ``shapes=``) and simulates it. The converted models and
Vela's output are cached in ``--work-dir`` (default: ``<tmp>/tvm-npu-vela_compare``; never commit
them).

Reported: cycles, efficiency (MACs / 256 / cycles), tvm-npu / Vela, and the goal (<= 0.8x Vela's
cycles) met or MISSED, and the layers furthest above their roofline bound (what holds the goal back
where it is missed; the per-layer report's cycles beside Vela's for the same layer, matched by order
and MAC count), with the totals per kind of layer. Numerics: the NPU's output and logits against
onnxruntime at ORT_ENABLE_BASIC and at its default level (ORT_ENABLE_ALL), with onnxruntime's two
levels against each other as the yardstick (random weights amplify a one-step rounding difference
layer by layer); and per layer: every quantized layer (the nodes between 8-bit tensors, cut out with
``onnx.utils.Extractor``) compiled alone and fed onnxruntime's float-path tensors for it, judged
against onnxruntime's output of that layer from the same input: its float path, and its integer
kernels (the layer between Q and DQ, at the default level), which on a CPU without VNNI depart from
the float path on full-range int8 weights (standard: >= 99.9% of elements identical, none more than
1 step apart).

Vela's figures come from its analytical performance estimator for the Ethos-U65, ours from a
cycle-level simulator of this NPU: the comparison is of two compilers' schedules on machines of
equal MAC peak and DRAM bandwidth, each judged by its own model. Writes ``vela_compare.json`` and
``vela_compare.md``; with ``--models`` only those networks' entries are replaced.
"""

from __future__ import annotations

import argparse
import configparser
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from tvm_npu.testing.layerwise import IDENTICAL, LEVELS, MAX_STEPS, end_to_end_check, layer_check, ort_kernels
from tvm_npu.testing.vela import match_layers, read_vela_cpu_operators, read_vela_layers, read_vela_summary

RESULTS = Path(__file__).parent / "results"
REPO = Path(__file__).resolve().parent.parent
DEFAULT_VELA_CONFIG = REPO.parent / "shared" / "peers" / "vela_tvmnpu.ini"
ACCELERATOR = "ethos-u65-256"
VELA_CONFIG_NAME = "TvmNpu"  # the ini's system config and memory mode
GOAL = 0.8  # tvm-npu cycles / Vela cycles
SEED = 0
CALIBRATION_SAMPLES = 8
IMAGE = (1, 224, 224, 3)  # NHWC; Keras's default input size for every network below but InceptionV3
TOP_LAYERS = 10


@dataclass(frozen=True)
class Network:
    """A Keras application at its default input size ``image`` (both compilers get the same);
    ``issue_vela_cycles`` is the figure issue 15 quotes (for reference only; None where it quotes none)."""

    keras: str
    issue_vela_cycles: int | None = None
    image: tuple[int, int, int, int] = IMAGE


NETWORKS = {
    "resnet50": Network("ResNet50", 21_951_614),
    "mobilenet_v2": Network("MobileNetV2", 3_133_921),
    # issue 24: hard-swish and squeeze-excitation; swish and SE; concat and BN after it; pre-activation
    "mobilenet_v3_small": Network("MobileNetV3Small"),
    "mobilenet_v3_large": Network("MobileNetV3Large"),
    "efficientnet_b0": Network("EfficientNetB0"),
    "densenet121": Network("DenseNet121"),
    "resnet50_v2": Network("ResNet50V2"),
    "nasnet_mobile": Network("NASNetMobile"),
    "inception_v3": Network("InceptionV3", image=(1, 299, 299, 3)),
}


# ------------------------------------------------------------------- the models
def make_tflite(net: Network, path: Path) -> None:
    """Keras ``net`` with seeded random weights, quantized by the TFLite converter to full int8."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf  # the vela extra; imported only when a model must be made

    tf.keras.utils.set_random_seed(SEED)
    # the input shape given: MobileNetV3 otherwise builds with a dynamic H and W, which Vela cannot place
    # on the NPU (it runs every layer from there on on the CPU)
    model = getattr(tf.keras.applications, net.keras)(weights=None, input_shape=net.image[1:])
    rng = np.random.default_rng(SEED)

    def representative() -> Iterable[list[np.ndarray]]:
        for _ in range(CALIBRATION_SAMPLES):
            yield [rng.uniform(-1, 1, net.image).astype(np.float32)]

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    path.write_bytes(converter.convert())


def make_onnx(tflite: Path, path: Path) -> None:
    """tf2onnx's ``--tflite`` conversion at opset 17 (what ``python -m tf2onnx.convert`` does)."""
    import tf2onnx

    tf2onnx.convert.from_tflite(str(tflite), opset=17, output_path=str(path))


def missing(*modules: str) -> list[str]:
    """The modules of the ``vela`` extra that this Python cannot import."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def models(name: str, work: Path) -> tuple[Path, Path]:
    """(.tflite, .onnx) of a network, made once per work dir."""
    tflite, onnx_path = work / f"{name}.tflite", work / f"{name}.onnx"
    absent = missing("tensorflow", "tf2onnx") if not (tflite.is_file() and onnx_path.is_file()) else []
    if absent:
        raise SystemExit(f"making {name}'s models needs {', '.join(absent)}: pip install -e \".[vela]\"")
    if not tflite.is_file():
        print(f"{name}: Keras -> TFLite int8", flush=True)
        make_tflite(NETWORKS[name], tflite)
        onnx_path.unlink(missing_ok=True)  # made from the old .tflite
    if not onnx_path.is_file():
        print(f"{name}: tf2onnx --tflite --opset 17", flush=True)
        make_onnx(tflite, onnx_path)
    return tflite, onnx_path


# ------------------------------------------------------------------- Vela




def run_vela(tflite: Path, config: Path, out_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Vela on ``tflite`` for the peer machine: (summary, per-layer), from its CSVs (cached in ``out_dir``)."""
    summary = out_dir / f"{tflite.stem}_summary_{VELA_CONFIG_NAME}.csv"
    per_layer = out_dir / f"{tflite.stem}_per-layer.csv"
    stamp = out_dir / "config.ini"  # the config the cached output was made with
    if not (summary.is_file() and per_layer.is_file() and stamp.is_file()
            and stamp.read_text() == config.read_text()):
        out_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "ethosu.vela", str(tflite), "--accelerator-config", ACCELERATOR,
               "--config", str(config), "--system-config", VELA_CONFIG_NAME, "--memory-mode", VELA_CONFIG_NAME,
               "--output-dir", str(out_dir), "--verbose-performance"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        (out_dir / "vela.log").write_text(done.stdout + done.stderr)
        if done.returncode:
            tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:]
            raise RuntimeError(f"vela failed on {tflite} (exit {done.returncode}): {' '.join(tail)}")
        stamp.write_text(config.read_text())
    return read_vela_summary(summary), read_vela_layers(per_layer)


def peer_machine(config: Path, summary: dict[str, Any]) -> dict[str, float]:
    """The Vela machine's figures in tvm-npu's terms (from the ini and Vela's own summary)."""
    ini = configparser.ConfigParser()
    ini.read(config)
    system, mode = ini[f"System_Config.{VELA_CONFIG_NAME}"], ini[f"Memory_Mode.{VELA_CONFIG_NAME}"]
    clock = float(summary["core_clock"])
    return {
        "clock_mhz": clock / 1e6,
        "macs_per_cycle": float(ACCELERATOR.rsplit("-", 1)[1]),
        "dram_bytes_per_cycle": float(summary["dram_bandwidth"]) * 2**30 / clock,  # Vela prints GiB/s
        "dram_burst_bytes": float(system["Dram_burst_length"]),
        "dma_latency": float(system["Dram_read_latency"]),
        "sram_bytes": float(mode["arena_cache_size"]),
    }


def our_machine(target: str) -> dict[str, float]:
    """The same figures for the tvm-npu target."""
    from tvm_npu.config import DType, parse_target

    hw = parse_target(target).hw
    return {"clock_mhz": hw.clock_mhz, "macs_per_cycle": hw.peak_macs_per_cycle(DType.INT8),
            "dram_bytes_per_cycle": hw.dram_bytes_per_cycle, "dram_burst_bytes": hw.dram_burst_bytes,
            "dma_latency": hw.dma_latency, "sram_bytes": hw.max_sram_bytes}


# ------------------------------------------------------------------- numerics




























# ------------------------------------------------------------------- our side


def measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One network: Vela, tvm-npu, numerics."""
    from tvm_npu.compiler.onnx_import import bind_input_shapes
    from tvm_npu.tools.bench import build_model, model_report, profile_model

    tflite, onnx_path = models(name, args.work_dir)
    vela, vela_layers = run_vela(tflite, args.vela_config, args.work_dir / f"vela_{name}")
    vela_cpu_ops = read_vela_cpu_operators(args.work_dir / f"vela_{name}" / "vela.log")  # the ratio holds at 0
    if vela_cpu_ops:
        print(f"{name}: Vela left {vela_cpu_ops} operators on the CPU: its cycles cover only part of the network",
              flush=True)
    model = onnx.load(onnx_path)
    input_name = model.graph.input[0].name
    image = NETWORKS[name].image
    executable, info, build_s = build_model(model, args.target, progress=False, shapes={input_name: image})
    x = np.random.default_rng(SEED).integers(-128, 128, image, dtype=np.int8)
    _, prof, sim_s = profile_model(executable, [x], trace=True, timing_only=True)
    rep = model_report(prof, info)
    macs = int(vela["nn_macs"])
    peak = our_machine(args.target)["macs_per_cycle"]
    vela_cycles = int(vela["cycles_total"])
    pairs = match_layers(rep.layers, vela_layers)
    layers = [{"label": x.label or x.name, "op": x.op, "description": x.description, "macs": x.macs,
               "cycles": x.cycles, "bound_cycles": x.bound_cycles, "efficiency": x.efficiency, "bound_by": x.bound_by,
               "excess_cycles": x.cycles - x.bound_cycles,
               "vela_layer": pairs[i]["name"] if i in pairs else None,
               "vela_cycles": pairs[i]["cycles"] if i in pairs else None} for i, x in enumerate(rep.layers)]
    row: dict[str, Any] = {
        "network": name, "keras": NETWORKS[name].keras, "image": list(image), "target": args.target, "macs": macs,
        "our_macs": info.npu_macs + info.host_macs, "vela_cycles": vela_cycles,
        "vela_cpu_ops": vela_cpu_ops,
        "vela_efficiency": macs / peak / vela_cycles, "issue_vela_cycles": NETWORKS[name].issue_vela_cycles,
        "cycles": rep.cycles, "efficiency": macs / peak / rep.cycles, "ratio": rep.cycles / vela_cycles,
        "goal_cycles": GOAL * vela_cycles, "goal_met": rep.cycles <= GOAL * vela_cycles,
        "layer_bound_cycles": rep.bound_cycles, "model_bound_cycles": rep.model_bound_cycles,
        "dram_bytes": rep.dram_bytes, "vela_dram_bytes": int(vela["dram_total_bytes"]),
        "host_ops": dict(info.host_ops), "build_s": build_s, "simulator_s": sim_s,
        "machine": {"tvm-npu": our_machine(args.target), "vela": peer_machine(args.vela_config, vela)},
        "vela_layers_matched": len(pairs), "layers_with_macs": sum(1 for x in rep.layers if x.macs),
        "layers": layers,
    }
    print(f"{name}: tvm-npu {rep.cycles:,} cycles, Vela {vela_cycles:,}: {row['ratio']:.3f}x "
          f"(goal <= {GOAL}x: {'met' if row['goal_met'] else 'MISSED'})", flush=True)
    if args.numerics:
        static = bind_input_shapes(model, {input_name: image})
        static = onnx.shape_inference.infer_shapes(static)
        row["end_to_end"] = end_to_end_check(static, input_name, x, args.target)
        row["ort_default_kernels"] = ort_kernels(static)
        if args.layers:
            row["per_layer"] = layer_check(static, input_name, x, args.target)
    return row


# ------------------------------------------------------------------- output
def share_text(share: float) -> str:
    """A share of identical elements in percent; never rounded up to 100% when one element differs."""
    text = f"{share:.3%}"
    return ">99.999%" if share < 1 and text == "100.000%" else text


def pct(share_steps: Sequence[float]) -> str:
    return f"{share_text(share_steps[0])} (max {share_steps[1]})"


def layer_kind(layer: dict[str, Any]) -> str:
    """``conv3x3 depthwise``, ``conv1x1``, ``matmul``, ...: the report's operator with a conv's kernel."""
    if layer["op"] != "conv2d":
        return layer["op"]
    kernel = layer["description"].split("/", 1)[0]
    return f"{kernel} depthwise" if re.search(r" g\d+ ", layer["description"]) else kernel


def int8_dot_product() -> str:
    """How this CPU multiplies 8-bit integers in onnxruntime's x86 kernels: ``vnni`` (exact int32 sums) or
    ``avx2`` (VPMADDUBSW: u8 x s8 products summed in pairs that saturate at int16)."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), [])
    except OSError:
        return "unknown"
    if {"avx512_vnni", "avx_vnni"} & set(flags):
        return "vnni"
    return "avx2" if "avx2" in flags else "unknown"


def markdown(rows: Sequence[dict[str, Any]], cpu_int8: str = "unknown") -> str:
    """The issue's table with our column filled in, the machines, numerics, and what holds the goal back."""
    out = ["Vela's figures come from its analytical performance estimator for the Ethos-U65 (ethos-u65-256), "
           "ours from a cycle-level simulator of this NPU: the comparison is of two compilers' schedules on "
           "machines of equal MAC peak and DRAM bandwidth, each judged by its own model.", "",
           "| network | MACs | Vela cycles | Vela efficiency (MACs / 256 / cycles) | tvm-npu cycles | tvm-npu "
           "efficiency | tvm-npu / Vela | goal (<= 0.8x Vela) |",
           "|---|--:|--:|--:|--:|--:|--:|---|"]
    for r in rows:
        size = r.get("image", IMAGE)[1:3]
        shown = r["keras"] if tuple(size) == IMAGE[1:3] else f"{r['keras']} ({size[0]}x{size[1]})"
        out.append(f"| {shown} | {r['macs'] / 1e9:.3g} G | {r['vela_cycles']:,} | {r['vela_efficiency']:.3f} | "
                   f"{r['cycles']:,} | {r['efficiency']:.3f} | {r['ratio']:.3f}x | <= {r['goal_cycles'] / 1e6:.2f} M: "
                   f"{'met' if r['goal_met'] else 'MISSED'} |")
    quoted = [f"{r['keras']} {r['issue_vela_cycles']:,}" for r in rows
              if r["issue_vela_cycles"] not in (None, r["vela_cycles"])]
    if quoted:
        out += ["", f"(Vela's cycles as issue 15 quoted them: {', '.join(quoted)}.)"]
    hosts = [f"{r['keras']}: {', '.join(f'{k} x{v}' for k, v in r['host_ops'].items())}" for r in rows if r["host_ops"]]
    if hosts:
        out += ["", f"Host operators in our build: {'; '.join(hosts)}."]
    on_cpu = [f"{r['keras']} {r['vela_cpu_ops']}" for r in rows if r.get("vela_cpu_ops")]
    if on_cpu:
        out += ["", f"Vela left operators on the CPU ({', '.join(on_cpu)}): its cycles for those networks cover only "
                "part of them, and the ratio means nothing."]
    if rows:
        ours, peer = rows[0]["machine"]["tvm-npu"], rows[0]["machine"]["vela"]
        out += ["", "The two machines (tvm-npu's target against Vela's ini and summary):", "",
                "| | tvm-npu | Vela |", "|---|--:|--:|"]
        out += [f"| {k} | {ours[k]:,.0f} | {peer[k]:,.0f} |" for k in ours]
        differ = [k for k in ours if ours[k] != peer[k]]
        out += ["", f"The machines DIFFER in {', '.join(differ)}: the comparison is not at equal peak and bandwidth."
                if differ else "Equal in every figure above."]
        notes: list[str] = []
        out += ["", "Numerics (random int8 input, seed 0): % of elements identical to onnxruntime (max difference in "
                "steps); onnxruntime's default level (ORT_ENABLE_ALL) against its ORT_ENABLE_BASIC is the yardstick. "
                "Per layer: each quantized layer compiled alone, fed onnxruntime's input for it; the worst layer.", "",
                "| network | tensor | NPU vs ORT basic | NPU vs ORT default | ORT default vs basic |",
                "|---|---|--:|--:|--:|"]
        for r in rows:
            for name, e in r.get("end_to_end", {}).items():
                out.append(f"| {r['keras']} | {name} | {pct(e['npu_vs_basic'])} | {pct(e['npu_vs_default'])} | "
                           f"{pct(e['ort_default_vs_basic'])} |")
            if "per_layer" in r:
                s = r["per_layer"]["summary"]
                n = r["per_layer"]["layers"]
                cells = [f"{share_text(s[k]['min_identical'])} (max {s[k]['max_steps']}); "
                         f"{s[k]['layers_meeting']}/{n} meet" for k in (*LEVELS, "ort_default_vs_basic")]
                out.append(f"| {r['keras']} | per layer ({n}) | {' | '.join(cells)} |")
                own = [x for x in r["per_layer"]["rows"]
                       if x["ort_default_vs_basic"][0] < IDENTICAL or x["ort_default_vs_basic"][1] > MAX_STEPS]
                if own:
                    worst = max(x["ort_default_vs_basic"][1] for x in own)
                    cause = ("on this CPU (AVX2, no VNNI) its u8 x s8 kernels sum products in pairs that saturate "
                             "at int16 (VPMADDUBSW), which full-range int8 weights (TFLite's reach +-127) can "
                             "overflow; with 7-bit weights the two agree (tests/testing/test_layerwise_and_vela.py)"
                             if cpu_int8 == "avx2" else f"CPU int8 dot product: {cpu_int8}")
                    kernels = r.get("ort_default_kernels", {})
                    convs = ", ".join(f"{kernels[k]} {k}" for k in ("QLinearConv", "Conv", "FusedConv") if k in kernels)
                    notes.append(f"{r['keras']}: onnxruntime's integer kernels depart from its own float path on "
                                 f"{len(own)} of {n} layers (up to {worst} steps; {cause}). In the whole network "
                                 f"its default level runs the convolutions as {convs or 'unknown'}: some in these "
                                 f"kernels, the rest in float. The NPU is judged by its agreement with the float "
                                 f"path.")
                hosted = r["per_layer"].get("layers_with_host_ops")
                if hosted:
                    notes.append(f"{r['keras']}: {len(hosted)} layer(s) compiled alone keep host operators "
                                 f"({', '.join(hosted)})")
        out += ["", f"Standard per layer: >= {IDENTICAL:.1%} identical and <= {MAX_STEPS} step. Per layer, every "
                "reference takes the same input (onnxruntime's float path's tensors); the default-level column runs "
                "the layer between a QuantizeLinear and a DequantizeLinear, so onnxruntime uses its integer kernels "
                "(QLinearConv, ...) where it has them. The Softmax output "
                "is int8 probabilities (scale 1/256), mostly 0: the logits before it show the differences.",
                *(line for note in notes for line in ("", note))]
    for r in rows:
        top = sorted(r["layers"], key=lambda x: -x["excess_cycles"])[:TOP_LAYERS]
        over = r["cycles"] - r["goal_cycles"]
        verdict = (f"MISSED by {over:,.0f} cycles: the layers that hold it back" if over > 0 else
                   f"goal met with {-over:,.0f} cycles to spare")
        out += ["", f"{r['keras']}: {verdict}. The sum of our layers' roofline bounds is "
                f"{r['layer_bound_cycles']:,.0f} ({r['layer_bound_cycles'] / r['vela_cycles']:.3f}x Vela's cycles); "
                f"the layers furthest above their bound, with Vela's cycles for the same layer (matched by order and "
                f"MAC count: {r['vela_layers_matched']}/{r['layers_with_macs']}):", "",
                "| layer | operator | MACs | cycles | bound | efficiency | bound by | cycles - bound | Vela cycles |",
                "|---|---|--:|--:|--:|--:|---|--:|--:|"]
        for x in top:
            vela = f"{x['vela_cycles']:,}" if x["vela_cycles"] is not None else "-"
            out.append(f"| {x['label']} | {x['description']} | {x['macs'] / 1e6:.1f} M | {x['cycles']:,} | "
                       f"{x['bound_cycles']:,.0f} | {x['efficiency']:.2f} | {x['bound_by']} | "
                       f"{x['excess_cycles']:,.0f} | {vela} |")
        by_kind: dict[str, list[float]] = {}
        for x in r["layers"]:
            agg = by_kind.setdefault(layer_kind(x), [0, 0, 0, 0, 0, 0])  # cycles, bound; matched: ours, Vela's,
            agg[0] += x["cycles"]                                          # layers, layers slower than Vela's
            agg[1] += x["bound_cycles"]
            if x["vela_cycles"] is not None:
                agg[2] += x["cycles"]
                agg[3] += x["vela_cycles"]
                agg[4] += 1
                agg[5] += x["cycles"] > x["vela_cycles"]
        out += ["", "| operator | cycles | bound | efficiency | cycles / Vela (matched layers) | layers slower than "
                "Vela's |", "|---|--:|--:|--:|--:|--:|"]
        for kind, (cyc, bound, mc, mv, n, slower) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
            ratio, count = (f"{mc / mv:.2f}x", f"{slower:.0f} / {n:.0f}") if mv else ("-", "-")
            out.append(f"| {kind} | {cyc:,} | {bound:,.0f} | {bound / cyc if cyc else 0:.2f} | {ratio} | {count} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated networks (default: all; known: {', '.join(NETWORKS)})")
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "tvm-npu-vela_compare",
                        help="where the .tflite/.onnx models and Vela's output are cached")
    parser.add_argument("--vela-config", type=Path, default=DEFAULT_VELA_CONFIG,
                        help=f"Vela's ini with the {VELA_CONFIG_NAME} system config and memory mode "
                        f"(default: {DEFAULT_VELA_CONFIG})")
    parser.add_argument("--target", default="npu", help="the tvm-npu target (default: npu)")
    parser.add_argument("--no-numerics", dest="numerics", action="store_false",
                        help="skip the comparisons with onnxruntime")
    parser.add_argument("--no-layers", dest="layers", action="store_false",
                        help="skip the per-layer numerics (one build per quantized layer)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results)")
    args = parser.parse_args(argv)
    names = args.models.split(",") if args.models else list(NETWORKS)
    unknown = [n for n in names if n not in NETWORKS]
    if unknown:
        parser.error(f"unknown network(s) {', '.join(unknown)}; known: {', '.join(NETWORKS)}")
    if not args.vela_config.is_file():
        parser.error(f"--vela-config {args.vela_config}: no such file; give the path of vela_tvmnpu.ini")
    absent = missing("ethosu", "onnxruntime")
    if absent:
        parser.error(f"{', '.join(absent)} not installed: pip install -e \".[vela]\" (best in a venv of its own)")
    if not args.out.is_dir():
        parser.error(f"--out {args.out}: no such directory")
    args.vela_config = args.vela_config.resolve()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    # TVM's ONNX frontend renames every tf2onnx tensor name with a '.' in it, once per name: noise here
    warnings.filterwarnings("ignore", message="Renaming name")
    start = time.perf_counter()
    rows = [measure(n, args) for n in names]
    path = args.out / "vela_compare.json"
    if args.models and path.is_file():  # a partial run replaces its networks' entries
        previous = {r["network"]: r for r in json.loads(path.read_text())["rows"]}
        previous.update({r["network"]: r for r in rows})
        rows = [previous[n] for n in NETWORKS if n in previous]
    from tvm_npu.tools.bench import environment

    versions: dict[str, str | None] = {}
    for pkg in ("tensorflow-cpu", "tf2onnx", "ethos-u-vela", "onnx", "onnxruntime"):
        try:
            versions[pkg] = version(pkg)
        except PackageNotFoundError:  # recorded as missing: the run did not need it (models cached)
            versions[pkg] = None
    path.write_text(json.dumps({"environment": {**environment(), **versions, "cpu_int8": int8_dot_product()},
                                "goal": GOAL,
                                "vela_config": str(args.vela_config), "last_run_seconds": time.perf_counter() - start,
                                "rows": rows}, indent=1) + "\n")
    text = markdown(rows, int8_dot_product())
    (args.out / "vela_compare.md").write_text(text)
    print(text)
    print(f"wrote {path} and {args.out / 'vela_compare.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
