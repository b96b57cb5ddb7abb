"""C1 and C2: ingests racing for one collection, and a lock holder that is killed or paused."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path
from typing import Any

import psycopg

from rag_pg.store.locks import LOCK_CLASS, lock_key

from ..conftest import drop_database, new_database, run_cli
from ..invariants import dump, violations
from ..rows import value
from ..waiting import eventually
from .conftest import counted, slow
from .harness import counts, edit_some, env_for, spawned, write_tree

# Same root; or two include lists that overlap on part1 (one collection, so one lock).
INCLUDES = ("part0,part1", "part1,part2")


def race_pairs(db_url: str, server: Any, tree: Path, cwd: Path, pairs: int, seed: int = 5) -> dict[str, Any]:
    rng = random.Random(seed)
    stats: dict[str, Any] = {"races": 0, "waited": 0, "busy": 0, "failed": 0, "duplicates": 0,
                             "violations": 0, "max_wait_s": 0.0, "overlapping": 0}
    for i in range(pairs):
        edit_some(tree, rng)
        overlapping = i % 2 == 1
        envs = [env_for(db_url, server, **({"RAGPG_SOURCE_INCLUDED_PATHS": inc} if overlapping else {}))
                for inc in INCLUDES]
        started = time.monotonic()
        with spawned(["ingest", str(tree)], envs[0], cwd) as one, spawned(["ingest", str(tree)], envs[1], cwd) as two:
            outs = [p.communicate(timeout=300) for p in (one, two)]
            codes = [one.returncode, two.returncode]
        stats["max_wait_s"] = max(stats["max_wait_s"], round(time.monotonic() - started, 2))
        stats["races"] += 1
        stats["overlapping"] += overlapping
        errs = [err for _, err in outs]
        stats["waited"] += any("waiting for another ingest" in err for err in errs)
        stats["busy"] += sum(code == 3 and "another ingest" in err for code, err in zip(codes, errs, strict=True))
        stats["failed"] += sum(code not in (0, 3) or "Traceback" in err for code, err in zip(codes, errs, strict=True))
        stats["duplicates"] += counts(db_url)[1]
        stats["violations"] += len(violations(db_url))
    return stats


def union_reference(pg_server_url: str, pg_template: str, tree: Path, server: Any, cwd: Path) -> list[Any]:
    """A clean build of what the races indexed: the whole tree (the same-root runs)."""
    clean = new_database(pg_server_url, pg_template)
    try:
        assert run_cli(["ingest", str(tree)], env=env_for(clean, server), cwd=cwd).returncode == 0
        return dump(clean)
    finally:
        drop_database(pg_server_url, clean)


def run_races(db_url, server, tmp_path, pg_server_url, pg_template, pairs: int,
              contended: int = 0) -> dict[str, Any]:
    tree = write_tree(tmp_path / "tree", 40)
    server.delay = 0.01  # an ingest lasts long enough for its twin to find the lock taken
    try:
        stats = race_pairs(db_url, server, tree, tmp_path, pairs)
    finally:
        server.delay = 0.0
    assert stats["failed"] == stats["duplicates"] == stats["violations"] == 0, stats
    # Twins started together nearly always meet at the lock; how often is the figure, and the
    # slow tier's hundred races must show it (a few fast ones on a loaded machine may not).
    assert stats["waited"] >= contended, stats
    assert run_cli(["ingest", str(tree)], env=env_for(db_url, server), cwd=tmp_path).returncode == 0
    stats["converged"] = dump(db_url) == union_reference(pg_server_url, pg_template, tree, server, tmp_path)
    assert stats["converged"]
    return stats


def c1_text(stats: dict[str, Any]) -> str:
    return (f"{stats['races']} races ({stats['overlapping']} on overlapping include lists), {stats['waited']}"
            f" waited for the lock, {stats['busy']} gave up busy, 0 failures, 0 duplicates, converged;"
            f" max pair duration {stats['max_wait_s']} s")


def test_c1_concurrent_ingests_take_turns(db_url, embed_server, tmp_path, pg_server_url, pg_template, figure):
    stats = run_races(db_url, embed_server, tmp_path, pg_server_url, pg_template, pairs=3)
    figure("C1", c1_text(stats), **stats)


@slow
def test_c1_counted_races(db_url, embed_server, tmp_path, pg_server_url, pg_template, figure):
    stats = run_races(db_url, embed_server, tmp_path, pg_server_url, pg_template, pairs=counted(100, "C1"), contended=1)
    figure("C1", c1_text(stats), **stats)


def lock_held(url: str, key: int) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        # this database's lock only: tests sharing the server use the same collection name
        row = value(conn, "SELECT count(*) FROM pg_locks l JOIN pg_database db ON db.oid = l.database"
                           " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s"
                           " AND db.datname = current_database()", (LOCK_CLASS, key))
    return bool(row and row)


def poll(condition: Any, what: str) -> float:
    """Seconds until ``condition()`` holds (reported as a figure, never judged)."""
    started = time.monotonic()
    eventually(condition, what)
    return time.monotonic() - started


def test_c2_a_killed_holder_frees_the_lock_and_a_paused_one_is_reported(db_url, embed_server, tmp_path, figure):
    tree = write_tree(tmp_path / "tree", 6)
    key = lock_key("ragpg", "default")
    env = env_for(db_url, embed_server)
    # the holder stalls inside its run, lock held, until the test acts on it
    with spawned(["ingest", str(tree)], env, tmp_path, fault_specs=("before_write:1:sleep:600",)) as holder:
        poll(lambda: lock_held(db_url, key), "the holder taking the lock")
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        after_kill = poll(lambda: not lock_held(db_url, key), "the lock freed after its holder died")
    with spawned(["ingest", str(tree)], env, tmp_path, fault_specs=("before_write:1:sleep:600",)) as paused:
        poll(lambda: lock_held(db_url, key), "the second holder taking the lock")
        paused.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            out = run_cli(["ingest", str(tree)], env={**env, "RAGPG_DATABASE_LOCK_TIMEOUT": "2"}, cwd=tmp_path)
            reported = time.monotonic() - started
        finally:
            paused.send_signal(signal.SIGCONT)
    assert out.returncode == 3, out.stderr
    assert "pid " in out.stderr and "another ingest" in out.stderr and "Traceback" not in out.stderr
    assert violations(db_url) == []
    figure("C2", f"lock free {after_kill:.2f} s after SIGKILL of its holder; a SIGSTOPped holder reported"
                 f" (pid, application, state) after the 2 s lock timeout, in {reported:.1f} s; 0 indefinite waits",
           after_kill_s=round(after_kill, 2), busy_reported_s=round(reported, 2))
