"""What the command-line tests share: the bundled tiny_convnet saved as an ``.onnx`` file."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from tvm_npu.models.light import tiny_convnet


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "tiny.onnx"
    onnx.save(tiny_convnet(), str(path))
    return path
