"""The wheel carries its migrations: `pip install <wheel> && ragpg init` works outside a checkout."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import psycopg
import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_installs_and_inits_outside_the_checkout(empty_db_url, tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    wheel = next(dist.glob("ragpg-*.whl"))
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
        tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'ragpg'")}
        version = conn.execute("SELECT version_num FROM ragpg.alembic_version").fetchone()
    assert {"document", "chunk", "chunk_vector", "ingest_run", "alembic_version"} <= tables
    assert version is not None


def test_compose_file_parses():
    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert data["services"]["db"]["image"].startswith("pgvector/pgvector")
    assert "RAGPG_DATABASE_URL" in data["services"]["ragpg"]["environment"]
