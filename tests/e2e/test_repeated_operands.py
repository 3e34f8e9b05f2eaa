"""A tensor used as several operands of one operator (``x @ x``, ``x + x``): compiled, loaded once
where the tiles coincide, counted once by the bound, and correct against llvm."""

from __future__ import annotations

import numpy as np
import relax_models as rm
import tvm
from helpers import F32, assert_matches, run_op
from tvm import relax
from tvm_npu.tir_schedules import kind_of, tile_search

import tvm_npu
from tvm_npu.config import CompilerOptions, HardwareConfig
from tvm_npu.core.ops import ElementwiseSpec, EpiKind, Epilogue, MatmulSpec, TensorRef
from tvm_npu.tools.bench import to_numpy


def test_repeated_operands_match_llvm() -> None:
    mod = rm.repeated_operands()
    args = rm.inputs_for(mod)
    ex, info = tvm_npu.build_with_info(mod, "npu")
    assert info.npu_ops.get("relax.matmul") == 1 and not info.host_ops.get("relax.matmul")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    ref = relax.VirtualMachine(tvm_npu.build_reference(mod), tvm.cpu())
    tensors = [tvm.runtime.tensor(a) for a in args]
    for got, want in zip(to_numpy(vm["main"](*tensors)), to_numpy(ref["main"](*tensors)), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_x_plus_x_loads_its_tile_once_and_counts_it_once() -> None:
    x = TensorRef("x", (1, 8, 6, 5), F32, "NCHW")
    spec = ElementwiseSpec("add", TensorRef("y", x.shape, F32, "NCHW"), data=x,
                           epilogue=(Epilogue(EpiKind.ADD, x), Epilogue(EpiKind.RELU)))
    hw = HardwareConfig()
    for stages in (1, 2, 3):
        tile = tile_search.choose(spec, hw, CompilerOptions(pipeline_stages=stages))
        r = run_op(spec, tile, hw)
        assert_matches(r.out, r.ref, f"x + x, {tile}")
        assert r.stats.dma_load_bytes == x.nbytes  # one load per tile, not one per operand
        assert r.sram_peak == tile_search.footprint(spec, tile, hw)
    assert kind_of(spec).needed_bytes(spec) == {"x": x.nbytes}


def test_x_matmul_x_counts_x_once() -> None:
    x = TensorRef("x", (24, 24), F32)
    spec = MatmulSpec("matmul", TensorRef("y", (24, 24), F32), a=x, b=x)
    hw = HardwareConfig()
    r = run_op(spec, tile_search.choose(spec, hw, CompilerOptions()), hw)
    assert_matches(r.out, r.ref, "x @ x")
    assert kind_of(spec).needed_bytes(spec) == {"x": x.nbytes}


def test_x_minus_x_and_max_of_x_and_x_compile() -> None:
    """``x - x`` and ``max(x, x)`` simplify away in TE: they keep an operand buffer of their own
    (the fuzzer found ``x - x`` failing to schedule when it shared the data's)."""
    x = TensorRef("x", (2, 5, 4, 3), F32, "NCHW")
    hw = HardwareConfig()
    for kind in (EpiKind.SUB, EpiKind.MAX, EpiKind.MIN):
        spec = ElementwiseSpec("op", TensorRef("y", x.shape, F32, "NCHW"), data=x, epilogue=(Epilogue(kind, x),))
        r = run_op(spec, tile_search.choose(spec, hw, CompilerOptions()), hw)
        assert_matches(r.out, r.ref, f"x {kind.value} x")
