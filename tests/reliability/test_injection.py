"""G2: hostile strings as front-matter filter keys and values, path prefixes and collection
names: every answer equals a filter evaluated in Python, and no SQL error ever escapes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_pg import RagPG, Settings
from rag_pg.errors import RagError

from .conftest import counted, slow

PAYLOADS = ["'", "''", "\"", "--", ";", "$$", "$tag$", "\\", "\\'", "%", "_", "*", ")", "(", "'; DROP TABLE x; --",
            "\" OR 1=1 --", "a' OR 'a'='a", "\u02bc", "\uff07", "é", "東京", "' || pg_sleep(5) || '",
            "{\"$ne\": null}", "@>", "?|", "->>", "1) OR (1=1",
            # the metadata-filter payload of a peer's injection report, as a value and as a key
            "x') OR 1=1 OR ('x' = 'x"]
TEXT = st.one_of(st.sampled_from(PAYLOADS), st.text(min_size=1, max_size=20).filter(lambda s: "\x00" not in s))


def hostile_corpus(root: Path) -> dict[str, dict[str, str]]:
    """One document per payload: its payload as a front-matter value and as a key."""
    meta: dict[str, dict[str, str]] = {}
    for i, payload in enumerate(PAYLOADS):
        path = f"d{i:02}.md"
        fm = {"tag": payload, payload: "yes"}
        lines = "\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in fm.items())
        (root / path).write_text(f"---\n{lines}\n---\n# Doc {i}\n\ncommun passage {i}\n")
        meta[path] = fm
    return meta


def documented_prefix(raw: str) -> str | None:
    """A path prefix as documented: blanks trimmed, ``\\`` as ``/``, leading ``./`` and edge ``/``
    dropped, repeated ``/`` collapsed; nothing left means no filter. Matched segment by segment."""
    cleaned = re.sub(r"^(\./)+", "", raw.strip().replace("\\", "/")).strip("/")
    return re.sub(r"/+", "/", cleaned) or None


def check_filters(rag: RagPG, meta: dict[str, dict[str, str]], key: str, value: str, stats: dict[str, int]) -> None:
    stats["tried"] += 1
    try:
        hits = rag.search("commun passage", 50, mode="keyword", filters={key: value})
    except psycopg.Error:
        stats["sql_errors"] += 1
        return
    except RagError:
        stats["refused"] += 1
        return
    expected = {p for p, fm in meta.items() if fm.get(key) == value}
    stats["mismatches"] += {h.path for h in hits} != expected


def run_payloads(db_url: str, server: Any, tmp_path: Path, examples: int) -> dict[str, int]:
    root = tmp_path / "hostile"
    root.mkdir()
    meta = hostile_corpus(root)
    stats = {"tried": 0, "sql_errors": 0, "mismatches": 0, "refused": 0, "prefix_or_collection": 0}
    with RagPG(db_url, Settings().with_overrides(**{"embedding.url": server.url})) as rag:
        report = rag.ingest(root)
        assert report.documents_indexed == len(PAYLOADS), report.failures
        for fm in meta.values():  # every stored key and value, then random hostile pairs
            for key, value in fm.items():
                check_filters(rag, meta, key, value, stats)

        @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(key=TEXT, value=TEXT)
        def random_pairs(key: str, value: str) -> None:
            check_filters(rag, meta, key, value, stats)
            for prefix_or_name in (key, value):
                stats["prefix_or_collection"] += 1
                try:
                    hits = rag.search("commun", 5, mode="keyword", path_prefix=prefix_or_name)
                    prefix = documented_prefix(prefix_or_name)
                    assert prefix is None or all(h.path == prefix or h.path.startswith(prefix + "/")
                                                 for h in hits), (prefix_or_name, [h.path for h in hits])
                    rag.search("commun", 5, mode="keyword", collection=prefix_or_name)
                except psycopg.Error:
                    stats["sql_errors"] += 1
                except RagError:
                    pass  # an unknown collection or a bad prefix is a clean error

        random_pairs()
    return stats


def g2_text(stats: dict[str, int]) -> str:
    return (f"{stats['tried']} filter payloads + {stats['prefix_or_collection']} path prefixes/collection names:"
            f" result mismatches {stats['mismatches']}, SQL errors {stats['sql_errors']}")


def test_g2_hostile_filters_prefixes_and_names(db_url, embed_server, tmp_path, figure):
    stats = run_payloads(db_url, embed_server, tmp_path, 60)
    assert stats["sql_errors"] == stats["mismatches"] == 0, stats
    figure("G2", g2_text(stats), **stats)


@slow
def test_g2_counted_hostile_inputs(db_url, embed_server, tmp_path, figure):
    stats = run_payloads(db_url, embed_server, tmp_path, counted(2000, "G2"))
    assert stats["sql_errors"] == stats["mismatches"] == 0, stats
    figure("G2", g2_text(stats), **stats)
