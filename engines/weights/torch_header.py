"""The tensor names, dtypes and shapes of a ``torch.save`` checkpoint (``pytorch_model.bin``), without torch.

Many published drafters (the original EAGLE-1 and EAGLE-3 heads among them) ship ``pytorch_model.bin``,
not safetensors. Since torch 1.6 that file is a zip archive: ``<name>/data.pkl`` is a small pickle of the
state dict whose tensors point at storages ``<name>/data/<key>``. This reads the zip's central
directory and ``data.pkl`` by ranged reads (a few kilobytes, whatever the size of the weights) and
unpickles it with an unpickler that imports nothing: every global is a stub, a tensor becomes its
dtype and shape, and a storage's offset in the file is recorded so a small tensor such as ``d2t`` can
be read like a safetensors one. Nothing in the file is ever executed.
"""

from __future__ import annotations

import io
import pickle
import struct
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from servelab.engines.hosts.base import Host
from servelab.engines.weights.safetensors_header import HeaderError, SafetensorsHeader, TensorInfo

#: Bytes read from the end of the file to find the zip's end records (their comment is at most 64 KiB).
TAIL = 66_000
#: A data.pkl larger than this is not a state dict of names and shapes.
MAX_PICKLE = 16_000_000
_DTYPES = {"BFloat16Storage": ("BF16", 2), "HalfStorage": ("F16", 2), "FloatStorage": ("F32", 4), "DoubleStorage": ("F64", 8),
           "LongStorage": ("I64", 8), "IntStorage": ("I32", 4), "ShortStorage": ("I16", 2), "CharStorage": ("I8", 1),
           "ByteStorage": ("U8", 1), "BoolStorage": ("BOOL", 1)}


@dataclass(frozen=True)
class _Entry:
    name: str
    method: int
    comp_size: int
    size: int
    local_offset: int


class _Stub:
    """Any global the pickle names: accepts every call and state, means nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        self.state = state


@dataclass(frozen=True)
class _Storage:
    dtype: str
    itemsize: int
    key: str


@dataclass(frozen=True)
class _Tensor:
    storage: _Storage
    offset: int
    shape: tuple[int, ...]


def _rebuild_tensor(storage: Any, storage_offset: Any, size: Any, *rest: Any) -> Any:
    if isinstance(storage, _Storage) and isinstance(size, (tuple, list)) and all(isinstance(d, int) for d in size):
        return _Tensor(storage, int(storage_offset) if isinstance(storage_offset, int) else 0, tuple(size))
    return _Stub()


def _rebuild_parameter(data: Any, *rest: Any) -> Any:
    return data


class _StorageType:
    def __init__(self, name: str) -> None:
        self.name = name


class _ShapeUnpickler(pickle.Unpickler):
    """Resolves no global: tensors become shapes, storages their dtype, everything else a stub."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module.startswith("torch") and name in ("_rebuild_tensor_v2", "_rebuild_tensor"):
            return _rebuild_tensor
        if module.startswith("torch") and name == "_rebuild_parameter":
            return _rebuild_parameter
        if module == "torch" and name in _DTYPES:
            return _StorageType(name)
        return _Stub

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage":
            kind = pid[1]
            name = kind.name if isinstance(kind, _StorageType) else ""
            if not name and isinstance(pid[1], str):
                name = pid[1]
            dtype, size = _DTYPES.get(name, ("?", 1))
            return _Storage(dtype, size, str(pid[2]))
        return _Stub()


def _central_directory(tail: bytes, file_size: int) -> tuple[int, int]:
    i = tail.rfind(b"PK\x05\x06")
    if i < 0:
        raise HeaderError("not a zip archive (no end of central directory)")
    cd_size, cd_offset = struct.unpack("<II", tail[i + 12 : i + 20])
    if cd_offset == 0xFFFFFFFF or cd_size == 0xFFFFFFFF:
        j = tail.rfind(b"PK\x06\x06")
        if j < 0:
            raise HeaderError("zip64 archive without its end record")
        cd_size, cd_offset = struct.unpack("<QQ", tail[j + 40 : j + 56])
    if cd_offset + cd_size > file_size:
        raise HeaderError("the zip's central directory lies past the end of the file")
    return cd_offset, cd_size


def _entries(cd: bytes) -> list[_Entry]:
    out: list[_Entry] = []
    pos = 0
    while pos + 46 <= len(cd) and cd[pos : pos + 4] == b"PK\x01\x02":
        method, = struct.unpack("<H", cd[pos + 10 : pos + 12])
        comp, size = struct.unpack("<II", cd[pos + 20 : pos + 28])
        n, m, k = struct.unpack("<HHH", cd[pos + 28 : pos + 34])
        local, = struct.unpack("<I", cd[pos + 42 : pos + 46])
        name = cd[pos + 46 : pos + 46 + n].decode("utf-8", "replace")
        extra = cd[pos + 46 + n : pos + 46 + n + m]
        vals = [size, comp, local]
        e = 0
        while e + 4 <= len(extra):  # zip64 extra field: the 0xFFFFFFFF values, in this order
            tag, length = struct.unpack("<HH", extra[e : e + 4])
            if tag == 1:
                body, q = extra[e + 4 : e + 4 + length], 0
                for idx, v in enumerate(vals):
                    if v == 0xFFFFFFFF and q + 8 <= len(body):
                        vals[idx] = struct.unpack("<Q", body[q : q + 8])[0]
                        q += 8
            e += 4 + length
        out.append(_Entry(name, method, vals[1], vals[0], vals[2]))
        pos += 46 + n + m + k
    return out


async def _data_offset(host: Host, path: str, entry: _Entry) -> int:
    local = await host.read_bytes(path, entry.local_offset, 30)
    if local[:4] != b"PK\x03\x04":
        raise HeaderError(f"{path}: bad local header for {entry.name}")
    n, m = struct.unpack("<HH", local[26:30])
    return int(entry.local_offset + 30 + n + m)


async def read_torch_header(host: Host, path: str) -> SafetensorsHeader:
    """The state dict's tensors as a header: names, dtypes, shapes, and where each tensor's bytes lie
    in the file (``data_start`` is 0: offsets are absolute, for stored, uncompressed storages)."""
    size = await host.size(path)
    tail = await host.read_bytes(path, max(0, size - TAIL), TAIL)
    cd_offset, cd_size = _central_directory(tail, size)
    entries = _entries(await host.read_bytes(path, cd_offset, cd_size))
    pkl = next((e for e in entries if e.name.endswith("/data.pkl") or e.name == "data.pkl"), None)
    if pkl is None:
        raise HeaderError(f"{path}: no data.pkl in the archive (not a torch.save file)")
    if pkl.size > MAX_PICKLE:
        raise HeaderError(f"{path}: data.pkl is {pkl.size} bytes, not a state dict")
    raw = await host.read_bytes(path, await _data_offset(host, path, pkl), pkl.comp_size)
    if pkl.method == 8:
        raw = zlib.decompress(raw, -15)
    elif pkl.method != 0:
        raise HeaderError(f"{path}: data.pkl uses zip compression {pkl.method}")
    try:
        obj = _ShapeUnpickler(io.BytesIO(raw)).load()
    except Exception as exc:  # any malformed pickle is one line, never a traceback
        raise HeaderError(f"{path}: data.pkl does not unpickle as a state dict ({type(exc).__name__})") from None
    state = obj.get("state_dict", obj) if isinstance(obj, dict) else None
    if not isinstance(state, dict):
        raise HeaderError(f"{path}: data.pkl holds no state dict")
    prefix = pkl.name[: -len("data.pkl")]
    by_name = {e.name: e for e in entries}
    tensors: dict[str, TensorInfo] = {}
    for name, t in state.items():
        if not isinstance(t, _Tensor):
            continue
        begin = end = 0
        entry = by_name.get(f"{prefix}data/{t.storage.key}")
        n = 1
        for d in t.shape:
            n *= d
        if entry is not None and entry.method == 0 and n * t.storage.itemsize <= 8_000_000:
            start = await _data_offset(host, path, entry) + t.offset * t.storage.itemsize
            begin, end = start, start + n * t.storage.itemsize
        tensors[str(name)] = TensorInfo(str(name), t.storage.dtype, t.shape, begin, end)
    return SafetensorsHeader(path=path, header_size=-8, tensors=tensors, metadata={"format": "torch.save"})
