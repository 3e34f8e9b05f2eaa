"""Template schedules and tile choice, one module per operator kind (see ``kind.py``)."""

from __future__ import annotations

from tvm_npu.core.ops import OpSpec
from tvm_npu.core.tiles import TileParams

from . import conv2d, elementwise, matmul, pool, resize, rowwise  # noqa: F401  (each registers its kind)
from .common import Scheduled
from .kind import OpKind, kind_of


def schedule(spec: OpSpec, tile: TileParams) -> Scheduled:
    """Schedule ``spec`` with the template of its kind."""
    return kind_of(spec).schedule(spec, tile)


__all__ = ["OpKind", "Scheduled", "kind_of", "schedule"]
