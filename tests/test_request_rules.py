"""The service's request rules against its schema: an integer is a JSON number without a
fractional part (84.0 included), never a string; what validation refuses, the schema states."""

from __future__ import annotations

import re

import pytest

from rag_pg.serve.rules import InvalidRequest, SearchRequest, parse_search


def test_an_integral_number_is_an_integer_and_a_string_is_not():
    request = parse_search({"query": "q", "k": 5.0, "max_per_document": 2.0, "level": 0.0,
                            "neighbours": 1.0})
    assert (request.k, request.max_per_document, request.level, request.neighbours) == (5, 2, 0, 1)
    assert isinstance(request.k, int)
    for bad in ({"k": 2.5}, {"k": "5"}, {"max_per_document": "2"}, {"k": True}):
        with pytest.raises(InvalidRequest):
            parse_search({"query": "q", **bad})


def test_the_schema_states_the_nul_rule_of_every_stored_text():
    schema = SearchRequest.model_json_schema()["properties"]
    for name in ("query", "collection", "path_prefix", "node_type"):
        field = schema[name]
        patterns = [field.get("pattern")] + [p.get("pattern") for p in field.get("anyOf", [])]
        pattern = next(p for p in patterns if p)
        assert re.fullmatch(pattern.replace("\\u0000", "\x00"), "docs/ops") is not None
        assert re.fullmatch(pattern.replace("\\u0000", "\x00"), "do\x00cs") is None


def test_the_integer_fields_keep_their_bounds_in_the_schema():
    schema = SearchRequest.model_json_schema()["properties"]
    assert {"type": "integer", "minimum": 1} in schema["k"]["anyOf"]
    assert (schema["neighbours"]["minimum"], schema["neighbours"]["type"]) == (0, "integer")
    assert "'ge':" not in str(schema)  # a constraint pydantic could not turn into JSON Schema
