"""Run converters in a worker process with a time limit and a memory limit.

A hostile or broken file (an encrypted PDF, a corrupt DOCX, a zip bomb, a page that makes
a parser spin) can cost at most ``time_limit`` seconds and ``memory_limit`` bytes of a
separate process: the worker is killed and reaped at the limit and the file fails with
one ``ConversionError`` naming the reason; the next file gets a fresh worker. A healthy
worker is kept between files (its start and the libraries' import are paid once) and
replaced every ``max_tasks`` files, so what a library leaks does not pile up.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from typing import IO, Any

from rag_pg.source.convert.base import ConversionError, Converted, Converter
from rag_pg.source.convert.registry import DEFAULT_REGISTRY, INSTALL_HINT, Registry, extension_of
from rag_pg.source.convert.wire import HEADER_BYTES, frame_length, frame_prefix, json_frame

DEFAULT_TIME_LIMIT = 30.0
DEFAULT_MEMORY_LIMIT = 1024 * 1024 * 1024
DEFAULT_MAX_OUTPUT_CHARS = 64 * 1024 * 1024
STARTUP_SECONDS = 60.0  # a cold interpreter on a busy machine; not charged to a file
_BLOCK = 1 << 20


class _Dead(Exception):
    """The worker closed its output: it exited or was killed."""


class _Timeout(Exception):
    pass


class _TooLarge(Exception):
    pass


class _StartFailed(Exception):
    """The worker died or hung before its hello: the message is its last stderr line."""


def _child_path() -> list[str]:
    return list(dict.fromkeys(os.path.abspath(p or os.curdir) for p in sys.path))


def _reap(process: subprocess.Popen[bytes], stderr: IO[bytes]) -> None:
    """Kill (if still running) and wait: never leave a zombie or an orphan behind."""
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()
    stderr.close()


class _Worker:
    def __init__(self, settings: dict[str, Any], max_reply: int):
        self.max_reply = max_reply
        self.tasks = 0
        self._stderr = tempfile.TemporaryFile()
        # The parent's import path, so the worker finds what the parent finds (plug-ins too).
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(_child_path()))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rag_pg.source.convert.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            bufsize=0, close_fds=True, env=env,
        )
        self._finalizer = weakref.finalize(self, _reap, self.process, self._stderr)
        assert self.process.stdin is not None and self.process.stdout is not None
        self._in = self.process.stdin.fileno()
        self._out = self.process.stdout.fileno()
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        try:
            self.pid = int(self.exchange([json_frame(settings)], STARTUP_SECONDS)["pid"])
        except (_Dead, _Timeout, _TooLarge) as error:
            self.kill()
            raise _StartFailed(self._last_error() or type(error).__name__.strip("_").lower()) from None
        except BaseException:
            self.kill()
            raise

    def _last_error(self) -> str:
        try:
            with open(self._stderr.fileno(), "rb", closefd=False) as stream:
                stream.seek(0)
                lines = stream.read()[-2000:].decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return lines[-1] if lines else ""

    def exchange(self, parts: Sequence[bytes], timeout: float) -> dict[str, Any]:
        """Send ``parts`` (written as they are: the file's bytes are never copied), return
        the reply; both ways under one deadline."""
        deadline = time.monotonic() + timeout
        pending = deque(memoryview(part) for part in parts if part)
        received = bytearray()
        expected: int | None = None
        with selectors.DefaultSelector() as selector:
            if pending:
                selector.register(self._in, selectors.EVENT_WRITE)
            selector.register(self._out, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _Timeout
                for key, _ in selector.select(left):
                    if key.fd == self._in:
                        try:
                            pending[0] = pending[0][os.write(self._in, pending[0][:_BLOCK]):]
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:
                            pending.clear()  # it died: its closed output says so
                        while pending and not pending[0]:
                            pending.popleft()
                        if not pending:
                            selector.unregister(self._in)
                        continue
                    try:
                        block = os.read(self._out, _BLOCK)
                    except BlockingIOError:
                        continue
                    if not block:
                        raise _Dead
                    received += block
                    if expected is None and len(received) >= HEADER_BYTES:
                        expected = frame_length(received)
                        if expected > self.max_reply:
                            raise _TooLarge
                    if expected is not None and len(received) >= HEADER_BYTES + expected:
                        reply: dict[str, Any] = json.loads(received[HEADER_BYTES:])
                        return reply

    def death(self) -> str:
        """Why the worker is gone, after it was reaped: its signal or exit status."""
        code = self.process.returncode
        if code is not None and code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with status {code}"

    def stop(self) -> None:
        """Close its input (it exits at end of file); kill it if it does not."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def kill(self) -> None:
        self._finalizer()


class ConversionPool:
    """Converts files one at a time in a reused worker process; thread-safe (one lock).

    Use as a context manager, or call ``close``; a pool dropped without either still
    reaps its worker when it is garbage-collected or at interpreter exit.
    """

    def __init__(
        self, *, time_limit: float = DEFAULT_TIME_LIMIT, memory_limit: int = DEFAULT_MEMORY_LIMIT,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS, max_tasks: int = 200,
        registry: Registry | None = None,
    ):
        if time_limit <= 0 or memory_limit <= 0 or max_output_chars <= 0 or max_tasks <= 0:
            raise ValueError("conversion limits must be positive")
        self.time_limit = float(time_limit)
        self.memory_limit = int(memory_limit)
        self.max_output_chars = int(max_output_chars)
        self.max_tasks = max_tasks
        self.registry = registry or DEFAULT_REGISTRY
        self._lock = threading.Lock()
        self._worker: _Worker | None = None

    def __enter__(self) -> ConversionPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def worker_pid(self) -> int | None:
        worker = self._worker
        return worker.pid if worker is not None else None

    def convert(
        self, data: bytes, name: str, converter: Converter | None = None, *,
        time_limit: float | None = None,
    ) -> Converted:
        """``name`` picks the converter (by extension) and names the file in errors;
        ``time_limit`` replaces the pool's for this file."""
        limit = self.time_limit if time_limit is None else float(time_limit)
        converter = converter or self.registry.for_name(name)
        if converter is None:
            extension = extension_of(name) or "(no extension)"
            raise ConversionError(name, "unsupported",
                                  f"no converter installed for {extension} ({INSTALL_HINT})")
        target = f"{type(converter).__module__}:{type(converter).__qualname__}"
        request = [json_frame({"target": target, "name": name}), frame_prefix(data), data]
        with self._lock:
            try:
                worker = self._worker_ready()
            except _StartFailed as error:
                raise ConversionError(name, "crashed", f"conversion worker did not start: {error}") from None
            try:
                reply = worker.exchange(request, limit)
            except _Timeout:
                self._discard()
                raise ConversionError(name, "timeout", f"timeout after {limit:g} s") from None
            except _TooLarge:
                self._discard()
                raise ConversionError(name, "too_large", "converted text is too large") from None
            except _Dead:
                self._discard()
                raise ConversionError(
                    name, "crashed",
                    f"converter {worker.death()} (memory limit {self.memory_limit // 2**20} MB)",
                ) from None
            worker.tasks += 1
            if "ok" in reply:
                if worker.tasks >= self.max_tasks:
                    self._retire()
                return Converted.from_dict(reply["ok"])
            if reply.get("error") == "memory" or worker.tasks >= self.max_tasks:
                self._retire()  # a MemoryError may leave a library half-initialised
            raise ConversionError(name, reply.get("error", "corrupt"), str(reply.get("message")))

    def close(self) -> None:
        with self._lock:
            self._retire()

    def _worker_ready(self) -> _Worker:
        if self._worker is None or self._worker.process.poll() is not None:
            if self._worker is not None:
                self._discard()
            self._worker = _Worker(
                {"memory_limit": self.memory_limit, "max_output_chars": self.max_output_chars},
                max_reply=self.max_output_chars * 8 + (1 << 20),  # ASCII-escaped JSON of it
            )
        return self._worker

    def _discard(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker = None

    def _retire(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
