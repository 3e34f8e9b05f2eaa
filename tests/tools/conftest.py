"""What the command-line tests share, built once per session (per xdist worker): the bundled tiny_convnet
saved as an ``.onnx`` file, and that file compiled by ``tvm-npu compile`` into a library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from tvm_npu.models.light import tiny_convnet


@pytest.fixture(scope="session")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "tiny.onnx"
    onnx.save(tiny_convnet(), str(path))
    return path


@pytest.fixture(scope="session")
def compiled(model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``tvm-npu compile`` of :func:`model` in a subprocess, as a user runs it: (library, what it printed)."""
    out = tmp_path_factory.mktemp("lib") / "tiny.so"
    proc = subprocess.run([sys.executable, "-P", "-m", "tvm_npu", "compile", str(model), "-o", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc.stdout


@pytest.fixture(scope="session")
def library(compiled: tuple[Path, str]) -> Path:
    return compiled[0]
