"""What makes the codegen fast must not change what it emits: the per-signature compile cache
(identical operators are scheduled, lowered and walked once) and the box test of DRAM overlaps in
the semaphore pass."""

from __future__ import annotations

import itertools
import math
import os
import random
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import conv, eltwise, matmul
from tvm_npu.codegen import operator
from tvm_npu.codegen.operator import canonical, compile_operator, standalone_program
from tvm_npu.codegen.sync import _Dram, box, shares
from tvm_npu.codegen.worker import compile_all
from tvm_npu.simulator import ProgramBuilder, isa
from tvm_npu.simulator.builder import row_major
from tvm_npu.simulator.encoding import encode_program
from tvm_npu.simulator.hazards import overlap
from tvm_npu.tir_schedules import tile_search

from tvm_npu.config import CompilerOptions, DType, HardwareConfig
from tvm_npu.core.ops import spec_key
from tvm_npu.core.tiles import ConvTile, MatmulTile, Order
from tvm_npu.core.views import map_refs

HW = HardwareConfig()
TILE = ConvTile(toc=16, toh=4, tow=8, tic=16, order=Order.A_STATIONARY, stages=2)


def _renamed(spec, suffix: str):
    return replace(map_refs(spec, lambda t: replace(t, name=t.name + suffix)), name=spec.name + suffix)


def _body(program: isa.Program) -> tuple:
    return encode_program(replace(program, tensors=tuple(replace(t, name="") for t in program.tensors)))


def test_identical_operators_compile_once() -> None:
    a = conv(16, 16, 8, epi=("bias", "add", "relu"))
    b = _renamed(a, "_second_block")
    operator._COMPILED.clear()
    first, _ = standalone_program(a, TILE, HW)
    second, _ = standalone_program(b, TILE, HW)
    assert len(operator._COMPILED) == 1
    assert [t.name for t in second.tensors] != [t.name for t in first.tensors]
    assert _body(first) == _body(second)


def test_cached_program_equals_uncached() -> None:
    """The dump path compiles under the operator's own names, bypassing the cache."""
    spec = matmul(20, 24, 40, epi=("bias", "gelu"))
    tile = MatmulTile(tm=16, tn=16, tk=16, stages=3)

    def program(dump) -> isa.Program:
        asm = ProgramBuilder(HW)
        for t in (*spec.inputs, spec.out):
            asm.declare(t.name, t.shape, t.dtype, isa.TensorKind.INPUT if t in spec.inputs else isa.TensorKind.OUTPUT)
        compile_operator(asm, spec, tile, 0, dump)
        return asm.build()

    dumped: list[str] = []
    assert encode_program(program(lambda stage, _text: dumped.append(stage))) == encode_program(program(None))
    assert dumped  # the first one really took the uncached path


def test_same_tensor_twice_is_another_signature() -> None:
    """``x + x`` and ``x + y`` schedule differently (one load or two): their canonical forms differ."""
    spec = conv(16, 16, 8, epi=("add",))
    step = spec.epilogue[0]
    same = replace(spec, epilogue=(replace(step, operand=replace(step.operand, name=spec.out.name)),))
    assert canonical(spec)[0] != canonical(same)[0]
    assert canonical(spec)[0] == canonical(_renamed(spec, "_x"))[0]


def _random_access(rng: random.Random, shape: tuple[int, ...]) -> isa.Access:
    strides, size = row_major(shape), math.prod(shape)
    while True:
        dims = []
        for _ in range(rng.randint(1, 3)):
            along = strides[rng.randrange(len(shape))] * rng.choice((1, 1, 2, 3))
            s = along if rng.random() < 0.7 else rng.randint(0, size)  # mostly along an axis, some anywhere
            dims.append((rng.randint(1, 4), s))
        base = rng.randrange(size)
        if base + sum((n - 1) * s for n, s in dims) < size:
            return isa.Access(isa.Space.DRAM, base, tuple(n for n, _ in dims), tuple(s for _, s in dims), DType.FP32,
                              True, True, False, "dram", "dram_strides", 0)


def test_box_overlap_is_exact() -> None:
    """Against the element sets, on random strided accesses (boxes and not) of random tensors."""
    rng = random.Random(7)
    boxed = 0
    for _ in range(3000):
        shape = tuple(rng.randint(1, 6) for _ in range(rng.randint(1, 4)))
        x, y = (_random_access(rng, shape) for _ in range(2))
        dx, dy = (_Dram(a, isa.Engine.DMA_LOAD, 0, box(a, shape), a.extent) for a in (x, y))
        for d in (dx, dy):
            if d.box is not None:
                boxed += 1
                coords = itertools.product(*[range(s, s + n * k, k) for s, k, n in d.box])
                assert {sum(map(math.prod, zip(c, row_major(shape), strict=True))) for c in coords} == set(
                    d.acc.units().tolist())
        assert shares(dx, dy) == (overlap(x, y) is not None), (shape, x, y)
    assert boxed > 2000  # most accesses are boxes: the fast path is what was tested


def test_box_of_merged_rows() -> None:
    """A DMA run over whole rows (dims merged) is split into one progression per tensor axis."""
    acc = isa.Access(isa.Space.DRAM, 2 * 48, (1, 1, 96), (0, 0, 1), DType.FP32, True, False, False, "d", "s", 0)
    assert box(acc, (4, 6, 8)) == ((2, 1, 2), (0, 1, 6), (0, 1, 8))
    assert box(replace(acc, base=1), (4, 6, 8)) is None  # starts inside a row: not a box


def _worker_processes() -> list[int]:
    """This process's children that are codegen workers (Linux /proc)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"tvm_npu.codegen.worker" in cmd:
            pids.append(int(stat.parent.name))
    return pids


def test_worker_results_equal_in_process() -> None:
    """A worker process's compilation emits the same bytes as this process's; a spec that fails there
    is left to this process (which raises its error); no worker outlives the call."""
    specs = [conv(16, 16, 8, epi=("bias", "relu")), matmul(20, 24, 40, epi=("bias", "gelu"))]
    tiles = [TILE, MatmulTile(tm=16, tn=16, tk=16, stages=3)]
    bad = (canonical(specs[1])[0], TILE)  # a conv tile for a matmul: its template fails
    keys = [(canonical(s)[0], t) for s, t in zip(specs, tiles, strict=True)]
    results = compile_all([*keys, bad], 1, None)
    assert bad not in results and set(results) == set(keys)
    with pytest.raises(AttributeError, match="tm"):  # the template's own error, raised in this process
        operator.compiled(specs[1], TILE)
    if Path("/proc").is_dir():
        assert not _worker_processes()
    for (spec, tile), key in zip(zip(specs, tiles, strict=True), keys, strict=True):
        operator._COMPILED.clear()
        local = encode_program(standalone_program(spec, tile, HW)[0])
        operator._COMPILED.clear()
        operator._COMPILED[key] = results[key]
        assert encode_program(standalone_program(spec, tile, HW)[0]) == local


def test_worker_count_respects_env(monkeypatch) -> None:
    monkeypatch.setenv(operator.WORKERS_ENV, "0")
    assert operator.worker_count(10_000) == 0
    monkeypatch.delenv(operator.WORKERS_ENV)
    assert operator.worker_count(operator.MIN_PER_WORKER - 1) == 0
    assert operator.worker_count(10_000) == (os.cpu_count() or 1) - 1
    monkeypatch.setenv(operator.WORKERS_ENV, "many")
    with pytest.raises(ValueError, match="TVM_NPU_CODEGEN_WORKERS"):
        operator.worker_count(10)


def test_plan_memo_tells_x_plus_x_from_x_plus_y() -> None:
    """``tile_search.choose`` / ``estimate`` memoise by signature: ``x + x`` (one load) must not answer for
    ``x + y`` (two), whose spec_key is the same."""
    two = eltwise((1, 64, 56, 56), "NCHW", ["add"])
    step = two.epilogue[0]
    one = replace(two, epilogue=(replace(step, operand=replace(step.operand, name=two.data.name)),))
    assert spec_key(one) == spec_key(two)
    opts = CompilerOptions()
    first = tile_search.choose(one, HW, opts)
    assert tile_search.choose(two, HW, opts) == tile_search._search(two, HW, opts, HW.max_sram_bytes) != first
    assert tile_search.estimate(two, first, HW) != tile_search.estimate(one, first, HW)
