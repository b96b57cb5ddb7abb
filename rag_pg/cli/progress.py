"""The line `ragpg ingest` keeps up to date on stderr: documents, chunks embedded, rate, ETA."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from rag_pg.models import IngestReport


class IngestProgress:
    """One line on stderr, redrawn at most every ``interval`` seconds of ``clock``.

    The rate is the embedder's own: chunks embedded since its first batch came back, over
    the time since then (the walk and the first batch would otherwise hide a slow model).
    The ETA is for the chunks queued so far: while the walk goes on more are queued, so it
    can grow; once the walk is done it is the time left.
    """

    def __init__(
        self, *, clock: Callable[[], float] = time.monotonic,
        write: Callable[[str], None] | None = None, interval: float = 0.2,
    ) -> None:
        self.clock = clock
        self.write = write or (lambda text: click.echo(text, err=True, nl=False))
        self.interval = interval
        self.last = -interval
        self.embedded = 0
        self.queued = 0  # chunks handed to the embedder so far
        self._first: tuple[float, int] | None = None  # (when, embedded) at the first batch

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        now = self.clock()
        if event == "embedded":
            self.embedded = max(self.embedded, int(data.get("embedded", 0)))
            self.queued = max(self.queued, int(data.get("total", 0)))
            if self._first is None:
                self._first = (now, self.embedded)
        report: IngestReport | None = data.get("report")
        if report is None or now - self.last < self.interval:
            return
        self.last = now
        self.write("\r" + self.line(report, now) + "  ")

    def rate(self, now: float) -> float | None:
        """Chunks per second since the first batch; None before a second one came back."""
        if self._first is None or now <= self._first[0] or self.embedded <= self._first[1]:
            return None
        return (self.embedded - self._first[1]) / (now - self._first[0])

    def line(self, report: IngestReport, now: float) -> str:
        text = (f"{report.documents_seen} documents seen, {report.documents_indexed} indexed,"
                f" {report.documents_skipped} unchanged, {report.documents_failed} failed,"
                f" {self.embedded}/{max(self.queued, self.embedded)} chunks embedded")
        rate = self.rate(now)
        if rate is None:
            return text
        left = max(self.queued - self.embedded, 0) / rate
        shown = f"{rate:.1f}" if rate >= 1 else f"{rate:.2f}"
        return f"{text}, {shown} chunks/s, ETA {_duration(left)}"

    def finish(self) -> None:
        self.write("\n")


def _duration(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
