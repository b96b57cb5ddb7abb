"""The line `ragpg ingest` keeps up to date on stderr: documents, chunks embedded, rate, ETA."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from rag_pg.models import IngestReport

# A line of a log (not redrawn) says what it is: a reader, or a test counting a command's
# error lines, tells it from the one-line error a failed command ends with.
PREFIX = "ragpg: progress: "


class IngestProgress:
    """The state of an ingest on stderr, at most every ``interval`` seconds of ``clock``: one
    line redrawn in place on a terminal, or (``redraw=False``: a log file, CI, cron) a new
    line each time, so that a long run shows it is alive where nothing is redrawn.

    The rate is the embedder's own: chunks embedded since its first batch came back, over
    the time since then (the walk and the first batch would otherwise hide a slow model).
    The ETA is for the whole tree: the chunks queued and not embedded yet, plus the files
    not read yet (counted before the walk, ``planned``) at the chunks per file read so far
    (an unchanged file counts as a file with nothing to embed).
    """

    def __init__(
        self, *, clock: Callable[[], float] = time.monotonic,
        write: Callable[[str], None] | None = None, interval: float = 0.2, redraw: bool = True,
    ) -> None:
        self.clock = clock
        self.write = write or (lambda text: click.echo(text, err=True, nl=False))
        self.interval = interval
        self.redraw = redraw
        self.last = clock() if not redraw else -interval  # a log's first line after interval
        self.embedded = 0
        self.queued = 0  # chunks handed to the embedder so far
        self.files: int | None = None  # files the walk should read (an estimate)
        self._first: tuple[float, int] | None = None  # (when, embedded) at the first batch

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        now = self.clock()
        if event == "planned":
            self.files = int(data.get("files", 0))
        if event == "embedded":
            self.embedded = max(self.embedded, int(data.get("embedded", 0)))
            self.queued = max(self.queued, int(data.get("total", 0)))
            if self._first is None:
                self._first = (now, self.embedded)
        report: IngestReport | None = data.get("report")
        if report is None or event == "planned" or now - self.last < self.interval:
            return
        self.last = now
        line = self.line(report, now)
        self.write("\r" + line + "  " if self.redraw else f"{PREFIX}{line}\n")

    def rate(self, now: float) -> float | None:
        """Chunks per second since the first batch; None before a second one came back."""
        if self._first is None or now <= self._first[0] or self.embedded <= self._first[1]:
            return None
        return (self.embedded - self._first[1]) / (now - self._first[0])

    def chunks_left(self, report: IngestReport) -> float:
        """Chunks queued and not embedded, plus the files not read yet at the chunks per file
        read so far."""
        left = float(max(self.queued - self.embedded, 0))
        seen = report.documents_seen
        if self.files is not None and seen and self.files > seen:
            left += (self.files - seen) * self.queued / seen
        return left

    def line(self, report: IngestReport, now: float) -> str:
        of = f"/~{self.files}" if self.files is not None and self.files > report.documents_seen else ""
        text = (f"{report.documents_seen}{of} documents seen, {report.documents_indexed} indexed,"
                f" {report.documents_skipped} unchanged, {report.documents_failed} failed,"
                f" {self.embedded}/{max(self.queued, self.embedded)} chunks embedded")
        rate = self.rate(now)
        if rate is None:
            return text
        shown = f"{rate:.1f}" if rate >= 1 else f"{rate:.2f}"
        return f"{text}, {shown} chunks/s, ETA {_duration(self.chunks_left(report) / rate)}"

    def finish(self) -> None:
        if self.redraw:
            self.write("\n")


def _duration(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
