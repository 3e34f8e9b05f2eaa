"""A TVM RPC server that measures NPU tuning artifacts for tuning jobs on other machines.

    python -m tvm_npu.tuning.rpc_server --tracker HOST:PORT --key npu-sim [--host 0.0.0.0] [--port 9090 --port-end 9199]

It is TVM's own ``tvm.rpc.Server`` with :data:`tvm_npu.tuning.measure.MEASURE_FUNC` registered as a
global function by ``server_init_callback`` (a TVM RPC server only serves global functions),
registered with the tracker under ``key``, so that :func:`tvm_npu.tuning.measure.rpc_runner` (meta_schedule's
``RPCRunner``) on the tuning machine finds it. Each session (one measurement) runs in a process
forked from the server; a session longer than the client's timeout is killed by the server.

Like any TVM RPC server it accepts file uploads and calls from anyone who reaches its port:
run it on a trusted network only.

:class:`LocalCluster` starts a tracker and servers on this machine (tests, benchmarks, a first try).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import tvm_ffi

from tvm_npu.tuning.measure import (
    DEFAULT_KEY,
    MEASURE_FUNC,
    check_tracker,
    free_servers,
    measure_artifact,
    parse_host_port,
)


class LocalCluster:
    """A tracker and RPC servers on this machine, for tests, benchmarks and trying distributed
    tuning on one machine; a context manager whose value is the cluster (``.address`` is HOST:PORT).

    Every process runs in its own process group and is stopped by group: a TVM server forks a
    process per session and keeps a popen worker, which a plain kill of the server leaves running.
    Each process logs to ``<log_dir>/<name>.log``.
    """

    def __init__(self, servers: int = 2, key: str = DEFAULT_KEY, *, host: str = "127.0.0.1",
                 log_dir: str | os.PathLike | None = None, start_timeout_sec: float = 120.0) -> None:
        self.key = key
        self.host = host
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="npu_rpc_"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.start_timeout_sec = start_timeout_sec
        self.procs: dict[str, subprocess.Popen] = {}
        self.port = free_port(host)
        self.address = f"{host}:{self.port}"
        self._n_servers = servers

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
            self.wait_servers(self._n_servers)
        except BaseException:
            self.stop()
            raise
        return self

    def start(self) -> None:
        """Start the tracker and the servers; returns once the servers are starting (see :meth:`wait_servers`)."""
        self._spawn("tracker", "tvm.exec.rpc_tracker", "--host", self.host, "--port", str(self.port),
                    "--port-end", str(self.port + 1))
        for i in range(self._n_servers):
            self.start_server(f"server{i}")

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self, name: str) -> str:
        """What process ``name`` (tracker, server0, ...) has logged so far."""
        return (self.log_dir / f"{name}.log").read_text()

    def start_server(self, name: str) -> subprocess.Popen:
        """Start a server named ``name`` once the tracker listens (a server refuses to start without one)."""
        self.wait_for(lambda: _listens(self.host, self.port), "the tracker to listen")
        port = free_port(self.host)
        return self._spawn(name, "tvm_npu.tuning.rpc_server", "--tracker", self.address, "--key", self.key,
                           "--host", self.host, "--port", str(port), "--port-end", str(port + 1))

    def wait_servers(self, n: int) -> None:
        """Wait until the tracker knows exactly ``n`` servers with the key."""
        self.wait_for(lambda: free_servers(self.host, self.port, self.key) == n, f"{n} servers to register")

    def kill(self, name: str) -> None:
        """Kill process ``name`` and everything it started."""
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):  # already gone
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop(self) -> None:
        for name in self.procs:
            self.kill(name)

    def _spawn(self, name: str, module: str, *args: str) -> subprocess.Popen:
        with (self.log_dir / f"{name}.log").open("a") as log:
            self.procs[name] = subprocess.Popen([sys.executable, "-m", module, *args], stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True)
        return self.procs[name]

    def wait_for(self, ready: Callable[[], bool], what: str) -> None:
        """Poll ``ready`` until true; an error naming ``what`` if a process died or time ran out."""
        deadline = time.monotonic() + self.start_timeout_sec
        while not ready():
            for name, p in self.procs.items():
                if p.poll() is not None and p.returncode != -signal.SIGKILL:
                    raise RuntimeError(f"{name} exited with {p.returncode} while waiting for {what}: "
                                       f"{self.log(name)[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} after {self.start_timeout_sec} s (logs in {self.log_dir})")
            time.sleep(0.2)


def free_port(host: str) -> int:
    """A port nothing listens on now (the OS's choice)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _listens(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True


def register_measure() -> None:
    """``server_init_callback``: make the measuring function callable through the RPC session."""
    tvm_ffi.register_global_func(MEASURE_FUNC, measure_artifact, override=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tvm_npu.tuning.rpc_server", description=__doc__.split("\n\n")[0])
    p.add_argument("--tracker", required=True, help="address of the RPC tracker, HOST:PORT (e.g. 10.0.0.2:9190)")
    p.add_argument("--key", default=DEFAULT_KEY, help=f"device key to register under (default {DEFAULT_KEY})")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=9090, help="first port to try (default 9090)")
    p.add_argument("--port-end", type=int, default=9199, help="end of the port range, exclusive (default 9199)")
    p.add_argument("--custom-addr", default=None,
                   help="address to report to the tracker when the clients must use another than the one it sees")
    p.add_argument("--silent", action="store_true", help="log errors only")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if not args.key or ":" in args.key:
            raise ValueError(f"key {args.key!r} must be a non-empty name without ':' (e.g. {DEFAULT_KEY})")
        if not 0 < args.port < args.port_end <= 65536:
            raise ValueError(f"port range [{args.port}, {args.port_end}) is not within 1..65535")
        tracker = parse_host_port(args.tracker)
        check_tracker(*tracker)
    except (ValueError, ConnectionError) as e:
        print(f"tvm_npu.tuning.rpc_server: {e}", file=sys.stderr)
        return 2

    from tvm import rpc

    logging.basicConfig(level=logging.ERROR if args.silent else logging.INFO)
    try:
        server = rpc.Server(args.host, args.port, args.port_end, key=args.key, tracker_addr=tracker,
                            custom_addr=args.custom_addr, silent=args.silent, server_init_callback=register_measure)
    except (OSError, ValueError) as e:  # raised in TVM's server process: no free port, bad host
        print(f"tvm_npu.tuning.rpc_server: cannot listen on {args.host} ports [{args.port}, {args.port_end}): {e}",
              file=sys.stderr)
        return 2
    # The server runs in a popen worker that survives us unless killed: stop it on SIGTERM too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if not args.silent:
        print(f"tvm_npu.tuning.rpc_server: serving {MEASURE_FUNC} on {args.host}:{server.port}, "
              f"key {args.key!r}, tracker {args.tracker}", flush=True)
    try:
        server.proc.join()
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
