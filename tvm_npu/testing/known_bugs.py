"""Compiler bugs the fuzzer has found and that are not fixed yet.

Each entry recognises the outcome of a case that hits the bug (its verdict, kind, location and a
pattern of its message). The default fuzz test does not fail on a known bug (it would fail on every
CI run until the fix) but reports it; ``benchmarks/fuzz.py`` counts such cases separately and does
not minimise them again. Every entry has a strict-xfail regression test in
``tests/fuzz/regressions/test_regressions.py`` that rebuilds the minimal graph: when the bug is fixed, that test
passes (XPASS, which strict xfail turns into a failure): delete the ``xfail`` mark and the entry here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tvm_npu.testing.oracle import Outcome


@dataclass(frozen=True)
class KnownBug:
    id: str
    summary: str
    regression_test: str
    kind: str  # Outcome.kind
    location: str = ""  # Outcome.location prefix ('' any)
    message: str = ""  # regex searched in Outcome.detail ('' any)

    def matches(self, outcome: Outcome) -> bool:
        return (outcome.status == "failure" and outcome.kind == self.kind
                and outcome.location.startswith(self.location)
                and (not self.message or re.search(self.message, outcome.detail) is not None))


#: Fixed so far: f51b0e5 (ONNX Max/Min through ConvertLayout, Sub(x, x) in the elementwise template),
#: c22dbb6 (-tile-max below an axis, on-chip regions below the 4 KiB minimum, -num-semaphores below 12)
#: and the int8/fp16 work of issue 9 (quantized average pooling in 8 bits, border windows included; the
#: llvm reference's fp16 batch-norm). An entry looks like
#: ``KnownBug("x-minus-x", "<diagnosis>", "test_x_minus_x", kind="ScheduleError",
#: location="tir_schedules/elementwise.py:schedule", message="cache-read")``.
KNOWN_BUGS: tuple[KnownBug, ...] = ()


def known_bug(outcome: Outcome) -> KnownBug | None:
    """The known bug ``outcome`` is an instance of, if any."""
    return next((bug for bug in KNOWN_BUGS if bug.matches(outcome)), None)
