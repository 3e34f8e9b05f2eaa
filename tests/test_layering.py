"""The floors of the package (docs/architecture.md, "Floors"): which floor may import which, and no import
cycle between modules. Checked on every source file by reading its imports, nothing executed: module-level
imports, imports inside functions (lazy) and ``TYPE_CHECKING`` blocks alike."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("simulator", "tir_schedules", "relay_patterns", "codegen")

#: Floor -> the module prefixes it holds; a module belongs to the floor of its longest matching prefix.
FLOORS: dict[str, tuple[str, ...]] = {
    "config": ("tvm_npu.config",),
    "simulator": ("tvm_npu.simulator",),
    "core": ("tvm_npu.core",),
    "runtime": ("tvm_npu.runtime",),
    "models": ("tvm_npu.models",),
    "tir_schedules": ("tvm_npu.tir_schedules",),
    "codegen": ("tvm_npu.codegen",),
    "relay_patterns": ("tvm_npu.relay_patterns",),
    "tuning records": ("tvm_npu.tuning.space", "tvm_npu.tuning.database"),
    "compiler": ("tvm_npu.compiler",),
    "report": ("tvm_npu.report",),
    "tuning": ("tvm_npu.tuning",),
    "tools": ("tvm_npu.tools",),
    "testing": ("tvm_npu.testing",),
    "facade": ("tvm_npu",),
}
_COMPILER_AND_BELOW = {"config", "simulator", "core", "runtime", "models", "tir_schedules", "codegen",
                       "relay_patterns", "tuning records", "compiler"}
#: Floor -> the floors it may import besides its own. Not a total order: codegen lowers plans and never
#: imports the front end (relay_patterns), and neither imports the other.
ALLOWED: dict[str, set[str]] = {
    "config": set(),
    "simulator": {"config"},
    "core": {"config", "simulator"},
    "runtime": {"config", "simulator", "core"},
    "models": set(),
    "tir_schedules": {"config", "simulator", "core"},
    "codegen": {"config", "simulator", "core", "tir_schedules"},
    "relay_patterns": {"config", "simulator", "core", "tir_schedules"},
    "tuning records": {"config", "simulator", "core", "tir_schedules"},
    "compiler": _COMPILER_AND_BELOW - {"compiler"},
    "report": _COMPILER_AND_BELOW,
    "tuning": _COMPILER_AND_BELOW,
    "tools": _COMPILER_AND_BELOW | {"report", "tuning"},
    "testing": set(FLOORS) - {"testing"},  # the differential oracle checks what a user calls: the facade
    "facade": set(FLOORS) - {"facade", "testing"},
}


def floor_of(module: str) -> str | None:
    """The floor of a dotted ``tvm_npu`` module name (None: not ours)."""
    best = None
    for floor, prefixes in FLOORS.items():
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > len(best[1])):
                best = (floor, p)
    return best[0] if best else None


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] != "tvm_npu":
        parts.insert(0, "tvm_npu")  # stage folders install as tvm_npu.<stage>
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


SOURCES = sorted(p for d in ("tvm_npu", *STAGES) for p in (ROOT / d).rglob("*.py"))
MODULES = {_module_of(p): p for p in SOURCES}


def _resolve(name: str) -> str | None:
    """The source module ``name`` names (a submodule, or the longest package prefix), None if not ours."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(path: Path, module: str) -> set[str]:
    """Every ``tvm_npu`` module ``path`` (the source of ``module``) imports, at any depth of its code."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join([*base, *([node.module] if node.module else [])])
            else:
                stem = node.module or ""
            names = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in MODULES else stem for a in node.names]
        else:
            continue
        found |= {m for n in names if n.startswith("tvm_npu") and (m := _resolve(n)) and m != module}
    return found


GRAPH = {m: imports(p, m) for m, p in MODULES.items()}


def test_every_source_file_has_a_floor() -> None:
    assert len(SOURCES) > 60
    assert all(floor_of(m) is not None for m in MODULES)
    assert set(ALLOWED) == set(FLOORS)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_follow_the_floors(module: str) -> None:
    floor = floor_of(module)
    bad = sorted(m for m in GRAPH[module] if (f := floor_of(m)) != floor and f not in ALLOWED[floor])
    assert not bad, f"{module} ({floor}) may import only {sorted(ALLOWED[floor])} and its own floor, not {bad}"


def test_no_import_cycle() -> None:
    """Tarjan's strongly connected components over the module graph: every one is a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_check_sees_a_lazy_import(tmp_path: Path) -> None:
    """The rule is not vacuous: an import of the compiler inside a function of the simulator is found."""
    probe = tmp_path / "numerics.py"
    probe.write_text((ROOT / "simulator" / "numerics.py").read_text()
                     + "\n\ndef _late():\n    from tvm_npu.compiler.driver import build\n")
    found = imports(probe, "tvm_npu.simulator.numerics")
    assert "tvm_npu.compiler.driver" in found - GRAPH["tvm_npu.simulator.numerics"]
    assert floor_of("tvm_npu.compiler.driver") not in ALLOWED["simulator"]


def test_the_simulator_imports_neither_tvm_nor_the_compiler() -> None:
    """``import tvm_npu.simulator`` (and so ``import tvm_npu``, which loads the runtime) stays a numpy program."""
    code = ("import sys, tvm_npu.simulator\n"
            "assert 'tvm' not in sys.modules, 'tvm imported'\n"
            "bad = [m for m in sys.modules if m.startswith(('tvm_npu.compiler', 'tvm_npu.relay_patterns', "
            "'tvm_npu.tir_schedules', 'tvm_npu.codegen', 'tvm_npu.tools'))]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-P", "-c", code], check=True, cwd=ROOT.parent)
