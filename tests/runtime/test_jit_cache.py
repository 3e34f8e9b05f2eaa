"""The JIT caches of :mod:`tvm_npu.runtime.jit`: one compile per key across threads, content-addressed disk
entries that survive a new cache object, damaged / truncated / foreign entries ignored with a warning and
recompiled, least-recently-used eviction under a size limit, and a cache that cannot be written."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from onnx_net import OnnxNet  # tests/ is on sys.path

import tvm_npu
from tvm_npu.compiler.dynamic import compile_partition
from tvm_npu.core.artifact import Artifact
from tvm_npu.runtime import jit
from tvm_npu.runtime.npu_module import module_blob


@pytest.fixture(scope="module")
def program() -> jit.Program:
    """The JIT program of a conv stem of symbolic width (its one partition)."""
    net = OnnxNet()
    y = net.conv(net.node("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2]), 3, 4, 3)
    with jit.use_cache(jit.JitCache(disk=None)):
        _, info = tvm_npu.build_with_info(net.model(y, [1, 3, 8, "W"], [1, 4, 4, "w2"]))
    (mod,) = info.compiled.attrs["external_mods"]
    return jit.Program.decode(module_blob(mod))


@pytest.fixture
def counted() -> Iterator[list[dict[str, int]]]:
    """The real compiler, slowed a little (so that threads overlap) and recording each call's sizes."""
    calls: list[dict[str, int]] = []

    def compiler(func_json: str, values: dict[str, int], target: str, symbol: str) -> bytes:
        calls.append(dict(values))
        time.sleep(0.2)
        return compile_partition(func_json, values, target, symbol)

    jit.set_compiler(compiler)
    try:
        yield calls
    finally:
        jit.set_compiler(compile_partition)


def _one(program: jit.Program) -> jit.Partition:
    (part,) = program.partitions.values()
    return part


def test_two_threads_asking_for_one_new_shape_compile_it_once(program: jit.Program, counted: list,
                                                             tmp_path: Path) -> None:
    cache = jit.JitCache(jit.DiskCache(tmp_path))
    part = _one(program)
    barrier = threading.Barrier(4)
    results: list[bytes] = []

    def ask(width: int) -> None:
        barrier.wait()
        results.append(cache.program(part, {"W": width}, program.target))

    threads = [threading.Thread(target=ask, args=(w,)) for w in (16, 16, 16, 24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(v["W"] for v in counted) == [16, 24]  # W=16 once although three threads asked
    assert cache.compiles == 2 and cache.memory_hits == 2
    assert len({r for r in results}) == 2
    Artifact.decode(results[0])


def test_a_new_cache_object_finds_the_program_on_disk(program: jit.Program, counted: list, tmp_path: Path) -> None:
    part = _one(program)
    first = jit.JitCache(jit.DiskCache(tmp_path)).program(part, {"W": 16}, program.target)
    fresh = jit.JitCache(jit.DiskCache(tmp_path))
    assert fresh.program(part, {"W": 16}, program.target) == first
    assert (fresh.compiles, fresh.disk_hits, len(counted)) == (0, 1, 1)
    other = jit.JitCache(jit.DiskCache(tmp_path)).program(part, {"W": 16}, program.target + " -max-sram-bytes=65536")
    assert len(counted) == 2 and other != first  # the target is part of the key


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "foreign", "empty"])
def test_an_unusable_entry_is_ignored_with_a_warning_and_recompiled(program: jit.Program, counted: list,
                                                                    tmp_path: Path, damage: str) -> None:
    part = _one(program)
    disk = jit.DiskCache(tmp_path)
    good = jit.JitCache(disk).program(part, {"W": 16}, program.target)
    path = disk.path(jit.JitCache.key(part, {"W": 16}, program.target))
    data = path.read_bytes()
    if damage == "corrupt":
        data = data[:-40] + bytes(b ^ 0xFF for b in data[-40:])
    elif damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "foreign":  # a valid entry, of another key, under this name
        jit.JitCache(disk).program(part, {"W": 24}, program.target)
        data = disk.path(jit.JitCache.key(part, {"W": 24}, program.target)).read_bytes()
    else:
        data = b""
    path.write_bytes(data)
    cache = jit.JitCache(disk)
    with pytest.warns(jit.JitCacheWarning, match=f"ignoring {path}"):
        assert cache.program(part, {"W": 16}, program.target) == good
    assert cache.compiles == 1 and cache.disk_hits == 0
    assert jit.JitCache(disk).program(part, {"W": 16}, program.target) == good  # rewritten: a hit now


def test_least_recently_used_entries_are_evicted(program: jit.Program, counted: list, tmp_path: Path) -> None:
    part = _one(program)
    disk = jit.DiskCache(tmp_path, max_bytes=1 << 40)
    cache = jit.JitCache(disk)
    paths = {}
    for i, width in enumerate((16, 24, 32)):
        cache.program(part, {"W": width}, program.target)
        paths[width] = disk.path(jit.JitCache.key(part, {"W": width}, program.target))
        os.utime(paths[width], (1000 + i, 1000 + i))
    assert disk.get(jit.JitCache.key(part, {"W": 16}, program.target)) is not None  # used: the newest now
    sizes = {w: p.stat().st_size for w, p in paths.items()}
    disk.max_bytes = sizes[16] + sizes[32]
    assert disk.evict() == [paths[24]]
    assert sorted(p.name for p in tmp_path.glob("*.npu")) == sorted(paths[w].name for w in (16, 32))


def test_a_cache_that_cannot_be_written_costs_one_warning(program: jit.Program, counted: list,
                                                          tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = jit.JitCache(jit.DiskCache(blocker / "cache"))
    with pytest.warns(jit.JitCacheWarning, match="cannot write") as record:
        blob = cache.program(_one(program), {"W": 16}, program.target)
    assert len(record) == 1
    Artifact.decode(blob)


def test_the_cache_directory_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TVM_NPU_CACHE", str(tmp_path / "here"))
    monkeypatch.setenv("TVM_NPU_CACHE_BYTES", "12345")
    disk = jit.DiskCache()
    assert (disk.directory, disk.max_bytes) == (tmp_path / "here", 12345)
    monkeypatch.delenv("TVM_NPU_CACHE")
    assert jit.DiskCache().directory == Path.home() / ".cache" / "tvm-npu"


def test_a_damaged_jit_program_is_a_value_error(program: jit.Program) -> None:
    blob = program.encode()
    assert jit.Program.decode(blob).partitions == program.partitions
    with pytest.raises(ValueError, match="damaged"):
        jit.Program.decode(blob[:-10] + b"0123456789")
    with pytest.raises(ValueError, match="not a JIT NPU program"):
        jit.Program.decode(b"NPUA")


def test_a_full_disk_costs_one_warning(program: jit.Program, counted: list, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Writing fails with ENOSPC (simulated): results stay right, one warning for the cache's life."""

    def full(self: Path, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full)
    cache = jit.JitCache(jit.DiskCache(tmp_path))
    with pytest.warns(jit.JitCacheWarning, match="No space left on device") as record:
        blobs = [cache.program(_one(program), {"W": w}, program.target) for w in (16, 24)]
    assert len(record) == 1 and cache.compiles == 2
    assert not list(tmp_path.glob("*"))
    Artifact.decode(blobs[1])
