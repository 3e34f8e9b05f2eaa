"""The inputs a model takes: one record for a tensor's name, shape and type (:class:`TensorSpec`), one
enumeration of an ONNX graph's real inputs (:func:`graph_inputs`), one seeded random-input generator
(:func:`random_arrays`) and the inputs ONNX's backend tests feed (:func:`backend_inputs`).
numpy and onnx only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper


def shape_text(dims: Sequence[int | str]) -> str:
    """``(1, 3, 224, 224)``; a 1-tuple as ``(10,)``."""
    return "(" + ", ".join(map(str, dims)) + ("," if len(dims) == 1 else "") + ")"


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output: name, shape (a symbolic dimension by its name, ``"?"`` without one) and
    element type (a numpy dtype name, ``"?"`` when unknown)."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str

    def text(self) -> str:
        return f"{self.name}: {self.dtype} {shape_text(self.shape)}"

    @property
    def static(self) -> bool:
        """Whether every dimension is a number."""
        return all(isinstance(d, int) for d in self.shape)


#: The name quantization's helpers used for the same record.
InputSpec = TensorSpec


def input_values(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs of ``model`` that are real inputs, in order: inputs that are also initializers (old IR
    versions list every weight as an input too) are weights, not inputs."""
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def _dtype_name(elem_type: int) -> str:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name if elem_type else "?"


def graph_inputs(model: onnx.ModelProto) -> dict[str, TensorSpec]:
    """The real inputs of ``model`` (:func:`input_values`) by name, in order."""
    specs = {}
    for vi in input_values(model):
        tt = vi.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim)
        specs[vi.name] = TensorSpec(vi.name, dims, _dtype_name(tt.elem_type))
    return specs


def random_arrays(specs: Sequence[TensorSpec], seed: int | np.random.Generator = 0, *,
                  masks: bool = False) -> list[np.ndarray]:
    """Seeded arrays for ``specs``, in order: standard normal for floats, the whole range for 8-bit
    integers, 0..9 for wider integers (index-like inputs), 0/1 for booleans. A symbolic or unknown
    dimension is an error naming the input.

    ``seed`` may be a generator, which draws on (one sample after another). With ``masks`` an input
    named ``attention_mask`` is an additive mask attending to every position but the last eighth (no
    draw), as the bundled transformers take it.
    """
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in specs:
        if spec.dtype == "?" or not spec.static:
            raise ValueError(f"input {spec.name!r} has no static shape ({spec.text()}): give its array with --inputs")
        dtype = np.dtype(spec.dtype)
        shape = tuple(int(d) for d in spec.shape)
        if masks and spec.name == "attention_mask":
            mask = np.zeros(shape, dtype)
            mask[..., shape[-1] - shape[-1] // 8:] = -10000.0
            arrays.append(mask)
        elif dtype.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(dtype))
        elif dtype.kind == "b":
            arrays.append(rng.integers(0, 2, shape).astype(dtype))
        else:
            low, high = (np.iinfo(dtype).min, np.iinfo(dtype).max) if dtype.itemsize == 1 else (0, 9)
            arrays.append(rng.integers(low, high, shape, endpoint=True).astype(dtype))
    return arrays


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """:func:`random_arrays` of ``model``'s inputs by name, masks included: standard-normal floats (what
    normalised images or embeddings look like); an ``attention_mask`` attends to every position but the
    last eighth."""
    specs = list(graph_inputs(model).values())
    return {s.name: a for s, a in zip(specs, random_arrays(specs, seed, masks=True), strict=True)}


def backend_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The inputs ONNX's backend test runner feeds light models (``arange / size``, in the input's type; a
    symbolic dimension is 1)."""
    feeds = {}
    for spec in graph_inputs(model).values():
        dims = tuple(d if isinstance(d, int) else 1 for d in spec.shape)
        n = int(np.prod(dims))
        feeds[spec.name] = (np.arange(n).reshape(dims) / n).astype(spec.dtype)  # fp16 models take fp16
    return feeds
