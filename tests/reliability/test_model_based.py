"""A6 and A8: a stateful model of incremental ingest (Hypothesis). Files are added, edited,
deleted, renamed and moved into ``legacy/``, ``.aiignore`` toggles a rule, some ingests fail at a
random failpoint; after every successful ingest the index holds exactly the eligible files,
each with the hash of its bytes, and at the end it equals a clean build of the tree."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

import psycopg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rag_pg import RagPG, Settings
from rag_pg.testing import faults

from ..conftest import drop_database, new_database
from ..invariants import dump, violations
from .conftest import counted, slow

FOLDERS = ("a", "b", "a/deep", "legacy")
NAMES = ("one.md", "two.md", "three.md", "SCRATCH.md", "notes.txt")
SITES = ("after_walk_item", "before_embed", "before_write", "after_write")
# What follows a change: nothing, a clean ingest, or an ingest failing at the n-th pass of a site
# (drawn with every change, so that ingests run on trees that hold documents).
THEN = st.one_of(st.none(), st.just(("clean", 0)), st.tuples(st.sampled_from(SITES), st.integers(1, 2)))
WORDS = st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "sauvegarde", "réseau", "pool"]),
                 min_size=1, max_size=30).map(" ".join)


def eligible(rel: str, ignore_b: bool) -> bool:
    """The documented rules this machine exercises: Markdown only, never SCRATCH.md nor a file
    under a ``legacy`` folder, and ``b/`` out while ``.aiignore`` says so."""
    parts = rel.split("/")
    return (rel.endswith(".md") and parts[-1].lower() != "scratch.md" and "legacy" not in parts[:-1]
            and not (ignore_b and parts[0] == "b"))


class IngestMachine(RuleBasedStateMachine):
    server: Any = None
    pg_server_url = ""
    pg_template = ""
    totals = {"examples": 0, "steps": 0, "ingests": 0, "armed": 0, "faulted": 0}

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="ragpg-a6-"))
        self.url = new_database(self.pg_server_url, self.pg_template)
        self.files: dict[str, bytes] = {}
        self.ignore_b = False
        self.stored: dict[str, str] = {}  # what the index held after the last good ingest
        self.settings = Settings().with_overrides(**{"embedding.url": self.server.url, "embedding.batch_size": 4})
        IngestMachine.totals["examples"] += 1
        # every example starts from an indexed tree of a few documents: the rules change it
        for rel in ("a/one.md", "a/two.md", "b/one.md", "a/deep/three.md"):
            self.write(rel, f"# {rel}\n\nalpha beta {rel}\n".encode())
        self.ingest(None)

    def write(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.files[rel] = data

    @rule(folder=st.sampled_from(FOLDERS), name=st.sampled_from(NAMES), text=WORDS, then=THEN)
    def add(self, folder: str, name: str, text: str, then: tuple[str, int] | None) -> None:
        self.write(f"{folder}/{name}", f"# {name}\n\n{text}\n".encode())
        self.then(then)

    @precondition(lambda self: self.files)
    @rule(data=st.data(), text=WORDS, then=THEN)
    def edit(self, data: st.DataObject, text: str, then: tuple[str, int] | None) -> None:
        rel = data.draw(st.sampled_from(sorted(self.files)))
        self.write(rel, self.files[rel] + f"\n{text}\n".encode())
        self.then(then)

    @precondition(lambda self: self.files)
    @rule(data=st.data(), then=THEN)
    def delete(self, data: st.DataObject, then: tuple[str, int] | None) -> None:
        rel = data.draw(st.sampled_from(sorted(self.files)))
        (self.root / rel).unlink()
        del self.files[rel]
        self.then(then)

    @precondition(lambda self: self.files)
    @rule(data=st.data(), folder=st.sampled_from(FOLDERS), name=st.sampled_from(NAMES), then=THEN)
    def rename(self, data: st.DataObject, folder: str, name: str, then: tuple[str, int] | None) -> None:
        rel = data.draw(st.sampled_from(sorted(self.files)))
        target = f"{folder}/{name}"
        if target != rel:
            content = self.files.pop(rel)
            (self.root / rel).unlink()
            self.write(target, content)
        self.then(then)

    @rule(then=THEN)
    def toggle_aiignore(self, then: tuple[str, int] | None) -> None:
        self.ignore_b = not self.ignore_b
        (self.root / ".aiignore").write_text("b/\n" if self.ignore_b else "# nothing ignored\n")
        self.then(then)

    def then(self, then: tuple[str, int] | None) -> None:
        if then is not None:
            self.ingest(None if then[0] == "clean" else then)

    def ingest(self, fault: tuple[str, int] | None) -> None:
        IngestMachine.totals["ingests"] += 1
        spec = f"{fault[0]}:{fault[1]}:raise" if fault else None
        IngestMachine.totals["armed"] += spec is not None
        with RagPG(self.url, self.settings) as rag:
            try:
                if spec:
                    with faults.installed(spec):
                        rag.ingest(self.root, prune=True)
                else:
                    rag.ingest(self.root, prune=True)
            except faults.InjectedFault:
                IngestMachine.totals["faulted"] += 1
                self.check_between()
                return
        self.stored = {rel: hashlib.sha256(data).hexdigest() for rel, data in self.files.items()
                       if eligible(rel, self.ignore_b)}
        assert self.index() == self.stored

    def index(self) -> dict[str, str]:
        with psycopg.connect(self.url) as conn:
            return dict(conn.execute("SELECT path, content_hash FROM ragpg.document").fetchall())

    def check_between(self) -> None:
        """After a failed run: each document is its last good version or its file's bytes now."""
        now = {rel: hashlib.sha256(data).hexdigest() for rel, data in self.files.items()}
        for path, digest in self.index().items():
            assert digest in (self.stored.get(path), now.get(path)), path

    @invariant()
    def consistent(self) -> None:
        IngestMachine.totals["steps"] += 1
        assert violations(self.url) == []

    def teardown(self) -> None:
        IngestMachine.totals["ingests"] += 1
        try:
            with RagPG(self.url, self.settings) as rag:
                rag.ingest(self.root, prune=True)
            clean = new_database(self.pg_server_url, self.pg_template)
            try:
                with RagPG(clean, self.settings) as rag:
                    rag.ingest(self.root)
                assert dump(self.url) == dump(clean)  # I6: history + a rerun equals a clean build
            finally:
                drop_database(self.pg_server_url, clean)
        finally:
            drop_database(self.pg_server_url, self.url)
            shutil.rmtree(self.root, ignore_errors=True)


def run_machine(server: Any, pg_server_url: str, pg_template: str, examples: int, steps: int) -> dict[str, int]:
    IngestMachine.server, IngestMachine.pg_server_url, IngestMachine.pg_template = server, pg_server_url, pg_template
    IngestMachine.totals = {"examples": 0, "steps": 0, "ingests": 0, "armed": 0, "faulted": 0}
    case = IngestMachine.TestCase
    case.settings = settings(max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
                             suppress_health_check=list(HealthCheck))
    case("runTest").runTest()
    return dict(IngestMachine.totals)


def test_a6_incremental_ingest_matches_its_model(embed_server, pg_server_url, pg_template, figure):
    totals = run_machine(embed_server, pg_server_url, pg_template, examples=6, steps=10)
    assert totals["examples"] >= 6 and totals["ingests"] >= totals["examples"]
    figure("A6", f"{totals['examples']} examples x up to 10 steps ({totals['ingests']} ingests,"
                 f" {totals['armed']} with a failpoint armed, {totals['faulted']} failed there), 0 failures; renames, legacy/, SCRATCH.md"
                 " and .aiignore propagate with 0 orphans (A8)", **totals)


@slow
def test_a6_counted_model_examples(embed_server, pg_server_url, pg_template, figure):
    examples = counted(5000, "A6")
    totals = run_machine(embed_server, pg_server_url, pg_template, examples=examples, steps=25)
    figure("A6", f"{totals['examples']} examples x up to 25 steps ({totals['ingests']} ingests,"
                 f" {totals['armed']} with a failpoint armed, {totals['faulted']} failed there), 0 failures", **totals)
