"""The conversion worker: ``python -m rag_pg.source.convert.worker``, started by ConversionPool.

It reads a hello (its limits), caps its own address space with ``RLIMIT_AS`` before any
converter library is imported, asks the kernel to kill it when its parent dies, then
converts one file per request until its standard input closes. Libraries that print to
standard output cannot corrupt the replies: the reply channel is a private copy of the
descriptor, and descriptor 1 is pointed at standard error.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import resource
import signal
import sys
from typing import Any

from rag_pg.source.convert.base import ConversionError, Converter
from rag_pg.source.convert.registry import extension_of
from rag_pg.source.convert.wire import json_frame, read_frame, write_all

_PR_SET_PDEATHSIG = 1


def apply_limits(memory_limit: int | None) -> None:
    # Ctrl-C reaches the whole process group: the parent decides, and closes our input.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash leaves no core file behind
    if memory_limit:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = memory_limit if hard == resource.RLIM_INFINITY else min(memory_limit, hard)
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):  # a system that refuses it: the time limit still holds
            pass
    # The signal comes when the thread that started us ends; the pool re-checks that its
    # worker is alive before each file, so a pool used from several threads is safe too.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent's kill on timeout still holds
        pass


_loaded: dict[str, Converter] = {}


def load(target: str) -> Converter:
    """``module:QualName`` of a converter class, instantiated once per worker."""
    if target not in _loaded:
        module_name, _, qualname = target.partition(":")
        value: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            value = getattr(value, part)
        _loaded[target] = value()
    return _loaded[target]


def _label(converter: Converter | None, name: str) -> str:
    label = getattr(converter, "label", "") if converter is not None else ""
    return str(label or extension_of(name).lstrip(".").upper() or "file")


def handle(header: dict[str, Any], data: bytes, settings: dict[str, Any]) -> dict[str, Any]:
    name = str(header["name"])
    converter: Converter | None = None
    try:
        converter = load(str(header["target"]))
        converted = converter.convert(data, name)
        limit = int(settings.get("max_output_chars") or 0)
        if limit and len(converted.markdown) > limit:
            return {"error": "too_large",
                    "message": f"converted text exceeds {limit:,} characters"}
        return {"ok": converted.to_dict()}
    except ConversionError as error:
        return {"error": error.kind, "message": error.reason}
    except MemoryError:
        limit_mb = int(settings.get("memory_limit") or 0) // (1024 * 1024)
        return {"error": "memory", "message": f"exceeds memory limit ({limit_mb} MB)"}
    except RecursionError:
        return {"error": "corrupt", "message": f"corrupt {_label(converter, name)}: nested too deeply"}
    except Exception as error:  # a library's own exception: the file is what it could not read
        detail = (str(error).splitlines() or [""])[0][:300]
        return {"error": "corrupt",
                "message": f"corrupt {_label(converter, name)}: {type(error).__name__}: {detail}"}


def main() -> int:
    reply_fd = os.dup(1)
    os.dup2(2, 1)
    hello = read_frame(0)
    if hello is None:
        return 0
    settings: dict[str, Any] = json.loads(hello)
    apply_limits(settings.get("memory_limit"))
    write_all(reply_fd, json_frame({"ready": True, "pid": os.getpid()}))
    while True:
        header_bytes = read_frame(0)
        data = read_frame(0) if header_bytes is not None else None
        if header_bytes is None or data is None:
            return 0
        reply = handle(json.loads(header_bytes), data, settings)
        del data
        write_all(reply_fd, json_frame(reply))


if __name__ == "__main__":
    sys.exit(main())
