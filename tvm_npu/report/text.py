"""The small text helpers the reports and the command line share: one of each, so every table, error and
figure reads alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tvm_npu.models.inputs import shape_text

__all__ = ["columns", "first_line", "kib", "op_counts", "shape_text", "wall_time"]


def first_line(e: BaseException) -> str:
    """The first non-blank line of an exception's message (its type's name when it has none)."""
    return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)


def kib(nbytes: int) -> str:
    """``nbytes`` in KiB, whole above 1 KiB, to two decimals below (so a small figure is not shown as 0)."""
    return f"{nbytes / 1024:,.0f}" if nbytes >= 1024 or not nbytes else f"{nbytes / 1024:.2f}"


def columns(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """``head`` and ``rows`` as left-aligned columns, with a rule under the head."""
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in (head, ["-" * w for w in widths], *rows)]


def wall_time(seconds: float) -> str:
    """A wall time for people: milliseconds below one second (a 3 ms run is not "0.00 s")."""
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.2f} s"


def op_counts(counts: Mapping[str, int]) -> str:
    """``{"relax.nn.conv2d": 4}`` -> ``"conv2d x4"``, most frequent first."""
    short = sorted(((n.removeprefix("relax.").removeprefix("nn."), c) for n, c in counts.items()),
                   key=lambda nc: (-nc[1], nc[0]))
    return ", ".join(f"{n} x{c}" for n, c in short) or "none"
