"""encode/decode round trips: random instructions of every record type, and whole programs."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from programs import kitchen_sink
from tvm_npu.simulator import decode_program, encode_program, isa
from tvm_npu.simulator.encoding import encode_instruction

from tvm_npu.config import DType, HardwareConfig

I32 = st.integers(-(2**31), 2**31 - 1)
_FIELD = {
    "int": I32,
    "bool": st.booleans(),
    "float": st.floats(allow_nan=False),
    "DType": st.sampled_from(list(DType)),
    "Engine": st.sampled_from(list(isa.Engine)),
    "Strides3": st.tuples(I32, I32, I32),
    "Strides4": st.tuples(I32, I32, I32, I32),
    "tuple[int, int]": st.tuples(I32, I32),
}


def _record(opcode: isa.Opcode) -> st.SearchStrategy[isa.Instruction]:
    cls = isa.RECORD_OF[opcode]
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name == "op":
            kwargs["op"] = st.just(opcode)
        elif f.name == "dram_offset":
            kwargs[f.name] = st.integers(-(2**63), 2**63 - 1)
        else:
            kwargs[f.name] = _FIELD[f.type]
    return st.builds(cls, **kwargs)


INSTRUCTIONS = st.sampled_from(sorted(isa.Opcode)).flatmap(_record)


@settings(max_examples=400, deadline=None)
@given(instrs=st.lists(INSTRUCTIONS, min_size=1, max_size=8), config_hash=st.integers(0, 2**64 - 1))
def test_random_instructions_round_trip(instrs: list[isa.Instruction], config_hash: int) -> None:
    tensors = (isa.TensorDecl("t", DType.INT8, (3, 5), isa.TensorKind.INPUT),)
    program = isa.Program(config_hash, tensors, tuple(instrs))
    decoded = decode_program(encode_program(program))
    assert decoded.instructions == program.instructions
    assert decoded.config_hash == config_hash and decoded.tensors == tensors
    for instr in instrs:
        assert encode_instruction(instr)[0] == instr.opcode


def test_program_with_constants_round_trips() -> None:
    hw = HardwareConfig()
    program, _ = kitchen_sink(hw)
    decoded = decode_program(encode_program(program))
    assert decoded.instructions == program.instructions
    assert decoded.tensors == program.tensors
    assert decoded.constants.keys() == program.constants.keys()
    for name, data in program.constants.items():
        np.testing.assert_array_equal(decoded.constants[name], data)
        assert decoded.constants[name].dtype == data.dtype
    assert encode_program(decoded) == encode_program(program)
