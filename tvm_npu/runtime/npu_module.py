"""Runtime module of kind ``npu``: glue between TVM's runtime and the NPU simulator.

Python cannot subclass ``ffi.Module``, so a small C++ ``ModuleObj`` (``_npu_module.cc``)
is compiled on first use with ``tvm_ffi.cpp`` and cached on disk (``TVM_FFI_CACHE_DIR``,
default ``~/.cache/tvm-ffi``), once per Python environment. That module holds the serialized NPU programs as one
opaque blob plus the list of exported symbols, is binary-serialisable (so
``Executable.export_library`` embeds it in the ``.so``) and forwards every call of an
exported symbol back to Python through the global ``tvm_npu.runtime.invoke``.

Globals registered when this module is imported:

* ``tvm_npu.runtime.register_blob(blob: bytes) -> int``: called by C++ once per module
  creation/load; the blob is kept here and calls carry only the integer handle.
* ``tvm_npu.runtime.invoke(handle: int, symbol: str, *args) -> None``: dispatches to
  the handler installed with :func:`set_invoke_handler`.
* ``tvm_npu.runtime.create_module(blob: bytes, symbols: list[str]) -> Module``.
* ``ffi.Module.load_from_bytes.npu(data: bytes) -> Module``: the loader that
  ``tvm.runtime.load_module`` looks up for modules of kind ``npu``. It compiles/loads
  the C++ extension lazily, so importing this module is enough before ``load_module``.
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import tvm_ffi
import tvm_ffi.cpp

if TYPE_CHECKING:
    import tvm

__all__ = [
    "MODULE_KIND",
    "InvokeHandler",
    "create_module",
    "get_invoke_handler",
    "load_extension",
    "load_from_bytes",
    "load_module",
    "module_blob",
    "module_symbols",
    "save_to_bytes",
    "set_invoke_handler",
]

#: ``kind`` reported by the C++ module; also the suffix of its loader global.
MODULE_KIND = "npu"

#: Handler signature: ``(blob, symbol, args)``; ``args`` are TVM-FFI Tensors in DPS
#: order (inputs, then outputs that the handler must write in place).
InvokeHandler = Callable[[bytes, str, list[Any]], None]

_SOURCE_PATH = Path(__file__).with_name("_npu_module.cc")
_EXTENSION_NAME = "tvm_npu_runtime"
# Bump when the build recipe changes in a way the source text does not show.
_BUILD_RECIPE_VERSION = 1

_lock = threading.RLock()
_extension: tvm_ffi.Module | None = None
_create_fn: tvm_ffi.Function | None = None
_create_from_buffer_fn: tvm_ffi.Function | None = None
_load_fn: tvm_ffi.Function | None = None
_save_fn: tvm_ffi.Function | None = None

_blobs: list[bytes] = []
_blob_handles: dict[bytes, int] = {}
_invoke_handler: InvokeHandler | None = None


def _extension_source() -> str:
    """Return the C++ source, stamped so the build cache key changes with tvm-ffi and the environment.

    ``build_inline`` hashes only the source text and flags, not the tvm-ffi headers it
    compiles against; the stamp keeps a cached ``.so`` from being reused across an
    incompatible tvm-ffi upgrade. It also names the Python environment (a hash of
    ``sys.prefix``): two virtual environments compile against headers at different paths,
    and sharing one build directory made each rebuild it after the other had.
    """
    environment = hashlib.sha256(sys.prefix.encode()).hexdigest()[:16]
    stamp = (f"// tvm-ffi {tvm_ffi.__version__}; tvm_npu build recipe {_BUILD_RECIPE_VERSION}; "
             f"environment {environment}\n")
    return stamp + _SOURCE_PATH.read_text(encoding="utf-8")


def load_extension() -> tvm_ffi.Module:
    """Compile (once per machine) and load (once per process) the C++ ``npu`` module.

    The build goes to the tvm-ffi cache (``$TVM_FFI_CACHE_DIR`` or ``~/.cache/tvm-ffi``),
    keyed by a hash of the source, so later processes only ``dlopen`` it. The library is
    kept loaded for the life of the process because module objects use its vtable.

    A process killed while compiling leaves nothing that a later one would load: tvm-ffi builds
    under a file lock (``flock``: released by the kernel when the holder dies) with ninja, which
    records a step in ``.ninja_log`` only once it has finished, and rebuilds any output without a
    record or older than its inputs. A half-written object or library is therefore rebuilt, and a
    half-written ``main.cpp`` differs from the source and is rewritten (tests/e2e/test_runtime_cache.py
    kills a build and truncates the library to check both). So no temporary directory and rename.
    """
    global _extension, _create_fn, _create_from_buffer_fn, _load_fn, _save_fn
    # TVM registers tvm.runtime.Module as the Python class of ffi.Module: the modules made here are of it.
    # Imported here, not at the top, so that loading the runtime (``import tvm_npu``) stays light.
    import tvm  # noqa: F401
    with _lock:
        if _extension is None:
            lib_path = tvm_ffi.cpp.build_inline(name=_EXTENSION_NAME, cpp_sources=_extension_source())
            lib = tvm_ffi.load_module(lib_path, keep_module_alive=True)
            _create_fn = lib.get_function("tvm_npu_create_module")
            _create_from_buffer_fn = lib.get_function("tvm_npu_create_module_from_buffer")
            _load_fn = lib.get_function("tvm_npu_load_from_bytes")
            _save_fn = lib.get_function("tvm_npu_save_to_bytes")
            _extension = lib
        return _extension


def create_module(blob: bytes | bytearray, symbols: Sequence[str]) -> tvm.runtime.Module:
    """Wrap serialized NPU programs in a runtime module exporting ``symbols``.

    Each symbol becomes a function the Relax VM finds through the module's imports
    (``R.call_dps_packed("<symbol>", ...)``); calling it runs the invoke handler.
    """
    if isinstance(symbols, str):
        raise TypeError("symbols must be a sequence of names, not a single string")
    load_extension()
    assert _create_fn is not None
    names = [str(s) for s in symbols]
    if isinstance(blob, bytearray) and blob:  # the module reads it in place (DLPack): no copy of the weights
        assert _create_from_buffer_fn is not None
        return _create_from_buffer_fn(np.frombuffer(blob, dtype=np.uint8), names)
    return _create_fn(bytes(blob), names)


class _Owners:
    """The Python objects whose memory a module made by :func:`create_module_from_parts` reads (an opaque
    object to the FFI, which keeps it alive with the module; a list would be converted element-wise)."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[np.ndarray]) -> None:
        self.parts = parts


def create_module_from_parts(parts: Sequence[bytes | bytearray | np.ndarray], symbols: Sequence[str]
                             ) -> tvm.runtime.Module:
    """:func:`create_module` of the concatenation of ``parts`` without making it: the module reads every
    part where it is and keeps it alive (a model's weights stay in its constants' arrays), and concatenates
    them only when the program is run or serialised piece by piece when it is exported."""
    if isinstance(symbols, str):
        raise TypeError("symbols must be a sequence of names, not a single string")
    arrays = [p if isinstance(p, np.ndarray) else np.frombuffer(p, dtype=np.uint8) for p in parts]
    if not all(a.flags.c_contiguous for a in arrays):
        raise ValueError("every part of an NPU program must be C-contiguous")
    create = load_extension().get_function("tvm_npu_create_module_from_parts")
    return create([_Owners(arrays)], [a.ctypes.data for a in arrays], [a.nbytes for a in arrays],
                  [str(s) for s in symbols])


def module_blob(mod: tvm.runtime.Module) -> bytes:
    """Return the program blob held by an ``npu`` module (for inspection and tests)."""
    _check_kind(mod)
    return bytes(mod.get_function("__npu_get_blob")())


def module_symbols(mod: tvm.runtime.Module) -> list[str]:
    """Return the symbols exported by an ``npu`` module, in creation order."""
    _check_kind(mod)
    return [str(s) for s in mod.get_function("__npu_get_symbols")()]


def _check_kind(mod: tvm.runtime.Module) -> None:
    if mod.kind != MODULE_KIND:
        raise ValueError(f"expected a runtime module of kind {MODULE_KIND!r}, got {mod.kind!r}")


def set_invoke_handler(fn: InvokeHandler | None) -> InvokeHandler | None:
    """Install the callable that executes NPU symbols; return the previous one.

    The rest of the package installs its simulator here; keeping it pluggable lets the
    runtime glue be tested without the simulator.
    """
    global _invoke_handler
    if fn is not None and not callable(fn):
        raise TypeError("invoke handler must be callable")
    with _lock:
        previous = _invoke_handler
        _invoke_handler = fn
    return previous


def get_invoke_handler() -> InvokeHandler | None:
    """Return the currently installed invoke handler, if any."""
    return _invoke_handler


def _register_blob(blob: bytes) -> int:
    """Keep ``blob`` alive and return its handle; identical blobs share one handle.

    Handles are never released (the C++ side has no safe point to call back into
    Python on destruction), so deduplication bounds memory by distinct programs.
    """
    data = bytes(blob)
    with _lock:
        handle = _blob_handles.get(data)
        if handle is None:
            handle = len(_blobs)
            _blobs.append(data)
            _blob_handles[data] = handle
        return handle


def _invoke(handle: int, symbol: str, *args: Any) -> None:
    """Run ``symbol`` of the blob behind ``handle`` on DPS ``args`` via the handler."""
    handler = _invoke_handler
    if handler is None:
        raise RuntimeError(
            f"No NPU invoke handler is installed (calling {symbol!r}); `import tvm_npu` "
            "or call tvm_npu.runtime.npu_module.set_invoke_handler()"
        )
    if not 0 <= handle < len(_blobs):
        raise RuntimeError(f"Unknown NPU blob handle {handle} (calling {symbol!r})")
    handler(_blobs[handle], str(symbol), list(args))


def save_to_bytes(mod: tvm.runtime.Module) -> bytes:
    """Serialize an ``npu`` module exactly as ``export_library`` embeds it."""
    _check_kind(mod)
    load_extension()
    assert _save_fn is not None
    return bytes(_save_fn(mod))


def program_head(mod: tvm.runtime.Module, n: int) -> bytes:
    """The first ``n`` bytes of an ``npu`` module's program (what :func:`module_blob` starts with), without
    copying the whole program (a model's weights)."""
    _check_kind(mod)
    return bytes(load_extension().get_function("tvm_npu_program_head")(mod, n))


def serialized_size(mod: tvm.runtime.Module) -> int:
    """The length of :func:`save_to_bytes` of ``mod``, counted without making the bytes."""
    _check_kind(mod)
    return int(load_extension().get_function("tvm_npu_serialized_size")(mod))


def append_serialized(mod: tvm.runtime.Module, path: str | os.PathLike) -> None:
    """Append :func:`save_to_bytes` of ``mod`` to the file ``path``, written from the program's memory: no copy
    of a model's weights (``tvm_npu.tools.pack_stream``)."""
    _check_kind(mod)
    load_extension().get_function("tvm_npu_append_serialized")(mod, os.fspath(path))


def any_save_to_bytes(mod: tvm.runtime.Module) -> bytes:
    """``SaveToBytes`` of any binary-serializable module (e.g. the Relax VM executable), which TVM gives Python
    only inside a whole import blob."""
    return bytes(load_extension().get_function("tvm_npu_any_save_to_bytes")(mod))


def load_from_bytes(data: bytes) -> tvm.runtime.Module:
    """Rebuild an ``npu`` module from :func:`save_to_bytes` output.

    Raises ``ValueError`` for damaged or truncated data (the format carries a length
    and a checksum) instead of crashing.
    """
    load_extension()
    assert _load_fn is not None
    return _load_fn(bytes(data))


def load_module(path: str | os.PathLike[str]) -> tvm.runtime.Module:
    """``tvm.runtime.load_module`` with a truncation check on ELF shared libraries first.

    glibc's ``dlopen`` maps segments past the end of a truncated file and the process
    then dies of SIGBUS instead of raising, so a damaged export is rejected here with a
    ``ValueError``. The embedded ``npu`` module has its own length and checksum.
    """
    path = os.fspath(path)
    _check_elf_not_truncated(path)
    import tvm

    return tvm.runtime.load_module(path)


def _check_elf_not_truncated(path: str) -> None:
    """Raise ``ValueError`` if a 64-bit little-endian ELF file is shorter than it declares."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        header = f.read(64)
        if header[:4] != b"\x7fELF" or len(header) < 6 or header[4] != 2 or header[5] != 1:
            return  # not ELF64-LE: leave the diagnosis to the regular loader
        if len(header) < 64:
            raise ValueError(f"{path}: truncated ELF header ({size} bytes)")
        phoff, shoff = struct.unpack_from("<QQ", header, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", header, 0x36)
        if phoff + phnum * phentsize > size or (shnum and shoff + shnum * shentsize > size):
            raise ValueError(f"{path}: truncated shared library ({size} bytes); re-export it")
        f.seek(phoff)
        table = f.read(phnum * phentsize)
    for i in range(phnum):
        p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
        if p_type == 1 and p_offset + p_filesz > size:  # PT_LOAD
            raise ValueError(f"{path}: truncated shared library ({size} bytes); re-export it")


def _create_module_global(blob: bytes, symbols: Sequence[str]) -> tvm.runtime.Module:
    return create_module(blob, symbols)


# override=True: re-importing (e.g. importlib.reload, or two copies of the package on
# sys.path) must replace the globals rather than fail.
tvm_ffi.register_global_func("tvm_npu.runtime.register_blob", _register_blob, override=True)
tvm_ffi.register_global_func("tvm_npu.runtime.invoke", _invoke, override=True)
tvm_ffi.register_global_func("tvm_npu.runtime.create_module", _create_module_global, override=True)
tvm_ffi.register_global_func(f"ffi.Module.load_from_bytes.{MODULE_KIND}", load_from_bytes, override=True)
