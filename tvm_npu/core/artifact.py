"""The compiled-partition artifact: one NPU program plus what is needed to call and report it.

Held as the byte blob of an ``npu`` runtime module, so it must be self-describing and
safe to read from an untrusted file: a checksummed header, JSON metadata (never
pickle) and the program in the simulator's binary format::

    magic "NPUA" | version u16 | reserved u16 | meta_len u32 | crc32 u32 | meta (utf-8 JSON) | program
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import asdict, dataclass, field

import numpy as np

from tvm_npu.simulator import isa
from tvm_npu.simulator.encoding import encode_program_parts, join_parts, part_bytes

MAGIC = b"NPUA"
VERSION = 1
_HEAD = struct.Struct("<4sHHII")


class ArtifactError(ValueError):
    """A compiled NPU artifact is damaged, truncated or of another version."""


@dataclass(frozen=True)
class LayerInfo:
    """One NPU operator of a partition, for reports: what it is and which instructions are its."""

    name: str
    op: str
    description: str
    tile: dict
    first: int  # instruction index range [first, last)
    last: int
    macs: int
    dtype: str
    layout_in: str
    layout_out: str
    # compulsory DRAM bytes: each distinct tensor once, only the elements the operator needs,
    # nothing for a tensor kept on chip (the per-layer bound's DRAM part)
    input_bytes: int
    weight_bytes: int
    output_bytes: int
    sram_bytes: int
    predicted_cycles: float
    fused: list[str] = field(default_factory=list)
    #: The instruction ranges ``[first, last)`` that are this layer's when they are not one range (the
    #: members of a layer group take turns, slice by slice); empty: ``[first, last)`` alone.
    spans: list[list[int]] = field(default_factory=list)
    #: The layer group this layer belongs to (an index within its partition), -1 for none.
    group: int = -1

    def ranges(self) -> list[tuple[int, int]]:
        return [(a, b) for a, b in self.spans] if self.spans else [(self.first, self.last)]


@dataclass(frozen=True)
class GroupInfo:
    """A layer group of a partition (``-fusion=3``), for reports: layers ``first..last`` run slice by slice."""

    first: int
    last: int
    rows: int  # output rows per slice
    slices: int
    sram_bytes: int  # the intermediates' regions plus the largest step's buffers
    #: DRAM bytes ``-fusion=1`` moves for the group's intermediates (each stored once, loaded by each reader)
    saved_bytes: int
    predicted_cycles: float


@dataclass(frozen=True)
class Artifact:
    """A partition as compiled: its symbol, target, DPS signature, layers and program bytes."""

    symbol: str
    target: str
    inputs: list[str]
    outputs: list[str]
    layers: list[LayerInfo]
    program: bytes | bytearray
    groups: list[GroupInfo] = field(default_factory=list)

    def encode(self) -> bytes:
        meta = _meta(self.symbol, self.target, self.inputs, self.outputs, self.layers, self.groups)
        crc = zlib.crc32(self.program, zlib.crc32(meta))  # no temporary copy of the program
        return b"".join((_HEAD.pack(MAGIC, VERSION, 0, len(meta), crc), meta, self.program))

    @staticmethod
    def pack(symbol: str, target: str, inputs: list[str], outputs: list[str], layers: list[LayerInfo],
             program: isa.Program, groups: list[GroupInfo] | None = None) -> bytearray:
        """The encoded artifact of a program, written in one buffer: the program (with a
        model's weights) is serialised straight behind the metadata, never copied whole."""
        return join_parts(Artifact.pack_parts(symbol, target, inputs, outputs, layers, program, groups))

    @staticmethod
    def pack_parts(symbol: str, target: str, inputs: list[str], outputs: list[str], layers: list[LayerInfo],
                   program: isa.Program, groups: list[GroupInfo] | None = None
                   ) -> list[bytearray | np.ndarray | bytes]:
        """:meth:`pack`'s bytes as consecutive parts (``encode_program_parts``): the constants' arrays are
        parts as they are, so a runtime module made of the parts holds a model's weights once."""
        meta = _meta(symbol, target, inputs, outputs, layers, groups or [])
        head = _HEAD.size + len(meta)
        parts = encode_program_parts(program, reserve=head)
        first = parts[0]
        first[_HEAD.size:head] = meta
        with memoryview(first) as view:
            crc = zlib.crc32(view[_HEAD.size:])
        for part in parts[1:]:
            crc = zlib.crc32(part_bytes(part), crc)
        _HEAD.pack_into(first, 0, MAGIC, VERSION, 0, len(meta), crc)
        return parts

    @classmethod
    def decode(cls, blob: bytes | bytearray) -> Artifact:
        if len(blob) < _HEAD.size:
            raise ArtifactError(f"NPU artifact truncated: {len(blob)} bytes is shorter than its header")
        magic, version, _, meta_len, crc = _HEAD.unpack_from(blob, 0)
        if magic != MAGIC:
            raise ArtifactError(f"not an NPU artifact (magic {magic!r}, expected {MAGIC!r})")
        if version != VERSION:
            raise ArtifactError(f"NPU artifact version {version} is not supported; accepted: {VERSION}")
        body = blob[_HEAD.size :]
        if len(body) < meta_len or zlib.crc32(body) != crc:
            raise ArtifactError("NPU artifact is corrupted (checksum mismatch or truncated)")
        try:
            meta = json.loads(body[:meta_len].decode())
            layers = [LayerInfo(**x) for x in meta["layers"]]
            groups = [GroupInfo(**x) for x in meta.get("groups", [])]
            return cls(meta["symbol"], meta["target"], list(meta["inputs"]), list(meta["outputs"]), layers,
                       bytes(body[meta_len:]), groups)
        except (ValueError, KeyError, TypeError) as e:
            raise ArtifactError(f"NPU artifact metadata is malformed: {e}") from None


def _meta(symbol: str, target: str, inputs: list[str], outputs: list[str], layers: list[LayerInfo],
          groups: list[GroupInfo]) -> bytes:
    return json.dumps({"symbol": symbol, "target": target, "inputs": inputs, "outputs": outputs,
                       "layers": [asdict(x) for x in layers], "groups": [asdict(g) for g in groups]},
                      sort_keys=True).encode()
