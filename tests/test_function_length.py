"""Functions of one job: no production function is longer than about 60 lines (docstring excluded).

Read from the sources (nothing executed); ``tvm_npu/testing`` (test harnesses shipped for users) is held to
it too. A function that grows past the limit is split along its seams, not exempted here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: About 60 lines of code, with a little room for a signature or a call spread over several lines.
MAX_LINES = 62
SOURCES = sorted(p for d in ("tvm_npu", "simulator", "tir_schedules", "relay_patterns", "codegen")
                 for p in (ROOT / d).rglob("*.py"))


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the end, less the docstring's."""
    lines = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def long_functions(source: str) -> list[str]:
    """``name:line (n lines)`` of every function of ``source`` over :data:`MAX_LINES`."""
    return [f"{n.name}:{n.lineno} ({body_lines(n)} lines)" for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and body_lines(n) > MAX_LINES]


def test_the_check_sees_a_long_function_and_not_its_docstring() -> None:
    body = "    x = 1\n" * (MAX_LINES - 2) + "    return x\n"
    fits = "def f() -> int:\n" + "    \"\"\"A long\n    docstring.\n    \"\"\"\n" + body
    assert long_functions(fits) == []
    assert long_functions("def g() -> int:\n    y = 2\n" + body) == [f"g:1 ({MAX_LINES + 1} lines)"]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_production_function_is_longer_than_about_60_lines(path: Path) -> None:
    assert not long_functions(path.read_text()), path.relative_to(ROOT)
