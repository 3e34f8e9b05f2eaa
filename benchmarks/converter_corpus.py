"""The exporter-style corpus (``tvm_npu.testing.corpus``) in fp32 and int8: what stays on the host, and
what int8 costs against fp32 (issues 24 and 26).

Usage: ``python benchmarks/converter_corpus.py [--models yolov8,densenet] [--target "npu ..."] [--layers]``.

Per model: the fp32 build (host operator calls, NPU partitions, simulated NPU cycles, agreement with llvm
and onnxruntime), the same model quantized by onnxruntime's ``quantize_static`` (QDQ, per-channel int8
weights, int8 activations, 8 seeded random calibration samples; ``tvm_npu.tools.quantize.quantize_model``)
built for the NPU (host calls beyond the model's own float-input quantize and float-output dequantize,
partitions, cycles, bit-exactness against the llvm build of the same model, and the share of outputs
identical to onnxruntime's with the largest difference in output steps), the same for the model in the
TFLite converter + tf2onnx form (``tvm_npu.testing.tflite_form``: NHWC float input, TFLite's quantization
rules; fed the same image transposed to NHWC), and each int8 / fp32 cycle ratio (issue 24's goal: <= 0.35).
``--layers`` adds the per-layer check of ``tvm_npu.testing.layerwise``
(each quantized layer alone on onnxruntime's own input; slow). Writes ``results/converter_corpus.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx

import tvm_npu
from tvm_npu.testing.corpus import CORPUS
from tvm_npu.testing.layerwise import layer_check, ort_run, steps
from tvm_npu.testing.tflite_form import tflite_form
from tvm_npu.tools.bench import profile_model
from tvm_npu.tools.quantize import quantize_model

RESULTS = Path(__file__).parent / "results"
#: Host operators a quantized model needs whatever the compiler does: its float input is quantized and its
#: float output dequantized (the QDQ model's own boundary).
BOUNDARY = ("relax.quantize", "relax.dequantize")


def _host_calls(info: tvm_npu.BuildInfo, quantized: bool) -> tuple[int, dict[str, int]]:
    """Host operator calls, the boundary quantize / dequantize of a quantized model taken out (one each)."""
    ops = dict(info.host_ops)
    if quantized:
        for op in BOUNDARY:
            if ops.get(op):
                ops[op] -= 1
    ops = {k: v for k, v in ops.items() if v}
    return sum(ops.values()), ops


def measure(model: onnx.ModelProto, target: str, x: np.ndarray, quantized: bool) -> dict[str, Any]:
    """Build ``model`` for the NPU and for llvm, run both on ``x`` and onnxruntime too."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        ex, info = tvm_npu.build_with_info(model, target)
        build_s = time.perf_counter() - t0
        reference = tvm_npu.build_reference(model)
    (got, *_), prof, _ = profile_model(ex, [x])
    (ref, *_), _, _ = profile_model(reference, [x])
    (ort, *_) = ort_run(model, {model.graph.input[0].name: x}, "basic")
    calls, ops = _host_calls(info, quantized)
    row: dict[str, Any] = {"host_calls": calls, "host_ops": ops, "partitions": info.partitions,
                           "cycles": prof.total_cycles, "build_s": round(build_s, 1)}
    if quantized:
        row["bit_exact_vs_llvm"] = bool(np.array_equal(got, ref))
        step = float(model_output_step(model))
        row["vs_onnxruntime"] = steps(np.rint(got / step), np.rint(ort / step))
    else:
        row["max_abs_vs_llvm"] = float(np.max(np.abs(got - ref)))
        row["max_abs_vs_onnxruntime"] = float(np.max(np.abs(got - ort)))
    return row


def model_output_step(model: onnx.ModelProto) -> float:
    """The quantization step of the tensor the output ``DequantizeLinear`` reads (1.0 if there is none)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    node = producer.get(model.graph.output[0].name)
    if node is None or node.op_type != "DequantizeLinear":
        return 1.0
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    return float(np.asarray(inits[node.input[1]]).reshape(-1)[0])


def run(name: str, target: str, layers: bool, work: Path) -> dict[str, Any]:
    """fp32, int8 (``quantize_static``) and TFLite-form int8 rows of one corpus model."""
    model = CORPUS[name]()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    fp32 = measure(model, target, x, quantized=False)
    qpath = quantize_model(model, work / f"{name}.int8.onnx", random=8, seed=0)
    qmodel = onnx.load(str(qpath))
    int8 = measure(qmodel, target, x, quantized=True)
    tmodel = tflite_form(model)
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    tflite = measure(tmodel, target, x_nhwc, quantized=True)
    row = {"model": name, "fp32": fp32, "int8": int8, "int8_over_fp32_cycles": int8["cycles"] / fp32["cycles"],
           "tflite": tflite, "tflite_over_fp32_cycles": tflite["cycles"] / fp32["cycles"]}
    if layers:
        inferred = onnx.shape_inference.infer_shapes(qmodel)  # the per-layer extractor needs every value's type
        row["layers"] = layer_check(inferred, qmodel.graph.input[0].name, x, target)["summary"]
        row["tflite_layers"] = layer_check(tmodel, tmodel.graph.input[0].name, x_nhwc, target)["summary"]
    return row


def line(row: dict[str, Any]) -> str:
    f = row["fp32"]
    text = f"{row['model']:13s} fp32: host {f['host_calls']:3d} parts {f['partitions']:3d} cycles {f['cycles']:>10,}"
    for form in ("int8", "tflite"):
        q = row[form]
        same, worst = q["vs_onnxruntime"]
        text += (f"\n{'':13s} {form:6s}: host {q['host_calls']:3d} parts {q['partitions']:3d} cycles {q['cycles']:>10,}"
                 f" = {row[f'{form}_over_fp32_cycles']:.2f}x fp32 (goal <= 0.35)  bit-exact vs llvm"
                 f" {q['bit_exact_vs_llvm']}  vs onnxruntime {same:.2%} identical, max {worst} steps"
                 f"  host {q['host_ops'] or '-'}")
    return text + f"\n{'':13s} fp32 host {f['host_ops'] or '-'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CORPUS), help="comma-separated names of tvm_npu.testing.corpus")
    parser.add_argument("--target", default="npu")
    parser.add_argument("--layers", action="store_true", help="also check every quantized layer against onnxruntime")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tvm-npu-corpus.") as tmp:
        for name in args.models.split(","):
            rows.append(run(name, args.target, args.layers, Path(tmp)))
            print(line(rows[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "converter_corpus.json").write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
