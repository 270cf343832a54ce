"""The safetensors header: tensor names, dtypes and shapes, read without touching the weights.

A ``.safetensors`` file starts with an 8-byte little-endian length N, then N bytes of JSON
(``{"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``), then the
data; offsets count from the end of the header. Reading a drafter's header costs two ranged reads
through the host layer (local file or SFTP), whatever the size of the weights, and one more ranged
read fetches a small tensor such as EAGLE-3's ``d2t`` map.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from servelab.engines.hosts.base import Host
from servelab.engines.weights.json_object import json_object

#: A header larger than this is not a safetensors header (the format caps it at 100 MB).
MAX_HEADER = 100_000_000
#: Bytes per element of the dtypes small maps use.
DTYPE_SIZES: dict[str, int] = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
_INT_FORMATS: dict[str, str] = {"BOOL": "?", "U8": "B", "I8": "b", "I16": "h", "U16": "H", "I32": "i", "U32": "I", "I64": "q", "U64": "Q"}


class HeaderError(ValueError):
    """A file that is not a readable safetensors file; the message is one line."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry in the header."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class SafetensorsHeader:
    """The parsed header of one file: where its data starts and what each tensor is."""

    path: str
    header_size: int
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]

    @property
    def data_start(self) -> int:
        return 8 + self.header_size

    def get(self, name: str) -> TensorInfo | None:
        return self.tensors.get(name)


def header_length(prefix: bytes, path: str = "?") -> int:
    """The JSON header's length from the file's first 8 bytes."""
    if len(prefix) < 8:
        raise HeaderError(f"{path}: {len(prefix)} bytes, too short for a safetensors file")
    (n,) = struct.unpack("<Q", prefix[:8])
    if n <= 1 or n > MAX_HEADER:
        raise HeaderError(f"{path}: header length {n} is not a safetensors header")
    return int(n)


def parse_header(raw: bytes, path: str = "?") -> SafetensorsHeader:
    """Parse the JSON header bytes (the N bytes after the length)."""
    try:
        doc = json_object(raw)
    except ValueError as exc:
        raise HeaderError(f"{path}: the header is not JSON ({exc})") from None
    except TypeError:
        raise HeaderError(f"{path}: the header is not a JSON object") from None
    meta_raw = doc.pop("__metadata__", None) or {}
    tensors: dict[str, TensorInfo] = {}
    for name, entry in doc.items():
        tensors[name] = _tensor(name, entry, path)
    metadata = {str(k): str(v) for k, v in meta_raw.items()} if isinstance(meta_raw, dict) else {}
    return SafetensorsHeader(path=path, header_size=len(raw), tensors=tensors, metadata=metadata)


def _tensor(name: str, entry: Any, path: str) -> TensorInfo:
    if not isinstance(entry, dict):
        raise HeaderError(f"{path}: entry {name!r} is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or not isinstance(shape, list) or not isinstance(offsets, list) or len(offsets) != 2:
        raise HeaderError(f"{path}: entry {name!r} lacks dtype, shape or data_offsets")
    if not all(isinstance(d, int) and d >= 0 for d in [*shape, *offsets]):
        raise HeaderError(f"{path}: entry {name!r} has a negative or non-integer shape or offset")
    return TensorInfo(name, dtype, tuple(shape), offsets[0], offsets[1])


def encode(tensors: dict[str, tuple[str, list[int], bytes]], metadata: dict[str, str] | None = None) -> bytes:
    """A whole safetensors file from ``name -> (dtype, shape, raw little-endian data)`` (tests and tiny drafters)."""
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    blobs: list[bytes] = []
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    return struct.pack("<Q", len(raw)) + raw + b"".join(blobs)


def decode_ints(info: TensorInfo, data: bytes) -> list[int]:
    """The values of a small integer (or bool) tensor, flattened."""
    fmt = _INT_FORMATS.get(info.dtype)
    if fmt is None:
        raise HeaderError(f"tensor {info.name} is {info.dtype}, not an integer map")
    size = DTYPE_SIZES[info.dtype]
    if len(data) != info.elements * size:
        raise HeaderError(f"tensor {info.name}: {len(data)} bytes for {info.elements} {info.dtype} values")
    return [int(v) for v in struct.unpack(f"<{info.elements}{fmt}", data)]


async def read_header(host: Host, path: str) -> SafetensorsHeader:
    """Two ranged reads: the length, then the JSON. Never reads the weights."""
    n = header_length(await host.read_bytes(path, 0, 8), path)
    raw = await host.read_bytes(path, 8, n)
    if len(raw) != n:
        raise HeaderError(f"{path}: the file ends inside its header ({len(raw)} of {n} bytes)")
    return parse_header(raw, path)


async def read_tensor(host: Host, header: SafetensorsHeader, name: str, limit: int = 8_000_000) -> bytes:
    """The raw bytes of one small tensor, by offset; refuses tensors larger than ``limit`` bytes."""
    info = header.tensors[name]
    size = info.end - info.begin
    if size > limit:
        raise HeaderError(f"{header.path}: tensor {name} is {size} bytes, more than the {limit} a map check reads")
    data = await host.read_bytes(header.path, header.data_start + info.begin, size)
    if len(data) != size:
        raise HeaderError(f"{header.path}: the file ends inside tensor {name}")
    return data
