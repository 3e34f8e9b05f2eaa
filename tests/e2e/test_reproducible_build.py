"""Builds are reproducible across processes: the NPU program does not depend on ``PYTHONHASHSEED``.

A set's iteration order changes with the hash seed, so any set (or anything ordered by a hash)
that leaks into the program makes two builds of one model differ byte for byte (the channel
shuffles turned into strided stores were once declared in a set's order). Each build runs in
its own interpreter, with a different hash seed.
"""

from __future__ import annotations

import os
import subprocess
import sys

#: A chain of conv -> relu -> channel shuffle blocks (ShuffleNet's reshape, transpose, reshape):
#: several shuffles in one partition, each stored in shuffled order by its producer.
SCRIPT = """
import hashlib
import numpy as np
from tvm import relax
import tvm_npu
from tvm_npu.core.artifact import Artifact
from tvm_npu.runtime.npu_module import module_blob

R = relax.op
C, HW, G, BLOCKS = 8, 8, 2, 6
rng = np.random.default_rng(0)
bb = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType((1, C, HW, HW), "float32"))
with bb.function("main", [x]):
    with bb.dataflow():
        y = x
        for _ in range(BLOCKS):
            w = relax.const((rng.standard_normal((C, C, 1, 1)) / np.sqrt(C)).astype("float32"))
            y = bb.emit(R.nn.relu(bb.emit(R.nn.conv2d(y, w))))
            y = bb.emit(R.reshape(y, (1, G, C // G, HW, HW)))
            y = bb.emit(R.permute_dims(y, [0, 2, 1, 3, 4]))
            y = bb.emit(R.reshape(y, (1, C, HW, HW)))
        w = relax.const((rng.standard_normal((C, C, 1, 1)) / np.sqrt(C)).astype("float32"))
        gv = bb.emit_output(bb.emit(R.nn.conv2d(y, w)))
    bb.emit_func_output(gv)
_, info = tvm_npu.build_with_info(bb.get(), "npu")
for mod in info.compiled.attrs["external_mods"]:
    art = Artifact.decode(module_blob(mod))
    print(art.symbol, hashlib.sha256(art.program).hexdigest())
"""


def test_program_does_not_depend_on_the_hash_seed() -> None:
    procs = []
    for seed in ("0", "1"):  # these two seeds order the shuffles' set differently
        env = {**os.environ, "PYTHONHASHSEED": seed}
        procs.append(subprocess.Popen([sys.executable, "-P", "-c", SCRIPT], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    digests = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        digests.append(out.splitlines())
    assert digests[0], "no NPU partition was built"
    assert digests[0] == digests[1], f"programs differ between PYTHONHASHSEED=0 and 1: {digests}"
