"""Fault injection for crash tests: fail, kill or stall a process at a named checkpoint.

A fault is written ``site:n:mode[:seconds]``: on the n-th pass through ``site``
(:func:`rag_pg.store.checkpoints.reach`), ``raise`` raises :class:`InjectedFault`, ``exit`` ends the
process at once with status 137 (as a SIGKILL would, without cleanup), ``sleep`` stalls for
``seconds`` (default one hour) and then goes on.

In a test process, :func:`installed` is a context manager. For a test that must kill a real
ragpg process, the CLI runs with the faults installed in that child::

    python -m rag_pg.testing.faults --at before_write:2:exit -- ingest docs/
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from rag_pg.cli import main as ragpg_main
from rag_pg.store import checkpoints

MODES = ("raise", "exit", "sleep")


class InjectedFault(RuntimeError):
    """Raised at a checkpoint by a fault in ``raise`` mode."""


@dataclass(frozen=True, slots=True)
class Fault:
    site: str
    nth: int = 1
    mode: str = "raise"
    seconds: float = 3600.0

    @classmethod
    def parse(cls, spec: str) -> Fault:
        parts = spec.split(":")
        if not parts[0] or len(parts) > 4:
            raise ValueError(f"a fault is site:n:mode[:seconds] (got {spec!r})")
        nth = int(parts[1]) if len(parts) > 1 and parts[1] else 1
        mode = parts[2] if len(parts) > 2 and parts[2] else "raise"
        if mode not in MODES:
            raise ValueError(f"fault mode must be one of {', '.join(MODES)} (got {mode!r})")
        seconds = float(parts[3]) if len(parts) > 3 else 3600.0
        return cls(parts[0], nth, mode, seconds)


class Injector:
    """The checkpoint hook: counts passes per site and fires each fault on its n-th pass."""

    def __init__(self, faults: Sequence[Fault]):
        self.faults = tuple(faults)
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, site: str) -> None:
        with self._lock:
            count = self.counts[site] = self.counts.get(site, 0) + 1
        for fault in self.faults:
            if fault.site != site or fault.nth != count:
                continue
            if fault.mode == "exit":
                os._exit(137)
            if fault.mode == "sleep":
                time.sleep(fault.seconds)
                continue
            raise InjectedFault(f"injected fault at {site} #{count}")


@contextmanager
def installed(*specs: str | Fault) -> Iterator[Injector]:
    """Install these faults for the duration of the block (the previous hook comes back)."""
    injector = Injector([s if isinstance(s, Fault) else Fault.parse(s) for s in specs])
    previous = checkpoints.install(injector)
    try:
        yield injector
    finally:
        checkpoints.install(previous)


def command(faults: Sequence[str], args: Sequence[str]) -> list[str]:
    """The argv that runs ``ragpg *args`` in a new Python process with ``faults`` installed."""
    at = [part for spec in faults for part in ("--at", spec)]
    return [sys.executable, "-m", "rag_pg.testing.faults", *at, "--", *args]


def main(argv: Sequence[str]) -> None:
    """``--at SPEC`` (repeatable) ``--`` then the ragpg command line."""
    args = list(argv)
    if "--" not in args:
        raise SystemExit("usage: python -m rag_pg.testing.faults --at site:n:mode ... -- COMMAND...")
    split = args.index("--")
    own, rest = args[:split], args[split + 1:]
    if len(own) % 2 or any(flag != "--at" for flag in own[::2]):
        raise SystemExit("usage: python -m rag_pg.testing.faults --at site:n:mode ... -- COMMAND...")
    faults = [Fault.parse(spec) for spec in own[1::2]]
    checkpoints.install(Injector(faults))
    sys.argv = ["ragpg", *rest]
    ragpg_main()


if __name__ == "__main__":
    main(sys.argv[1:])
