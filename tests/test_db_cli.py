"""``ragpg db``: the embedded server run for a team. It listens on TCP with SCRAM passwords only
(no ``trust`` for TCP in its pg_hba.conf), keeps its socket in a 0700 folder and its generated
superuser password in a 0600 file (never printed), outlives the commands that use it, and a
start that fails leaves no process behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from rag_pg.store import embedded as embedded_pg
from rag_pg.store.embedded import PASSWORD_FILE, hba_rules

from .conftest import ROOT, run_cli
from .private_pg import _free_port


@dataclass
class Team:
    home: Path
    port: int
    env: dict[str, str]

    @property
    def data(self) -> Path:
        return self.home / "pg"

    def cli(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        out = run_cli(list(args), env={**self.env, **(env or {})}, cwd=self.home, timeout=180)
        return out.returncode, out.stdout, out.stderr


def _postmasters(data: Path) -> list[int]:
    """Processes whose command line names ``data`` as their data folder (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"postgres") and str(data).encode() in argv:
            found.append(int(entry.name))
    return found


def _reap(team: Team) -> None:
    """Stop the server, and kill what a failed stop would leave."""
    team.cli("db", "stop")
    for pid in _postmasters(team.data):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def team() -> Iterator[Team]:
    home = Path(tempfile.mkdtemp(prefix="ragpg-team-"))
    port = _free_port()
    team = Team(home, port, {"RAGPG_HOME": str(home), "RAGPG_EMBEDDED_LISTEN": f"127.0.0.1:{port}",
                             "RAGPG_EMBEDDING_PROVIDER": "none"})
    try:
        code, out, err = team.cli("db", "start")
        assert code == 0, err
        assert out.startswith("started the embedded PostgreSQL in"), out
        yield team
    finally:
        _reap(team)
        shutil.rmtree(home, ignore_errors=True)


def _password(team: Team) -> str:
    return (team.data / PASSWORD_FILE).read_text().strip()


def test_it_listens_on_tcp_with_passwords_only_and_keeps_its_secrets_private(team: Team) -> None:
    code, out, err = team.cli("db", "status", "--json")
    assert code == 0, err
    status = json.loads(out)
    assert (status["running"], status["managed"], status["listen"], status["port"]) == (
        True, True, "127.0.0.1", team.port)
    rules = [line.split() for line in (team.data / "pg_hba.conf").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    tcp = [rule for rule in rules if rule[0].startswith("host")]
    assert tcp and all(rule[-1] == "scram-sha-256" for rule in tcp)
    assert [rule for rule in rules if "trust" in rule] == [["local", "all", "all", "trust"]]
    # The trusted socket sits in a folder only its owner enters; the password file is 0600.
    assert Path(status["socket_dir"]) == team.data
    assert stat.S_IMODE(team.data.stat().st_mode) == 0o700
    assert stat.S_IMODE((team.data / PASSWORD_FILE).stat().st_mode) == 0o600
    code, url, err = team.cli("db", "url", "--user", "bi")
    assert (code, url.strip()) == (0, f"postgresql://bi@127.0.0.1:{team.port}/postgres")
    code, again, err2 = team.cli("db", "start")
    assert code == 0 and again.startswith("already running"), err2
    assert f"pid {status['pid']}," in again
    code, _, moved = team.cli("db", "start", env={"RAGPG_EMBEDDED_LISTEN": "127.0.0.1:1"})
    assert code == 0 and "`ragpg db stop` and start it again" in moved, moved
    for text in (out, url, err, again, err2):
        assert _password(team) not in text


def test_a_bi_reader_over_tcp_sees_the_index_and_a_wrong_password_is_refused(team: Team) -> None:
    corpus = team.home / "corpus"
    shutil.copytree(ROOT / "examples" / "corpus", corpus, dirs_exist_ok=True)
    pid = json.loads(team.cli("db", "status", "--json")[1])["pid"]
    for args in (("init",), ("ingest", str(corpus))):
        code, out, err = team.cli(*args)
        assert code == 0, err
    code, out, err = team.cli("roles", "create-reader", "bi", "--password-env", "BI_PW",
                              env={"BI_PW": "reader secret 1"})
    assert code == 0, err
    # The commands joined the server and left it running.
    assert json.loads(team.cli("db", "status", "--json")[1])["pid"] == pid

    url = team.cli("db", "url", "--user", "bi")[1].strip()
    with psycopg.connect(url, password="reader secret 1", connect_timeout=10) as conn:
        assert conn.info.host == "127.0.0.1"  # TCP, not the socket
        assert conn.execute("SELECT count(*) FROM ragpg.documents_v").fetchone() == (9,)
        found = conn.execute("SELECT path FROM ragpg.keyword_search('pool sizing', 1)").fetchall()
        assert found == [("en/ops/connection-pooling.md",)]
    for password in ("wrong", None):
        with pytest.raises(psycopg.OperationalError) as refused:
            psycopg.connect(url, password=password, connect_timeout=10).close()
        assert "password" in str(refused.value)
    superuser = team.cli("db", "url")[1].strip()
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(superuser, password="guess", connect_timeout=10).close()
    with psycopg.connect(superuser, password=_password(team), connect_timeout=10) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)


def test_stop_status_and_start_again(team: Team) -> None:
    password = _password(team)
    code, out, err = team.cli("db", "stop")
    assert (code, out.startswith("stopped")) == (0, True), err
    assert _postmasters(team.data) == []
    code, out, err = team.cli("db", "status", "--json")
    assert code == 3 and json.loads(out)["running"] is False
    code, out, err = team.cli("db", "stop")
    assert code == 0 and out.startswith("not running"), err
    code, out, err = team.cli("db", "start")
    assert code == 0 and out.startswith("started"), err
    assert _password(team) == password  # kept across starts
    url = team.cli("db", "url")[1].strip()
    with psycopg.connect(url, password=password, connect_timeout=10) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_start_that_fails_leaves_no_process_behind() -> None:
    home = Path(tempfile.mkdtemp(prefix="ragpg-team-busy-"))
    taken = socket.socket()
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = Team(home, taken.getsockname()[1],
                {"RAGPG_HOME": str(home), "RAGPG_EMBEDDED_LISTEN": f"127.0.0.1:{taken.getsockname()[1]}"})
    try:
        code, out, err = busy.cli("db", "start")
        assert code == 3, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ragpg: error: cannot start the embedded"), err
        assert "address" in lines[0].lower() or "bind" in lines[0].lower(), err
        assert _postmasters(busy.data) == []
        assert busy.cli("db", "status")[0] == 3
    finally:
        taken.close()
        _reap(busy)
        shutil.rmtree(home, ignore_errors=True)


def test_a_zero_config_server_is_not_taken_over_and_password_env_sets_the_password() -> None:
    home = Path(tempfile.mkdtemp(prefix="ragpg-team-env-"))
    port = _free_port()
    team = Team(home, port, {"RAGPG_HOME": str(home), "RAGPG_EMBEDDED_LISTEN": f"127.0.0.1:{port}",
                             "RAGPG_EMBEDDED_PASSWORD_ENV": "TEAM_PW", "TEAM_PW": "team secret 2"})
    try:
        # A command's own server (the usual way: socket only, stopped when it exits) is running.
        url, _, handle = embedded_pg.start(team.data)
        try:
            code, out, err = team.cli("db", "start")
            assert code == 3 and "running for another ragpg command" in err, err
        finally:
            handle.cleanup()
        code, out, err = team.cli("db", "start")
        assert code == 0, err
        assert not (team.data / PASSWORD_FILE).exists()
        tcp = team.cli("db", "url")[1].strip()
        with psycopg.connect(tcp, password="team secret 2", connect_timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        code, out, err = team.cli("db", "start", env={"TEAM_PW": ""})
        assert code == 0  # already running: the variable is not read again
    finally:
        _reap(team)
        shutil.rmtree(home, ignore_errors=True)


def test_only_an_address_beyond_loopback_opens_remote_lines_and_those_need_a_password() -> None:
    loopback = hba_rules("127.0.0.1")
    assert "0.0.0.0/0" not in loopback and "::/0" not in loopback
    wide = [line.split() for line in hba_rules("0.0.0.0").splitlines() if line.startswith("host")]
    assert ["host", "all", "all", "0.0.0.0/0", "scram-sha-256"] in wide
    assert all(rule[-1] == "scram-sha-256" for rule in wide)


def test_a_tenant_bound_reader_over_tcp_sees_only_its_tenant(team: Team) -> None:
    """A BI tool that logs in over TCP as a reader bound to one tenant reads that tenant's
    collections only, through every published view and keyword_search(), whatever it sets."""
    corpus = team.home / "tenant-corpus"
    shutil.copytree(ROOT / "examples" / "corpus", corpus, dirs_exist_ok=True)
    steps = [("init",), ("ingest", str(corpus), "-c", "acme"), ("ingest", str(corpus), "-c", "globex"),
             ("tenancy", "enable"), ("tenancy", "assign", "acme", "acme"),
             ("tenancy", "assign", "globex", "globex")]
    for args in steps:
        code, _, err = team.cli(*args)
        assert code == 0, (args, err)
    code, _, err = team.cli("roles", "create-reader", "bi_acme", "--tenant", "acme",
                            "--password-env", "BI_PW", env={"BI_PW": "acme reader 1"})
    assert code == 0, err
    try:
        url = team.cli("db", "url", "--user", "bi_acme")[1].strip()
        with psycopg.connect(url, password="acme reader 1", connect_timeout=10,
                             autocommit=True) as conn:
            assert conn.info.host == "127.0.0.1"  # TCP, not the socket
            for view in ("documents_v", "chunks_v"):
                seen = conn.execute(sql.SQL("SELECT DISTINCT collection FROM ragpg.{}").format(
                    sql.Identifier(view))).fetchall()
                assert seen == [("acme",)], view
            # Choosing another tenant is not the reader's to do.
            conn.execute("SELECT set_config('ragpg.tenant', 'globex', false)")
            assert conn.execute("SELECT DISTINCT collection FROM ragpg.documents_v").fetchall() == [
                ("acme",)]
            search = "SELECT path FROM ragpg.keyword_search('pool sizing', 5, %s)"
            assert conn.execute(search, ("acme",)).fetchall()[:1] == [("en/ops/connection-pooling.md",)]
            assert conn.execute(search, ("globex",)).fetchall() == []
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(url, password="wrong", connect_timeout=10).close()
    finally:
        code, _, err = team.cli("tenancy", "disable")
        assert code == 0, err
