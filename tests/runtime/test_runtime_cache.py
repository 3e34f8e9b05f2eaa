"""A process killed while compiling the C++ runtime module leaves no cache a later process would load.

The build runs in a fresh ``TVM_FFI_CACHE_DIR`` (one compile, ~10-25 s): a first process is killed with
its whole process group (ninja and the compiler too) while it compiles; the next one must build and
work. Then the library is cut in half and its ninja record dropped, which is what a linker killed while
writing leaves behind; the next process must relink rather than load it
(see :func:`tvm_npu.runtime.npu_module.load_extension`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds of the C++ runtime module, killed and repeated: the quick tier leaves it out

#: Loads (building if needed) the extension and uses it: a module of kind npu with its symbols.
SCRIPT = ("from tvm_npu.runtime import npu_module as m; "
          "print(m.module_symbols(m.create_module(b'blob', ['f', 'g'])))")


def _run(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)


def test_killed_build_leaves_no_corrupt_cache(tmp_path: Path) -> None:
    env = {**os.environ, "TVM_FFI_CACHE_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-P", "-c", SCRIPT], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("*/build.ninja")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)  # into the compiler
    assert proc.poll() is None, "the build finished before it could be interrupted"
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    (build_dir,) = tmp_path.glob("*/build.ninja")
    build_dir = build_dir.parent
    library = build_dir / "tvm_npu_runtime.so"

    done = _run(env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "['f', 'g']"
    size = library.stat().st_size

    # a link killed mid-write: a partial library, and no record of the step in ninja's log
    library.write_bytes(library.read_bytes()[: size // 2])
    log = build_dir / ".ninja_log"
    log.write_text("".join(line for line in log.read_text().splitlines(keepends=True)
                           if line.rstrip("\n").split("\t")[-2:-1] != [library.name]))
    again = _run(env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.strip() == "['f', 'g']" and library.stat().st_size == size
