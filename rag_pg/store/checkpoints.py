"""Named points of the write paths (ingest, re-embed) where a test may act; nothing otherwise.

The ingest and the re-embed call :func:`reach` at the moments whose interruption matters for
atomicity (before and after a write transaction, around an embedding call, around the model
switch). In production no hook is installed and ``reach`` returns at once; a crash test
installs one (``rag_pg.testing.faults``) to kill, stall or fail the process exactly there.
"""

from __future__ import annotations

from collections.abc import Callable

Hook = Callable[[str], None]

_hook: Hook | None = None


def reach(site: str) -> None:
    """Pass the named point: calls the installed hook, if any."""
    hook = _hook
    if hook is not None:
        hook(site)


def install(hook: Hook | None) -> Hook | None:
    """Set (or, with ``None``, remove) the hook; returns the one it replaces."""
    global _hook
    previous, _hook = _hook, hook
    return previous
