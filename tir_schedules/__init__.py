"""Template schedules: one ``schedule(spec, tile) -> Scheduled`` per operator kind."""

from __future__ import annotations

from collections.abc import Callable

from . import conv2d, elementwise, matmul, pool
from .common import Scheduled
from .ops import Conv2dSpec, ElementwiseSpec, MatmulSpec, OpSpec, PoolSpec
from .params import TileParams

TEMPLATES: dict[type, Callable[..., Scheduled]] = {
    Conv2dSpec: conv2d.schedule,
    MatmulSpec: matmul.schedule,
    PoolSpec: pool.schedule,
    ElementwiseSpec: elementwise.schedule,
}


def schedule(spec: OpSpec, tile: TileParams) -> Scheduled:
    """Schedule ``spec`` with the template of its kind."""
    return TEMPLATES[type(spec)](spec, tile)


__all__ = ["TEMPLATES", "Scheduled", "schedule"]
