"""safetensors files read header first: every entry's name, dtype, shape and byte range checked against
the file before any array is read, the arrays then read one at a time on demand.

The format (github.com/huggingface/safetensors): an 8-byte little-endian header length N, N bytes of
JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}), then the
data, each entry's bytes at [begin, end) of it. A header that claims more bytes than the file has, an
entry's range that does not match its shape and dtype, or one that runs past the end, is refused
naming the file and the entry, so a lying header cannot make a loader allocate what the file does not
hold. bfloat16 (which NumPy lacks) is widened to float32 exactly.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

# The safetensors library's own limit on the JSON header (100 MB): more is no checkpoint.
MAX_HEADER_BYTES = 100_000_000
_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
           "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?"}


class SafetensorsError(ValueError):
    """A file that is not a well-formed safetensors file (a ValueError naming the file and the entry)."""


class LazyArray:
    """One array of a safetensors file, not yet read: `shape`, `ndim` and `dtype` known, the values read
    by `np.asarray(array)`; `reshape` gives another view of it, still unread."""

    def __init__(self, file: SafetensorsFile, key: str, shape: tuple[int, ...] | None = None):
        self.file, self.key = file, key
        self.shape = file.shapes[key] if shape is None else tuple(shape)
        self.ndim = len(self.shape)
        self.dtype = file.dtype(key)

    def reshape(self, *shape: Any) -> LazyArray:
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        size = math.prod(self.shape)
        if -1 in shape:
            known = math.prod(d for d in shape if d != -1)
            shape = tuple(size // known if d == -1 else d for d in shape)
        if math.prod(shape) != size:
            raise ValueError(f"cannot reshape {self.key} of shape {self.shape} to {shape}.")
        return LazyArray(self.file, self.key, shape)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = self.file.read(self.key).reshape(self.shape)
        return value if dtype is None else value.astype(dtype)

    def __repr__(self) -> str:
        return f"LazyArray({self.key!r}, shape={self.shape}, dtype={self.dtype})"


class SafetensorsFile(Mapping):
    """A safetensors file opened header first: a mapping {name: LazyArray}; `shapes` ({name: shape}) and
    `nbytes` known on opening, each array read when asked for (`read(name)`).

    Example:
    >>> weights = SafetensorsFile("tests/data/timm/timm_vit_token/model.safetensors")
    >>> weights.shapes["pos_embed"], np.asarray(weights["pos_embed"]).dtype
    ((1, 17, 32), dtype('float32'))
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"No checkpoint file at {self.path}.")
        self.size = os.path.getsize(self.path)
        self._entries = self._read_header()
        self.shapes = {k: e[1] for k, e in self._entries.items()}
        self.nbytes = sum(e[3] - e[2] for e in self._entries.values())

    def _fail(self, why: str) -> SafetensorsError:
        return SafetensorsError(f"{self.path} is not a safetensors file keras-vit can read: {why}.")

    def _read_header(self) -> dict[str, tuple[str, tuple[int, ...], int, int]]:
        with open(self.path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise self._fail(f"it has {self.size} bytes, fewer than the 8 of the header length")
            length = int.from_bytes(head, "little")
            if length > min(MAX_HEADER_BYTES, self.size - 8):
                raise self._fail(f"its header length field says {length:,} bytes, but the file has "
                                 f"{self.size - 8:,} after it (and a header may have at most {MAX_HEADER_BYTES:,})")
            raw = f.read(length)
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise self._fail(f"its header is not JSON ({type(e).__name__}: {str(e)[:200]})") from None
        if not isinstance(header, dict):
            raise self._fail(f"its header is a JSON {type(header).__name__}, not an object")
        data = self.size - 8 - length
        entries, spans = {}, []
        for key, entry in header.items():
            if key == "__metadata__":
                continue
            if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
                raise self._fail(f"entry {key!r} is not {{dtype, shape, data_offsets}}: {str(entry)[:200]}")
            dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
            if not isinstance(dtype, str) or dtype not in _DTYPES:
                raise self._fail(f"entry {key!r} has dtype {str(dtype)[:50]!r}; known: {', '.join(_DTYPES)}")
            if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
                raise self._fail(f"entry {key!r} has shape {str(shape)[:200]}, not a list of non-negative ints")
            if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets)
                    or offsets[0] > offsets[1]):
                raise self._fail(f"entry {key!r} has data_offsets {str(offsets)[:200]}, not [begin, end]")
            begin, end = offsets
            want = math.prod(shape) * np.dtype(_DTYPES[dtype]).itemsize
            if end - begin != want:
                raise self._fail(f"entry {key!r} of shape {tuple(shape)} in {dtype} needs {want:,} bytes, its "
                                 f"data_offsets [{begin}, {end}] hold {end - begin:,}")
            if end > data:
                raise self._fail(f"entry {key!r} ends at byte {end:,} of the data, which has {data:,} (truncated?)")
            entries[key] = (dtype, tuple(shape), begin, end)
            spans.append((begin, end, key))
        spans.sort()
        for (_, end, first), (begin, _, second) in zip(spans, spans[1:]):
            if begin < end:
                raise self._fail(f"entries {first!r} and {second!r} overlap")
        self._data_start = 8 + length
        return entries

    def dtype(self, key: str) -> np.dtype:
        """The dtype `read(key)` gives (float32 for bfloat16)."""
        code = self._entries[key][0]
        return np.dtype("float32") if code == "BF16" else np.dtype(_DTYPES[code])

    def read(self, key: str) -> np.ndarray:
        """One array, read from the file now."""
        code, shape, begin, end = self._entries[key]
        with open(self.path, "rb") as f:
            f.seek(self._data_start + begin)
            raw = f.read(end - begin)
        if len(raw) != end - begin:
            raise self._fail(f"entry {key!r} is cut short (the file changed while read?)")
        value = np.frombuffer(raw, dtype=_DTYPES[code]).reshape(shape)
        if code == "BF16":  # the top half of a float32's bits
            return (value.astype(np.uint32) << 16).view(np.float32)
        return value.astype(value.dtype.newbyteorder("="), copy=True)

    def __getitem__(self, key: str) -> LazyArray:
        if key not in self._entries:
            raise KeyError(key)
        return LazyArray(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def open_safetensors(files: list[str]) -> dict[str, LazyArray]:
    """{name: LazyArray} of one or more safetensors files (a sharded checkpoint), headers read and checked;
    a name in two shards is refused."""
    tensors: dict[str, LazyArray] = {}
    for file in files:
        part = SafetensorsFile(file)
        twice = sorted(set(part) & set(tensors))
        if twice:
            raise SafetensorsError(f"{file} holds {twice[0]!r}, which another shard of the checkpoint holds too.")
        tensors.update({key: part[key] for key in part})
    return tensors
