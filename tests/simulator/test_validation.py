"""Every rule of the static validation names the instruction index, the field and the rule."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from tvm_npu.simulator import (
    BindingError,
    ConfigMismatchError,
    Engine,
    InstructionError,
    ProgramFormatError,
    Simulator,
    TensorKind,
    isa,
)

from tvm_npu.config import DType, HardwareConfig, parse_target

HW = HardwareConfig()
SIM = Simulator(HW)
F32, I8, I32 = DType.FP32, DType.INT8, DType.INT32
Op = isa.Opcode
TENSORS = (
    isa.TensorDecl("x", F32, (16, 16), TensorKind.INPUT),
    isa.TensorDecl("y", F32, (16, 16), TensorKind.OUTPUT),
    isa.TensorDecl("c", I8, (4,), TensorKind.CONSTANT),
)
CONSTANTS = {"c": np.zeros(4, np.int8)}
D3 = (64, 8, 1)
S3 = (1, 8, 8)
TOP = HW.max_sram_bytes


def load(t: int = 0, **kw: object) -> isa.DmaLoad:
    args = dict(tensor=t, dram_offset=0, sram_addr=0, dtype=F32, shape=(1, 4, 16), dram_strides=(0, 16, 1),
                sram_strides=(0, 16, 1))
    return isa.DmaLoad(**{**args, **kw})


def store(**kw: object) -> isa.DmaStore:
    args = dict(tensor=1, dram_offset=0, sram_addr=0, dtype=F32, shape=(1, 4, 16), dram_strides=(0, 16, 1),
                sram_strides=(0, 16, 1))
    return isa.DmaStore(**{**args, **kw})


def matmul(**kw: object) -> isa.MatMul:
    args = dict(a_addr=0, a_strides=(8, 1), b_addr=256, b_strides=(8, 1), c_addr=512, c_strides=(8, 1), m=8, n=8,
                k=8, in_dtype=I8, accumulate=False)
    return isa.MatMul(**{**args, **kw})


def conv(**kw: object) -> isa.Conv:
    args = dict(in_addr=0, in_strides=(64, 8, 1), in_c=2, in_h=8, in_w=8, w_addr=1024, w_strides=(18, 9, 3, 1),
                out_addr=2048, out_strides=(64, 8, 1), out_c=2, out_h=8, out_w=8, kernel_h=3, kernel_w=3,
                stride_h=1, stride_w=1, dilation_h=1, dilation_w=1, pad_top=1, pad_left=1, pad_bottom=1,
                pad_right=1, groups=1, in_dtype=I8, accumulate=False)
    return isa.Conv(**{**args, **kw})


def pool(**kw: object) -> isa.Pool:
    args = dict(in_addr=0, in_strides=D3, in_h=8, in_w=8, out_addr=1024, out_strides=(16, 4, 1), channels=1,
                out_h=4, out_w=4, kernel_h=2, kernel_w=2, stride_h=2, stride_w=2, pad_top=0, pad_left=0,
                pad_bottom=0, pad_right=0, dtype=F32, op=Op.VMAXPOOL, count_include_pad=False)
    return isa.Pool(**{**args, **kw})


def vec(cls: type, **kw: object) -> isa.Instruction:
    base = dict(shape=S3, dst_addr=0, dst_strides=D3, src_addr=256, src_strides=D3)
    return cls(**{**base, **kw})


def requant(**kw: object) -> isa.Instruction:
    base = dict(scale_addr=512, scale_strides=(0, 0, 0), zero_point=0, lo=-128, hi=127, dst_dtype=I8)
    return vec(isa.VecRequant, **{**base, **kw})


# (instruction, field named in the error, a word of the rule)
CASES: dict[str, tuple[Callable[[], isa.Instruction], str, str]] = {
    "dma_bad_tensor": (lambda: load(t=7), "tensor", "not in the program"),
    "dma_dtype_mismatch": (lambda: load(dtype=I8), "dtype", "mismatch"),
    "dma_dram_out_of_bounds": (lambda: load(shape=(1, 17, 16)), "dram_offset", "out of bounds"),
    "dma_dram_offset_past_end": (lambda: load(dram_offset=200), "dram_offset", "out of bounds"),
    "dma_negative_offset": (lambda: load(dram_offset=-1), "dram_offset", "non-negative"),
    "dma_negative_stride": (lambda: load(dram_strides=(0, -16, 1)), "dram_strides", "non-negative"),
    "dma_zero_extent": (lambda: load(shape=(1, 0, 16)), "shape", "positive"),
    "dma_sram_misaligned": (lambda: load(sram_addr=2), "sram_addr", "misaligned"),
    "dma_sram_out_of_bounds": (lambda: load(sram_addr=TOP - 64), "sram_addr", "out of bounds"),
    "dma_sram_negative": (lambda: load(sram_addr=-64), "sram_addr", "out of bounds"),
    "dma_sram_overlap": (lambda: load(sram_strides=(0, 0, 1)), "sram_strides", "distinct"),
    "store_to_input": (lambda: store(tensor=0), "tensor", "OUTPUT or SCRATCH"),
    "store_to_constant": (lambda: store(tensor=2, dtype=I8, shape=(1, 1, 4), dram_strides=(0, 0, 1)), "tensor",
                          "CONSTANT"),
    "store_dram_overlap": (lambda: store(dram_strides=(0, 0, 1)), "dram_strides", "distinct"),
    "matmul_int32_operands": (lambda: matmul(in_dtype=I32), "in_dtype", "tensor-engine type"),
    "matmul_zero_m": (lambda: matmul(m=0), "m", "positive"),
    "matmul_c_misaligned": (lambda: matmul(c_addr=514), "c_addr", "misaligned"),
    "matmul_a_broadcast": (lambda: matmul(a_strides=(0, 1)), "a_strides", "distinct"),
    "matmul_b_out_of_bounds": (lambda: matmul(b_addr=TOP - 32), "b_addr", "out of bounds"),
    "conv_groups": (lambda: conv(groups=3), "in_c", "divisible"),
    "conv_window": (lambda: conv(out_h=9), "out_h", "window"),
    "conv_pad": (lambda: conv(pad_top=3), "pad_top", "dilated kernel"),
    "conv_zero_stride": (lambda: conv(stride_w=0), "stride_w", "positive"),
    "conv_weights_out_of_bounds": (lambda: conv(w_addr=TOP - 16), "w_addr", "out of bounds"),
    "binary_dst_overlap": (lambda: vec(isa.VecBinary, dst_strides=(0, 0, 1), other_addr=512, other_strides=D3,
                                       dtype=F32, op=Op.VADD), "dst_strides", "distinct"),
    "binary_other_out_of_bounds": (lambda: vec(isa.VecBinary, other_addr=TOP - 4, other_strides=D3, dtype=F32,
                                               op=Op.VADD), "other_addr", "out of bounds"),
    "binary_wrong_op": (lambda: vec(isa.VecBinary, other_addr=512, other_strides=D3, dtype=F32, op=Op.VRELU), "op",
                        "not valid"),
    "sigmoid_int": (lambda: vec(isa.VecUnary, dtype=I8, op=Op.VSIGMOID), "dtype", "float"),
    "clip_fraction_int": (lambda: vec(isa.VecClip, dtype=I8, lo=-1.5, hi=6.0), "lo", "integer"),
    "clip_out_of_range": (lambda: vec(isa.VecClip, dtype=I8, lo=0.0, hi=300.0), "hi", "range"),
    "clip_reversed": (lambda: vec(isa.VecClip, dtype=F32, lo=2.0, hi=1.0), "lo", "greater"),
    "clip_nan": (lambda: vec(isa.VecClip, dtype=F32, lo=math.nan, hi=1.0), "lo", "NaN"),
    "scale_int": (lambda: vec(isa.VecScale, dtype=I32, scale=1.0, shift=0.0), "dtype", "float"),
    "scale_inf": (lambda: vec(isa.VecScale, dtype=F32, scale=math.inf, shift=0.0), "scale", "finite"),
    "bias_axis": (lambda: vec(isa.VecBiasAdd, bias_addr=512, axis=3, dtype=F32), "axis", "0, 1 or 2"),
    "requant_dst_type": (lambda: requant(dst_dtype=I32), "dst_dtype", "INT16 or UINT16"),
    "requant_zero_point": (lambda: requant(zero_point=200), "zero_point", "INT8"),
    "requant_uint8_lo": (lambda: requant(lo=-1, hi=255, dst_dtype=DType.UINT8), "lo", "UINT8"),
    "requant_reversed": (lambda: requant(lo=5, hi=4), "lo", "greater"),
    "requant_src_misaligned": (lambda: requant(src_addr=258), "src_addr", "misaligned"),
    "requant_scale_out_of_bounds": (lambda: requant(scale_addr=TOP - 4, scale_strides=D3), "scale_addr",
                                    "out of bounds"),
    "conv_pad_value_float": (lambda: conv(in_dtype=F32, pad_value=1), "pad_value", "must be 0"),
    "conv_pad_value_range": (lambda: conv(in_dtype=DType.UINT8, pad_value=-1), "pad_value", "UINT8"),
    "cast_dst_out_of_bounds": (lambda: vec(isa.VecCast, dst_addr=TOP - 8, src_dtype=I8, dst_dtype=F32),
                               "dst_addr", "out of bounds"),
    "pool_pad": (lambda: pool(pad_left=2), "pad_left", "smaller than the kernel"),
    "pool_window": (lambda: pool(out_w=5), "out_w", "window"),
    "signal_sem": (lambda: isa.Signal(Engine.VECTOR, HW.num_semaphores), "sem", "does not exist"),
    "wait_negative_sem": (lambda: isa.Wait(Engine.VECTOR, -1), "sem", "does not exist"),
    "end_in_the_middle": (lambda: isa.End(), "opcode", "last instruction"),
    "wrong_tuple_arity": (lambda: matmul(a_strides=(8,)), "a_strides", "tuple of 2 ints"),
    "int_as_dtype": (lambda: matmul(in_dtype=0), "in_dtype", "DType"),
    "float_as_int": (lambda: matmul(m=8.0), "m", "an int"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_rule(case: str) -> None:
    make, field, words = CASES[case]
    good = isa.Signal(Engine.DMA_LOAD, 0)
    program = isa.Program(HW.config_hash, TENSORS, (good, make(), good, isa.End()), CONSTANTS)
    with pytest.raises(InstructionError) as err:
        SIM.load(program)
    assert (err.value.index, err.value.field) == (1, field), str(err.value)
    assert words in err.value.rule
    assert "instruction #1 " in str(err.value) and f"field '{field}'" in str(err.value)


def test_the_good_instructions_of_the_cases_are_valid() -> None:
    """The case builders differ from a valid instruction only in the field under test."""
    valid = [load(), store(), matmul(), conv(), pool(), vec(isa.VecCast, src_dtype=I8, dst_dtype=F32)]
    program = isa.Program(HW.config_hash, TENSORS, (*valid, isa.End()), CONSTANTS)
    SIM.load(program)


def test_program_must_end_with_end() -> None:
    with pytest.raises(InstructionError, match="last instruction must be END") as err:
        SIM.load(isa.Program(HW.config_hash, TENSORS, (isa.Signal(Engine.VECTOR, 0),), CONSTANTS))
    assert err.value.index == 0
    with pytest.raises(InstructionError, match="empty"):
        SIM.load(isa.Program(HW.config_hash, TENSORS, (), CONSTANTS))


def test_not_a_record() -> None:
    with pytest.raises(InstructionError, match="not an NPU instruction"):
        SIM.load(isa.Program(HW.config_hash, TENSORS, ("MATMUL", isa.End()), CONSTANTS))  # type: ignore[arg-type]


def test_program_for_another_configuration() -> None:
    other = parse_target("npu -max-sram-bytes=65536").hw
    program = isa.Program(other.config_hash, TENSORS, (isa.End(),), CONSTANTS)
    with pytest.raises(ConfigMismatchError, match="recompile"):
        SIM.load(program)
    loaded = Simulator(other).load(program)
    with pytest.raises(ConfigMismatchError):
        SIM.run(loaded, timing_only=True)


def test_constant_without_data() -> None:
    with pytest.raises(ProgramFormatError, match="constant 'c'"):
        SIM.load(isa.Program(HW.config_hash, TENSORS, (isa.End(),), {}))


def test_sram_access_at_the_very_end_is_valid() -> None:
    program = isa.Program(HW.config_hash, TENSORS, (load(sram_addr=TOP - 256), isa.End()), CONSTANTS)
    assert SIM.run(program, timing_only=True).stats.sram_high_water == TOP


PROGRAM = isa.Program(HW.config_hash, TENSORS, (load(), isa.End()), CONSTANTS)
X = np.zeros((16, 16), np.float32)


@pytest.mark.parametrize(
    ("feeds", "words"),
    [
        ({}, "'x' (FP32 (16, 16)) was not supplied"),
        ({"x": X.astype(np.float64)}, "'x' must be a numpy array of float32"),
        ({"x": X[:8]}, "(16, 16)"),
        ({"x": X.tolist()}, "got list"),
        ({"x": X, "q": X}, "['q'] are not INPUT or OUTPUT"),
        ({"x": X, "c": np.zeros(4, np.int8)}, "['c'] are not INPUT or OUTPUT"),
        ({"x": X, "y": np.zeros((16, 32), np.float32)[:, ::2]}, "C-contiguous"),
    ],
)
def test_binding_errors_name_the_tensor(feeds: dict[str, object], words: str) -> None:
    with pytest.raises(BindingError) as err:
        SIM.run(PROGRAM, feeds)  # type: ignore[arg-type]
    assert words in str(err.value)


def test_non_program_input() -> None:
    with pytest.raises(ProgramFormatError):
        SIM.load(b"garbage")
    with pytest.raises(ProgramFormatError, match="expected a Program"):
        SIM.load(12)  # type: ignore[arg-type]


def test_instruction_too_large_for_the_host_is_an_instruction_error() -> None:
    """A legal conv whose zero-padded tile (2**30 x 2**15 float64: 256 TiB, past any address space) cannot exist."""
    d, w = 2**30, 2**15
    conv_ = conv(in_strides=(w, w, 1), in_c=1, in_h=1, in_w=w, w_strides=(2, 2, 1, 1), out_c=1, out_h=1,
                 out_w=w, out_strides=(w, w, 1), kernel_h=2, kernel_w=1, dilation_h=d, pad_top=d,
                 pad_left=0, pad_bottom=0, pad_right=0, w_addr=w, out_addr=2 * w)
    program = isa.Program(HW.config_hash, TENSORS, (conv_, isa.End()), CONSTANTS)
    assert SIM.run(program, timing_only=True).stats.total_cycles > 0
    with pytest.raises(InstructionError, match="too large to simulate") as err:
        SIM.run(program, {"x": X})
    assert (err.value.index, err.value.field) == (0, "operands")
