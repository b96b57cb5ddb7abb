"""The search view: ragpg on the request's database connection."""

from __future__ import annotations

from typing import get_args

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from rag_pg import ConfigError, Mode, RagError

from . import engine

MODES = get_args(Mode)  # the search modes, read from the public type
MAX_QUERY_CHARS = 1000
MAX_K = 50


def _bad_request(message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=400)


@require_GET
def search(request: HttpRequest) -> JsonResponse:
    """``GET /search?q=...&k=5&mode=hybrid|vector|keyword``: hits, best first, with provenance."""
    query = request.GET.get("q", "")
    if not query.strip():
        return _bad_request("q is required")
    if len(query) > MAX_QUERY_CHARS:
        return _bad_request(f"q is longer than {MAX_QUERY_CHARS} characters")
    try:
        k = int(request.GET.get("k", "5"))
    except ValueError:
        return _bad_request("k must be an integer")
    if not 1 <= k <= MAX_K:
        return _bad_request(f"k must be between 1 and {MAX_K}")
    mode = request.GET.get("mode") or None
    if mode is not None and mode not in MODES:
        return _bad_request(f"mode must be one of {', '.join(MODES)}")
    try:
        # The database filters by what the logged-in user may read (docs/permissions.md).
        rag = engine.rag()
        with rag.acting_as(engine.principals_of(request.user)):
            hits = rag.search(query, k, mode=mode)
    except ConfigError as exc:
        return _bad_request(str(exc))
    except RagError as exc:
        return JsonResponse({"error": str(exc).splitlines()[0]}, status=503)
    return JsonResponse({"query": query, "hits": [hit.to_dict() for hit in hits]})
