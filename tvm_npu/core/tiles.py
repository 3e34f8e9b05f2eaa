"""Template parameters: one frozen, hashable record per operator kind.

These are what the cost model chooses, the tuner searches and tuning records
store; a template is fully determined by its spec and one of these.
"""

from __future__ import annotations

import enum
import typing
from dataclasses import asdict, dataclass


class Order(enum.Enum):
    """Which operand stays in SRAM while the other streams through the pipelined loop."""

    A_STATIONARY = "a"  # matmul: rows of A kept, B tiles stream (n inner); conv: input kept, weights stream
    B_STATIONARY = "b"  # matmul: B kept, A streams (m inner); conv: weights kept, input tiles stream


class ConvEngine(enum.Enum):
    """Which engine computes a convolution's windows.

    The tensor engine runs every convolution as an implicit GEMM; a depthwise one uses one
    column of its array per channel group, so the vector engine's window multiply-accumulate
    (``VDWCONV``, all lanes busy) can be faster. Tiles default to the tensor engine, so a
    record written before the choice existed keeps its meaning.
    """

    TENSOR = "tensor"
    VECTOR = "vector"


@dataclass(frozen=True)
class MatmulTile:
    tm: int
    tn: int
    tk: int
    order: Order = Order.A_STATIONARY
    stages: int = 2


@dataclass(frozen=True)
class ConvTile:
    """Output channels, output rows, output columns and input channels per tile.

    For grouped convolutions ``tg`` groups form one tile (then ``toc``/``tic`` are per group);
    ``engine`` says which engine computes the tile (the vector engine only for depthwise);
    ``skip_rows``: a one-row window with a row stride reads only the rows it uses
    (``tir_schedules/strided.py``); ``stream_groups``: a grouped tensor-engine tile pipelines its group,
    output-channel and spatial tiles as one loop (as vector tiles always do), each step loading its
    group's weights with its input, so the next group's weights load while this group computes.
    """

    toc: int
    toh: int
    tow: int
    tic: int
    order: Order = Order.B_STATIONARY
    stages: int = 2
    tg: int = 1
    engine: ConvEngine = ConvEngine.TENSOR
    skip_rows: bool = False
    stream_groups: bool = False


@dataclass(frozen=True)
class PoolTile:
    """Channels, output rows and output columns per tile; ``skip_rows`` as for :class:`ConvTile`."""

    tc: int
    toh: int
    tow: int
    stages: int = 2
    skip_rows: bool = False


@dataclass(frozen=True)
class EltwiseTile:
    """Tile extent per output dimension."""

    tiles: tuple[int, ...]
    stages: int = 2


@dataclass(frozen=True)
class RowTile:
    """Whole rows per tile (a row-wise operator needs every element of a row on chip)."""

    rows: int
    stages: int = 2


@dataclass(frozen=True)
class ResizeTile:
    """Channels and output rows per band of a resize (whole output rows: the W pass needs whole source rows)."""

    tc: int
    toh: int
    stages: int = 2


TileParams = MatmulTile | ConvTile | PoolTile | EltwiseTile | RowTile | ResizeTile


def tile_to_json(tile: TileParams) -> dict:
    """A JSON-safe form for tuning records (enums by value, tuples as lists)."""
    d = {k: (v.value if isinstance(v, enum.Enum) else list(v) if isinstance(v, tuple) else v)
         for k, v in asdict(tile).items()}
    return {"kind": type(tile).__name__, **d}


def tile_from_json(d: dict) -> TileParams:
    """Inverse of :func:`tile_to_json`; raises ValueError on anything else."""
    kinds = {c.__name__: c for c in typing.get_args(TileParams)}
    d = dict(d)
    cls = kinds.get(d.pop("kind", None))
    if cls is None:
        raise ValueError(f"unknown tile kind in record; accepted: {sorted(kinds)}")
    try:
        if "order" in d:
            d["order"] = Order(d["order"])
        if "engine" in d:
            d["engine"] = ConvEngine(d["engine"])
    except ValueError as e:
        raise ValueError(f"malformed {cls.__name__} record: {e}") from None
    if "tiles" in d:
        d["tiles"] = tuple(int(x) for x in d["tiles"])
    try:
        return cls(**d)
    except TypeError as e:
        raise ValueError(f"malformed {cls.__name__} record: {e}") from None
