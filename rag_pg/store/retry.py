"""Replays a write transaction that PostgreSQL aborted for a reason that passes with time.

A serialization failure (40001), a deadlock (40P01) and a lock wait that ran past
``lock_timeout`` (55P03) say nothing about the data: the same transaction, run again once the
other writer is done, succeeds. ragpg's own writers never meet them (one writer per collection
holds its lock); a foreign writer on the same rows (a script, an admin's UPDATE) or a server
whose default isolation is SERIALIZABLE does. Every other error is the data's or the server's
and is raised at once: replaying a unique violation or a value error only repeats it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg import errors
from psycopg.pq import TransactionStatus

from rag_pg.store import checkpoints

T = TypeVar("T")

TRANSIENT: tuple[type[psycopg.Error], ...] = (
    errors.SerializationFailure,
    errors.DeadlockDetected,
    errors.LockNotAvailable,
)


@dataclass(frozen=True, slots=True)
class TransientRetry:
    """Up to ``attempts`` runs of one transaction, ``delay × 2ⁿ`` apart with ±50 % jitter.

    The jitter keeps two writers that collided from colliding again at the same instant.
    """

    attempts: int = 4
    delay: float = 0.05
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[], float] = random.random

    def run(self, conn: psycopg.Connection[Any], transaction: Callable[[], T]) -> T:
        """Run ``transaction`` (a function that opens and ends its own transaction block).

        Inside a caller's transaction it runs once: PostgreSQL aborted the caller's whole
        transaction (a savepoint cannot undo a serialization failure), so only the caller can
        replay it.
        """
        if conn.info.transaction_status != TransactionStatus.IDLE:
            return transaction()
        attempt = 1
        while True:
            try:
                return transaction()
            except TRANSIENT:
                if attempt == self.attempts:
                    raise
            checkpoints.reach("transient_retry")
            self.sleep(self.delay * 2 ** (attempt - 1) * (0.5 + self.jitter()))
            attempt += 1

DEFAULT = TransientRetry()
