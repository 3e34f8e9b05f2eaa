"""Measuring through TVM's RPC: a tracker and two ``tvm_npu.tuning.rpc_server`` processes on 127.0.0.1
(:class:`~tvm_npu.tuning.rpc_server.LocalCluster`: each process in its own process group, killed by group)."""

from __future__ import annotations

import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import conv, matmul
from tvm import rpc
from tvm.rpc import base
from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerInput, RunnerResult
from tvm_npu.codegen.operator import standalone_program
from tvm_npu.tir_schedules import tile_search

import tvm_npu
from tvm_npu.config import parse_target
from tvm_npu.core.artifact import Artifact
from tvm_npu.models.light import tiny_convnet
from tvm_npu.testing.workloads import streaming
from tvm_npu.tuning import database, rpc_server
from tvm_npu.tuning import tuner as tuning
from tvm_npu.tuning.measure import free_servers, measure_artifact, rpc_runner, write_artifact
from tvm_npu.tuning.rpc_server import LocalCluster, free_port

pytestmark = pytest.mark.slow  # an RPC tracker and servers, tuning over them: the quick tier leaves it out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(2, log_dir=tmp_path_factory.mktemp("rpc_logs"))
    try:
        c.start()  # the servers start while the artifacts compile
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Artifact files of distinct operators and tiles (milliseconds to simulate)."""
    npu = parse_target("npu")
    folder = tmp_path_factory.mktemp("artifacts")
    paths = []
    for spec in (conv(16, 32, 16), conv(32, 32, 8, k=1), matmul(64, 96, 64)):
        for tile, _ in tile_search.legal(spec, npu.hw, npu.options)[:3]:
            program, _ = standalone_program(spec, tile, npu.hw)
            blob = Artifact.pack("op", str(npu), [t.name for t in spec.inputs], [spec.out.name], [], program)
            paths.append(write_artifact(blob, folder))
    return paths


def _slow_artifact(rows: int) -> bytearray:
    """A valid program that takes about ``rows`` / 6000 s to simulate (a long streaming loop)."""
    npu = parse_target("npu")
    return Artifact.pack("stream", str(npu), ["x"], ["y"], [], streaming(npu.hw, rows, 256))


#: The runner's timeout: short, nothing may hang; every measurement but the one meant to time out
#: takes a fraction of it.
TIMEOUT_SEC = 4


@pytest.fixture(scope="module")
def runner(cluster: LocalCluster) -> PyRunner:
    cluster.wait_servers(2)
    return rpc_runner(cluster.address, timeout_sec=TIMEOUT_SEC)


def _results(runner: PyRunner, paths: list[str]) -> list[RunnerResult]:
    return [f.result() for f in runner.run([RunnerInput(p, "cpu", []) for p in paths])]


def test_rpc_measurements_equal_local_ones(cluster: LocalCluster, artifacts: list[str], runner: PyRunner,
                                           tmp_path: Path) -> None:
    broken = bytearray(Path(artifacts[0]).read_bytes())
    broken[-1] ^= 0xFF  # one flipped bit in the program: the checksum no longer matches
    bad = write_artifact(broken, tmp_path)
    results = _results(runner, [*artifacts, bad])
    rpc = [float(r.run_secs[0]) for r in results[:-1]]
    assert rpc == [measure_artifact(p) for p in artifacts]  # bit for bit: the simulator is deterministic
    assert len(set(rpc)) > 1  # distinct tiles, distinct times: not one value repeated
    assert results[-1].run_secs is None and "checksum mismatch" in results[-1].error_msg


def test_a_measurement_over_its_timeout_fails_and_the_others_go_on(
        cluster: LocalCluster, artifacts: list[str], runner: PyRunner, tmp_path: Path) -> None:
    slow = write_artifact(_slow_artifact(50000), tmp_path)  # twice the timeout and more
    results = _results(runner, [slow, *artifacts[:2]])
    assert results[0].run_secs is None and "Timeout" in results[0].error_msg
    # the server killed the session (not the client giving up, which reads the same)
    assert any("timeout in RPC session" in cluster.log(name) for name in ("server0", "server1"))
    assert [float(r.run_secs[0]) for r in results[1:]] == [measure_artifact(p) for p in artifacts[:2]]


def test_a_server_the_tracker_names_but_that_is_gone_costs_a_retry_and_holds_nothing(
        cluster: LocalCluster, artifacts: list[str], runner: PyRunner) -> None:
    # A stale entry, as when a server dies just after offering itself: a port nothing listens on.
    with socket.create_connection((cluster.host, cluster.port)) as tracker:
        tracker.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        base.recvall(tracker, 4)
        for message in ([base.TrackerCode.UPDATE_INFO, {"key": f"server:{cluster.key}", "addr": [None, 1]}],
                        [base.TrackerCode.PUT, cluster.key, [free_port(cluster.host), f"{cluster.key}:gone"], None]):
            base.sendjson(tracker, message)
            assert base.recvjson(tracker) == base.TrackerCode.SUCCESS
        results = _results(runner, artifacts[:6])  # the third request is offered the stale entry
        assert [float(r.run_secs[0]) for r in results] == [measure_artifact(p) for p in artifacts[:6]]
    # Both servers are free again at once: no session of a finished measurement is left open
    # (it was, until the session timed out, when the failed attempt's frames were kept alive).
    deadline = time.monotonic() + TIMEOUT_SEC / 2
    while _idle_servers(cluster) < 2:
        assert time.monotonic() < deadline, "a server is still held by a finished measurement's session"
        time.sleep(0.1)


def _idle_servers(cluster: LocalCluster) -> int:
    return rpc.connect_tracker(cluster.host, cluster.port).summary()["queue_info"][cluster.key]["free"]


def test_a_server_killed_mid_run_fails_only_its_measurement(
        cluster: LocalCluster, runner: PyRunner, tmp_path: Path) -> None:
    served = cluster.log("server1").count("start serving")
    blob = _slow_artifact(2500)
    slow = [write_artifact(blob, tmp_path) for _ in range(4)]  # ~0.5 s each, in turn on both servers
    futures = runner.run([RunnerInput(p, "cpu", []) for p in slow])
    cluster.wait_for(lambda: cluster.log("server1").count("start serving") > served, "server1 to take a measurement")
    time.sleep(0.15)  # upload done, measuring
    cluster.kill("server1")
    results = [f.result() for f in futures]
    failed = [r for r in results if r.run_secs is None]
    assert len(failed) == 1 and failed[0].error_msg
    expected = measure_artifact(slow[0])
    assert all(float(r.run_secs[0]) == expected for r in results if r.run_secs is not None)
    assert free_servers(cluster.host, cluster.port, cluster.key) == 1  # the tracker dropped the dead server


def test_no_server_with_the_key_is_a_clear_error(cluster: LocalCluster) -> None:
    with pytest.raises(RuntimeError, match=r"no RPC server with key 'no-such-npu'.*tvm_npu\.tuning\.rpc_server"):
        rpc_runner(cluster.address, "no-such-npu")


def test_unreachable_or_malformed_tracker_address_is_a_one_line_error(capsys: pytest.CaptureFixture) -> None:
    nobody = f"127.0.0.1:{free_port('127.0.0.1')}"
    with pytest.raises(ConnectionError, match=f"no RPC tracker answers at {nobody}"):
        rpc_runner(nobody)
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        rpc_runner("localhost")
    assert rpc_server.main(["--tracker", nobody]) == 2
    err = capsys.readouterr().err
    assert f"no RPC tracker answers at {nobody}" in err and err.count("\n") == 1


# ------------------------------------------------------------------ tuning through RPC (meta_schedule: slow)
#: meta_schedule's global trial budget of these runs (beyond each operator's cost-model tile): two
#: batches, the second chosen with the cost model trained on the first.
TRIALS = 32


def _best(work_dir: Path) -> dict[str, tuple[float, object, int]]:
    return {k: (b.seconds, b.tile, b.trials) for k, b in tuning.best_records(work_dir, "npu").items()}


@pytest.mark.benchmark
def test_tuning_through_rpc_gives_the_same_best_records_as_local(tmp_path: Path) -> None:
    local, remote = tmp_path / "local", tmp_path / "rpc"
    tvm_npu.tune(tiny_convnet(), "npu", local, trials=TRIALS, workers=2, progress=False)
    with LocalCluster(2, log_dir=tmp_path / "logs") as cluster:
        tvm_npu.tune(tiny_convnet(), "npu", remote, trials=TRIALS, rpc=cluster.address, progress=False)
        assert all("start serving" in cluster.log(f"server{i}") for i in range(2))  # both servers measured
    assert len(_best(local)) >= 4
    assert _best(remote) == _best(local)  # per operator: best seconds, its tile, successful trials
    assert database.load_choices(remote, "npu") == database.load_choices(local, "npu")


@pytest.mark.benchmark
def test_a_server_killed_mid_tuning_leaves_a_database_that_loads_and_applies(tmp_path: Path) -> None:
    work = tmp_path / "tune"
    with LocalCluster(2, log_dir=tmp_path / "logs") as cluster:
        def kill_after_two_sessions() -> None:
            cluster.wait_for(lambda: cluster.log("server1").count("start serving") >= 2, "server1 to measure")
            cluster.kill("server1")

        killer = threading.Thread(target=kill_after_two_sessions)
        killer.start()
        results = tvm_npu.tune(tiny_convnet(), "npu", work, trials=TRIALS, rpc=cluster.address, progress=False)
        killer.join()
        assert cluster.procs["server1"].returncode == -signal.SIGKILL  # killed while tuning ran
        assert free_servers(cluster.host, cluster.port, cluster.key) == 1
    assert results and tuning.open_database(work, create=False).get_all_tuning_records()
    best = tuning.best_tiles(work, "npu")
    assert len(best) >= 4
    _, info = tvm_npu.build_with_info(tiny_convnet(), "npu", database=work)
    assert info.tuned_ops > 0  # the database applies
