"""Every model known by name, and the one way to an ``onnx.ModelProto`` from a path, a proto or a name.

:data:`BUNDLED` is what ``tvm-npu bench mobilenet_v2`` and ``tvm_npu.build("vit_tiny")`` resolve: the
README's model, onnx's light models and the exporter-style generators (:data:`ZOO`).
:func:`benchmark_models` is the table ``benchmarks/compare_llvm.py`` measures (light models with
randomised weights, and the Relax-built :func:`transformer_block`). :func:`load_onnx` turns a path, a
ModelProto or a bundled name into a ModelProto with one-line errors; the compiler's ``load_model``, ``tvm-npu
bench`` and ``tvm-npu quantize`` all go through it. numpy and onnx only: TVM is imported by
:func:`transformer_block` alone, when it is called.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import onnx

from tvm_npu.models.bundled import bert_layer, efficientnet_b0, mobilenet_v2, swin_t_stage, vit_tiny
from tvm_npu.models.inputs import random_inputs  # noqa: F401  (tvm_npu.zoo's name, kept: the old module path)
from tvm_npu.models.light import LIGHT_MODELS, light_model_path, randomize_weights, tiny_convnet
from tvm_npu.models.onnx_file import load_lean, read_external


def _light(name: str) -> onnx.ModelProto:
    return onnx.load(str(light_model_path(name)))


#: The exporter-style models, full size.
ZOO: dict[str, Callable[[], onnx.ModelProto]] = {
    "mobilenet_v2": mobilenet_v2,
    "efficientnet_b0": efficientnet_b0,
    "vit_tiny": vit_tiny,
    "swin_t_stage": swin_t_stage,
    "bert_layer": bert_layer,
}

#: Every model known by name (``tvm-npu bench mobilenet_v2``, ``tvm_npu.build("vit_tiny")``):
#: the README's model, onnx's light models and the exporter-style ones.
BUNDLED: dict[str, Callable[[], onnx.ModelProto]] = {
    "tiny_convnet": tiny_convnet,
    **{f"light_{name}": partial(_light, name) for name in LIGHT_MODELS},
    **ZOO,
}


def opset(model: onnx.ModelProto) -> int:
    """The model's default-domain (``ai.onnx``) opset version."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def load_onnx(model: str | os.PathLike | onnx.ModelProto, *, bundled: bool = True,
              lean: bool = False) -> onnx.ModelProto:
    """A ModelProto from itself, a path to an ``.onnx`` file or (``bundled``) a name in :data:`BUNDLED`.

    A file that exists wins over a bundled name, so a local file is never shadowed. One-line errors: a
    missing file (``FileNotFoundError``, listing the bundled names) and a file that is not a model
    (``ValueError``). ``lean`` (what the compiler asks for): a file's large initializers stay in the file
    (or its external-data files) as external-data references (:func:`tvm_npu.models.onnx_file.load_lean`);
    without it they are read in (what ``onnx.load`` gives, with the file held once), which onnxruntime and
    other tools need.
    """
    if isinstance(model, onnx.ModelProto):
        return model
    if not isinstance(model, str | os.PathLike):
        raise TypeError(f"model must be an onnx.ModelProto, a path or a bundled model's name, "
                        f"not {type(model).__name__}")
    path = Path(model)
    if path.is_file():  # (one-line ModelFileError, a ValueError, for a corrupt file or missing external data)
        lean_model = load_lean(path)
        return lean_model if lean else read_external(lean_model)
    if bundled and isinstance(model, str) and model in BUNDLED:
        return BUNDLED[model]()
    known = f" (bundled models: {', '.join(BUNDLED)})" if bundled else ""
    raise FileNotFoundError(f"model file {str(model)!r} does not exist{known}")


def model_name(model: str | os.PathLike) -> str:
    """How a model given by path or name is shown: a bundled name as itself, a file by its stem."""
    return str(model) if not Path(model).is_file() and str(model) in BUNDLED else Path(model).stem


# ------------------------------------------------------------------------ benchmark models
#: The models ``benchmarks/compare_llvm.py --quick`` runs.
QUICK = ("tiny_convnet", "light_squeezenet", "transformer_block")


def transformer_block(seq: int = 64, dim: int = 128, hidden: int = 512, seed: int = 0) -> Any:
    """One pre-norm-free transformer layer on ``seq x dim`` tokens as a Relax module (``tvm.IRModule``):
    single-head attention (q, k, v projections, ``softmax(q k^T / sqrt(dim)) v``, output projection,
    residual) and an MLP (``gelu(x W1 + b1) W2 + b2``, residual). Imports TVM when called."""
    import numpy as np
    from tvm import relax
    from tvm.script import relax as R

    rng = np.random.default_rng(seed)

    def const(*shape: int, scale: float) -> relax.Constant:
        return relax.const(rng.normal(0.0, scale, shape).astype(np.float32))

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((seq, dim), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            w = 1 / np.sqrt(dim)
            q, k, v = (bb.emit(R.matmul(x, const(dim, dim, scale=w))) for _ in range(3))
            scores = bb.emit(R.multiply(bb.emit(R.matmul(q, bb.emit(R.permute_dims(k)))),
                                        relax.const(np.float32(w))))
            attn = bb.emit(R.matmul(bb.emit(R.nn.softmax(scores, axis=-1)), v))
            h = bb.emit(R.add(bb.emit(R.matmul(attn, const(dim, dim, scale=w))), x))
            up = bb.emit(R.nn.gelu(bb.emit(R.add(bb.emit(R.matmul(h, const(dim, hidden, scale=w))),
                                                 const(hidden, scale=0.1)))))
            down = bb.emit(R.add(bb.emit(R.matmul(up, const(hidden, dim, scale=1 / np.sqrt(hidden)))),
                                 const(dim, scale=0.1)))
            out = bb.emit_output(bb.emit(R.add(down, h)))
        bb.emit_func_output(out)
    return bb.get()


def benchmark_models(quick: bool = False) -> dict[str, Callable[[], Any]]:
    """Name -> loader of the models ``benchmarks/compare_llvm.py`` measures, in the order they are
    benchmarked: tiny_convnet, every light model with weights randomised (seed 0) and
    :func:`transformer_block`; ``quick``: only :data:`QUICK`."""
    table: dict[str, Callable[[], Any]] = {"tiny_convnet": BUNDLED["tiny_convnet"]}
    for name, load in BUNDLED.items():
        if name.startswith("light_"):
            table[name] = lambda load=load: randomize_weights(load(), seed=0)
    table["transformer_block"] = transformer_block
    return {k: v for k, v in table.items() if k in QUICK} if quick else table
