"""read_ahead: the ingest's parsing thread hands its items over in order, raises its errors to
the consumer, and stops when the consumer does."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from rag_pg.ingest.prepare import read_ahead


def test_items_come_in_order_and_end() -> None:
    assert list(read_ahead(iter(range(100)), 3)) == list(range(100))
    assert list(read_ahead(iter([]), 3)) == []


def test_the_producers_error_reaches_the_consumer_after_the_items_before_it() -> None:
    def items() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("file 3 is broken")

    got: list[int] = []
    with pytest.raises(ValueError, match="file 3 is broken"):
        for item in read_ahead(items(), 2):
            got.append(item)
    assert got == [1, 2]


def test_the_producer_runs_at_most_depth_ahead_and_stops_with_the_consumer() -> None:
    produced: list[int] = []
    closed = threading.Event()
    gate = threading.Semaphore(0)

    def items() -> Iterator[int]:
        try:
            for i in range(1000):
                produced.append(i)
                gate.release()
                yield i
        finally:
            closed.set()

    reader = read_ahead(items(), 4)
    assert next(reader) == 0
    for _ in range(6):  # 0 handed over, 1 to 4 in the queue, 5 made and waiting for room
        gate.acquire()
    assert not gate.acquire(timeout=0.2)  # a seventh is never made while nobody reads
    assert len(produced) == 6
    reader.close()  # the consumer stops: the producer ends, its generator is closed
    assert closed.is_set()
    assert len(produced) < 1000
    assert not [t for t in threading.enumerate() if t.name == "ragpg-ingest-read"]


def test_a_consumer_error_stops_the_producer() -> None:
    closed = threading.Event()

    def items() -> Iterator[int]:
        try:
            yield from range(10**6)
        finally:
            closed.set()

    with pytest.raises(KeyError):
        for item in read_ahead(items(), 8):
            if item == 5:
                raise KeyError(item)
    assert closed.is_set()
