"""B3: a flapping embedding service (30 % of calls fail) and one poison document."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import psycopg

from rag_pg import RagPG, Settings
from rag_pg.errors import RagError
from rag_pg.testing.embedserver import FakeEmbeddingServer
from rag_pg.testing.fake_http import FakeHandler

from ..invariants import violations
from ..rows import value
from .conftest import counted, slow
from .harness import write_tree

POISON = "POISON-7f3a"


class FlappingServer(FakeEmbeddingServer):
    """Fails a seeded random share of its /embed calls with 503; the rest answer normally."""

    def __init__(self, share: float, seed: int = 3, **kwargs: Any):
        super().__init__(**kwargs)
        self.share = share
        self.failed = 0
        self._rng = random.Random(seed)
        self._flap_lock = threading.Lock()

    def answer_post(self, handler: FakeHandler, path: str, body: bytes) -> None:
        with self._flap_lock:
            fail = self._rng.random() < self.share
            self.failed += fail
        if fail:
            handler.send_json(503, {"detail": "flapping"})
            return
        super().answer_post(handler, path, body)


def flapping_run(tmp_path: Path, db_url: str, docs: int, most_runs: int = 30) -> dict[str, Any]:
    tree = write_tree(tmp_path / "tree", docs, paragraphs=3)
    poison = tree / "part0" / "doc0000.md"
    poison.write_text(poison.read_text() + f"\n{POISON}\n")
    stats: dict[str, Any] = {"runs": 0, "aborted_runs": 0, "poison_reported": 0, "violations": 0}
    with FlappingServer(0.3, dim=64) as server:
        server.poison = POISON
        settings = Settings().with_overrides(**{
            "embedding.url": server.url, "embedding.batch_size": 8, "embedding.backoff": 0.01,
            "embedding.backoff_max": 0.05, "embedding.cooldown": 0.01})
        for _ in range(most_runs):
            stats["runs"] += 1
            with RagPG(db_url, settings) as rag:
                try:
                    report = rag.ingest(tree)
                except RagError:
                    stats["aborted_runs"] += 1  # the service was down for all of a batch's attempts
                    report = None
            stats["violations"] += len(violations(db_url))
            if report is not None:
                stats["poison_reported"] += [f.path for f in report.failures] == ["part0/doc0000.md"]
                if report.documents_seen == report.documents_skipped + report.documents_failed:
                    break  # nothing left to index but the poison document
        stats["injected_503"] = server.failed
        stats["calls"] = server.calls
    with psycopg.connect(db_url) as conn:
        row = value(conn, "SELECT count(*) FROM ragpg.document")
    stats["indexed"] = int(row) if row else 0
    stats["expected"] = docs - 1
    return stats


def check(stats: dict[str, Any]) -> None:
    assert stats["indexed"] == stats["expected"], stats
    assert stats["violations"] == 0, stats
    assert stats["poison_reported"] == stats["runs"] - stats["aborted_runs"], stats
    assert stats["injected_503"] > 0, stats


def b3_text(stats: dict[str, Any]) -> str:
    return (f"coverage after reruns {stats['indexed']}/{stats['expected']} in {stats['runs']} runs"
            f" ({stats['aborted_runs']} aborted), {stats['injected_503']} of {stats['calls']} calls failed 503,"
            f" poison reported in every completed run, 0 partial docs")


def test_b3_flapping_service_and_a_poison_document(db_url, tmp_path, figure):
    stats = flapping_run(tmp_path, db_url, docs=100)
    check(stats)
    figure("B3", b3_text(stats), **stats)


@slow
def test_b3_counted_flapping_service(db_url, tmp_path, figure):
    stats = flapping_run(tmp_path, db_url, docs=counted(1000, "B3"))
    check(stats)
    figure("B3", b3_text(stats), **stats)
