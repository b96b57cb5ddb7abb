"""The provider chain: retries with backoff, cooldowns, a deadline, same-model fallbacks.

How one batch is served::

    for each provider, in order:
        skip it while it cools down, or when it serves another model than the collection's
        try it up to `attempts` times while it is *unavailable* and retrying may help,
            waiting Retry-After when the server says so, else an exponential backoff with
            jitter; never past the batch's deadline
        it exhausted its attempts: it cools down for `cooldown` seconds; next provider
    invalid input and malformed answers are raised at once: never retried, never a fallback
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from rag_pg.config import EmbeddingSettings
from rag_pg.embed.base import EmbeddingProvider, EmbedType, ProviderUnavailable, call_deadline
from rag_pg.errors import EmbeddingError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

Identity = tuple[str, int | None]
T = TypeVar("T")


@dataclass
class Link:
    """One provider of the chain, with its settings and its health as the chain has seen it."""

    settings: EmbeddingSettings
    provider: EmbeddingProvider
    position: int
    cooling_until: float = 0.0
    failures: int = 0  # consecutive exhausted batches
    last_error: str = ""  # why it last failed: said while it cools down
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def name(self) -> str:
        return f"provider {self.position} ({self.provider.kind})"

    served: tuple[str, int] | None = None  # what a one-model service said it serves

    def known(self) -> tuple[str | None, int | None]:
        """Model and dimension known without a request: configured, or fixed (local)."""
        if self.provider.kind == "local":
            return self.provider.model, self.provider.dimension
        return self.settings.model, self.settings.dimension

    @property
    def fixed_service(self) -> bool:
        """A fallback on ragpg's own /embed contract: such a service serves one model whatever
        the configuration names (a fallback inherits ``embedding.model``), and only its
        /health says which. (The first provider's answers are checked against the model
        as they come: a mismatch there is the configuration's error, said as such.)"""
        return self.provider.kind == "http" and self.position > 1

    def learn(self) -> tuple[str | None, int | None]:
        """Model and dimension, asking the service when the configuration does not say (and
        always a one-model service, once)."""
        if self.fixed_service:
            if self.served is None:
                answer = self.provider.health()
                self.served = (str(answer["model"]), int(answer["dim"]))
            return self.served
        model, dimension = self.known()
        if model is None:
            model = self.provider.model
        if dimension is None:
            dimension = self.provider.dimension
        return model, dimension


class ChainUnavailable(ProviderUnavailable):
    """No provider of the chain could serve; ``retry_after`` is when the first cooldown ends."""


class EmbeddingChain:
    """An ordered list of providers that serves as one provider (the EmbeddingProvider protocol).

    Its model and dimension (its *identity*) are those of the first provider, from the
    configuration when it says them, else asked of the providers in order. A provider of
    another model never serves: a fallback must produce vectors comparable with the
    collection's, or the batch fails with a message that says why.
    Thread-safe: the ingest keeps several batches in flight through one chain.
    """

    def __init__(
        self,
        links: Sequence[Link | tuple[EmbeddingSettings, EmbeddingProvider]],
        *,
        deadline: float = 120.0,
        expect: Identity | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not links:
            raise ValueError("an embedding chain needs at least one provider")
        self.links: list[Link] = [
            item if isinstance(item, Link) else Link(item[0], item[1], position=n)
            for n, item in enumerate(links, start=1)
        ]
        self.deadline = deadline
        self.kind = self.links[0].provider.kind
        self._expect = expect
        self._sleep = sleep  # tests record the waits instead of sleeping
        # Deadlines are handed to the providers, which read time.monotonic (base.time_left): a
        # clock given here (tests move it forward) must never run behind that one.
        self._clock = clock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._identity: Identity | None = expect if expect and expect[1] is not None else None
        self._views: dict[Identity, EmbeddingChain] = {}

    # -- the protocol -------------------------------------------------------------------------

    @property
    def model(self) -> str:
        return self.identity()[0]

    @property
    def dimension(self) -> int | None:
        return self.identity()[1]

    def embed(self, type: EmbedType, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Vectors of the chain's model for ``texts``, from the first provider that can serve."""
        deadline = self._clock() + self.deadline
        with call_deadline(deadline):
            model, dimension = self.identity()
            reasons: list[str] = []
            for link in self.links:
                if self._clock() >= deadline:
                    reasons.append(f"deadline of {self.deadline:g}s reached")
                    break
                skip = self._skip(link, model, dimension)
                if skip is not None:
                    reasons.append(skip)
                    continue
                try:
                    vectors = self._attempts(
                        link, functools.partial(link.provider.embed, type, texts), deadline
                    )
                except ProviderUnavailable as exc:
                    reasons.append(f"{link.name}: {_one_line(exc)}")
                    continue
                if dimension is not None and vectors.shape[1] != dimension:
                    raise EmbeddingError.malformed(
                        f"{link.name} returned dimension {vectors.shape[1]}, expected {dimension}"
                    )
                return vectors
        raise self._exhausted(reasons)

    def health(self) -> dict[str, Any]:
        """The first provider of the chain's model that answers; unavailable when none does."""
        model, dimension = self.identity()
        reasons: list[str] = []
        for link in self.links:
            skip = self._skip(link, model, dimension)
            if skip is not None:
                reasons.append(skip)
                continue
            try:
                answer = link.provider.health()
            except EmbeddingError as exc:
                reasons.append(f"{link.name}: {_one_line(exc)}")
                continue
            if answer.get("model") not in (None, model):  # configured one name, serves another
                reasons.append(f"{link.name} serves {answer['model']!r}, not {model!r}")
                continue
            return {**answer, "model": model, "dim": dimension or answer.get("dim"),
                    "served_by": link.position}
        raise self._exhausted(reasons)

    def close(self) -> None:
        """Close every provider (each closes only what it opened)."""
        for link in self.links:
            link.provider.close()

    def __repr__(self) -> str:
        return f"EmbeddingChain({[link.name for link in self.links]!r})"

    # -- identity and views -------------------------------------------------------------------

    def identity(self) -> Identity:
        """(model, dimension) every vector of this chain has; resolved once, then cached."""
        with self._lock:
            if self._identity is not None:
                return self._identity
        deadline = self._clock() + self.deadline
        with call_deadline(deadline):
            resolved = self._resolve(deadline)
        with self._lock:
            if resolved[1] is not None:
                self._identity = resolved
        return resolved

    def serving(self, model: str, dimension: int | None) -> EmbeddingChain | None:
        """This chain restricted to one model (the collection's), or None if no provider could.

        The view shares the providers and their cooldowns; search uses it to follow a
        collection through a ``reembed`` switch when both models are in the chain.
        """
        try:
            if (model, dimension) == self.identity():
                return self
        except EmbeddingError:
            pass  # no provider answers now: a view still serves once one does
        usable = [
            link for link in self.links
            if link.known()[0] in (None, model)
            and (dimension is None or link.known()[1] in (None, dimension))
        ]
        if not usable:
            return None
        key = (model, dimension)
        with self._lock:
            view = self._views.get(key)
            if view is None:
                view = EmbeddingChain(
                    usable, deadline=self.deadline, expect=key, sleep=self._sleep,
                    rng=self._rng,
                )
                self._views[key] = view
            return view

    def _resolve(self, deadline: float) -> Identity:
        reasons: list[str] = []
        if self._expect is not None:
            model: str | None = self._expect[0]
        else:
            # No model configured: the chain's model is its first provider's. A fallback's is
            # no stand-in while the first is down: it may be another model, and adopting it
            # would read as "the configured model changed" (an ingest refused, `reembed` advised).
            first = self.links[0]
            model = first.known()[0]
            if model is None:
                try:
                    model = self._learn(first, deadline)[0]
                except EmbeddingError as exc:
                    reasons.append(f"{first.name}: {_one_line(exc)}")
                    if len(self.links) > 1:
                        reasons.append("no embedding.model is configured, so no fallback can"
                                       " stand in for the first provider's model")
        if model is None:
            raise self._exhausted(reasons or ["no provider says which model it serves"])
        candidates = [link for link in self.links if link.known()[0] in (None, model)]
        for link in candidates:
            if link.known()[0] == model and link.known()[1] is not None:
                return model, link.known()[1]
        for link in candidates:
            try:
                learned_model, learned_dim = self._learn(link, deadline)
            except EmbeddingError as exc:
                reasons.append(f"{link.name}: {_one_line(exc)}")
                continue
            if learned_model == model and learned_dim is not None:
                return model, learned_dim
            if learned_model != model:
                reasons.append(f"{link.name} serves {learned_model!r}, not {model!r}: not used")
        if reasons:
            raise self._exhausted(reasons)
        return model, None

    # -- one provider -------------------------------------------------------------------------

    def _skip(self, link: Link, model: str, dimension: int | None) -> str | None:
        """Why ``link`` must not serve this batch (cooling, or another model), else None."""
        now = self._clock()
        with link.lock:
            cooling = link.cooling_until - now
        if cooling > 0:
            return f"{link.name} cools down for {cooling:.1f}s after repeated failures{_last(link)}"
        configured = link.known()[0]
        if configured is not None and configured != model:
            return (
                f"{link.name} serves {configured!r}, not {model!r} that the collection is"
                " indexed with: not used"
            )
        try:
            served, served_dim = self._learn(link, time.monotonic() + self.deadline)
        except EmbeddingError as exc:  # its /health is down or garbled: it cannot serve now
            self._failed(link, getattr(exc, "retry_after", None), _one_line(exc))
            return f"{link.name}: {_one_line(exc)}"
        if served != model or (dimension is not None and served_dim not in (None, dimension)):
            return (
                f"{link.name} serves {served!r} ({served_dim} d), not {model!r}"
                f" ({dimension} d) that the collection is indexed with: not used"
            )
        return None

    def _attempts(self, link: Link, call: Callable[[], T], deadline: float) -> T:
        """``call`` on ``link`` with its retries; ProviderUnavailable once they are spent."""
        settings = link.settings
        started = self._clock()
        for attempt in range(1, settings.attempts + 1):
            try:
                result = call()
            except ProviderUnavailable as exc:
                last = exc
            except EmbeddingError as exc:
                if exc.kind != "unavailable":
                    raise  # invalid input or malformed: the texts' or the answer's fault
                last = ProviderUnavailable(str(exc))
            else:
                with link.lock:
                    link.failures = 0
                return result
            if not last.retryable or attempt == settings.attempts:
                break
            delay = last.retry_after if last.retry_after is not None else self._backoff(
                settings, attempt
            )
            if self._clock() + delay >= deadline:
                break  # waiting would overrun the batch's deadline: next provider now
            self._sleep(delay)
        self._failed(link, last.retry_after, _one_line(last))
        took = self._clock() - started
        raise ProviderUnavailable(
            f"{_one_line(last)} ({attempt} attempt{'s' if attempt > 1 else ''} in {took:.1f}s)",
            retry_after=last.retry_after,
        )

    def _learn(self, link: Link, deadline: float) -> tuple[str | None, int | None]:
        """The link's model and dimension; asking the service is retried like an embed."""
        known = link.known()
        if known[0] is not None and known[1] is not None and not link.fixed_service:
            return known
        if link.served is not None:
            return link.served
        with link.lock:
            if link.cooling_until > self._clock():
                raise ProviderUnavailable(f"cools down after repeated failures{_last(link)}")
        return self._attempts(link, link.learn, deadline)

    def _backoff(self, settings: EmbeddingSettings, attempt: int) -> float:
        """Exponential, capped, with "equal jitter": between half and all of the step."""
        step = min(settings.backoff_max, settings.backoff * 2.0 ** (attempt - 1))
        return step / 2 + self._rng.uniform(0, step / 2)

    def _failed(self, link: Link, retry_after: float | None, reason: str) -> None:
        with link.lock:
            link.failures += 1
            link.last_error = reason
            pause = max(link.settings.cooldown, retry_after or 0.0)
            link.cooling_until = max(link.cooling_until, self._clock() + pause)

    def _exhausted(self, reasons: list[str]) -> ChainUnavailable:
        now = self._clock()
        waits = [link.cooling_until - now for link in self.links if link.cooling_until > now]
        retry_after = min(waits) if waits and len(waits) == len(self.links) else None
        if len(reasons) == 1:
            message = reasons[0]
        else:
            listed = "; ".join(f"{n}) {r}" for n, r in enumerate(reasons, start=1))
            message = f"no embedding provider could serve: {listed}"
        return ChainUnavailable(message, retry_after=retry_after)


def serving(
    provider: EmbeddingProvider, model: str | None, dimension: int | None
) -> EmbeddingProvider | None:
    """The provider (or the part of a chain) that makes vectors of ``model``; None if none does."""
    if model is None:
        return None
    from rag_pg.embed.gated import GatedProvider  # the gate wraps whatever it bounds

    if isinstance(provider, GatedProvider):
        inner = serving(provider.inner, model, dimension)
        return None if inner is None else GatedProvider(inner, provider.gate)
    if isinstance(provider, EmbeddingChain):
        return provider.serving(model, dimension)
    if provider.model != model:
        return None
    if dimension is not None and provider.dimension not in (None, dimension):
        return None
    return provider


def _last(link: Link) -> str:
    return f" (last: {link.last_error})" if link.last_error else ""


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
