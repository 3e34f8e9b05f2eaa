"""No worker process outlives tuning: the builder's and the runner's popen pools are shut down when
tuning ends, fails or is interrupted (a ``tvm.exec.popen_worker`` used to be left running after an RPC run)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import tvm.s_tir.meta_schedule as ms

import tvm_npu
from tvm_npu.models.light import tiny_convnet
from tvm_npu.tuning.rpc_server import LocalCluster

pytestmark = pytest.mark.slow  # tuning runs that start worker processes: the quick tier leaves it out


def _children() -> set[int]:
    """This process's living descendants (zombies, already exited, do not count)."""
    return {p.pid for p in psutil.Process().children(recursive=True)
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE}


def _left_over(before: set[int]) -> set[int]:
    """Descendants started since ``before`` that are still alive (a killed worker gets a moment to go)."""
    deadline = time.monotonic() + 5.0
    while (left := _children() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_a_tuning_run_leaves_no_worker_process(tmp_path: Path) -> None:
    before = _children()
    results = tvm_npu.tune(tiny_convnet(), "npu", tmp_path, trials=3, trials_per_iter=3, plans=False, workers=2,
                           progress=False)
    assert results
    assert not _left_over(before)


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_tuning_that_fails_midway_leaves_no_worker_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           error: type[BaseException]) -> None:
    """The search raises after the runner's workers have measured the cost model's tiles (an error, or
    Ctrl-C): they are stopped all the same."""

    def search_fails(**kwargs: object) -> None:
        raise error("the search failed")

    monkeypatch.setattr(ms, "tune_tasks", search_fails)
    before = _children()
    with pytest.raises(error, match="the search failed"):
        tvm_npu.tune(tiny_convnet(), "npu", tmp_path, trials=3, plans=False, workers=2, progress=False)
    assert not _left_over(before)


def _marked(mark: str) -> list[psutil.Process]:
    """Living processes whose environment carries ``mark`` (inherited from the command that started them)."""
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get("TVM_NPU_TEST_MARK") == mark and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_the_tune_command_over_rpc_leaves_no_process(tmp_path: Path) -> None:
    """The reported case: ``tvm-npu tune tiny_convnet --rpc HOST:PORT`` left a ``tvm.exec.popen_worker``
    running after the command had exited. Every process the command started carries a mark in its
    environment; none may be alive once it has exited."""
    mark = uuid.uuid4().hex
    with LocalCluster(1, log_dir=tmp_path / "logs") as cluster:
        cluster.wait_servers(1)
        env = {**os.environ, "TVM_NPU_TEST_MARK": mark}
        done = subprocess.run([sys.executable, "-P", "-m", "tvm_npu", "tune", "tiny_convnet", "--rpc", cluster.address,
                               "--key", cluster.key, "--trials", "2", "--no-plans", "--work-dir", str(tmp_path / "w")],
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        deadline = time.monotonic() + 5.0
        while (left := _marked(mark)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, [" ".join(p.cmdline()) for p in left]
