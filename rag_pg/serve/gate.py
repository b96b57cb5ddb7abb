"""A bound on the requests that wait on a reranking service, so that a stalled one cannot take
the whole server down with it (the embedding of a query has its own bound, around the call
alone: :mod:`rag_pg.embed.gated`).

Why: a search that reranks runs in a worker thread and holds a pooled database connection
while it waits for the reranker. When that service stalls, such requests pile up, each
abandoned thread keeps its connection until the service's own timeout, and soon a keyword
search or ``/stats`` waits for a connection too. The gate lets only ``slots`` such requests
run at once (fewer than the pool's connections), keeps a short queue of ``queue`` more
waiting without a thread, and refuses the rest at once (:class:`Busy`, a 503) instead of
letting them time out.

A slot is given back when the worker thread finishes — not when the request gives up — so
abandoned threads count until they are really gone. The gate's state lives on the event loop;
a worker thread gives its slot back through ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable


class Busy(Exception):
    """Every slot for model calls is taken and the queue is full: retry later (a 503)."""


class ModelGate:
    """At most ``slots`` model-bound requests at once, ``queue`` more waiting, the rest refused."""

    def __init__(self, slots: int, queue: int):
        if slots < 1 or queue < 0:
            raise ValueError("a gate needs at least one slot and a queue of zero or more")
        self.slots = slots
        self.queue = queue
        self._busy = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def busy(self) -> int:
        """Slots in use (by running or abandoned worker threads)."""
        return self._busy

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    async def acquire(self) -> Callable[[], None]:
        """Wait for a slot (without a thread); returns the release, callable once from any thread.

        Raises :class:`Busy` at once when the slots and the queue are full.
        """
        loop = asyncio.get_running_loop()
        if self._busy < self.slots and not self.waiting:
            self._busy += 1
        else:
            if self.waiting >= self.queue:
                raise Busy(
                    f"{self._busy} searches are waiting on the reranking service and {self.waiting}"
                    f" more are queued ({self.slots} at once); retry later, or search without"
                    " rerank"
                )
            ticket: asyncio.Future[None] = loop.create_future()
            self._waiters.append(ticket)
            try:
                await ticket  # _hand_over gives this request the slot of a finished one
            except BaseException:
                if ticket.done() and not ticket.cancelled():
                    self._hand_over()  # the slot arrived as we were cancelled: pass it on
                else:
                    ticket.cancel()
                raise
        return _Release(loop, self._hand_over)

    def _hand_over(self) -> None:
        """On the loop: give a freed slot to the first live waiter, or mark it free."""
        while self._waiters:
            ticket = self._waiters.popleft()
            if not ticket.done():
                ticket.set_result(None)
                return
        self._busy -= 1


class _Release:
    """Gives a slot back once, from the worker thread or the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, hand_over: Callable[[], None]):
        self._loop = loop
        self._hand_over = hand_over
        self._done = False
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        try:
            self._loop.call_soon_threadsafe(self._hand_over)
        except RuntimeError:
            pass  # the loop is closed: the server is gone, and the gate with it


__all__ = ["Busy", "ModelGate"]
