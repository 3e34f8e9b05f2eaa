"""What one operator kind must say about itself, and the registry of kinds.

Every operator kind (``conv2d.py``, ``matmul.py``, ``pool.py``, ``elementwise.py``)
keeps side by side what changes together: its TE compute and schedule template, the
loop it pipelines, its tile axes and candidates, its SRAM footprint, and its cost
model (the steps of its pipelined loop, and closed-form floors for ranking). The
planner (``tile_search.py``) is a search over any kind; the codegen emits any kind.
Adding a kind is one module subclassing :class:`OpKind`, registered with
:func:`register`.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from tvm import te, tirx

from tvm_npu.config import CompilerOptions, HardwareConfig
from tvm_npu.core.ops import OpSpec
from tvm_npu.core.tiles import TileParams

from .common import Scheduled
from .cost import Pipelining, Step


@dataclass(frozen=True)
class RowWindow:
    """How a kind's output rows (axis H) read rows of its main input: output row ``y`` reads input rows
    ``y * stride - pad_top + k * dilation`` for ``k < kernel`` (inside ``[0, rows)``, else padding)."""

    kernel: int
    stride: int
    dilation: int
    pad_top: int
    pad_bottom: int

    def needs(self, lo: int, hi: int, rows: int) -> tuple[int, int, int, int]:
        """Input rows ``[a, b)`` that output rows ``[lo, hi)`` read, and the padding rows above and below them."""
        start = lo * self.stride - self.pad_top
        end = (hi - 1) * self.stride - self.pad_top + (self.kernel - 1) * self.dilation + 1
        a, b = max(0, start), min(rows, end)
        return a, b, a - start, end - b


class OpKind(abc.ABC):
    """One operator kind: its template, its tile space and its cost model."""

    #: The spec class this kind handles and the tile record that parameterises it.
    spec_type: ClassVar[type]
    tile_type: ClassVar[type]
    #: The operator's name in reports (``conv2d``, ``matmul``, ``pool``, ``elementwise``).
    name: ClassVar[str]
    #: Whether the codegen emits this kind itself rather than walking its TIR template (``resize.py``).
    direct: ClassVar[bool] = False

    # ---------------------------------------------------------------- template
    @abc.abstractmethod
    def schedule(self, spec: OpSpec, tile: TileParams) -> Scheduled:
        """TE compute -> PrimFunc -> ``tvm.s_tir`` schedule (see ``common.py`` for the conventions)."""

    def as_scheduled(self, spec: OpSpec, tile: TileParams) -> OpSpec:
        """The spec ``tile``'s template is built for, which the codegen emits: ``spec`` itself, or an
        equivalent form the tile chose (a strided operator over a view of the input rows it uses,
        ``strided.py``)."""
        return spec

    @abc.abstractmethod
    def definition(self, spec: OpSpec, tile: TileParams) -> tuple:
        """The template's TE definition: (inputs, output, ...); ``tile`` matters only where the staged
        input is padded to the tile grid."""

    def workload(self, spec: OpSpec, tile: TileParams) -> tirx.PrimFunc:
        """The operator before scheduling: what a tuning task is keyed by and its schedules apply to."""
        inputs, final = self.definition(spec, tile)[:2]
        return te.create_prim_func([*inputs, final])

    @abc.abstractmethod
    def pipelining(self, spec: OpSpec, tile: TileParams) -> Pipelining:
        """The loop the template pipelines: read by the schedule, the footprint and the cost model."""

    # -------------------------------------------------------------- tile space
    @abc.abstractmethod
    def axes(self, spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions) -> dict[str, list]:
        """Per field of :attr:`tile_type`, the values the search tries (smallest first)."""

    def fallback_axes(self, spec: OpSpec, hw: HardwareConfig, opts: CompilerOptions) -> dict[str, list] | None:
        """Axes searched only when no tile of :meth:`axes` fits the SRAM: extents that are legal but that
        :meth:`axes` leaves out because they are slow (None: there are none). A slow tile keeps the operator
        on the NPU, which beats the host fallback that :class:`NoTileFits` means."""
        return None

    def admits(self, spec: OpSpec, tile: TileParams) -> bool:
        """Constraints across axes that the product of :meth:`axes` does not express."""
        return True

    def whole_rows(self, spec: OpSpec, tile: TileParams) -> bool | None:
        """Whether ``tile`` spans whole output rows (None: the kind has no such preference).

        Whole-row tiles give the longest DRAM runs and no column halo; narrower tiles are
        only considered when no whole-row tile fits.
        """
        return None

    @abc.abstractmethod
    def footprint(self, spec: OpSpec, tile: TileParams, hw: HardwareConfig) -> int:
        """SRAM bytes the template allocates (aligned buffers times their versions)."""

    # -------------------------------------------------------------- cost model
    @abc.abstractmethod
    def steps(self, spec: OpSpec, tile: TileParams, hw: HardwareConfig) -> Iterator[Step]:
        """The iterations of the pipelined loop, in execution order, lazily."""

    def compute_floor(self, spec: OpSpec, tile: TileParams, hw: HardwareConfig) -> int:
        """Tensor-engine cycles of all tiles back to back (closed form; 0 without the array)."""
        return 0

    @abc.abstractmethod
    def traffic_floor(self, spec: OpSpec, tile: TileParams, hw: HardwareConfig) -> float:
        """DRAM channel cycles of the useful bytes this tile must move (re-loads included)."""

    def outer_count(self, spec: OpSpec, tile: TileParams) -> int:
        """Iterations of the loop outside the pipelined one (stationary operands reload per iteration)."""
        return 1

    @abc.abstractmethod
    def step_count(self, spec: OpSpec, tile: TileParams) -> int:
        """How many steps :meth:`steps` yields (closed form)."""

    # ----------------------------------------------------------------- bounds
    def needed_bytes(self, spec: OpSpec) -> dict[str, int]:
        """Bytes of each distinct DRAM tensor the operator must read at least once.

        A tensor named by several operands counts once (with the most any use needs);
        kinds that read only part of an input (strided windows) override this.
        """
        need: dict[str, int] = {}
        for t in spec.inputs:
            need[t.name] = max(need.get(t.name, 0), t.nbytes)
        return need

    # ----------------------------------------------------------- layer groups
    def row_window(self, spec: OpSpec) -> RowWindow | None:
        """How output rows map to rows of the main input (``spec.inputs[0]``), or None when the kind
        cannot compute a slice of rows on its own (only kinds with one are layer-group members)."""
        return None

    # ----------------------------------------------------------------- reports
    @abc.abstractmethod
    def describe(self, spec: OpSpec) -> str:
        """A one-line description of the operator for reports."""

    def compute_dtype(self, spec: OpSpec) -> str:
        """The dtype the operator computes in (the report's ``dtype`` column)."""
        return spec.inputs[0].dtype.np.name


_KINDS: dict[type, OpKind] = {}


def register(kind: OpKind) -> OpKind:
    """Make ``kind`` the handler of its spec type."""
    _KINDS[kind.spec_type] = kind
    return kind


def kind_of(spec: OpSpec) -> OpKind:
    """The kind that handles ``spec``; ``TypeError`` for a spec no kind handles."""
    try:
        return _KINDS[type(spec)]
    except KeyError:
        raise TypeError(f"no operator kind handles {type(spec).__name__}; known: "
                        f"{sorted(t.__name__ for t in _KINDS)}") from None


def epilogue_text(spec: OpSpec) -> str:
    """`` +bias+relu`` for a spec's epilogue steps (empty when there are none)."""
    epi = "+".join(e.kind.value for e in spec.epilogue)
    return f" +{epi}" if epi else ""
