"""The models with ONNX ``LRN`` (AlexNet, ZFNet-512, Inception-v1), seed-0 random weights: NPU
build (simulated) against onnxruntime, with host calls, partitions, cycles and efficiency, with the
LRN rewrite (``relay_patterns/lrn.py``) and without it (the importer's ``avg_pool3d`` and the
division by a tensor then run on the host).

    python benchmarks/lrn.py [MODEL ...]     # writes benchmarks/results/lrn.json

``tvm-npu bench MODEL --repeat 1 --randomize-weights 0`` gives the same cycles against llvm.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import tvm

import tvm_npu
from tvm_npu.models.light import randomize_weights
from tvm_npu.tools.bench import default_inputs, input_names, model_report, profile_model, resolve_model

MODELS = ("light_bvlc_alexnet", "light_zfnet512", "light_inception_v1")


def measure(name: str, lrn: bool = True) -> dict[str, object]:
    _, model = resolve_model(name)
    model = randomize_weights(model, 0)
    (x,), (inp,) = default_inputs(model), input_names(model)  # the ONNX backend test's input, as ``bench``
    # the pipeline without the rewrite: its switch (tvm_npu.compiler.driver.SWITCHES) turned off
    with tvm.transform.PassContext(disabled_pass=[] if lrn else ["npu.canonicalize.lrn"]):
        ex, info = tvm_npu.build_with_info(model, "npu")
    outs, prof, _ = profile_model(ex, [x])
    out = outs[0]
    _, timed, _ = profile_model(ex, [x], trace=True, timing_only=True)
    rep = model_report(timed, info)  # the report's model line: sum of per-layer bounds / model cycles
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # the light models list unused shape initializers
    want = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
        None, {inp: x})[0]
    err = float(np.max(np.abs(out - want)) / np.max(np.abs(want)))
    return {"model": name, "lrn_on_npu": lrn, "host_ops": dict(info.host_ops),
            "host_calls": sum(info.host_ops.values()), "partitions": info.partitions,
            "npu_cycles": prof.total_cycles, "efficiency": rep.efficiency, "max_error_vs_onnxruntime_rel_range": err}


def main(names: list[str]) -> None:
    rows = [measure(n, lrn) for n in names or MODELS for lrn in (False, True)]
    for r in rows:
        print(r)
    out = Path(__file__).parent / "results" / "lrn.json"
    out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
