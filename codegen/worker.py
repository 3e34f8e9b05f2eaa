"""Codegen worker processes: operators scheduled, lowered and walked in parallel (``precompile``).

A worker is a Python process running :func:`main`, started with :mod:`subprocess` rather than
:mod:`multiprocessing`: a spawned ``multiprocessing`` child imports the parent's main script again,
which re-runs a user's build script that has no ``if __name__ == "__main__"`` guard. Messages are
length-prefixed pickles over the worker's stdin and a duplicate of its stdout (its own stdout goes to
stderr, so nothing TVM prints can corrupt them), exchanged only between this process and the workers it
started: tasks are canonical specs and tiles (plain dataclasses), results :class:`~.compile_op.Compiled` records
(plain data) or None when compiling failed there.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import IO, Any

_HEADER = struct.Struct("<Q")
#: How long the workers may take to finish once this process has run out of operators to compile: far
#: more than any one operator takes; a worker busy longer is stuck, and is killed.
STUCK_SECONDS = 300.0
_READY = "ready"


def _send(stream: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    """The next message, or raise EOFError when the other side has gone."""
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError
    size = _HEADER.unpack(head)[0]
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)  # written by this module's other side only (module docstring)


def compile_all(keys: Sequence[Any], workers: int, compile_one: Callable[..., Any] | None) -> dict[Any, Any]:
    """``compile_one(*key)`` for every key, this process from the end of ``keys`` and ``workers``
    worker processes from its start (``compile_one=None``: the workers alone, as tests check them);
    returns the results by key (a key a worker failed on is left out: the caller compiles it
    in-process, where its error is raised as without workers). The workers are stopped before this
    returns, also when ``compile_one`` raises."""
    todo = deque(range(len(keys)))
    lock = threading.Lock()
    done: dict[Any, Any] = {}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # -c, not -m: the package imports this module before runpy would run it as __main__; -P: the
    # working directory is not on sys.path, where a source checkout's tvm_npu/ would shadow the package
    command = [sys.executable, "-P", "-c", "from tvm_npu.codegen.worker import main; main()"]
    procs = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
             for _ in range(workers)]

    def serve(proc: subprocess.Popen) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            if _receive(proc.stdout) != _READY:
                return
            while True:
                with lock:
                    if not todo:
                        return
                    i = todo.popleft()
                _send(proc.stdin, keys[i])
                result = _receive(proc.stdout)
                if result is not None:
                    done[keys[i]] = result
        except (EOFError, OSError, ValueError, pickle.UnpicklingError):  # (ValueError: its pipe was closed)
            return  # the worker died: its task is compiled by the caller

    threads = [threading.Thread(target=serve, args=(p,), daemon=True) for p in procs]
    try:
        for t in threads:
            t.start()
        while compile_one is not None:
            with lock:
                if not todo:
                    break
                i = todo.pop()
            done[keys[i]] = compile_one(*keys[i])
        deadline = time.monotonic() + STUCK_SECONDS
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
    finally:  # (a worker still busy now is stuck: killed below, its operator compiled by the caller)
        for p in procs:
            if p.stdin is not None:
                p.stdin.close()  # a worker exits at the end of its input
            try:
                p.wait(timeout=0 if any(t.is_alive() for t in threads) else 10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for t in threads:
            if t.ident is not None:
                t.join()  # (returns at once: its worker has exited)
    return done


def main() -> None:
    """The worker: compile each task received and send the result back (None if it failed)."""
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints go to stderr, never into the channel
    from tvm_npu.codegen.compile_op import compile_plain

    _send(channel, _READY)
    tasks = sys.stdin.buffer
    while True:
        try:
            key = _receive(tasks)
        except EOFError:
            return
        _send(channel, compile_plain(*key))
