"""An ONNX file read without its weights: every large initializer stays in its file.

``onnx.load`` holds a model twice while it parses it (the file's bytes and the protobuf), and every
later whole-model step (``CopyFrom``, shape inference, the checker) copies the weights again: a 548 MB
VGG-19 file peaked at 7.3x its size during import. :func:`load_lean` instead scans the file's protobuf
wire format (ModelProto field 7 = graph, GraphProto field 5 = initializer, TensorProto field 9 =
raw_data) and parses a copy of it in which each initializer of at least :data:`INLINE_BYTES` raw bytes
is an ONNX external-data reference (``data_location=EXTERNAL``, ``location`` / ``offset`` / ``length``)
into the original file. External-data models (``.onnx`` + data files, the form of models over 2 GB)
come out the same way, their relative locations made absolute. The ONNX-level passes then see dims and
dtypes only; a weight is read when something needs its values: :func:`array` (a read-only ``np.memmap``,
whose pages are read on use) or :func:`read_into` (straight into a buffer the caller owns, e.g. TVM's).

numpy and onnx only (the models floor).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: Initializers with at least this many raw bytes stay in the file (ONNX's own external-data threshold);
#: smaller ones (shapes, scales, zero points, clip bounds) are parsed as usual.
INLINE_BYTES = 1024

_GRAPH, _INITIALIZER = 7, 5  # ModelProto.graph, GraphProto.initializer
_T_DATA_TYPE, _T_NAME, _T_RAW, _T_EXTERNAL, _T_LOCATION = 2, 8, 9, 13, 14  # TensorProto fields
_LENGTH_DELIMITED = 2
#: Element types whose raw bytes are one numpy array as they are (not bit-packed, not strings).
_PLAIN = frozenset({
    TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8, TensorProto.UINT8,
    TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32, TensorProto.UINT32, TensorProto.INT64,
    TensorProto.UINT64, TensorProto.BOOL,
})


class ModelFileError(ValueError):
    """A one-line error for an ONNX file (or its external data) that cannot be read."""


# ------------------------------------------------------------------------------ wire format
def _varint(buf: mmap.mmap | bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the base-128 varint at ``pos``."""
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise EOFError
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _scan(buf: mmap.mmap | bytes, start: int, end: int) -> tuple[list[tuple[int, int, int, int, int]],
                                                                 tuple[int, int] | None]:
    """The complete fields of ``buf[start:end]`` as (field number, wire type, field start, payload start,
    field end) (a length-delimited payload starts after its length), and (field number, payload start) of
    a field whose payload runs past ``end`` (None when there is none). EOFError for a malformed tag."""
    out, pos = [], start
    while pos < end:
        tag, body = _varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            stop = _varint(buf, body, end)[1]
        elif wire == 1:
            stop = body + 8
        elif wire == _LENGTH_DELIMITED:
            size, body = _varint(buf, body, end)
            stop = body + size
        elif wire == 5:
            stop = body + 4
        else:  # groups (3, 4) are not in onnx.proto; 6, 7 do not exist
            raise EOFError
        if stop > end:
            return out, (number, body)
        out.append((number, wire, pos, body, stop))
        pos = stop
    return out, None


def _fields(buf: mmap.mmap | bytes, start: int, end: int) -> list[tuple[int, int, int, int, int]]:
    """The fields of ``buf[start:end]`` (:func:`_scan`); EOFError when one is cut short."""
    fields, cut = _scan(buf, start, end)
    if cut is not None:
        raise EOFError
    return fields


def _cut_initializer(buf: mmap.mmap, graph_start: int, end: int) -> str | None:
    """The name of the initializer a truncated graph ends in (None: it ends elsewhere, or it is unnamed)."""
    try:
        _, cut = _scan(buf, graph_start, end)
        if cut is None or cut[0] != _INITIALIZER:
            return None
        fields, _ = _scan(buf, cut[1], end)  # the tensor's fields up to the cut: its name comes first
    except EOFError:
        return None
    name = next((f for f in fields if f[0] == _T_NAME), None)
    return None if name is None else bytes(buf[name[3]:name[4]]).decode(errors="replace")


def _tag(number: int, wire: int) -> bytes:
    return _encode_varint(number << 3 | wire)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _delimited(number: int, payload: bytes) -> bytes:
    return _tag(number, _LENGTH_DELIMITED) + _encode_varint(len(payload)) + payload


def _external_entry(key: str, value: str) -> bytes:
    """One ``TensorProto.external_data`` entry (a StringStringEntryProto: key = 1, value = 2)."""
    return _delimited(_T_EXTERNAL, _delimited(1, key.encode()) + _delimited(2, value.encode()))


def _lean_tensor(buf: mmap.mmap, start: int, end: int, location: str) -> bytes:
    """The TensorProto at ``buf[start:end]``, its raw_data (when large and of a plain type) replaced by a
    reference to where it lies in the file ``location``."""
    fields = _fields(buf, start, end)
    by_number = {f[0]: f for f in fields}
    raw = by_number.get(_T_RAW)
    dtype = by_number.get(_T_DATA_TYPE)
    stored = by_number.get(_T_LOCATION)
    if raw is None or raw[4] - raw[3] < INLINE_BYTES or dtype is None or \
            _varint(buf, dtype[3], dtype[4])[0] not in _PLAIN or \
            (stored is not None and _varint(buf, stored[3], stored[4])[0] == TensorProto.EXTERNAL):
        return bytes(buf[start:end])
    kept = b"".join(bytes(buf[f[2]:f[4]]) for f in fields if f[0] != _T_RAW)
    return kept + _external_entry("location", location) + _external_entry("offset", str(raw[3])) + \
        _external_entry("length", str(raw[4] - raw[3])) + _tag(_T_LOCATION, 0) + \
        _encode_varint(TensorProto.EXTERNAL)


def _lean_graph(buf: mmap.mmap, start: int, end: int, location: str) -> bytes:
    """The GraphProto at ``buf[start:end]`` with its initializers made lean (:func:`_lean_tensor`)."""
    parts = []
    for number, wire, first, body, stop in _fields(buf, start, end):
        if number == _INITIALIZER and wire == _LENGTH_DELIMITED:
            parts.append(_delimited(_INITIALIZER, _lean_tensor(buf, body, stop, location)))
        else:
            parts.append(bytes(buf[first:stop]))
    return b"".join(parts)


def _lean_bytes(buf: mmap.mmap, path: Path, shown: str) -> bytes:
    """The serialised ModelProto in ``buf`` (the file ``path``, named ``shown`` in errors) with its main
    graph's large initializers left in the file; a one-line :class:`ModelFileError` for a truncated or
    corrupt file."""
    try:
        fields, cut = _scan(buf, 0, len(buf))
        if cut is not None:
            name = _cut_initializer(buf, cut[1], len(buf)) if cut[0] == _GRAPH else None
            what = f"initializer {name!r}" if name is not None else f"field {cut[0]}"
            raise ModelFileError(f"ONNX file {shown!r} is truncated: {what} runs past its end "
                                 f"({len(buf)} bytes)")
        parts = []
        for number, wire, first, body, stop in fields:
            if number == _GRAPH and wire == _LENGTH_DELIMITED:
                parts.append(_delimited(_GRAPH, _lean_graph(buf, body, stop, str(path))))
            else:
                parts.append(bytes(buf[first:stop]))
    except EOFError:
        raise ModelFileError(f"{shown!r} is not an ONNX model (its protobuf encoding is corrupt)") from None
    return b"".join(parts)


# ------------------------------------------------------------------------------ loading
def load_lean(path: str | os.PathLike) -> onnx.ModelProto:
    """The model in the ONNX file ``path`` with every initializer of at least :data:`INLINE_BYTES` left where
    it is stored (in the file itself, or in the external-data file the model names), as an external-data
    reference with an absolute location; smaller external tensors are read in. One-line
    :class:`ModelFileError` for a truncated or corrupt file and for external data that is missing, lies
    outside the model's directory or is shorter than its tensor."""
    shown, path = str(path), Path(path).resolve()
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise ModelFileError(f"{shown!r} is not an ONNX model (the file is empty)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            data = _lean_bytes(buf, path, shown)
    try:
        model = onnx.ModelProto.FromString(data)
    except Exception as e:  # protobuf's DecodeError and friends
        raise ModelFileError(f"{shown!r} is not an ONNX model ({type(e).__name__})") from None
    for tensor in model.graph.initializer:
        if is_external(tensor):
            _resolve(tensor, path)
    for tensor in _attribute_tensors(model.graph):
        if is_external(tensor):
            _resolve(tensor, path)
            _read_in(tensor)
    return model


def _resolve(tensor: TensorProto, model_path: Path) -> None:
    """Make ``tensor``'s external location absolute (relative to ``model_path``'s directory) and check that
    the data is there; a small tensor is read in."""
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    where = Path(location)
    if str(where) != str(model_path) and (where.is_absolute() or not location or ".." in where.parts):
        raise ModelFileError(f"tensor {tensor.name!r}: external data location {location!r} is not a path "
                             f"inside the model's directory {str(model_path.parent)!r}")
    _set_entry(tensor, "location", str(model_path.parent / where))
    _where(tensor)  # checks the file and its length
    if _nbytes(tensor) < INLINE_BYTES:
        _read_in(tensor)


def _attribute_tensors(graph: onnx.GraphProto) -> list[TensorProto]:
    """Tensors in node attributes (Constant values) and in subgraphs (their initializers too)."""
    out: list[TensorProto] = []
    for node in graph.node:
        for attr in node.attribute:
            out.extend([attr.t] if attr.HasField("t") else [])
            out.extend(attr.tensors)
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                out.extend(sub.initializer)
                out.extend(_attribute_tensors(sub))
    return out


def _set_entry(tensor: TensorProto, key: str, value: str) -> None:
    for entry in tensor.external_data:
        if entry.key == key:
            entry.value = value
            return
    tensor.external_data.add(key=key, value=value)


def _read_in(tensor: TensorProto) -> None:
    """Replace ``tensor``'s external reference by its bytes."""
    path, offset, length = _where(tensor)
    with open(path, "rb") as f:
        f.seek(offset)
        tensor.raw_data = f.read(length)
    del tensor.external_data[:]
    tensor.ClearField("data_location")  # as a tensor stored inline is written (no explicit DEFAULT)


def read_external(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (changed in place, and returned) with every main-graph initializer's external data read
    into it: what ``onnx.load`` gives, for tools that hand the model to onnxruntime."""
    for tensor in model.graph.initializer:
        if is_external(tensor):
            _read_in(tensor)
    return model


# ------------------------------------------------------------------------------ reading weights
def is_external(tensor: TensorProto) -> bool:
    """Whether ``tensor``'s data is in a file (ONNX external data)."""
    return tensor.data_location == TensorProto.EXTERNAL


def _nbytes(tensor: TensorProto) -> int:
    """Raw bytes of a tensor of a plain element type (-1 for other types, whose size is not a product)."""
    if tensor.data_type not in _PLAIN:
        return -1
    return int(np.prod(tensor.dims, dtype=np.int64)) * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def _where(tensor: TensorProto) -> tuple[Path, int, int]:
    """(file, offset, length) of an external tensor's bytes, checked against the file: a one-line
    :class:`ModelFileError` naming the file and the tensor when it is missing or too short. A relative
    location is relative to the current directory (as for ``onnx.numpy_helper.to_array``)."""
    info = {e.key: e.value for e in tensor.external_data}
    path = Path(info.get("location", ""))
    try:
        size = path.stat().st_size if path.is_file() else -1
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else size - offset
    except ValueError:
        raise ModelFileError(f"tensor {tensor.name!r}: external data offset / length "
                             f"{info.get('offset')!r} / {info.get('length')!r} are not integers") from None
    if size < 0:
        raise ModelFileError(f"tensor {tensor.name!r}: external data file {str(path)!r} does not exist")
    expected = _nbytes(tensor)
    if expected >= 0 and length != expected:
        raise ModelFileError(f"tensor {tensor.name!r}: external data in {str(path)!r} is {length} bytes, "
                             f"its shape {list(tensor.dims)} needs {expected}")
    if offset < 0 or offset + length > size:
        raise ModelFileError(f"tensor {tensor.name!r}: external data file {str(path)!r} is too short "
                             f"({size} bytes; the tensor is bytes {offset} to {offset + length})")
    return path, offset, length


def array(tensor: TensorProto) -> np.ndarray:
    """``tensor``'s value: an external tensor of a plain type as a read-only ``np.memmap`` of its file (its
    pages are read when used), any other as ``onnx.numpy_helper.to_array`` makes it."""
    if not is_external(tensor):
        return numpy_helper.to_array(tensor)
    path, offset, length = _where(tensor)
    if tensor.data_type in _PLAIN and length:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).newbyteorder("<")
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=tuple(tensor.dims) or (1,)) \
            .reshape(tuple(tensor.dims))
    inline = TensorProto()
    inline.CopyFrom(tensor)
    _read_in(inline)
    return numpy_helper.to_array(inline)


def read_into(tensor: TensorProto, out: np.ndarray) -> None:
    """Read an external tensor of a plain type into ``out`` (C-contiguous, writable, of its shape and dtype)
    with one copy from the file: no intermediate buffer."""
    path, offset, length = _where(tensor)
    if out.nbytes != length or not out.flags.c_contiguous:
        raise ValueError(f"tensor {tensor.name!r}: a buffer of {out.nbytes} bytes cannot take its {length}")
    view = memoryview(out.reshape(-1).view(np.uint8))
    with open(path, "rb") as f:
        f.seek(offset)
        done = 0
        while done < length:
            n = f.readinto(view[done:])
            if not n:
                raise ModelFileError(f"tensor {tensor.name!r}: external data file {str(path)!r} ended early")
            done += n


#: Bytes of the file read at a time by :func:`read_transposed_into` (its one transient buffer).
TRANSPOSE_BLOCK_BYTES = 16 << 20


def read_transposed_into(tensor: TensorProto, out: np.ndarray) -> None:
    """Read an external 2-D tensor of a plain type, stored as ``(out.shape[1], out.shape[0])``, into ``out``
    transposed (C-contiguous, writable): rows of the file in blocks of about :data:`TRANSPOSE_BLOCK_BYTES`,
    each written into its columns of ``out``, so no whole second copy is held (a Gemm's ``transB`` weight,
    :func:`tvm_npu.compiler.weights.pretranspose_gemm_weights`)."""
    path, offset, length = _where(tensor)
    if out.ndim != 2 or out.nbytes != length or not out.flags.c_contiguous:
        raise ValueError(f"tensor {tensor.name!r}: a buffer of shape {out.shape} cannot take its {length} bytes "
                         f"transposed")
    cols, rows = out.shape  # the file holds (rows, cols)
    row_bytes = cols * out.itemsize
    step = max(1, TRANSPOSE_BLOCK_BYTES // max(row_bytes, 1))
    block = np.empty((min(step, rows), cols), out.dtype)
    with open(path, "rb") as f:
        f.seek(offset)
        for first in range(0, rows, step):
            part = block[:min(step, rows - first)]
            want = part.nbytes
            if f.readinto(memoryview(part.reshape(-1).view(np.uint8))) != want:
                raise ModelFileError(f"tensor {tensor.name!r}: external data file {str(path)!r} ended early")
            out[:, first:first + len(part)] = part.T


def is_plain(tensor: TensorProto) -> bool:
    """Whether ``tensor``'s element type is one numpy array as its bytes are (what :func:`read_into` takes)."""
    return tensor.data_type in _PLAIN
