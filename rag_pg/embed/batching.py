"""Split texts into requests by count and estimated tokens, and keep several of them in flight."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rag_pg.embed.base import EmbeddingProvider, EmbedType
from rag_pg.errors import EmbeddingError
from rag_pg.source.tokens import estimate_tokens

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


def plan_batches(
    texts: Sequence[str], *, max_count: int, max_tokens: int
) -> list[tuple[int, int]]:
    """``[start, end)`` ranges in order: at most ``max_count`` texts and ``max_tokens`` tokens each.

    Providers cap a request by tokens as well as by inputs (OpenAI: 300,000 tokens, TEI:
    ``max-batch-tokens``); a text larger than the token budget alone still gets a request of
    its own, where the provider may refuse it as invalid input (that text's fault only).
    """
    if max_count <= 0 or max_tokens <= 0:
        raise ValueError("max_count and max_tokens must be positive")
    ranges: list[tuple[int, int]] = []
    start, tokens = 0, 0
    for i, text in enumerate(texts):
        cost = max(1, estimate_tokens(text))
        if i > start and (i - start >= max_count or tokens + cost > max_tokens):
            ranges.append((start, i))
            start, tokens = i, 0
        tokens += cost
    if start < len(texts):
        ranges.append((start, len(texts)))
    return ranges


def embed_all(
    provider: EmbeddingProvider,
    type: EmbedType,
    texts: Sequence[str],
    *,
    batch_size: int,
    batch_tokens: int,
    concurrency: int = 1,
    on_batch: Callable[[int], None] | None = None,
) -> npt.NDArray[np.float32]:
    """Vectors for ``texts`` in order, with up to ``concurrency`` requests in flight.

    A remote GPU is idle while one request travels and is parsed; a few in flight keep it
    busy (see bench/embed_concurrency.py). ``on_batch(n)`` runs in the calling thread after
    each batch of ``n`` texts, so progress callbacks need no locking. When batches fail, the
    ones in flight finish, the rest are never sent, and the error raised is *unavailable* if
    any batch was unavailable (the run must stop), else the first failure in text order.
    """
    ranges = plan_batches(texts, max_count=batch_size, max_tokens=batch_tokens)
    if not ranges:
        import numpy as np

        return np.zeros((0, 0), dtype=np.float32)
    parts: list[npt.NDArray[np.float32] | None] = [None] * len(ranges)
    if concurrency <= 1 or len(ranges) == 1:
        for n, (start, end) in enumerate(ranges):
            parts[n] = provider.embed(type, texts[start:end])
            if on_batch is not None:
                on_batch(end - start)
        return _stack(parts)
    errors: dict[int, EmbeddingError] = {}
    with concurrent.futures.ThreadPoolExecutor(
        max_workers=min(concurrency, len(ranges)), thread_name_prefix="ragpg-embed"
    ) as pool:
        futures = {
            pool.submit(provider.embed, type, texts[start:end]): n
            for n, (start, end) in enumerate(ranges)
        }
        for future in concurrent.futures.as_completed(futures):
            n = futures[future]
            if future.cancelled():
                continue
            try:
                parts[n] = future.result()
            except EmbeddingError as exc:
                errors[n] = exc
                for other in futures:
                    other.cancel()  # not started yet: never sent
                continue
            if on_batch is not None and not errors:
                start, end = ranges[n]
                on_batch(end - start)
    if errors:
        unavailable = [errors[n] for n in sorted(errors) if errors[n].kind == "unavailable"]
        raise unavailable[0] if unavailable else errors[min(errors)]
    return _stack(parts)


def _stack(parts: list[npt.NDArray[np.float32] | None]) -> npt.NDArray[np.float32]:
    ready = [p for p in parts if p is not None]
    if len(ready) != len(parts):  # a cancelled batch without an error: cannot happen
        raise EmbeddingError.unavailable("an embedding batch was not completed")
    if len(ready) == 1:
        return ready[0]
    import numpy as np

    return np.concatenate(ready)
