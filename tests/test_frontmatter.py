"""Front-matter splitting and the YAML traps of RELIABILITY E2 (rag_pg.source.frontmatter)."""

from __future__ import annotations

import ast
import json
import math
import re
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_pg.source import frontmatter
from rag_pg.source.frontmatter import MAX_FRONT_MATTER_BYTES, split_front_matter

FAST = settings(max_examples=150, deadline=None)


def fm(block: str, body: str = "body\n") -> str:
    return f"---\n{block}---\n{body}"


def jsonb_safe(value: Any) -> None:
    """What Postgres jsonb accepts: strict JSON, no NUL, valid UTF-8 everywhere."""
    text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    assert "\\u0000" not in text
    text.encode("utf-8")


# --- splitting -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "front_matter", "body", "warned"),
    [
        ("no front matter\n", {}, "no front matter\n", False),
        ("", {}, "", False),
        (fm("a: 1\n"), {"a": 1}, "body\n", False),
        ("---\na: 1\n...\nbody", {"a": 1}, "body", False),  # YAML's '...' also closes
        ("---  \na: 1\n---\t\nbody", {"a": 1}, "body", False),  # trailing blanks tolerated
        ("---\r\na: 1\r\n---\r\nbody\r\n", {"a": 1}, "body\n", False),
        ("\ufeff---\na: 1\n---\nbody", {"a": 1}, "body", False),
        ("---\n---\nbody", {}, "body", False),
        ("---\n# only a comment\n\n---\nbody", {}, "body", False),
        ("---\na: 1\n---", {"a": 1}, "", False),
        ("\n---\na: 1\n---\nbody", {}, "\n---\na: 1\n---\nbody", False),  # not on line 1
        ("--- \nx", {}, "--- \nx", True),  # never closed
        ("---\na: 1\nbody without closing\n", {}, "---\na: 1\nbody without closing\n", True),
        ("----\na: 1\n----\nbody", {}, "----\na: 1\n----\nbody", False),  # four dashes: text
        (fm("a: [1, 2\n"), {}, "body\n", True),  # invalid YAML: block still removed
        (fm("- a\n- b\n"), {}, "body\n", True),  # a list
        (fm("just a string\n"), {}, "body\n", True),
        (fm("42\n"), {}, "body\n", True),
    ],
)
def test_split_table(text: str, front_matter: dict[str, Any], body: str, warned: bool) -> None:
    result, rest, warnings = split_front_matter(text)
    assert (result, rest) == (front_matter, body)
    assert bool(warnings) == warned
    for warning in warnings:
        assert "\n" not in warning and warning.startswith("front-matter")


def test_body_keeps_everything_after_the_closing_line() -> None:
    text = fm("title: T\n", "# H\n\n---\n\nafter a thematic break\n")
    assert split_front_matter(text)[1] == "# H\n\n---\n\nafter a thematic break\n"


# --- values --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("title: Hello\n", {"title": "Hello"}),
        (
            "tags: [a, b]\nauthor: {name: X, langs: [fr, en]}\n",
            {"tags": ["a", "b"], "author": {"name": "X", "langs": ["fr", "en"]}},
        ),
        ("date: 2024-01-05\n", {"date": "2024-01-05"}),
        ("at: 2024-01-05 10:30:00\n", {"at": "2024-01-05T10:30:00"}),
        ("at: 2024-01-05T10:30:00Z\n", {"at": "2024-01-05T10:30:00+00:00"}),
        ("at: 2024-01-05 10:30:00 +02:00\n", {"at": "2024-01-05T10:30:00+02:00"}),
        ("bad: 2024-02-30\n", {"bad": "2024-02-30"}),  # impossible date stays text
        ("quoted: '2024-01-05'\n", {"quoted": "2024-01-05"}),
        # YAML 1.2 core schema: no Norway problem, no octal-by-leading-zero, no sexagesimal
        ("country: NO\nok: yes\noff: off\n", {"country": "NO", "ok": "yes", "off": "off"}),
        ("a: true\nb: False\nc: TRUE\n", {"a": True, "b": False, "c": True}),
        (
            "n: 010\nh: 0x1F\no: 0o17\nt: 1:20\nneg: -7\n",
            {"n": 10, "h": 31, "o": 15, "t": "1:20", "neg": -7},
        ),
        ("f: 1.5\ne: 1e3\nd: .5\n", {"f": 1.5, "e": 1000.0, "d": 0.5}),
        ("k: 08\n09: z\n", {"k": 8, "9": "z"}),
        ("bad: !!int zz\nempty: !!int\n", {"bad": "zz", "empty": ""}),  # kept as written
        ("a: ~\nb: null\nc:\n", {"a": None, "b": None, "c": None}),
        (
            "1: one\ntrue: yes\nnull: n\n2024-01-01: d\n",
            {"1": "one", "true": "yes", "null": "n", "2024-01-01": "d"},
        ),
        ("s: !!set {b, a}\n", {"s": ["a", "b"]}),
        ("o: !!omap [{a: 1}, {b: 2}]\n", {"o": [["a", 1], ["b", 2]]}),
        ("explicit: !!str 12\nbig: " + "9" * 5000 + "\n", {"explicit": "12", "big": "9" * 5000}),
        ("multi: |\n  line one\n  line two\n", {"multi": "line one\nline two\n"}),
    ],
)
def test_values_are_normalised_to_json(block: str, expected: dict[str, Any]) -> None:
    result, _, warnings = split_front_matter(fm(block))
    assert (result, warnings) == (expected, [])
    jsonb_safe(result)


@pytest.mark.parametrize(
    ("block", "expected", "warning"),
    [
        ("f: .nan\nkeep: 1\n", {"keep": 1}, "'f'"),
        ("f: .inf\n", {}, "'f'"),
        ("f: -.Inf\n", {}, "'f'"),
        ("big: 1e999\n", {}, "'big'"),
        ("b: !!binary aGVsbG8=\nkeep: 1\n", {"keep": 1}, "'b'"),
        ("l: [1, .nan, 2]\n", {"l": [1, 2]}, "'l[1]'"),
        ("m: {x: {y: !!binary aGVsbG8=}}\n", {"m": {"x": {}}}, "'m.x.y'"),
        ('nul: "a\\0b"\n', {}, "'nul'"),
        ('lone: "\\ud800"\n', {}, "'lone'"),
        ("? [a, b]\n: 1\nkeep: 2\n", {"keep": 2}, "line 2"),
        ("a: 1\nb: 2\na: 3\n", {"a": 3, "b": 2}, "line 4: duplicate key 'a'"),
        ("1: x\n'1': y\n", {"1": "y"}, "duplicate key '1'"),
    ],
)
def test_values_json_cannot_hold_are_dropped_with_a_warning(
    block: str, expected: dict[str, Any], warning: str
) -> None:
    result, _, warnings = split_front_matter(fm(block))
    assert result == expected
    assert len(warnings) == 1 and warning in warnings[0]
    jsonb_safe(result)


# --- traps ---------------------------------------------------------------------------

LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{', '.join(['*' + previous] * 9)}]\n"
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    "block",
    [
        LAUGHS,
        LAUGHS + "j: &j [*i, *i, *i, *i, *i, *i, *i, *i, *i]\n",
        "a: &x [*x]\n",  # recursive alias
        "base: &b {x: 1}\nchild:\n  <<: *b\n  y: 2\n",  # merge keys need aliases too
        "a: &unused 1\n",  # an anchor alone is refused as well
    ],
)
def test_anchors_and_aliases_are_refused_fast_and_small(block: str) -> None:
    tracemalloc.start()
    try:
        result, body, warnings = split_front_matter(fm(block))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (result, body) == ({}, "body\n")
    assert len(warnings) == 1 and "anchors and aliases" in warnings[0]
    assert peak < 2 * 1024 * 1024


@pytest.mark.parametrize(
    "block",
    [
        "x: !!python/object/apply:os.system ['echo pwned']\n",
        "!!python/object/new:os.system [echo]\n",
        "x: !!python/name:os.system\n",
        "x: !custom 1\n",
        "x: !!timestamp not-a-date\n",
        "x: !!bool maybe\n",
        "x: !!float\n",
    ],
)
def test_unsafe_or_unknown_tags_invalidate_the_block(block: str) -> None:
    result, body, warnings = split_front_matter(fm(block))
    assert (result, body) == ({}, "body\n")
    assert len(warnings) == 1 and "line 2" in warnings[0]


def test_deep_nesting_is_refused() -> None:
    block = "x: " + "[" * 5000 + "]" * 5000 + "\n"
    result, _, warnings = split_front_matter(fm(block))
    assert result == {} and "nesting" in warnings[0]


def test_control_characters_are_reported_with_their_line() -> None:
    result, _, warnings = split_front_matter(fm("a: 1\nb: \x01\n"))
    assert result == {} and "line 3" in warnings[0]


def test_invalid_yaml_warning_names_the_file_line() -> None:
    _, _, warnings = split_front_matter(fm("a: 1\nb: 2\nc: [unclosed\nd: 4\n"))
    assert re.match(r"front-matter line \d+: invalid YAML", warnings[0])
    line = int(warnings[0].split()[2].rstrip(":"))
    assert line in (4, 5, 6)


@pytest.mark.parametrize("size", [MAX_FRONT_MATTER_BYTES + 1, 1024 * 1024])
def test_oversized_block_is_refused_before_parsing(size: int) -> None:
    block = "k: " + "x" * (size - 4) + "\n"
    tracemalloc.start()
    try:
        result, body, warnings = split_front_matter(fm(block))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (result, body) == ({}, "body\n")
    assert "larger than" in warnings[0]
    assert peak < 6 * size  # a few copies of the text, never a YAML tree of it


def test_block_just_under_the_cap_is_parsed() -> None:
    block = "k: " + "x" * (MAX_FRONT_MATTER_BYTES - 10) + "\n"
    assert split_front_matter(fm(block))[0] == {"k": "x" * (MAX_FRONT_MATTER_BYTES - 10)}


def test_module_never_uses_unsafe_yaml_loading() -> None:
    tree = ast.parse(Path(frontmatter.__file__).read_text())
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    forbidden = {
        "load",
        "load_all",
        "full_load",
        "unsafe_load",
        "Loader",
        "FullLoader",
        "UnsafeLoader",
        "CLoader",
        "CFullLoader",
        "CUnsafeLoader",
    }
    assert names & forbidden == set()
    assert "SafeLoader" in names


# --- properties ----------------------------------------------------------------------

# YAML 1.1 emitters (safe_dump) leave '1e3', '0o17' and '08' unquoted; YAML 1.2 reads
# them as numbers.
_NUMBER_IN_12_ONLY = re.compile(r"[-+]?[0-9.]*[0-9][0-9.]*[eE][-+]?[0-9]+|0o[0-7]+|[-+]?0[0-9]+")
SAFE_TEXT = st.text(
    st.characters(exclude_categories=["Cs", "Cc"], exclude_characters="\ufeff\x85\u2028\u2029"),
    max_size=20,
).filter(lambda text: not _NUMBER_IN_12_ONLY.fullmatch(text))
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | SAFE_TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(SAFE_TEXT, children, max_size=4)
    ),
    max_leaves=12,
)


@given(st.dictionaries(SAFE_TEXT, VALUES, max_size=6))
@FAST
def test_json_like_mappings_round_trip(data: dict[str, Any]) -> None:
    dumped = yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    result, body, warnings = split_front_matter(fm(dumped))
    assert (result, body, warnings) == (data, "body\n", [])


@given(st.text(max_size=300))
@FAST
def test_any_block_gives_jsonb_safe_front_matter_and_never_raises(block: str) -> None:
    result, _, warnings = split_front_matter(fm(block + "\n"))
    assert isinstance(result, dict)
    jsonb_safe(result)
    for warning in warnings:
        assert "\n" not in warning


@given(st.floats())
@FAST
def test_floats_are_finite_or_dropped(value: float) -> None:
    result, _, warnings = split_front_matter(fm(f"v: {yaml.safe_dump(value).splitlines()[0]}\n"))
    if math.isfinite(value):
        assert result == {"v": value} and warnings == []
    else:
        assert result == {} and len(warnings) == 1
