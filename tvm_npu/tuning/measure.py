"""Measuring compiled NPU code: the artifacts tuning builds and the runners that simulate them.

Tuning (``tvm_npu.tuning.tuner``) follows meta_schedule's split: a builder turns a candidate into an
artifact file, a runner measures artifact files and returns ``run_secs``. An artifact here is an
encoded :class:`~tvm_npu.core.artifact.Artifact` (checksummed, JSON metadata, the program in the
simulator's binary format: never pickle), so it is safe to ship to another machine; it names its
target, so the measuring side needs nothing else. Measuring = the simulator's timing-only run
(deterministic cycles, no numerics), converted to seconds with the target's clock.

Runners: :class:`NpuLocalRunner` (one popen worker per core; meta_schedule's ``LocalRunner`` has
one worker and loads a shared library, which an NPU program is not) and :func:`rpc_runner`
(meta_schedule's ``RPCRunner`` through TVM's tracker, to servers started with
``python -m tvm_npu.tuning.rpc_server``, which register :data:`MEASURE_FUNC`).
"""

from __future__ import annotations

import os
import socket
import struct
import tempfile
import traceback
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerInput, RunnerResult
from tvm.support.popen_pool import PopenPoolExecutor

from tvm_npu.config import parse_target
from tvm_npu.core.artifact import Artifact
from tvm_npu.simulator import Simulator

if TYPE_CHECKING:
    from tvm.rpc import RPCSession
    from tvm.s_tir.meta_schedule.runner import RPCConfig

#: Name of the measuring function as a TVM global (what RPC servers register).
MEASURE_FUNC = "tvm_npu.measure_artifact"
#: File suffix of a tuning artifact.
SUFFIX = ".npua"


def write_artifact(blob: bytes | bytearray, directory: str | os.PathLike | None = None) -> str:
    """Write an encoded artifact to a fresh file (in ``directory`` or a temporary one); its path."""
    folder = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="npu_tune_"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{uuid.uuid4().hex}{SUFFIX}"
    path.write_bytes(blob)
    return str(path)


def measure_blob(blob: bytes | bytearray) -> float:
    """Simulated seconds of one run of an encoded artifact (timing-only: deterministic)."""
    artifact = Artifact.decode(blob)
    hw = parse_target(artifact.target).hw
    stats = Simulator(hw).run(artifact.program, timing_only=True).stats
    return hw.cycles_to_seconds(stats.total_cycles)


def measure_artifact(path: str) -> float:
    """:func:`measure_blob` of an artifact file (what runners and RPC servers call)."""
    return measure_blob(Path(path).read_bytes())


def seconds_to_cycles(seconds: float, target: str) -> int:
    """Inverse of the measurement's conversion, for reports in cycles."""
    return round(seconds * parse_target(target).hw.clock_mhz * 1e6)


def shutdown_pool(pool: PopenPoolExecutor) -> None:
    """Stop ``pool`` and every worker process it started. TVM's ``shutdown`` kills the workers and then
    waits for the jobs still queued, which start them again (left running after it returned): those
    jobs are cancelled first, and any worker a job started meanwhile is killed after."""
    threads = getattr(pool, "_threadpool", None)
    if threads is not None:
        threads.shutdown(wait=False, cancel_futures=True)
    pool.shutdown(wait=True)
    for worker in list(getattr(pool, "_worker_map", {}).values()):
        worker.kill()


def shutdown_runner(runner: object) -> None:
    """Stop the worker processes of a runner made here (:class:`NpuLocalRunner`, :func:`rpc_runner`);
    nothing for another kind of runner."""
    if isinstance(runner, NpuLocalRunner):
        runner.shutdown()
    elif isinstance(getattr(runner, "pool", None), PopenPoolExecutor):
        shutdown_pool(runner.pool)


@derived_object
class _Future(PyRunnerFuture):
    """A popen-pool future as meta_schedule's ``RunnerFuture``; errors become failed results."""

    def __init__(self, future: Future, timeout_sec: float) -> None:
        super().__init__()
        self.future = future
        self.timeout_sec = timeout_sec

    def done(self) -> bool:
        return self.future.done()

    def result(self) -> RunnerResult:
        try:
            return RunnerResult([float(self.future.result())], None)
        except TimeoutError:
            return RunnerResult(None, f"NpuLocalRunner: timeout, killed after {self.timeout_sec} s")
        except Exception as e:
            return RunnerResult(None, f"NpuLocalRunner: {type(e).__name__}: {e}")


@derived_object
class NpuLocalRunner(PyRunner):
    """Measures artifacts in ``workers`` popen processes on this machine (default: one per core).

    A measurement that takes longer than ``timeout_sec`` is killed and recorded as failed.
    """

    def __init__(self, workers: int | None = None, timeout_sec: float = 600.0) -> None:
        super().__init__()
        self.workers = workers or os.cpu_count() or 1
        self.timeout_sec = timeout_sec
        self.pool = PopenPoolExecutor(max_workers=self.workers, timeout=timeout_sec)

    def run(self, runner_inputs: list[RunnerInput]) -> list[PyRunnerFuture]:
        return [_Future(self.pool.submit(measure_artifact, str(r.artifact_path)), self.timeout_sec)
                for r in runner_inputs]

    def shutdown(self) -> None:
        """Stop the worker processes (:func:`shutdown_pool`)."""
        shutdown_pool(self.pool)


# ---------------------------------------------------------------------- RPC
#: Device key the RPC servers register under unless told otherwise.
DEFAULT_KEY = "npu-sim"
#: Seconds a client allows beyond the measurement's own timeout for the tracker, connection and upload.
RPC_SLACK_SEC = 10.0
#: Servers the tracker may name for one measurement before it fails (a named server may have just died).
REQUEST_ATTEMPTS = 5


def _create_session(config: RPCConfig) -> RPCSession:
    """RPCRunner's session from the tracker, with two differences: an error at once when no server
    with the key is left (all died), where the tracker would keep the request waiting for one; and
    a failed attempt (the tracker named a server that just died) leaves nothing behind.

    TVM's ``TrackerSession.request`` retries in a loop that keeps the attempt's error in a local: a
    reference cycle through its frame, whose caller frames (RPCRunner's worker function) hold this
    measurement's session. Until the garbage collector ran, that session stayed open after the
    measurement, its server busy, and the next request waited for the server to time it out.
    """
    host, port, key = config.tracker_host, config.tracker_port, config.tracker_key
    if free_servers(host, port, key) == 0:
        raise RuntimeError(f"no RPC server with key {key!r} is left at the tracker {host}:{port}")
    tracker = config.connect_tracker()
    error = ""
    for _ in range(REQUEST_ATTEMPTS):
        try:
            return tracker.request(key, priority=config.session_priority,
                                   session_timeout=config.session_timeout_sec, max_retry=1)
        except RuntimeError as e:
            traceback.clear_frames(e.__traceback__)  # breaks the cycle (TVM's frame keeps its error)
            error = str(e)
    raise RuntimeError(f"no session from the tracker at {host}:{port} after {REQUEST_ATTEMPTS} attempts: {error}")


def _upload(session: RPCSession, local_path: str, remote_path: str) -> str:
    """Upload an artifact; its path on the server (there is no runtime module to load)."""
    session.upload(local_path, remote_path)
    return session.get_function("tvm.rpc.server.workpath")(remote_path)


def _no_arguments(session: RPCSession, device: object, args_info: object, alloc_repeat: int) -> list:
    """An NPU program carries its own inputs: nothing to allocate on the server."""
    return []


def _run_remote(session: RPCSession, remote_path: str, device: object, evaluator_config: object,
                repeated_args: list) -> list[float]:
    """Measure the uploaded artifact with the server's :data:`MEASURE_FUNC`."""
    return [float(session.get_function(MEASURE_FUNC)(remote_path))]


def _no_cleanup(session: RPCSession | None, remote_path: str | None) -> None:
    """The server deletes a session's work directory when the session ends; RPCRunner's default
    cleanup would add three round trips per measurement and, after a server died, replace the
    measurement's error by its own."""


def rpc_runner(tracker: str, key: str = DEFAULT_KEY, *, workers: int | None = None,
               timeout_sec: float = 600.0) -> PyRunner:
    """meta_schedule's ``RPCRunner`` measuring on every ``tvm_npu.tuning.rpc_server`` registered with ``tracker``
    (``HOST:PORT``) under ``key``, ``workers`` sessions at a time (default: one per such server).

    A server kills a measurement that runs longer than ``timeout_sec``; the client gives up on one
    that has not returned after twice that plus :data:`RPC_SLACK_SEC` (a hung or unreachable server,
    or no server left to take the request). Either way the measurement is a failed result and the
    others go on. Raises ConnectionError if no tracker answers, RuntimeError if it knows no server
    with ``key``.
    """
    from tvm.s_tir.meta_schedule.runner import RPCConfig, RPCRunner

    if timeout_sec <= 0:
        raise ValueError(f"timeout_sec must be positive seconds, got {timeout_sec!r}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be >= 1 (or None: one per server), got {workers!r}")
    host, port = parse_host_port(tracker)
    servers = free_servers(host, port, key)
    if servers == 0:
        raise RuntimeError(f"no RPC server with key {key!r} is registered with the tracker at {tracker}: "
                           f"start one with `python -m tvm_npu.tuning.rpc_server --tracker {tracker} --key {key}`")
    workers = workers or servers
    config = RPCConfig(tracker_host=host, tracker_port=port, tracker_key=key, session_timeout_sec=timeout_sec)
    runner = RPCRunner(config, f_create_session=_create_session, f_upload_module=_upload,
                       f_alloc_argument=_no_arguments, f_run_evaluator=_run_remote, f_cleanup=_no_cleanup,
                       max_workers=workers)
    # RPCRunner's pool waits without limit; a request no server takes (all died) would hang the run.
    shutdown_pool(runner.pool)
    runner.pool = PopenPoolExecutor(max_workers=workers, timeout=2 * timeout_sec + RPC_SLACK_SEC)
    return runner


def parse_host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); ValueError naming the text otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"tracker address {text!r} is not HOST:PORT (e.g. 127.0.0.1:9190)")
    return host, int(port)


def check_tracker(host: str, port: int, timeout_sec: float = 10.0) -> None:
    """ConnectionError (one line) unless a TVM RPC tracker answers at host:port.

    Checked here because TVM's own connect retries a refused connection for 60 s and then fails
    in a server thread, leaving a server process that serves nothing.
    """
    from tvm.rpc import base

    try:
        with socket.create_connection((host, port), timeout=timeout_sec) as sock:
            sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
            reply = base.recvall(sock, 4)
    except OSError as e:
        raise ConnectionError(f"no RPC tracker answers at {host}:{port} ({e.strerror or e}); start one with "
                              f"`python -m tvm.exec.rpc_tracker --host {host} --port {port}`") from None
    if struct.unpack("<i", reply)[0] != base.RPC_TRACKER_MAGIC:
        raise ConnectionError(f"{host}:{port} answers but is not a TVM RPC tracker")


def free_servers(host: str, port: int, key: str) -> int:
    """How many servers with ``key`` the tracker at host:port knows, busy or idle (0 if none)."""
    from tvm import rpc

    check_tracker(host, port)
    summary = rpc.connect_tracker(host, port).summary()
    return sum(1 for s in summary.get("server_info", []) if str(s.get("key", "")).split(":")[-1] == key)


def measure_paths(runner: PyRunner, paths: Sequence[str]) -> list[float | None]:
    """Measure artifact files with ``runner``: seconds per path, None where the measurement failed."""
    futures = runner.run([RunnerInput(p, "cpu", []) for p in paths])
    out: list[float | None] = []
    for f in futures:
        r = f.result()
        out.append(float(r.run_secs[0]) if r.error_msg is None and r.run_secs else None)
    return out
