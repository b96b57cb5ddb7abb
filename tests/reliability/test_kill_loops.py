"""A1 and A2: counted failpoint loops and random SIGKILLs of the ingest, each followed by the
invariants, a per-document "entirely old or entirely new" check and a converging rerun."""

from __future__ import annotations

import hashlib
import random
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from rag_pg import RagPG, Settings
from rag_pg.testing import faults

from ..conftest import drop_database, new_database, run_cli
from ..invariants import dump, violations
from .conftest import counted, slow
from .harness import edit_some, env_for, spawned, write_tree

SITES = ("after_walk_item", "before_embed", "after_embed", "before_write", "after_write")


def by_document(rows: list[Any]) -> dict[tuple[str, str], list[Any]]:
    grouped: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for row in rows:
        grouped[(row["collection"], row["path"])].append(row)
    return dict(grouped)


def mixed_documents(rows: list[Any], old: list[Any], new: list[Any]) -> list[str]:
    """Documents whose stored rows are neither their old version's nor their new version's."""
    now, before, after = by_document(rows), by_document(old), by_document(new)
    return [key[1] for key, stored in now.items() if stored not in (before.get(key), after.get(key))]


def settings_for(server: Any) -> Settings:
    return Settings().with_overrides(**{"embedding.url": server.url, "embedding.batch_size": 8})


def ingest(url: str, tree: Path, server: Any) -> None:
    with RagPG(url, settings_for(server)) as rag:
        rag.ingest(tree)


class Versions:
    """A tree that flips between two versions of every document, with a clean dump of each."""

    def __init__(self, root: Path, n: int, pg_server_url: str, pg_template: str, server: Any):
        self.root = write_tree(root, n)
        self.texts = {p: p.read_text() for p in sorted(root.rglob("*.md"))}
        self.current = 0
        self.refs: list[list[Any]] = []
        for version in (0, 1):
            self.write(version)
            scratch = new_database(pg_server_url, pg_template)
            try:
                ingest(scratch, self.root, server)
                self.refs.append(dump(scratch))
            finally:
                drop_database(pg_server_url, scratch)
        self.write(0)

    def write(self, version: int) -> None:
        for path, text in self.texts.items():
            path.write_text(text + (f"\nSecond version of {path.stem}.\n" if version else ""))
        self.current = version


def failpoint_loop(db_url: str, versions: Versions, server: Any, mode: str, tmp_path: Path,
                   sites: tuple[str, ...] = SITES, most: int = 10_000) -> dict[str, int]:
    """For each site and n = 1, 2, ... until a run completes: fail the n-th pass, check, rerun."""
    ingest(db_url, versions.root, server)  # the index holds version 0
    stats = {"runs": 0, "violations": 0, "mixed": 0, "not_converged": 0}
    for site in sites:
        for nth in range(1, most + 1):
            before = versions.refs[versions.current]
            versions.write(1 - versions.current)
            fired = run_with_fault(db_url, versions.root, server, f"{site}:{nth}:{mode}", tmp_path)
            stats["runs"] += 1
            found = violations(db_url)
            stats["violations"] += len(found)
            stats["mixed"] += len(mixed_documents(dump(db_url), before, versions.refs[versions.current]))
            ingest(db_url, versions.root, server)  # the clean rerun
            stats["not_converged"] += dump(db_url) != versions.refs[versions.current]
            if not fired:
                break
    return stats


def run_with_fault(db_url: str, tree: Path, server: Any, spec: str, cwd: Path) -> bool:
    """One ingest with the fault; True when it fired (the run failed there)."""
    if spec.endswith(":exit"):
        out = run_cli(["ingest", str(tree)], env=env_for(db_url, server), cwd=cwd, faults=(spec,))
        assert out.returncode in (0, 137), out.stderr
        return out.returncode == 137
    with faults.installed(spec), RagPG(db_url, settings_for(server)) as rag:
        try:
            rag.ingest(tree)
        except faults.InjectedFault:
            return True
    return False


def test_a1_every_failpoint_pass_raises_then_converges(db_url, embed_server, tmp_path, pg_server_url,
                                                       pg_template, figure):
    versions = Versions(tmp_path / "tree", 6, pg_server_url, pg_template, embed_server)
    stats = failpoint_loop(db_url, versions, embed_server, "raise", tmp_path)
    exits = failpoint_loop(db_url, versions, embed_server, "exit", tmp_path, sites=("after_embed",), most=2)
    assert stats["runs"] > len(SITES) and exits["runs"] == 2
    assert stats["violations"] == stats["mixed"] == stats["not_converged"] == 0, stats
    assert exits["violations"] == exits["mixed"] == exits["not_converged"] == 0
    figure("A1", f"{len(SITES)} sites x every n (raise, 6 docs): {stats['runs']} failed runs + "
                 f"{exits['runs']} hard exits, 0 invariant violations, 0 mixed documents, 0 non-converging reruns",
           **{f"raise_{k}": v for k, v in stats.items()}, exit_runs=exits["runs"])


@slow
def test_a1_counted_failpoint_loop_both_modes(db_url, embed_server, tmp_path, pg_server_url, pg_template,
                                              figure):
    versions = Versions(tmp_path / "tree", counted(50, "A1"), pg_server_url, pg_template, embed_server)
    total = {}
    for mode in ("raise", "exit"):
        stats = failpoint_loop(db_url, versions, embed_server, mode, tmp_path)
        assert stats["violations"] == stats["mixed"] == stats["not_converged"] == 0, (mode, stats)
        total[mode] = stats["runs"]
    figure("A1", f"{len(SITES)} sites x every n x 2 modes on {counted(50, 'A1')} docs: {total['raise']} raised + "
                 f"{total['exit']} hard exits, 0 invariant violations, 0 mixed documents, 0 non-converging reruns",
           raised=total["raise"], exits=total["exit"], docs=counted(50, "A1"))


def kill_loop(db_url: str, tree: Path, server: Any, kills: int, most_delay: float, cwd: Path,
              seed: int = 7) -> dict[str, Any]:
    """Start an ingest, SIGKILL it after a random 0..most_delay s, edit 0-5 files; repeat."""
    rng = random.Random(seed)
    known: dict[str, set[str]] = defaultdict(set)

    def remember() -> None:
        for path in tree.rglob("*.md"):
            known[path.relative_to(tree).as_posix()].add(hashlib.sha256(path.read_bytes()).hexdigest())

    remember()
    stats: dict[str, Any] = {"kills": 0, "mid_run": 0, "repair_killed": 0, "violations": 0, "partial": 0}
    repairing = False
    for _ in range(kills):
        args = ["ingest", str(tree)] + (["--full"] if rng.random() < 0.5 else [])
        with spawned(args, env_for(db_url, server), cwd) as proc:
            time.sleep(rng.uniform(0, most_delay))  # a random moment, not a synchronisation
            proc.send_signal(signal.SIGKILL)
            code = proc.wait()
        stats["kills"] += 1
        killed = code == -signal.SIGKILL
        stats["mid_run"] += killed
        stats["repair_killed"] += killed and repairing
        stats["violations"] += len(violations(db_url))
        stats["partial"] += len(unknown_versions(db_url, known))
        repairing = killed and edit_some(tree, rng) == 0  # the next run repairs this one's damage
        remember()
    out = run_cli(["ingest", str(tree)], env=env_for(db_url, server), cwd=cwd)
    assert out.returncode == 0, out.stderr
    stats["final_violations"] = len(violations(db_url))
    return stats


def unknown_versions(url: str, known: dict[str, set[str]]) -> list[str]:
    """Documents whose stored hash is no version their file ever had."""
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT path, content_hash FROM ragpg.document").fetchall()
    return [path for path, digest in rows if digest not in known.get(path, set())]


def converged(db_url: str, tree: Path, server: Any, pg_server_url: str, pg_template: str) -> bool:
    clean = new_database(pg_server_url, pg_template)
    try:
        ingest(clean, tree, server)
        return dump(db_url) == dump(clean)
    finally:
        drop_database(pg_server_url, clean)


def run_kills(db_url, server, tmp_path, pg_server_url, pg_template, *, docs: int, kills: int,
              most_delay: float) -> dict[str, Any]:
    tree = write_tree(tmp_path / "tree", docs)
    server.delay = 0.01
    try:
        stats = kill_loop(db_url, tree, server, kills, most_delay, tmp_path)
    finally:
        server.delay = 0.0
    assert stats["violations"] == stats["partial"] == stats["final_violations"] == 0, stats
    assert stats["mid_run"] >= 1, stats  # at least one kill landed inside a run
    assert converged(db_url, tree, server, pg_server_url, pg_template)
    return stats


def test_a2_random_kills_never_leave_a_partial_document(db_url, embed_server, tmp_path, pg_server_url,
                                                        pg_template, figure):
    stats = run_kills(db_url, embed_server, tmp_path, pg_server_url, pg_template,
                      docs=60, kills=4, most_delay=2.0)
    figure("A2", f"{stats['kills']} kills ({stats['mid_run']} mid-run, {stats['repair_killed']} of a repairing"
                 " rerun), 0 partial documents, 0 orphans, converged", **stats)


@slow
def test_a2_counted_random_kills(db_url, embed_server, tmp_path, pg_server_url, pg_template, figure):
    kills = counted(200, "A2")
    stats = run_kills(db_url, embed_server, tmp_path, pg_server_url, pg_template,
                      docs=300, kills=kills, most_delay=3.0)
    figure("A2", f"{stats['kills']} kills ({stats['mid_run']} mid-run, {stats['repair_killed']} of a repairing"
                 f" rerun) on 300 docs, 0 partial documents, 0 orphans, {stats['kills']}/{stats['kills']}"
                 " invariant checks clean, converged", **stats)
