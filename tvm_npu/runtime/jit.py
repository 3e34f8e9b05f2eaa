"""NPU partitions compiled for the shapes of each call: the dispatcher and its caches.

A model built once for every input size (:mod:`tvm_npu.compiler.dynamic`) keeps its host part
shape-generic and holds its NPU partitions as a *JIT program*: the blob of an ``npu`` runtime module
(so ``export_library`` keeps it, like any NPU program) that starts with :data:`MAGIC` and holds each
partition's Relax function in TVM's own serialised form (``tvm.ir.save_json``), its signature, the
compile policy, and the programs compiled ahead of time. A call of a partition symbol reads the
values of its symbolic dimensions from the arguments (tensor shapes; a shape argument where Relax
passes one), then finds the program for those sizes: compiled ahead of time, in memory, on disk, or
compiled now, and runs it like any compiled partition (:mod:`tvm_npu.runtime.execute`). Where the NPU
cannot run a partition at a call's sizes (no tile of an operator fits the SRAM), the compiler returns a
host (llvm) build of it instead, with a warning; that one is kept in memory only.

The runtime floor does not import the compiler: the compile function is injected with
:func:`set_compiler` by :mod:`tvm_npu.compiler.dynamic` when it is imported, and the facade
(``import tvm_npu``) registers a loader that imports it on the first compile, so a fresh process that
only loaded an exported library compiles too.

Caches (:class:`JitCache`): in memory, one compile per key however many threads ask at once (a
future per key; different keys compile in parallel); on disk, content-addressed (the partition's
serialised function, the sizes, the target, the compiler and format versions), each entry the
project's own artifact format behind a JSON header with its key, length and SHA-256, never
unpickled. A damaged, truncated or foreign entry is ignored with a warning and recompiled; a
directory that cannot be written costs a warning, never a result. Entries past the size limit are
evicted least recently used first. Location: ``$TVM_NPU_CACHE``, else ``~/.cache/tvm-npu``.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from tvm_npu.core.artifact import Artifact, ArtifactError
from tvm_npu.runtime import npu_module
from tvm_npu.runtime.execute import _invoke as run_artifact  # the one path every NPU program runs through

#: First bytes of a JIT program blob; :data:`FORMAT_VERSION` is part of every cache key.
MAGIC = b"NPUJIT\x00\x01"
FORMAT_VERSION = 1
_CACHE_MAGIC = b"NPUCACHE"
_LEN = struct.Struct("<Q")
#: Default size limit of the disk cache (``$TVM_NPU_CACHE_BYTES`` overrides it).
DEFAULT_CACHE_BYTES = 1 << 30

#: A partition run on the host (llvm) where the NPU cannot run it at a call's sizes: takes the DPS tensors.
HostRun = Callable[[list[Any]], None]
#: ``(function JSON, sizes by variable name, target, symbol[, tuning]) -> artifact blob``: what compiles a
#: partition; a :data:`HostRun` instead where no tile of an operator fits the SRAM at those sizes (the documented
#: fallback). ``tuning`` (:attr:`Program.tuning`) is passed only when the program holds tuning records.
Compiler = Callable[..., "bytes | HostRun"]
#: A signature entry: ``("tensor" | "shape", dims)``, a dim a size (int), a variable name (str) or None
#: (an expression of variables, checked by the compiled program).
Param = tuple[str, tuple[int | str | None, ...]]

_compiler: Compiler | None = None
_compiler_loader: Callable[[], object] | None = None


class JitCacheWarning(UserWarning):
    """A disk cache entry was unusable (ignored and recompiled) or could not be written."""


def set_compiler(fn: Compiler | None) -> None:
    """Install the function that compiles a partition for concrete sizes (the compiler floor does)."""
    global _compiler
    _compiler = fn


def set_compiler_loader(fn: Callable[[], object] | None) -> None:
    """Install what imports the compiler on the first compile (the facade does: the runtime may not)."""
    global _compiler_loader
    _compiler_loader = fn


def _compile(func_json: str, values: Mapping[str, int], target: str, symbol: str,
             tuning: Mapping[str, Any] | None = None) -> bytes | HostRun:
    if _compiler is None and _compiler_loader is not None:
        _compiler_loader()
    if _compiler is None:
        raise RuntimeError(f"NPU partition {symbol}: no JIT compiler is installed; import tvm_npu.compiler.dynamic "
                           f"(or tvm_npu) before running a model built for every shape")
    if tuning:
        return _compiler(func_json, values, target, symbol, tuning)
    return _compiler(func_json, values, target, symbol)


def tuning_digest(tuning: Mapping[str, Any] | None) -> str:
    """A short content hash of a program's tuning records ("" for none): part of the cache key, so a program
    compiled with other records is never reused."""
    if not tuning:
        return ""
    known = _digests.get(id(tuning))
    if known is not None and known[0] is tuning:  # a program's records, hashed once (they are never changed)
        return known[1]
    digest = hashlib.sha256(json.dumps(tuning, sort_keys=True).encode()).hexdigest()[:32]
    _digests[id(tuning)] = (tuning, digest)
    return digest


_digests: dict[int, tuple[Mapping[str, Any], str]] = {}


def values_key(values: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """Sizes of symbolic variables as a hashable, ordered key."""
    return tuple(sorted((str(k), int(v)) for k, v in values.items()))


@dataclass(frozen=True)
class Partition:
    """One NPU partition of a JIT program: its Relax function (TVM JSON), signature and content hash."""

    symbol: str
    func_json: str
    params: tuple[Param, ...]
    content: str  # SHA-256 of func_json

    def sizes(self, args: Sequence[Any]) -> dict[str, int]:
        """The symbolic variables' sizes in this call (``args``: the DPS arguments, inputs first); a
        ``ValueError`` naming the argument when a static size or a repeated variable disagrees."""
        values: dict[str, int] = {}
        for i, ((kind, dims), arg) in enumerate(zip(self.params, args, strict=False)):
            shape = tuple(int(d) for d in (arg if kind == "shape" else np.from_dlpack(arg).shape))
            if len(shape) != len(dims):
                raise ValueError(f"NPU partition {self.symbol}: argument {i} has rank {len(shape)}, not {len(dims)}")
            for j, (d, n) in enumerate(zip(dims, shape, strict=True)):
                if (isinstance(d, int) and d != n) or (isinstance(d, str) and values.setdefault(d, n) != n):
                    raise ValueError(f"NPU partition {self.symbol}: argument {i} dimension {j} is {n}, "
                                     f"expected {d if isinstance(d, int) else f'{d}={values[d]}'}")
        return values


def _framed(data: bytes, magic: bytes, what: str) -> tuple[dict, bytes]:
    """(header, payload) of ``magic | u32 header length | JSON header | payload``, the framing of a JIT program
    and of a disk-cache entry; a ``ValueError`` naming ``what`` when ``data`` is not one."""
    if not data.startswith(magic) or len(data) < len(magic) + _LEN.size:
        raise ValueError(f"not {what} (bad magic or truncated)")
    (n,) = _LEN.unpack_from(data, len(magic))
    start = len(magic) + _LEN.size
    return json.loads(data[start:start + n]), data[start + n:]  # a damaged header: JSONDecodeError, a ValueError


@dataclass
class Program:
    """What a JIT program blob holds (:meth:`encode` / :meth:`decode`)."""

    target: str
    partitions: dict[str, Partition]
    jit: str = "on"  # "off": only the shapes compiled ahead of time run
    inputs: dict[str, list[int | str]] = field(default_factory=dict)  # declared input dims (str: a variable)
    bounds: dict[str, tuple[int, int]] = field(default_factory=dict)  # variable -> (min, max) of a profile
    compiled: dict[tuple[str, tuple[tuple[str, int], ...]], bytes] = field(default_factory=dict)
    #: The tuning records the build was given (``database=``), applied to every compile of a partition:
    #: ``{"tiles": {spec key: tile JSON}, "plans": {partition key: plan choice dict}}``; {} untuned.
    tuning: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        """``MAGIC | u64 header length | header JSON | payload``; the header holds the payload's SHA-256."""
        chunks: list[bytes] = []
        offset = 0

        def put(data: bytes) -> list[int]:
            nonlocal offset
            chunks.append(data)
            offset += len(data)
            return [offset - len(data), len(data)]

        header = {
            "format": FORMAT_VERSION, "target": self.target, "jit": self.jit, "inputs": self.inputs,
            "bounds": {k: list(v) for k, v in self.bounds.items()}, "tuning": self.tuning,
            "partitions": [{"symbol": p.symbol, "params": [[k, list(d)] for k, d in p.params],
                            "content": p.content, "func": put(p.func_json.encode())}
                           for p in self.partitions.values()],
            "compiled": [{"symbol": s, "values": dict(v), "program": put(blob)}
                         for (s, v), blob in self.compiled.items()],
        }
        payload = b"".join(chunks)
        header["sha256"] = hashlib.sha256(payload).hexdigest()
        head = json.dumps(header, sort_keys=True).encode()
        return b"".join((MAGIC, _LEN.pack(len(head)), head, payload))

    @classmethod
    def decode(cls, blob: bytes) -> Program:
        """The program of a JIT blob; a ``ValueError`` when it is damaged, truncated or of another format."""
        header, payload = _framed(blob, MAGIC, "a JIT NPU program")
        if header.get("format") != FORMAT_VERSION or hashlib.sha256(payload).hexdigest() != header.get("sha256"):
            raise ValueError(f"JIT NPU program of format {header.get('format')} or damaged "
                             f"(this runtime reads format {FORMAT_VERSION})")

        def get(span: list[int]) -> bytes:
            return payload[span[0]:span[0] + span[1]]

        parts = {p["symbol"]: Partition(p["symbol"], get(p["func"]).decode(),
                                        tuple((k, tuple(d)) for k, d in p["params"]), p["content"])
                 for p in header["partitions"]}
        compiled = {(c["symbol"], values_key(c["values"])): get(c["program"]) for c in header["compiled"]}
        return cls(header["target"], parts, header["jit"], header["inputs"],
                   {k: (int(a), int(b)) for k, (a, b) in header["bounds"].items()}, compiled,
                   dict(header.get("tuning") or {}))

    def input_shapes(self, values: Mapping[str, int]) -> str:
        """The model's input shapes at ``values`` (``x=(1, 3, 48, 320)``), for messages."""
        return ", ".join(f"{name}=({', '.join(str(values.get(d, d)) for d in dims)})"
                         for name, dims in self.inputs.items())

    def where(self, var: str) -> str:
        """Where a symbolic variable is declared: ``input 'x' dimension 3 ('W')``."""
        for name, dims in self.inputs.items():
            if var in dims:
                return f"input {name!r} dimension {dims.index(var)} ({var!r})"
        return f"dimension {var!r}"


def _default_dir() -> Path:
    env = os.environ.get("TVM_NPU_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "tvm-npu"


def _warn(text: str) -> None:
    warnings.warn(text, JitCacheWarning, stacklevel=4)


class DiskCache:
    """Compiled programs on disk by content key; LRU eviction past ``max_bytes`` (file times are the recency)."""

    def __init__(self, directory: str | os.PathLike | None = None, max_bytes: int | None = None) -> None:
        self._directory = Path(directory) if directory is not None else None
        env = os.environ.get("TVM_NPU_CACHE_BYTES")
        self.max_bytes = max_bytes if max_bytes is not None else int(env) if env else DEFAULT_CACHE_BYTES
        self._write_warned = False  # a cache that cannot be written says so once

    @property
    def directory(self) -> Path:
        """The directory given, else ``$TVM_NPU_CACHE`` (else ``~/.cache/tvm-npu``) as it is now: the process's
        cache is made at import, before a program or a test session sets the variable."""
        return self._directory if self._directory is not None else _default_dir()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.npu"

    def get(self, key: str) -> bytes | None:
        """The program stored under ``key``; None when absent, or (with a warning, the entry removed) unusable."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            _warn(f"NPU JIT cache: cannot read {path} ({e.strerror}); compiling instead")
            return None
        try:
            blob = self._unpack(key, data)
        except (ValueError, ArtifactError, UnicodeDecodeError, KeyError, TypeError) as e:
            _warn(f"NPU JIT cache: ignoring {path}: {e}; recompiling it")
            path.unlink(missing_ok=True)
            return None
        with suppress(OSError):
            os.utime(path)  # most recently used
        return blob

    @staticmethod
    def _unpack(key: str, data: bytes) -> bytes:
        header, blob = _framed(data, _CACHE_MAGIC, "an NPU JIT cache entry")
        if header.get("key") != key:
            raise ValueError(f"an entry for another key ({str(header.get('key'))[:16]}...)")
        if header.get("length") != len(blob) or hashlib.sha256(blob).hexdigest() != header.get("sha256"):
            raise ValueError(f"truncated or damaged ({len(blob)} of {header.get('length')} bytes)")
        Artifact.decode(blob)  # its own checksum and version
        return blob

    def put(self, key: str, blob: bytes) -> None:
        """Store ``blob`` (atomically: a temporary file renamed), then evict; failing (not writable, disk full)
        warns once per cache object and loses nothing but the entry."""
        head = json.dumps({"format": FORMAT_VERSION, "key": key, "length": len(blob),
                           "sha256": hashlib.sha256(blob).hexdigest()}).encode()
        tmp = self.path(f"{key}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(b"".join((_CACHE_MAGIC, _LEN.pack(len(head)), head, blob)))
            os.replace(tmp, self.path(key))
        except OSError as e:
            with suppress(OSError):
                tmp.unlink(missing_ok=True)
            if not self._write_warned:
                self._write_warned = True
                _warn(f"NPU JIT cache: cannot write {self.directory} ({e.strerror or e}); programs compiled now "
                      f"are not cached on disk")
            return
        self.evict()

    def evict(self) -> list[Path]:
        """Remove least recently used entries until the cache holds at most ``max_bytes``; the removed ones."""
        try:
            entries = sorted((p.stat().st_mtime, p.stat().st_size, p) for p in self.directory.glob("*.npu"))
        except OSError:
            return []
        total = sum(size for _, size, _ in entries)
        removed = []
        for _, size, path in entries:
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
            removed.append(path)
        return removed


#: The packages whose sources make the compiled programs (the stage folders install as subpackages elsewhere).
_COMPILER_PACKAGES = ("tvm_npu", "tvm_npu.simulator", "tvm_npu.tir_schedules", "tvm_npu.relay_patterns",
                      "tvm_npu.codegen")


@lru_cache(maxsize=1)
def compiler_version() -> str:
    """What a compiled program depends on: tvm-npu's version and a digest of its sources (a source checkout
    keeps one version number while its compiler changes), and TVM's version; part of every cache key."""
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    import tvm

    try:
        ours = version("tvm-npu")
    except PackageNotFoundError:
        ours = "unknown"
    digest = hashlib.sha256()
    for package in _COMPILER_PACKAGES:
        spec = importlib.util.find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(root).rglob("*.py")):
                digest.update(f"{package}/{path.relative_to(root)}".encode())
                digest.update(path.read_bytes())
    return f"tvm-npu {ours} (sources {digest.hexdigest()[:16]}); tvm {tvm.__version__}"


@dataclass
class JitCache:
    """Compiled partitions in memory (and on ``disk`` unless None), with counters for what happened."""

    disk: DiskCache | None = field(default_factory=DiskCache)
    compiles: int = 0
    disk_hits: int = 0
    memory_hits: int = 0
    compile_seconds: dict[tuple[str, tuple[tuple[str, int], ...]], float] = field(default_factory=dict, repr=False)
    _entries: dict[str, Future] = field(default_factory=dict, repr=False)
    # content addresses already computed, by (partition content, sizes, target, tuning digest): a steady-state
    # call looks its program up without serialising and hashing its key again
    _keys: dict[tuple[str, tuple[tuple[str, int], ...], str, str], str] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # what a call of (program, symbol) with these argument shapes runs, once it ran: a repeated shape goes
    # straight to its program (no sizes read, no policy or key work); whether it came from this cache
    dispatch: dict[tuple[int, str, tuple], tuple[bytes | HostRun, tuple[int, ...] | None, bool]] = \
        field(default_factory=dict, repr=False)

    @staticmethod
    def key(part: Partition, values: Mapping[str, int], target: str, tuning: Mapping[str, Any] | None = None) -> str:
        """The content address: partition, sizes, target, tuning records, compiler and format versions."""
        text = json.dumps([part.content, values_key(values), target, compiler_version(), FORMAT_VERSION]
                          + ([tuning_digest(tuning)] if tuning else []))
        return hashlib.sha256(text.encode()).hexdigest()

    def program(self, part: Partition, values: Mapping[str, int], target: str,
                tuning: Mapping[str, Any] | None = None) -> bytes | HostRun:
        """The artifact of ``part`` at ``values`` (compiled with ``tuning``'s records): from memory, disk, or
        compiled (once per key, whatever the number of threads asking); a host fallback (kept in memory only)
        where the NPU cannot run it."""
        known = (part.content, values_key(values), target, tuning_digest(tuning))
        key = self._keys.get(known)
        if key is None:
            key = self._keys[known] = self.key(part, values, target, tuning)
        with self._lock:
            future = self._entries.get(key)
            owner = future is None
            if owner:
                future = self._entries[key] = Future()
            else:
                self.memory_hits += 1
        if not owner:
            return future.result()
        try:
            blob = self._load_or_compile(key, part, values, target, tuning)
        except BaseException as e:
            with self._lock:
                del self._entries[key]
            future.set_exception(e)
            raise
        future.set_result(blob)
        return blob

    def _load_or_compile(self, key: str, part: Partition, values: Mapping[str, int], target: str,
                         tuning: Mapping[str, Any] | None) -> bytes | HostRun:
        blob = self.disk.get(key) if self.disk is not None else None
        if blob is not None:
            with self._lock:
                self.disk_hits += 1
            return blob
        import time

        start = time.perf_counter()
        blob = _compile(part.func_json, values, target, part.symbol, tuning)
        with self._lock:
            self.compiles += 1
            self.compile_seconds[(part.symbol, values_key(values))] = time.perf_counter() - start
        if self.disk is not None and isinstance(blob, bytes):
            self.disk.put(key, blob)
        return blob


_cache = JitCache()
_programs: dict[bytes, Program] = {}
_programs_lock = threading.Lock()


def cache() -> JitCache:
    """The process's JIT cache (what :func:`use_cache` replaces)."""
    return _cache


@contextmanager
def use_cache(new: JitCache) -> Iterator[JitCache]:
    """Compile and look up through ``new`` inside the block (tests; a private cache directory)."""
    global _cache
    previous, _cache = _cache, new
    try:
        yield new
    finally:
        _cache = previous


def _program(blob: bytes) -> Program:
    prog = _programs.get(blob)
    if prog is None:
        prog = Program.decode(blob)
        with _programs_lock:
            _programs[blob] = prog
    return prog


def _check_policy(prog: Program, part: Partition, values: Mapping[str, int]) -> None:
    """A ``ValueError`` for sizes below 1 or outside a profile's bounds, or not compiled ahead of time with
    ``jit="off"``."""
    for var, n in sorted(values.items()):
        _check_bound(prog, var, n)
    if prog.jit == "off" and (part.symbol, values_key(values)) not in prog.compiled:
        shapes = sorted({prog.input_shapes(dict(v)) for s, v in prog.compiled if s == part.symbol})
        raise ValueError(f"NPU partition {part.symbol}: input shape {prog.input_shapes(values)} was not compiled "
                         f"and the model was built with jit='off'; compiled shapes: {'; '.join(shapes) or 'none'}")


def programs_of(executable: Any) -> list[Program]:
    """The JIT programs of an executable (a ``relax.VMExecutable`` or a loaded library): the blobs of its ``npu``
    modules that are JIT programs; [] for a static build."""
    stack, found = [getattr(executable, "mod", executable)], []
    while stack:
        mod = stack.pop()
        stack.extend(mod.imports)
        if mod.kind == "npu" and npu_module.program_head(mod, len(MAGIC)) == MAGIC:  # not a whole copy
            found.append(_program(npu_module.module_blob(mod)))
    return found


def check_bounds(programs: Sequence[Program], arrays: Mapping[str, Any]) -> None:
    """A ``ValueError`` naming the input and dimension when an array's symbolic size is 0 or lies outside a
    profile's bounds (the check every partition call makes, made before the host part runs)."""
    for prog in programs:
        for name, dims in prog.inputs.items():
            shape = getattr(arrays.get(name), "shape", None)
            if shape is None or len(shape) != len(dims):
                continue
            for var, n in zip(dims, shape, strict=True):
                if isinstance(var, str):
                    _check_bound(prog, var, int(n))


def _check_bound(prog: Program, var: str, n: int) -> None:
    if n < 1:  # no NPU program computes an empty tensor
        raise ValueError(f"{prog.where(var)} is {n}; accepted: {var} >= 1"
                         + (f" (in {prog.bounds[var][0]}..{prog.bounds[var][1]})" if var in prog.bounds else ""))
    if var in prog.bounds and not prog.bounds[var][0] <= n <= prog.bounds[var][1]:
        lo, hi = prog.bounds[var]
        raise ValueError(f"{prog.where(var)} is {n}, outside the bounds {lo}..{hi} of the model's shape "
                         f"profile; accepted: {var} in {lo}..{hi}")


def program_for(prog: Program, symbol: str, values: Mapping[str, int]) -> bytes | HostRun:
    """The artifact that runs ``symbol`` of ``prog`` at ``values`` (ahead of time, cached, or compiled)."""
    part = prog.partitions[symbol]
    _check_policy(prog, part, values)
    ahead = prog.compiled.get((symbol, values_key(values)))
    return ahead if ahead is not None else _cache.program(part, values, prog.target, prog.tuning)


def invoke(blob: bytes, symbol: str, args: list[Any]) -> None:
    """The invoke handler: a JIT program's symbol is specialised for this call's sizes, then run; any other
    NPU program runs as before."""
    if not blob.startswith(MAGIC):
        run_artifact(blob, symbol, args)
        return
    prog = _program(blob)
    cache = _cache
    # the shapes of the arguments decide the program (a shape argument is a tuple: its own key)
    key = (id(prog), symbol, tuple(a if isinstance(a, tuple) else a.shape for a in args))
    known = cache.dispatch.get(key)
    if known is None:
        known = cache.dispatch[key] = _dispatch(prog, symbol, args)
    elif known[2]:
        with cache._lock:
            cache.memory_hits += 1
    program, tensors, _ = known
    if tensors is not None:
        args = [args[i] for i in tensors]
    if isinstance(program, bytes):
        run_artifact(program, symbol, args)
    else:
        program(args)


def _dispatch(prog: Program, symbol: str, args: list[Any]) -> tuple[bytes | HostRun, tuple[int, ...] | None, bool]:
    """The first call of ``symbol`` at these argument shapes: its sizes checked and its program found or compiled
    (:func:`program_for`); (program, the indices of the tensor arguments or None for all, whether the cache holds
    it)."""
    if symbol not in prog.partitions:
        raise ValueError(f"the JIT NPU program has no partition {symbol!r} (it has {sorted(prog.partitions)})")
    part = prog.partitions[symbol]
    values = part.sizes(args)
    program = program_for(prog, symbol, values)
    tensors = tuple(i for i, (kind, _) in enumerate(part.params) if kind != "shape")
    tensors += tuple(range(len(part.params), len(args)))
    return program, None if tensors == tuple(range(len(args))) else tensors, \
        prog.compiled.get((symbol, values_key(values))) is None


npu_module.set_invoke_handler(invoke)
