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


@dataclass(frozen=True)
class Artifact:
    """A partition as compiled: its symbol, target, DPS signature, layers and program bytes."""

    symbol: str
    target: str
    inputs: list[str]
    outputs: list[str]
    layers: list[LayerInfo]
    program: bytes

    def encode(self) -> bytes:
        meta = json.dumps(
            {
                "symbol": self.symbol,
                "target": self.target,
                "inputs": self.inputs,
                "outputs": self.outputs,
                "layers": [asdict(x) for x in self.layers],
            },
            sort_keys=True,
        ).encode()
        crc = zlib.crc32(meta + self.program)
        return _HEAD.pack(MAGIC, VERSION, 0, len(meta), crc) + meta + self.program

    @classmethod
    def decode(cls, blob: bytes) -> Artifact:
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
            return cls(meta["symbol"], meta["target"], list(meta["inputs"]), list(meta["outputs"]), layers,
                       bytes(body[meta_len:]))
        except (ValueError, KeyError, TypeError) as e:
            raise ArtifactError(f"NPU artifact metadata is malformed: {e}") from None
