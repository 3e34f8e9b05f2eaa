"""Linear (bilinear) resize as an operator kind of its own, on the vector engine.

Per band (``tc`` channels x ``toh`` output rows): one DMA of the source rows the band reads (whole rows,
a halo row of the previous band loaded again), the W pass over those rows into ``mid``, the H pass from
``mid`` into the output band, one store of whole output rows. Each pass covers the output indices by
:func:`runs`: arithmetic progressions of output index and source indices sharing one pair of weights, so
one run is ``VSCALE a * w0``, ``VSCALE b * w1``, ``VADD`` over a strided 3-D shape (one ``VSCALE`` when
``w1 == 0``). W before H with float32 products rounded once is TVM topi's ``A * (1 - t) + B * t``
exactly: every output is llvm's bit for bit. An integer factor ``f`` gives about ``2 f`` runs per axis.

The kind has no TIR template: a run's source index is a table lookup of the output index, not one affine
loop over the tile, so the codegen emits the bands directly (``codegen/resize.py``) from the same
:func:`runs` and :func:`bands` this cost model counts.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tvm import te, tirx
from tvm_npu.simulator import timing

from tvm_npu.config import CompilerOptions, HardwareConfig
from tvm_npu.core.ops import ResizeSpec, Tap
from tvm_npu.core.tiles import ResizeTile

from .common import Scheduled
from .cost import NO_COPY, Pipelining, Step, boxes, tile_extents
from .cost import ceil_div as _ceil
from .kind import OpKind, register

#: Later outputs tried as a run's second member (the greedy cover's look-ahead; integer factors need ``f``).
_LOOKAHEAD = 8


@dataclass(frozen=True)
class Run:
    """Output indices ``o0 + k * step`` (``k < n``) reading source indices ``lo0 + k * src_step`` and
    ``hi0 + k * src_step`` with weights ``w0`` and ``w1``."""

    o0: int
    step: int
    lo0: int
    hi0: int
    src_step: int
    n: int
    w0: float
    w1: float


def _extend(taps: Sequence[Tap], left: set[int], o: int, o2: int) -> int:
    """How many outputs ``o, o2, 2 o2 - o, ...`` continue one progression of equal weights."""
    step, sl = o2 - o, taps[o2][0] - taps[o][0]
    if sl < 0 or taps[o2][1] - taps[o][1] != sl:
        return 1
    n = 2
    while (o + n * step) in left and taps[o + n * step][2:] == taps[o][2:] \
            and taps[o + n * step][0] == taps[o][0] + n * sl and taps[o + n * step][1] == taps[o][1] + n * sl:
        n += 1
    return n


@functools.lru_cache(maxsize=1024)
def runs(taps: tuple[Tap, ...], first: int, last: int) -> tuple[Run, ...]:
    """A greedy cover of outputs ``[first, last)`` by runs (longest progression from the first output left)."""
    left = set(range(first, last))
    cover: list[Run] = []
    for o in range(first, last):
        if o not in left:
            continue
        best_n, best_step = 1, 1
        later = [o2 for o2 in range(o + 1, last) if o2 in left and taps[o2][2:] == taps[o][2:]][:_LOOKAHEAD]
        for o2 in later:
            n = _extend(taps, left, o, o2)
            if n > best_n:
                best_n, best_step = n, o2 - o
        src_step = taps[o + best_step][0] - taps[o][0] if best_n > 1 else 0
        lo, hi, w0, w1 = taps[o]
        cover.append(Run(o, best_step, lo, hi, src_step, best_n, w0, w1))
        left -= {o + k * best_step for k in range(best_n)}
    return tuple(cover)


def band_source(spec: ResizeSpec, o0: int, o1: int) -> tuple[int, int]:
    """Source rows ``[r0, r1)`` that output rows ``[o0, o1)`` read."""
    rows = spec.rows[o0:o1]
    return min(t[0] for t in rows), max(t[1] for t in rows) + 1


def bands(spec: ResizeSpec, tile: ResizeTile) -> Iterator[tuple[int, int, int, int, int]]:
    """(image, first channel, channels, first output row, output rows) of every band, in emission order."""
    n, c = spec.data.shape[:2]
    ho = len(spec.rows)
    for b in range(n):
        for c0 in range(0, c, tile.tc):
            for o0 in range(0, ho, tile.toh):
                yield b, c0, min(tile.tc, c - c0), o0, min(tile.toh, ho - o0)


def _most_source_rows(spec: ResizeSpec, toh: int) -> int:
    ho = len(spec.rows)
    return max(b - a for a, b in (band_source(spec, o0, min(ho, o0 + toh)) for o0 in range(0, ho, toh)))


@dataclass(frozen=True)
class Buffers:
    """Element counts of the SRAM buffers of one band (per version)."""

    src: int
    mid: int
    out: int
    tmp: int


def buffers(spec: ResizeSpec, tile: ResizeTile) -> Buffers:
    """``mid`` and ``tmp`` have one version: only the (in-order) vector engine touches them."""
    w, wo = spec.data.shape[3], len(spec.cols)
    nr = _most_source_rows(spec, tile.toh)
    return Buffers(tile.tc * nr * w, tile.tc * nr * wo, tile.tc * tile.toh * wo, tile.tc * max(nr, tile.toh) * wo)


def lerp_count(run: Run) -> int:
    """Vector instructions of one run: ``VSCALE`` alone when the second weight is 0."""
    return 1 if run.w1 == 0.0 else 3


def band_vector_cycles(hw: HardwareConfig, spec: ResizeSpec, channels: int, o0: int, rows: int) -> int:
    """Vector-engine cycles of one band: the W pass over its source rows, the H pass over its output rows."""
    r0, r1 = band_source(spec, o0, o0 + rows)
    w_pass = sum(lerp_count(r) * timing.vector_cycles(hw, channels * (r1 - r0) * r.n)
                 for r in runs(spec.cols, 0, len(spec.cols)))
    h_pass = sum(lerp_count(r) * timing.vector_cycles(hw, channels * r.n * len(spec.cols))
                 for r in runs(spec.rows, o0, o0 + rows))
    return w_pass + h_pass


class Resize(OpKind):
    """A linear resize over bands of whole output rows, emitted directly (module docstring)."""

    spec_type = ResizeSpec
    tile_type = ResizeTile
    name = "resize"
    #: The codegen emits this kind itself (``codegen/resize.py``), not through a TIR template.
    direct = True

    # ---------------------------------------------------------------- template
    def schedule(self, spec: ResizeSpec, tile: ResizeTile) -> Scheduled:
        raise TypeError(f"{spec.name}: a resize has no TIR schedule; the codegen emits it directly")

    def definition(self, spec: ResizeSpec, tile: ResizeTile) -> tuple:
        """The resize with its taps as inputs: what a tuning task is keyed by."""
        n, c, h, w = spec.data.shape
        ho, wo = len(spec.rows), len(spec.cols)
        data = te.placeholder((n, c, h, w), spec.data.dtype.np.name, name=spec.data.name)
        rows = [te.placeholder((ho,), d, name=f"rows_{k}") for k, d in enumerate(("int32", "int32", "float32",
                                                                                   "float32"))]
        cols = [te.placeholder((wo,), d, name=f"cols_{k}") for k, d in enumerate(("int32", "int32", "float32",
                                                                                   "float32"))]

        def along_w(b: tirx.PrimExpr, ch: tirx.PrimExpr, y: tirx.PrimExpr, x: tirx.PrimExpr) -> tirx.PrimExpr:
            return data[b, ch, y, cols[0][x]] * cols[2][x] + data[b, ch, y, cols[1][x]] * cols[3][x]

        out = te.compute((n, c, ho, wo), lambda b, ch, y, x: along_w(b, ch, rows[0][y], x) * rows[2][y]
                         + along_w(b, ch, rows[1][y], x) * rows[3][y], name=spec.out.name)
        return [data, *rows, *cols], out

    def pipelining(self, spec: ResizeSpec, tile: ResizeTile) -> Pipelining:
        return Pipelining(self.step_count(spec, tile) > 1)

    # -------------------------------------------------------------- tile space
    def axes(self, spec: ResizeSpec, hw: HardwareConfig, opts: CompilerOptions) -> dict[str, list]:
        return {"tc": tile_extents(spec.data.shape[1], 1, opts, limit=8),
                "toh": tile_extents(len(spec.rows), 1, opts, limit=8), "stages": [opts.pipeline_stages]}

    def footprint(self, spec: ResizeSpec, tile: ResizeTile, hw: HardwareConfig) -> int:
        s = tile.stages if self.pipelining(spec, tile).pipelined else 1
        b, isz = buffers(spec, tile), spec.data.dtype.itemsize
        return sum(hw.align(x * isz) for x in (*[b.src] * s, b.mid, *[b.out] * s, b.tmp))

    # -------------------------------------------------------------- cost model
    def steps(self, spec: ResizeSpec, tile: ResizeTile, hw: HardwareConfig) -> Iterator[Step]:
        data = boxes(hw, spec.data.dtype, tuple(spec.data.shape), spec.data.on_chip)
        result = boxes(hw, spec.out.dtype, tuple(spec.out.shape), spec.out.on_chip)
        w, wo = spec.data.shape[3], len(spec.cols)
        vector: dict[tuple[int, int, int], int] = {}  # every channel block repeats the bands' instructions
        for slot, (b, c0, ch, o0, rows) in enumerate(bands(spec, tile)):
            r0, r1 = band_source(spec, o0, o0 + rows)
            loads = data.cost((b, c0, r0, 0), (1, ch, r1 - r0, w))
            if (ch, o0, rows) not in vector:
                vector[ch, o0, rows] = band_vector_cycles(hw, spec, ch, o0, rows)
            # everything is consumed by the vector engine: the loads are modelled as epilogue operands
            yield Step(loads=NO_COPY, vector=vector[ch, o0, rows],
                       store=result.cost((b, c0, o0, 0), (1, ch, rows, wo)), operands=loads, slot=slot)

    def traffic_floor(self, spec: ResizeSpec, tile: ResizeTile, hw: HardwareConfig) -> float:
        return (spec.data.nbytes + spec.out.nbytes) / hw.dram_bytes_per_cycle

    def step_count(self, spec: ResizeSpec, tile: ResizeTile) -> int:
        return spec.data.shape[0] * _ceil(spec.data.shape[1], tile.tc) * _ceil(len(spec.rows), tile.toh)

    # ----------------------------------------------------------------- reports
    def describe(self, spec: ResizeSpec) -> str:
        n, c, h, w = spec.data.shape
        return f"linear {n}x{c}x{h}x{w}->{len(spec.rows)}x{len(spec.cols)}"


KIND = register(Resize())
