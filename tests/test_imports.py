"""What a process pays for before it does anything: a no-change re-ingest or a search must not
load the migration tools (Alembic, SQLAlchemy: ~0.5 s), the HTTP client (httpx: ~0.1 s) or
the Markdown/YAML parser. They come in with the operations that need them."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("alembic", "sqlalchemy", "httpx", "yaml", "rag_pg.parse", "rag_pg.migrate")


def loaded_after(code: str) -> list[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_library_loads_none_of_the_heavy_modules():
    assert loaded_after("import rag_pg, rag_pg.api, rag_pg.embed, rag_pg.ingest") == []


def test_they_load_when_an_operation_needs_them():
    assert loaded_after("import rag_pg.embed.http") == ["httpx"]
    assert set(loaded_after("from rag_pg.api import RagPG; from rag_pg import migrate")) >= {
        "alembic", "sqlalchemy", "rag_pg.migrate"}
