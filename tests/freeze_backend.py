"""Run the ``ragpg`` CLI with a checkpoint hook that freezes (SIGSTOP) its database backend.

    python tests/freeze_backend.py SITE PIDFILE -- ingest docs/

On the first pass through SITE, the backends of this ragpg process's pool (every ``ragpg``
backend of the server that holds no advisory lock, so the lock's own connection is spared) are
stopped and their pids written to PIDFILE; the command then goes on and meets a frozen server on
its next call. The test that runs this sends SIGCONT to those pids. The server must be a test's
own (the hook needs the right to signal its processes).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import psycopg
from psycopg.rows import scalar_row

from rag_pg.cli import main as ragpg_main
from rag_pg.store import checkpoints

_RAGPG_BACKENDS = """
SELECT pid FROM pg_stat_activity
WHERE application_name = 'ragpg' AND pid <> pg_backend_pid()
  AND pid NOT IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory')
"""


def main(argv: list[str]) -> None:
    site, pidfile, dashes, *command = argv
    assert dashes == "--", "usage: freeze_backend.py SITE PIDFILE -- COMMAND..."
    url = os.environ["RAGPG_DATABASE_URL"]
    done = False

    def freeze(reached: str) -> None:
        nonlocal done
        if reached != site or done:
            return
        done = True
        with psycopg.connect(url, autocommit=True, application_name="freezer") as conn, \
                conn.cursor(row_factory=scalar_row) as cur:
            pids = cur.execute(_RAGPG_BACKENDS).fetchall()
        assert pids, "no ragpg backend to freeze"
        Path(pidfile).write_text(" ".join(map(str, pids)))
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)

    checkpoints.install(freeze)
    sys.argv = ["ragpg", *command]
    ragpg_main()


if __name__ == "__main__":
    main(sys.argv[1:])
