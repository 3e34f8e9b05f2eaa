"""Random, truncated and mutated programs only ever raise the simulator's own errors.

Mutations change instruction bytes and then recompute the crc32, so the decoder's
field checks and the static validation are exercised, not just the checksum.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from programs import kitchen_sink
from tvm_npu.simulator import Simulator, SimulatorError, decode_program, encode_program, isa
from tvm_npu.simulator.encoding import FORMAT_VERSION, MAGIC

from tvm_npu.config import DType, HardwareConfig
from tvm_npu.testing.workloads import streaming, tiled_matmul

HW = HardwareConfig()
SIM = Simulator(HW)


def _seeds() -> list[tuple[bytes, dict[str, np.ndarray], int, int]]:
    """(encoded program, feeds, first and one-past-last byte of its code section)."""
    rng = np.random.default_rng(0)
    programs = [
        kitchen_sink(HW),
        (streaming(HW, 3, 96, buffers=2, reps=2), {"x": rng.standard_normal((3, 96)).astype(np.float32)}),
        (
            tiled_matmul(HW, 20, 12, 24, DType.INT8, 8, 8, 16),
            {"a": np.ones((20, 24), np.int8), "b": np.ones((24, 12), np.int8)},
        ),
    ]
    seeds = []
    for program, feeds in programs:
        blob = encode_program(program)
        data = sum(t.nbytes for t in program.tensors if t.kind == isa.TensorKind.CONSTANT)
        no_code = encode_program(isa.Program(program.config_hash, program.tensors, (), program.constants))
        seeds.append((blob, feeds, len(no_code) - data - 4, len(blob) - data - 4))
    return seeds


SEEDS = _seeds()


def with_crc(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body))


def outcome(blob: bytes, feeds: dict[str, np.ndarray], timing_only: bool = False) -> str:
    """Run a program; return the simulator error's class name or 'ok'. Anything else propagates and fails."""
    try:
        SIM.run(blob, feeds, timing_only=timing_only)
    except SimulatorError as e:
        return type(e).__name__
    return "ok"


def test_mutated_instruction_bytes_with_valid_crc() -> None:
    rng = np.random.default_rng(1234)
    seen: Counter[str] = Counter()
    for trial in range(900):
        blob, feeds, start, end = SEEDS[trial % len(SEEDS)]
        body = bytearray(blob[:-4])
        for _ in range(rng.integers(1, 4)):
            pos = int(rng.integers(start, end))
            body[pos] = int(rng.integers(0, 256)) if rng.random() < 0.7 else body[pos] ^ (1 << int(rng.integers(8)))
        seen[outcome(with_crc(bytes(body)), feeds, timing_only=bool(trial % 2))] += 1
    # validation, not just the checksum, must have been exercised, and some mutants must still run
    assert seen["InstructionError"] > 100 and seen["ProgramFormatError"] > 10 and seen["ok"] > 10, seen


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, len(SEEDS) - 1),
    edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=6),
)
def test_hypothesis_mutations(seed: int, edits: list[tuple[float, int]]) -> None:
    blob, feeds, start, end = SEEDS[seed]
    body = bytearray(blob[:-4])
    for where, value in edits:
        body[start + int(where * (end - start))] = value
    outcome(with_crc(bytes(body)), feeds)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    outcome(data, {})
    header = struct.pack("<4sHHQIIQ", MAGIC, FORMAT_VERSION, 0, HW.config_hash, 2, 5, 0)
    outcome(with_crc(header + data), {})


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_every_truncation(seed: int) -> None:
    blob, feeds, _, _ = SEEDS[seed]
    for cut in range(0, len(blob), 7):
        assert outcome(blob[:cut], feeds) == "ProgramFormatError"
        assert outcome(with_crc(blob[: max(cut - 4, 0)]), feeds) == "ProgramFormatError"


def test_header_defects_are_format_errors() -> None:
    blob, feeds, _, _ = SEEDS[0]
    body = bytearray(blob[:-4])
    struct.pack_into("<H", body, 4, FORMAT_VERSION + 1)
    with pytest.raises(SimulatorError, match="version"):
        SIM.run(with_crc(bytes(body)), feeds)
    body = bytearray(blob[:-4])
    struct.pack_into("<Q", body, 8, HW.config_hash ^ 1)
    assert outcome(with_crc(bytes(body)), feeds) == "ConfigMismatchError"
    assert outcome(blob[:-1] + bytes([blob[-1] ^ 0xFF]), feeds) == "ProgramFormatError"


INTERESTING = (0, 1, -1, 2, 3, 7, 8, 63, 64, 65, 255, 4096, 65535, 2**20 - 4, 2**20, 2**30, 2**31 - 1, -(2**31))


def test_field_mutations() -> None:
    """Set one or two fields of decoded instructions to edge values; run the Program object directly."""
    rng = np.random.default_rng(99)
    seen: Counter[str] = Counter()
    programs = [(decode_program(blob), feeds) for blob, feeds, _, _ in SEEDS]
    for trial in range(600):
        program, feeds = programs[trial % len(programs)]
        instrs = list(program.instructions)
        for _ in range(int(rng.integers(1, 3))):
            i = int(rng.integers(len(instrs) - 1))
            fields = [f for f in dataclasses.fields(instrs[i]) if f.name != "op"]
            f = fields[int(rng.integers(len(fields)))]
            value = getattr(instrs[i], f.name)
            new = int(rng.choice(INTERESTING)) if rng.random() < 0.6 else int(rng.integers(-5, 300))
            if isinstance(value, tuple):
                k = int(rng.integers(len(value)))
                value = tuple(new if j == k else v for j, v in enumerate(value))
            elif isinstance(value, bool | DType | isa.Engine):
                value = type(value)(int(rng.integers(2 if isinstance(value, bool) else 4)))
            else:
                value = type(value)(new)
            instrs[i] = dataclasses.replace(instrs[i], **{f.name: value})
        mutant = isa.Program(program.config_hash, program.tensors, tuple(instrs), program.constants)
        try:
            SIM.run(mutant, feeds, timing_only=trial % 3 == 0)
            seen["ok"] += 1
        except SimulatorError as e:
            seen[type(e).__name__] += 1
    assert seen["InstructionError"] > 100 and seen["DeadlockError"] > 5 and seen["ok"] > 50, seen
