"""Test-tree configuration: ``tests/`` is on ``sys.path`` (pytest's rootdir-conftest rule), so
test modules in any sub-folder can ``import helpers``; also registers this tree's markers."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "slow: builds a whole ONNX model (tens of seconds each); part of the default suite, "
        "deselect with -m 'not slow' for a quick run",
    )
