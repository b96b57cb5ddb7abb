"""Waiting on a readiness signal in tests: one bounded poll instead of hand-written loops.

The bound is a ceiling for a loaded machine, never a speed check: a regression that never
becomes ready fails with what was awaited instead of hanging the suite."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Seconds any readiness wait may take on a loaded 2-core machine before the test fails.
PATIENCE = 120.0


def eventually(condition: Callable[[], T], what: str, *, limit: float = PATIENCE,
               interval: float = 0.02) -> T:
    """Call ``condition`` until it returns a truthy value and return that value; after
    ``limit`` seconds, fail naming ``what`` was awaited."""
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"still waiting after {limit:g} s: {what}")
        time.sleep(interval)
