"""Exporting a compiled model as a shared library without TVM's LLVM copy of its weights.

``export_library`` embeds the imported modules (the NPU programs, which hold a model's weights) as one
serialised blob under the symbol ``__tvm_ffi__library_bin``. By default TVM builds that symbol as an LLVM
constant array and emits an object file from it: the blob, the LLVM constant and the object code are
whole copies at once (a 548 MB VGG-19 peaked at about 4x its weights above the build here).
:func:`pack_imports` writes TVM's serialised blob (the bytes ``runtime.ModulePackImportsToTensor`` gives and
the LLVM route embeds) to a file piece by piece (:func:`tvm_npu.tools.pack_stream.write_imports_blob`: the
weights are not copied on the way) and lets the assembler include it (``.incbin``), so the library is the
same to TVM's loader. Native ELF shared libraries only (what :func:`exports_natively` says); anything else
(cross-compiled ``.tar``, a system library) keeps TVM's way.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import tvm

from tvm_npu.tools.pack_stream import write_imports_blob

#: The symbol TVM's library loader reads the imported modules from.
LIBRARY_BIN = "__tvm_ffi__library_bin"


def exports_natively(output: str | os.PathLike) -> bool:
    """Whether :func:`pack_imports` can pack the imports of a library written to ``output`` here: a shared
    library (not a ``.tar`` of objects) on a Linux host, whose assembler takes ``.incbin``."""
    return sys.platform.startswith("linux") and Path(output).suffix == ".so"


def _assembly(blob: Path) -> str:
    """Assembly defining :data:`LIBRARY_BIN` as the bytes of the file ``blob``."""
    quoted = str(blob).replace("\\", "\\\\").replace('"', '\\"')
    return (f'\t.section .rodata.{LIBRARY_BIN},"a",@progbits\n'
            f"\t.globl {LIBRARY_BIN}\n\t.type {LIBRARY_BIN}, @object\n\t.p2align 4\n"
            f'{LIBRARY_BIN}:\n\t.incbin "{quoted}"\n\t.size {LIBRARY_BIN}, . - {LIBRARY_BIN}\n'
            '\t.section .note.GNU-stack,"",@progbits\n')


def pack_imports(mod: tvm.runtime.Module, is_system_lib: bool, symbol_prefix: str, workspace_dir: str) -> str:
    """``export_library``'s ``fpack_imports``: the imports of ``mod`` as an assembly file that includes their
    serialised blob from a file next to it; returns the assembly file's path. A system library (which also
    registers the blob under a prefix) is refused: export it without this packer."""
    if is_system_lib or symbol_prefix:
        raise ValueError("pack_imports packs the imports of a shared library only; "
                         "export a system library with TVM's own packer (no fpack_imports)")
    blob = Path(workspace_dir) / "devc.bin"
    write_imports_blob(mod, blob)
    source = Path(workspace_dir) / "devc.S"
    source.write_text(_assembly(blob))
    return str(source)


def export_library(executable: tvm.runtime.Module, output: str | os.PathLike) -> None:
    """``executable.export_library(output)``, its imports packed by :func:`pack_imports` when
    :func:`exports_natively` (else TVM's own way)."""
    if exports_natively(output):
        executable.export_library(str(output), fpack_imports=pack_imports)
    else:
        executable.export_library(str(output))
