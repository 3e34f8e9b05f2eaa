"""Compact binary encoding of programs, and its exact inverse.

Layout (little-endian)::

    header   magic "NPUP" | version u16 | reserved u16 | config_hash u64
             | n_tensors u32 | n_instructions u32 | data_bytes u64
    tensors  per tensor: name_len u16, utf-8 name, dtype u8, kind u8, ndim u8, dims u32 x ndim
    code     per instruction: opcode u8, then the record's fields in declaration order
    data     the bytes of every CONSTANT tensor, in table order (row-major)
    trailer  crc32 u32 of everything before it

Field widths come from each record's annotations (see ``_CODECS``), so adding a
field to a record in :mod:`isa` changes the encoding in one place.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from functools import cache

import numpy as np

from tvm_npu.config import DType

from . import isa
from .errors import ProgramFormatError

MAGIC = b"NPUP"
FORMAT_VERSION = 3  # 2: uint8, Conv.pad_value, VecRequant with fp32 multipliers; 3: VDWCONV (and new vector
# ops: VLUT 0x3E, VLOG 0x67, new opcodes that older decoders reject as unknown, so the version stays)
_HEADER = struct.Struct("<4sHHQIIQ")
_TRAILER = struct.Struct("<I")
_TENSOR_HEAD = struct.Struct("<BBB")

# annotation -> (struct code, decoder)
_CODECS: dict[str, tuple[str, type | None]] = {
    "int": ("i", None),
    "bool": ("B", bool),
    "float": ("d", None),
    "DType": ("B", DType),
    "Engine": ("B", isa.Engine),
    "Strides3": ("iii", tuple),
    "Strides4": ("iiii", tuple),
    "tuple[int, int]": ("ii", tuple),
}
# fields that need 64 bits
_WIDE = {"dram_offset": "q"}


@dataclasses.dataclass(frozen=True)
class _Schema:
    fields: tuple[tuple[str, str, type | None, int], ...]  # name, code, decoder, arity
    packer: struct.Struct


@cache
def _schema(cls: type) -> _Schema:
    parts, codes = [], []
    for f in dataclasses.fields(cls):
        if f.name == "op":  # carried by the opcode byte
            continue
        code, conv = _CODECS[f.type]
        code = _WIDE.get(f.name, code)
        parts.append((f.name, code, conv, len(code)))
        codes.append(code)
    return _Schema(tuple(parts), struct.Struct("<" + "".join(codes)))


def encode_instruction(instr: isa.Instruction) -> bytes:
    """Encode one instruction (opcode byte + fixed-width fields)."""
    schema = _schema(type(instr))
    values: list = []
    for name, code, _conv, arity in schema.fields:
        v = getattr(instr, name)
        if arity > 1:
            if len(v) != arity:
                raise ValueError(f"{type(instr).__name__}.{name} needs {arity} values, got {v!r}")
            values.extend(int(x) for x in v)
        elif code == "d":
            values.append(float(v))
        else:
            values.append(int(v))
    try:
        return bytes([int(instr.opcode)]) + schema.packer.pack(*values)
    except struct.error as e:
        raise ValueError(f"{type(instr).__name__} does not fit the encoding: {e}") from None


def _decode_instruction(buf: memoryview, pos: int, index: int) -> tuple[isa.Instruction, int]:
    if pos >= len(buf):
        raise ProgramFormatError(f"truncated program: instruction #{index} starts past the end (byte {pos})")
    code = buf[pos]
    try:
        opcode = isa.Opcode(code)
    except ValueError:
        raise ProgramFormatError(f"instruction #{index} at byte {pos}: unknown opcode 0x{code:02x}") from None
    cls = isa.RECORD_OF[opcode]
    schema = _schema(cls)
    end = pos + 1 + schema.packer.size
    if end > len(buf):
        raise ProgramFormatError(f"truncated program: instruction #{index} ({opcode.name}) needs bytes up to {end}")
    raw = schema.packer.unpack_from(buf, pos + 1)
    kwargs: dict = {}
    i = 0
    for name, _code, conv, arity in schema.fields:
        vals = raw[i : i + arity]
        i += arity
        if arity > 1:
            kwargs[name] = tuple(vals)
            continue
        v = vals[0]
        if conv is bool:
            if v not in (0, 1):
                raise ProgramFormatError(
                    f"instruction #{index} ({opcode.name}): field '{name}' must be 0 or 1, got {v}"
                )
            v = bool(v)
        elif conv is not None:
            try:
                v = conv(v)
            except ValueError:
                raise ProgramFormatError(
                    f"instruction #{index} ({opcode.name}): field '{name}' has invalid code {v}"
                ) from None
        kwargs[name] = v
    if "op" in {f.name for f in dataclasses.fields(cls)}:
        kwargs["op"] = opcode
    return cls(**kwargs), end


def encode_program(program: isa.Program, reserve: int = 0) -> bytearray:
    """Serialise a program (header, tensor table, code, constant data, crc32) into one buffer.

    The constant data (a model's weights) is copied once, straight into the returned
    buffer (a bytearray, so that it is not copied again into an immutable ``bytes``);
    the program starts after ``reserve`` bytes left for a container's header.
    """
    return join_parts(encode_program_parts(program, reserve))


def encode_program_parts(program: isa.Program, reserve: int = 0) -> list[bytearray | np.ndarray | bytes]:
    """:func:`encode_program`'s bytes as consecutive parts, the constant data not copied: a bytearray
    (``reserve`` bytes left for a container's header, then the header, tensor table and code), every
    constant's array as it is (C-contiguous, little-endian: a model's weights stay in the memory of its
    constants, issue 26), the crc32 trailer."""
    table = bytearray()
    arrays = []
    for t in program.tensors:
        name = t.name.encode()
        table += struct.pack("<H", len(name)) + name
        table += _TENSOR_HEAD.pack(int(t.dtype), int(t.kind), len(t.shape))
        table += struct.pack(f"<{len(t.shape)}I", *t.shape)
        if t.kind == isa.TensorKind.CONSTANT:
            arr = np.ascontiguousarray(program.constants[t.name], dtype=t.dtype.np.newbyteorder("<"))
            if arr.shape != tuple(t.shape):
                raise ValueError(f"constant {t.name!r} has shape {arr.shape}, declared {t.shape}")
            arrays.append(arr)
    code = b"".join(encode_instruction(i) for i in program.instructions)
    n_data = sum(a.nbytes for a in arrays)
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, 0, program.config_hash, len(program.tensors),
                        len(program.instructions), n_data)
    first = bytearray(reserve) + head + table + code
    with memoryview(first) as view:
        crc = zlib.crc32(view[reserve:])
    for a in arrays:
        crc = zlib.crc32(part_bytes(a), crc)
    return [first, *arrays, _TRAILER.pack(crc)]


def part_bytes(part: bytearray | np.ndarray | bytes) -> memoryview:
    """The bytes of a part, flat (a 0-d or n-d array as its raw bytes)."""
    return memoryview(part.reshape(-1) if isinstance(part, np.ndarray) else part).cast("B")


def join_parts(parts: list[bytearray | np.ndarray | bytes]) -> bytearray:
    """The parts of :func:`encode_program_parts` (or a container's) as one bytearray, each copied once."""
    out = bytearray(sum(part_bytes(p).nbytes for p in parts))
    pos = 0
    with memoryview(out) as view:
        for part in parts:
            data = part_bytes(part)
            view[pos:pos + data.nbytes] = data
            pos += data.nbytes
    return out


def decode_program(blob: bytes | bytearray | memoryview) -> isa.Program:
    """Parse a serialised program; raises :class:`ProgramFormatError` on any defect."""
    buf = memoryview(bytes(blob))
    if len(buf) < _HEADER.size + _TRAILER.size:
        raise ProgramFormatError(f"truncated program: {len(buf)} bytes is shorter than the header")
    magic, version, _res, config_hash, n_tensors, n_instr, data_len = _HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise ProgramFormatError(f"not an NPU program: magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != FORMAT_VERSION:
        raise ProgramFormatError(f"program format version {version} is not supported; accepted: {FORMAT_VERSION}")
    (crc,) = _TRAILER.unpack_from(buf, len(buf) - _TRAILER.size)
    if zlib.crc32(buf[: len(buf) - _TRAILER.size]) != crc:
        raise ProgramFormatError("corrupted program: crc32 checksum mismatch (truncated or modified)")
    body_end = len(buf) - _TRAILER.size
    pos = _HEADER.size
    tensors = []
    for ti in range(n_tensors):
        try:
            (name_len,) = struct.unpack_from("<H", buf, pos)
            name = bytes(buf[pos + 2 : pos + 2 + name_len]).decode()
            pos += 2 + name_len
            dtype_code, kind_code, ndim = _TENSOR_HEAD.unpack_from(buf, pos)
            pos += _TENSOR_HEAD.size
            shape = struct.unpack_from(f"<{ndim}I", buf, pos)
            pos += 4 * ndim
        except (struct.error, UnicodeDecodeError) as e:
            raise ProgramFormatError(f"tensor table entry #{ti} is malformed or truncated at byte {pos}: {e}") from None
        if pos > body_end:
            raise ProgramFormatError(f"truncated program in tensor table entry #{ti}")
        try:
            decl = isa.TensorDecl(name, DType(dtype_code), tuple(shape), isa.TensorKind(kind_code))
        except ValueError:
            raise ProgramFormatError(
                f"tensor table entry #{ti} ({name!r}): invalid dtype code {dtype_code} or kind code {kind_code}"
            ) from None
        tensors.append(decl)
    if len({t.name for t in tensors}) != len(tensors):
        raise ProgramFormatError("tensor table has duplicate names")
    instructions = []
    for index in range(n_instr):
        instr, pos = _decode_instruction(buf[:body_end], pos, index)
        instructions.append(instr)
    if body_end - pos != data_len:
        raise ProgramFormatError(
            f"data section is {body_end - pos} bytes but the header declares {data_len} (truncated or corrupted)"
        )
    constants = {}
    for t in tensors:
        if t.kind != isa.TensorKind.CONSTANT:
            continue
        n = t.nbytes
        if pos + n > body_end:
            raise ProgramFormatError(f"constant {t.name!r} runs past the end of the data section")
        constants[t.name] = np.frombuffer(buf, dtype=t.dtype.np.newbyteorder("<"), count=t.size, offset=pos).reshape(
            t.shape
        )
        pos += n
    if pos != body_end:
        raise ProgramFormatError(f"{body_end - pos} unexpected bytes after the constant data")
    return isa.Program(config_hash, tuple(tensors), tuple(instructions), constants)
