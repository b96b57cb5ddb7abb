"""What a process pays for before it does anything: a no-change re-ingest or a search must not
load the migration tools (Alembic, SQLAlchemy: ~0.5 s), the Markdown/YAML parser or numpy
(~0.1 s). They come in with the operations that need them. httpx, a required dependency the
embedding providers use, is imported with them like any other light module."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("alembic", "sqlalchemy", "yaml", "numpy", "markdown_it", "fastapi", "rag_pg.source.parse",
         "rag_pg.store.migrate")
# What a command that only talks (help, a search without embedding) needs none of.
DRIVERS = ("psycopg", "httpx")


def loaded_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter holds after running ``code``."""
    probe = f"import sys, json\n{code}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_library_loads_none_of_the_heavy_modules():
    assert loaded_after("import rag_pg, rag_pg.api, rag_pg.embed, rag_pg.ingest.run") == []


def test_they_load_when_an_operation_needs_them():
    assert set(loaded_after("from rag_pg.api import RagPG; from rag_pg.store import migrate")) >= {
        "alembic", "sqlalchemy", "rag_pg.store.migrate"}
    assert "numpy" in loaded_after("from rag_pg.embed import validate_vectors;"
                                   " validate_vectors([[1.0]], count=1, dimension=1)")


def test_a_no_change_reingest_loads_none_of_them(db_url, embed_server, corpus):
    from rag_pg import RagPG, Settings

    overrides = {"embedding.provider": "http", "embedding.url": embed_server.url}
    with RagPG(db_url, Settings.load(environ={}, overrides=overrides)) as rag:
        rag.init()
        assert rag.ingest(corpus).documents_indexed > 0
    code = (
        "from rag_pg import RagPG, Settings\n"
        f"settings = Settings.load(environ={{}}, overrides={overrides!r})\n"
        f"with RagPG({db_url!r}, settings) as rag:\n"
        f"    report = rag.ingest({str(corpus)!r})\n"
        "assert report.documents_indexed == 0 and report.documents_skipped > 0, report\n"
    )
    # The HTTP provider itself is built but never called: numpy is never needed.
    assert loaded_after(code) == []


def test_the_library_and_the_cli_never_load_the_test_helpers():
    probe = ("import sys, rag_pg, rag_pg.api, rag_pg.ingest.run, rag_pg.admin.reembed, rag_pg.cli\n"
             "print([m for m in sys.modules if m.startswith('rag_pg.testing')])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def cli_modules(args: list[str], env: dict[str, str] | None = None) -> set[str]:
    """The top-level packages a fresh ``ragpg ARGS`` process held when it ended."""
    probe = ("import sys, json\n"
             f"sys.argv = ['ragpg', *{args!r}]\n"
             "from rag_pg.cli import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} | set(sys.modules))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env=env)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_help_loads_no_driver_client_or_parser():
    for args in (["--help"], ["search", "--help"], ["ingest", "--help"], ["serve", "--help"]):
        loaded = cli_modules(args)
        assert [m for m in (*HEAVY, *DRIVERS, "rag_pg.api") if m in loaded] == [], args


def test_a_keyword_search_loads_no_parser_http_client_or_numpy(db_url, embed_server, corpus):
    import os

    from rag_pg import RagPG, Settings

    overrides = {"embedding.provider": "http", "embedding.url": embed_server.url}
    with RagPG(db_url, Settings.load(environ={}, overrides=overrides)) as rag:
        rag.init()
        assert rag.ingest(corpus).documents_indexed > 0
    env = {**os.environ, "RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed_server.url}
    loaded = cli_modules(["search", "sauvegarde", "--mode", "keyword", "--json"], env=env)
    assert "psycopg" in loaded  # it did search
    assert [m for m in (*HEAVY, "httpx") if m in loaded] == []
