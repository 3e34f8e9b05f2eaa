"""Which folder may import which: the rule of docs/architecture.md ("Import rules"), checked on
every source file by reading its imports (nothing is executed)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("simulator", "tir_schedules", "relay_patterns", "codegen")
#: Modules of ``tvm_npu/`` every stage may import: configuration, the typed contracts between
#: stages, and the artifact / runtime-module formats the codegen produces.
SHARED = {"config", "ops", "tiles", "plan", "epilogue", "artifact", "runtime_module", "views"}

#: Layer -> the layers it may import (besides itself and third-party packages).
ALLOWED: dict[str, set[str]] = {
    "config": set(),
    "simulator": {"config"},
    "shared": {"config", "simulator", "shared"},
    "tir_schedules": {"config", "shared", "simulator"},
    "relay_patterns": {"config", "shared", "tir_schedules", "simulator"},
    "codegen": {"config", "shared", "simulator", "tir_schedules", "relay_patterns"},
    "app": {"config", "shared", "simulator", "tir_schedules", "relay_patterns", "codegen", "app"},
}


def _layer(module: str) -> str | None:
    """The layer of a dotted ``tvm_npu`` module name (None: not ours)."""
    parts = module.split(".")
    if parts[0] != "tvm_npu":
        return None
    if len(parts) == 1:
        return "app"
    if parts[1] in STAGES:
        return parts[1]
    if parts[1] == "config":
        return "config"
    return "shared" if parts[1] in SHARED else "app"


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] != "tvm_npu":
        parts.insert(0, "tvm_npu")  # stage folders install as tvm_npu.<stage>
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                out.append(".".join([*base, *([node.module] if node.module else [])]))
            else:
                out.append(node.module or "")
    return out


SOURCES = sorted(p for d in ("tvm_npu", *STAGES) for p in (ROOT / d).rglob("*.py"))


def test_the_rule_covers_every_source_file() -> None:
    assert len(SOURCES) > 40
    assert all(_layer(_module_of(p)) is not None for p in SOURCES)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layering(path: Path) -> None:
    module = _module_of(path)
    layer = _layer(module)
    bad = [m for m in _imports(path, module)
           if (target := _layer(m)) is not None and target != layer and target not in ALLOWED[layer]]
    assert not bad, f"{module} ({layer}) may import only {sorted(ALLOWED[layer])}, not {bad}"
