"""Test-tree configuration: ``tests/`` is on ``sys.path`` (pytest's rootdir-conftest rule), so
test modules in any sub-folder can ``import helpers``; also registers this tree's markers."""

from __future__ import annotations

import os

import pytest

# Python processes the tests start (TVM's popen workers, RPC servers, codegen workers) do not put the
# working directory on sys.path: run from a source checkout, its tvm_npu/ folder (whose stage folders
# are only subpackages once installed) would shadow the installed package.
os.environ["PYTHONSAFEPATH"] = "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "slow: builds whole models, tunes, fuzzes or starts servers (seconds to tens of seconds each); part of "
        "the default suite, left out of the quick tier: pytest -n auto -m 'not slow and not benchmark'",
    )


@pytest.fixture(autouse=True, scope="session")
def _jit_cache_of_the_session(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The JIT's disk cache (``$TVM_NPU_CACHE``, ``tvm_npu/runtime/jit.py``) in a directory of this test session
    (each xdist worker its own), never the user's ``~/.cache/tvm-npu``; a test that needs another sets its own."""
    os.environ["TVM_NPU_CACHE"] = str(tmp_path_factory.mktemp("jit-cache"))
