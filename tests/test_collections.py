"""An unknown collection is an error wherever it is read (library, CLI), unless the call creates
it; the configured collection is only empty before its first ingest."""

from __future__ import annotations

import pytest

from rag_pg import RagPG, Settings
from rag_pg.errors import CollectionNotFound, ConfigError

from .conftest import run_cli


def _corpus(root):
    root.mkdir()
    (root / "a.md").write_text("# Alpha\n\nUn texte sur les pommes.\n")
    return root


@pytest.fixture
def rag(db_url, embed_server, tmp_path):
    settings = Settings.load(environ={}, overrides={"embedding.url": embed_server.url})
    with RagPG(db_url, settings) as rag:
        rag.ingest(_corpus(tmp_path / "c"), collection="pommes")
        yield rag


def test_reads_of_an_unknown_collection_raise_naming_those_that_exist(rag):
    for read in (lambda: rag.search("pommes", collection="pomes"),
                 lambda: rag.search("pommes", collection="pomes", mode="keyword"),
                 lambda: rag.get_document("a.md", collection="pomes"),
                 lambda: rag.stats("pomes"),
                 lambda: rag.require_collection("pomes")):
        with pytest.raises(CollectionNotFound, match=r"no collection 'pomes' in this index \(collections: 'pommes'\)"):
            read()
    assert issubclass(CollectionNotFound, ConfigError)  # a usage error: CLI exit 2


def test_existing_and_configured_collections_read_as_usual(rag, db_url, tmp_path):
    assert [h.path for h in rag.search("pommes", collection="pommes")] == ["a.md"]
    assert rag.get_document("missing.md", collection="pommes") is None  # the document is absent
    assert rag.stats().documents == 0  # "default", configured, never ingested: empty
    assert rag.search("pommes") == []
    assert rag.collections() == ["pommes"]
    keyword_only = Settings.load(environ={}, overrides={"embedding.provider": "none"})
    with RagPG(db_url, keyword_only) as plain:  # no vectors: existence is read, and holds
        plain.ingest(_corpus(tmp_path / "k"), collection="mots")
        assert [h.path for h in plain.search("pommes", collection="mots")] == ["a.md"]


@pytest.mark.parametrize("args", [["search", "pommes", "-c", "pomes"], ["stats", "-c", "pomes"],
                                  ["tree", "-c", "pomes"], ["context", "pommes", "-c", "pomes"]])
def test_cli_exits_2_in_one_line(rag, db_url, embed_server, tmp_path, args):
    out = run_cli(args, env={"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed_server.url},
                  cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr == "ragpg: error: no collection 'pomes' in this index (collections: 'pommes')\n"
    assert out.stdout == ""
