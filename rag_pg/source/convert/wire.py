"""The frames between the parent and its conversion worker: an 8-byte length, then bytes.

A request is two frames (a JSON header, then the file's raw bytes, never re-encoded); a
reply is one JSON frame. The first exchange is a hello that carries the worker's limits.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

_LENGTH = struct.Struct(">Q")
HEADER_BYTES = _LENGTH.size


def frame_prefix(payload: bytes) -> bytes:
    return _LENGTH.pack(len(payload))


def frame(payload: bytes) -> bytes:
    return frame_prefix(payload) + payload


def json_frame(value: Any) -> bytes:
    # ASCII escapes keep any lone surrogate a library handed back transportable.
    return frame(json.dumps(value, ensure_ascii=True).encode("ascii"))


def frame_length(prefix: bytes | bytearray) -> int:
    return int(_LENGTH.unpack_from(prefix)[0])


def read_exactly(fd: int, size: int) -> bytes | None:
    """``size`` bytes from a blocking descriptor, or None at end of file."""
    parts: list[bytes] = []
    left = size
    while left:
        block = os.read(fd, min(left, 1 << 20))
        if not block:
            return None
        parts.append(block)
        left -= len(block)
    return b"".join(parts)


def read_frame(fd: int) -> bytes | None:
    prefix = read_exactly(fd, HEADER_BYTES)
    if prefix is None:
        return None
    return read_exactly(fd, frame_length(prefix))


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
