"""C8: the database's disk fills up during an ingest. The server's data folder lives on a small
tmpfs (mounting needs root: without it the test says so and does not run); once space is
freed, the server is (re)started and a rerun converges to a clean build."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rag_pg.store import migrate

from ..conftest import drop_database, new_database, run_cli
from ..invariants import dump, violations
from .conftest import counted, slow
from .harness import OwnPostgres, env_for, write_tree
from .test_kill_loops import unknown_versions


@pytest.fixture
def small_disk() -> Iterator[Path]:
    mount = Path(tempfile.mkdtemp(prefix="ragpg-c8-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160m,mode=0755", "tmpfs", str(mount)],
                          capture_output=True, text=True) if os.geteuid() == 0 else None
    if done is None or done.returncode != 0:
        shutil.rmtree(mount, ignore_errors=True)
        pytest.skip("C8 needs a small filesystem: mounting a tmpfs needs root (and a sandbox that allows it)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        shutil.rmtree(mount, ignore_errors=True)


def fill(mount: Path, leave: int) -> Path:
    """Take all of the filesystem's free space but ``leave`` bytes."""
    filler = mount / "filler"
    free = shutil.disk_usage(mount).free
    with filler.open("wb") as out:
        remaining = max(0, free - leave)
        block = b"\0" * (1 << 20)
        while remaining > 0:
            out.write(block[: min(len(block), remaining)])
            remaining -= len(block)
    return filler


def disk_full_events(mount: Path, server: Any, tmp_path: Path, pg_server_url: str, pg_template: str,
                     events: int) -> dict[str, Any]:
    own = OwnPostgres(base=mount)
    stats: dict[str, Any] = {"events": 0, "disk_full_seen": 0, "exit_codes": [], "tracebacks": 0,
                             "inconsistencies": 0, "converged": 0}
    try:
        with psycopg.connect(own.url(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE c8")
        url = own.url("c8")
        with psycopg.connect(url, autocommit=True) as conn:
            migrate.upgrade(conn, "ragpg")
        known: dict[str, set[str]] = defaultdict(set)
        import hashlib

        tree = tmp_path / "tree"
        for event in range(events):
            # new paths each time, more than the space left: the index must grow (the pages an
            # earlier failed run added stay allocated and would absorb a small one)
            write_tree(tree / f"e{event}", 300, paragraphs=40, seed=event)
            for path in tree.rglob("*.md"):
                known[path.relative_to(tree).as_posix()].add(hashlib.sha256(path.read_bytes()).hexdigest())
            filler = fill(mount, leave=1 << 20)
            out = run_cli(["ingest", str(tree)], env=env_for(url, server), cwd=tmp_path)
            stats["events"] += 1
            stats["exit_codes"].append(out.returncode)
            stats["tracebacks"] += "Traceback" in out.stderr
            log = (own.base / "log").read_text(errors="replace")
            stats["disk_full_seen"] += out.returncode != 0 and ("No space left" in out.stderr + log
                                                                 or "could not extend" in out.stderr + log)
            filler.unlink()  # space is back
            if not own.running():
                own.start()
            stats["inconsistencies"] += len(violations(url)) + len(unknown_versions(url, known))
            rerun = run_cli(["ingest", str(tree)], env=env_for(url, server), cwd=tmp_path)
            clean = new_database(pg_server_url, pg_template)
            try:
                assert run_cli(["ingest", str(tree)], env=env_for(clean, server), cwd=tmp_path).returncode == 0
                stats["converged"] += rerun.returncode == 0 and dump(url) == dump(clean)
            finally:
                drop_database(pg_server_url, clean)
    finally:
        own.close()
    return stats


def check(stats: dict[str, Any]) -> None:
    assert stats["disk_full_seen"] == stats["events"], stats  # the disk really filled each time
    assert all(code in (1, 3) for code in stats["exit_codes"]), stats
    assert stats["inconsistencies"] == 0 and stats["converged"] == stats["events"], stats


def c8_text(stats: dict[str, Any]) -> str:
    return (f"{stats['events']} disk-full events (exit codes {sorted(set(stats['exit_codes']))}, traceback x"
            f" {stats['tracebacks']}), 0 partial docs, converged {stats['converged']}/{stats['events']}")


def test_c8_disk_full_during_an_ingest(small_disk, embed_server, tmp_path, pg_server_url, pg_template, figure):
    stats = disk_full_events(small_disk, embed_server, tmp_path, pg_server_url, pg_template, 1)
    check(stats)
    figure("C8", c8_text(stats), **stats)


@slow
def test_c8_counted_disk_full(small_disk, embed_server, tmp_path, pg_server_url, pg_template, figure):
    stats = disk_full_events(small_disk, embed_server, tmp_path, pg_server_url, pg_template, counted(25, "C8"))
    check(stats)
    figure("C8", c8_text(stats), **stats)
