"""The C++ runtime module's build cache is per Python environment (two venvs must not rebuild it in turn)."""

from __future__ import annotations

import sys

import pytest

from tvm_npu.runtime import npu_module as runtime_module


def test_each_environment_has_its_own_runtime_build(monkeypatch: pytest.MonkeyPatch) -> None:
    here = runtime_module._extension_source()
    assert runtime_module._extension_source() == here  # stable: a second process reuses the build
    monkeypatch.setattr(sys, "prefix", "/elsewhere/.venv")
    there = runtime_module._extension_source()
    # build_inline keys its cache directory by a hash of the source text: another environment, another directory
    assert there != here and there.splitlines()[1:] == here.splitlines()[1:]
