"""The external codegen ``relax.ext.npu`` that ``relax.transform.RunCodegen`` calls."""

from __future__ import annotations

import json
from pathlib import Path

import tvm
import tvm_ffi
from tvm_npu.tir_schedules.params import tile_from_json

from tvm_npu.config import parse_target
from tvm_npu.runtime_module import create_module

from .partition import compile_partition


def npu_codegen(functions, options, constant_names) -> list[tvm.runtime.Module]:
    """Compile every ``Codegen="npu"`` function into one ``npu`` runtime module each.

    ``options`` (strings only: it crosses the FFI) carries the canonical target string
    (``str(NpuTarget)``), an optional dump directory and optional tuned tiles as JSON
    ``{spec_key: tile}``. Constants are embedded in the programs, so ``constant_names``
    is unused.
    """
    del constant_names
    opts = dict(options.items()) if options is not None else {}
    target = parse_target(str(opts.get("target", "npu")))
    dump = Path(str(opts["dump_dir"])) if opts.get("dump_dir") else None
    tiles = {k: tile_from_json(v) for k, v in json.loads(str(opts.get("tiles", "{}"))).items()}
    modules = []
    for func in functions:
        symbol = str(func.attrs["global_symbol"])
        artifact = compile_partition(func, symbol, target, dump, tiles)
        modules.append(create_module(artifact.encode(), [symbol]))
    return modules


tvm_ffi.register_global_func("relax.ext.npu", npu_codegen, override=True)
