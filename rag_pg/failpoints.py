"""Named fault sites for crash tests: ``RAGPG_FAILPOINT=site:n:mode`` (raise, exit, sleep)."""

from __future__ import annotations

import os
import threading
import time

_counts: dict[str, int] = {}
_lock = threading.Lock()


class FailpointError(RuntimeError):
    """Raised by a failpoint in ``raise`` mode."""


def hit(site: str) -> None:
    """Count a pass through ``site``; on the configured n-th pass, fail as configured.

    A test hook: reads ``RAGPG_FAILPOINT`` each time (cheap), does nothing when unset.
    """
    spec = os.environ.get("RAGPG_FAILPOINT")
    if not spec:
        return
    for item in spec.split(","):
        parts = item.split(":")
        if parts[0] != site:
            continue
        nth = int(parts[1]) if len(parts) > 1 and parts[1] else 1
        mode = parts[2] if len(parts) > 2 else "raise"
        with _lock:
            _counts[site] = _counts.get(site, 0) + 1
            count = _counts[site]
        if count != nth:
            continue
        if mode == "exit":
            os._exit(137)
        if mode == "sleep":
            time.sleep(float(parts[3]) if len(parts) > 3 else 3600.0)
            continue
        raise FailpointError(f"failpoint {site} #{nth}")
