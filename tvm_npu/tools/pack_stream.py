"""The blob ``export_library`` embeds (a module's imports, serialised), written to a file piece by piece.

TVM's ``runtime.ModulePackImportsToTensor`` builds the whole blob in memory: every imported module's
``SaveToBytes`` (the NPU programs, which hold a model's weights), then a copy of it in a string stream,
then that string with its length in front, then a tensor: a 548 MB VGG-19 held about two extra copies of
its weights while it was exported. :func:`write_imports_blob` writes the same bytes (TVM's layout, which
``tests/tools/test_pack_stream.py`` checks byte for byte against TVM's packer) to a file instead: the NPU
modules append their serialised form straight from their program memory (``tvm_npu_append_serialized``
in ``_npu_module.cc``); only the host executable, which is small, passes through a ``bytes`` object.

The layout, as TVM 0.27's ``ModuleSerializer`` writes it (``src/target/codegen.cc``), all integers
little-endian ``u64`` and a string or byte run as its ``u64`` length then its bytes: the length of the
rest; the import tree (CSR row pointers, then child indices); then per module group its type key and,
for a binary-serializable module, its bytes. Modules that compile into the shared library (host code)
form one group written as the key ``_lib`` alone. Groups are numbered in TVM's two-phase depth-first
order (:func:`_groups`), which the loader relies on.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import tvm

from tvm_npu.runtime import npu_module

_U64 = struct.Struct("<Q")


def _exportable(mod: tvm.runtime.Module) -> bool:
    return mod.is_compilation_exportable()


def _groups(root: tvm.runtime.Module) -> tuple[list[list[tvm.runtime.Module]], dict[int, int]]:
    """Module groups in TVM's order (every non-exportable module alone, the exportable ones merged into one
    group placed after all their parents and before their children) and each module's group index by
    address: phase 0 walks from the root without entering exportable modules, phase 1 from those."""
    groups: list[list[tvm.runtime.Module]] = []
    index: dict[int, int] = {}
    visited = {root.__chandle__()}
    stack, boundary = [root], []

    def push_imports(mod: tvm.runtime.Module) -> None:
        for child in mod.imports:
            if child.__chandle__() not in visited:
                visited.add(child.__chandle__())
                stack.append(child)

    while stack:
        mod = stack.pop()
        if _exportable(mod):
            boundary.append(mod)
            continue
        index[mod.__chandle__()] = len(groups)
        groups.append([mod])
        push_imports(mod)
    if not boundary:
        return groups, index
    library = len(groups)
    groups.append([])
    stack = boundary
    while stack:
        mod = stack.pop()
        if _exportable(mod):
            groups[library].append(mod)
            index[mod.__chandle__()] = library
        else:
            index[mod.__chandle__()] = len(groups)
            groups.append([mod])
        push_imports(mod)
    return groups, index


def _import_tree(groups: list[list[tvm.runtime.Module]], index: dict[int, int]) -> tuple[list[int], list[int]]:
    """(row pointers, child indices) of the groups' imports, each row sorted and without repeats."""
    rows, children = [0], []
    for parent, members in enumerate(groups):
        row = sorted({index[c.__chandle__()] for m in members for c in m.imports} - {parent})
        if row and row[0] <= parent:
            raise ValueError(f"cannot export: merging the host modules into one library makes a cycle in the "
                             f"import tree (module kinds {groups[parent][0].kind} and {groups[row[0]][0].kind})")
        children += row
        rows.append(len(children))
    return rows, children


def _u64s(values: list[int]) -> bytes:
    return _U64.pack(len(values)) + b"".join(_U64.pack(v) for v in values)


def _run(data: bytes) -> bytes:
    return _U64.pack(len(data)) + data


def write_imports_blob(root: tvm.runtime.Module, path: str | os.PathLike) -> int:
    """Write the serialised imports of ``root`` (what ``ModulePackImportsToTensor`` returns) to ``path``;
    returns the number of bytes written."""
    groups, index = _groups(root)
    rows, children = _import_tree(groups, index)
    path = Path(path)
    with open(path, "wb") as f:
        f.write(_U64.pack(0) + _u64s(rows) + _u64s(children))  # the length is set at the end
    for members in groups:
        first = members[0]
        with open(path, "ab") as f:
            if _exportable(first):
                f.write(_run(b"_lib"))
                continue
            if not first.is_binary_serializable():
                raise ValueError(f"cannot export: a module of kind {first.kind!r} is neither compiled into the "
                                 f"library nor binary serializable")
            f.write(_run(first.kind.encode()))
            if first.kind != npu_module.MODULE_KIND:
                f.write(_run(bytes(npu_module.any_save_to_bytes(first))))
                continue
            f.write(_U64.pack(npu_module.serialized_size(first)))
        npu_module.append_serialized(first, path)  # straight from the program's memory (module docstring)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.write(_U64.pack(size - _U64.size))
    return size
