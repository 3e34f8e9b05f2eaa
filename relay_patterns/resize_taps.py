"""Where a resize reads: the float32 source coordinate of every output index, as TVM's ``resize2d`` computes
it, and a linear resize's two source indices and weights per output index (its taps). A module of its own so
that both the canonicalisation (``resize.py``) and the extraction of the resize operator (``extract.py``) use
the one computation."""

from __future__ import annotations

import numpy as np

from tvm_npu.core.ops import Tap

#: Coordinate transformations computed here (TVM's ``resize2d`` also has ``tf_crop_and_resize``).
COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn")


def source_coordinates(coord: str, n_in: int, n_out: int) -> np.ndarray:
    """The float32 source coordinate of every output index along an axis of ``n_in`` -> ``n_out``."""
    o = np.arange(n_out, dtype=np.float32)
    scale = np.float32(n_in) / np.float32(n_out)
    if coord == "half_pixel" or (coord == "pytorch_half_pixel" and n_out > 1):
        return (o + np.float32(0.5)) * scale - np.float32(0.5)
    if coord == "pytorch_half_pixel":
        return np.zeros(n_out, np.float32)
    if coord == "align_corners":
        return np.float32(n_in - 1) / np.float32(n_out - 1) * o
    if coord == "asymmetric":
        return scale * o
    if coord == "tf_half_pixel_for_nn":
        return (o + np.float32(0.5)) * scale
    raise ValueError(f"coordinate transformation {coord!r}; accepted: {', '.join(COORDINATES)}")


def linear_taps(coord: str, n_in: int, n_out: int) -> tuple[Tap, ...]:
    """Per output index ``(lo, hi, 1 - t, t)``: the neighbours of its source coordinate (clamped to the axis)
    and their float32 weights, as TVM's linear ``resize2d`` computes them."""
    x = source_coordinates(coord, n_in, n_out)
    lo = np.floor(x)
    t = (x - lo).astype(np.float32)
    lo = lo.astype(np.int64)
    return tuple((int(a), int(b), float(np.float32(1) - w), float(w))
                 for a, b, w in zip(np.clip(lo, 0, n_in - 1), np.clip(lo + 1, 0, n_in - 1), t, strict=True))
