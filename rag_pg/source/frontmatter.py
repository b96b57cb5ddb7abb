"""Split a Markdown file's YAML front-matter from its body, safely, into JSON-ready values.

Decisions (SPEC §2.2, RELIABILITY E2):

- The block opens with a first line ``---`` and closes at the next ``---`` or ``...`` line
  (``...`` is YAML's own end-of-document marker; Pandoc accepts it too). Trailing spaces on
  the delimiter lines are ignored. No closing line: no front-matter, the whole text is body.
- Whatever happens to the block's parsing (invalid, not a mapping, over the size cap), it is
  removed from the body: the body never depends on whether the YAML was well-formed.
- Loading is YAML 1.2 "core schema" on PyYAML's *safe* machinery: ``yes``/``no``/``on``/
  ``off`` stay strings (no "Norway problem"), ``010`` is ten, ``1:20`` is a string. Implicit
  timestamps are still recognised and become ISO 8601 strings (an impossible date such as
  ``2024-02-30`` stays the string it was).
- Anchors and aliases are refused outright (billion laughs), nesting deeper than
  ``MAX_DEPTH`` is refused, and the block is capped at ``MAX_FRONT_MATTER_BYTES`` before any
  parsing. Any other tag than the standard safe ones (``!!python/...``, ``!local``) makes the
  whole front-matter invalid.
- Values are made JSON-compatible for a jsonb column: dates to ISO strings, sets to sorted
  lists, non-string keys to their JSON spelling (``1`` → ``"1"``, ``true`` → ``"true"``).
  Values JSON or jsonb cannot hold (NaN, ±Infinity, ``!!binary`` bytes, strings with NUL or
  lone surrogates) are dropped, from a mapping or from a list, each with a warning.
- A duplicate key keeps its last value (as PyYAML and JSON parsers do), with a warning.
"""

from __future__ import annotations

import datetime
import math
import re
from typing import Any

from yaml import SafeLoader
from yaml.constructor import ConstructorError
from yaml.error import MarkedYAMLError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.reader import ReaderError

MAX_FRONT_MATTER_BYTES = 64 * 1024
MAX_DEPTH = 64

_CLOSER = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.MULTILINE)
_DROP = object()
_KINDS = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


class _RefusedYAML(MarkedYAMLError):
    """A construct the front-matter loader refuses on purpose (alias, anchor, depth)."""


class _FrontMatterLoader(SafeLoader):
    """PyYAML's safe loader with the traps closed; never ``yaml.load``/``FullLoader``.

    Its implicit types are YAML 1.2's core schema plus timestamps (registered below),
    not PyYAML's YAML 1.1 set.
    """

    yaml_implicit_resolvers: dict[Any, Any] = {}

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.notes: list[str] = []

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _RefusedYAML(None, None, "anchors and aliases are not allowed", event.start_mark)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _RefusedYAML(
                    None, None, f"nesting deeper than {MAX_DEPTH} levels", event.start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        """PyYAML's scalar constructors raise KeyError/IndexError on bad explicit tags
        (``!!bool maybe``, ``!!float``): turn them into a YAML error that knows its line."""
        try:
            return super().construct_object(node, deep=deep)
        except (KeyError, IndexError, ValueError, TypeError, AttributeError) as error:
            tag = str(node.tag).rsplit(":", 1)[-1]
            raise ConstructorError(
                None, None, f"{node.value!r} is not a valid !!{tag}", node.start_mark
            ) from error

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Keys become their JSON spelling here, so ``1`` and ``true`` (equal in Python)
        stay apart, duplicates are seen after that spelling, and a key JSON cannot hold
        is dropped with a note instead of failing the whole block."""
        if not isinstance(node, MappingNode):
            raise ConstructorError(
                None, None, f"expected a mapping node, but found {node.id}", node.start_mark
            )
        self.flatten_mapping(node)
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 2
            name = _json_key(self.construct_object(key_node, deep=True))
            if name is None or not _valid_text(name):
                self.notes.append(f"front-matter line {line}: a key must be a scalar; dropped")
                continue
            if name in mapping:
                self.notes.append(
                    f"front-matter line {line}: duplicate key {name!r}; the last value wins"
                )
            mapping[name] = self.construct_object(value_node, deep=deep)
        return mapping


for _tag, _regexp, _first in (
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("null", r"^(?:~|null|Null|NULL)$", "~nN"),
    ("int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        "float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+.0123456789",
    ),
    (
        "timestamp",
        r"^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]"
        r"|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?"
        r"(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?"
        r"(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$",
        "0123456789",
    ),
):
    _FrontMatterLoader.add_implicit_resolver(
        f"tag:yaml.org,2002:{_tag}", re.compile(_regexp), list(_first)
    )
_FrontMatterLoader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^$"), [""])


def _construct_int(loader: _FrontMatterLoader, node: ScalarNode) -> int | str:
    written = str(loader.construct_scalar(node))
    text = written.replace("_", "")
    sign = -1 if text.startswith("-") else 1
    text = text.lstrip("+-")
    base = {"0o": 8, "0x": 16, "0b": 2}.get(text[:2], 10)
    try:
        return sign * int(text[2:] if base != 10 else text, base)
    except ValueError:
        return written  # beyond Python's digit limit, or a bad explicit !!int: keep the text


def _construct_timestamp(loader: _FrontMatterLoader, node: ScalarNode) -> Any:
    if not isinstance(node.value, str) or not loader.timestamp_regexp.match(node.value):
        raise ConstructorError(None, None, f"not a timestamp: {node.value!r}", node.start_mark)
    try:
        return loader.construct_yaml_timestamp(node)
    except (ValueError, OverflowError):
        return loader.construct_scalar(node)  # `date: 2024-02-30` stays what was written


_FrontMatterLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_FrontMatterLoader.add_constructor("tag:yaml.org,2002:timestamp", _construct_timestamp)


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _error_warning(error: Exception, block: str) -> str:
    """One line naming the file line (line 1 is the opening ``---``) and the problem."""
    line: int | None = None
    if isinstance(error, MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        line = mark.line + 2 if mark is not None else None
        problem = error.problem or error.context or "invalid YAML"
    elif isinstance(error, ReaderError):
        line = block.count("\n", 0, error.position) + 2
        problem = f"unacceptable character #x{error.character:04x}"
    else:
        problem = f"{type(error).__name__}: {error}"
    where = f"front-matter line {line}" if line is not None else "front-matter"
    return _one_line(f"{where}: invalid YAML ({problem}); front-matter ignored")


def _json_key(key: Any) -> str | None:
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int | float):
        return repr(key)
    if isinstance(key, datetime.date):
        return key.isoformat()
    return None


def _valid_text(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _normalise(value: Any, path: str, warnings: list[str]) -> Any:
    """A JSON/jsonb-compatible copy of ``value``, or ``_DROP`` (with a warning).

    ``path`` names the value in warnings: ``tags[2]``, ``author.name``.
    """
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        warnings.append(f"front-matter key {path!r}: {value!r} is not a JSON number; dropped")
        return _DROP
    if isinstance(value, str):
        if _valid_text(value):
            return value
        warnings.append(f"front-matter key {path!r}: text with NUL or lone surrogate; dropped")
        return _DROP
    if isinstance(value, datetime.date):  # datetime is a date too
        return value.isoformat()
    if isinstance(value, dict):
        result: dict[str, Any] = {}
        for key, item in value.items():
            name = _json_key(key)
            if name is None or not _valid_text(name):
                warnings.append(f"front-matter key {path!r}: unusable key {key!r}; dropped")
                continue
            normalised = _normalise(item, f"{path}.{name}" if path else name, warnings)
            if normalised is _DROP:
                continue
            if name in result:
                warnings.append(f"front-matter key {name!r} given twice; the last value wins")
            result[name] = normalised
        return result
    if isinstance(value, set | frozenset):
        return _normalise(sorted(value, key=repr), path, warnings)
    if isinstance(value, list | tuple):
        items = (_normalise(item, f"{path}[{i}]", warnings) for i, item in enumerate(value))
        return [item for item in items if item is not _DROP]
    if isinstance(value, bytes):
        warnings.append(f"front-matter key {path!r}: binary data cannot be stored; dropped")
        return _DROP
    warnings.append(f"front-matter key {path!r}: unsupported {type(value).__name__}; dropped")
    return _DROP


def _load(block: str) -> tuple[Any, list[str]]:
    loader = _FrontMatterLoader(block)
    try:
        data = loader.get_single_data()
    finally:
        loader.dispose()
    return data, loader.notes


def split_front_matter(text: str) -> tuple[dict[str, Any], str, list[str]]:
    """(front_matter, body, warnings); never raises on bad front-matter, it warns instead.

    Line endings are normalised to LF and a leading BOM dropped first, so that line numbers
    in warnings count lines the way an editor does.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    first_end = text.find("\n")
    if text[: first_end if first_end >= 0 else len(text)].rstrip(" \t") != "---":
        return {}, text, []
    closer = _CLOSER.search(text, first_end + 1) if first_end >= 0 else None
    if closer is None:
        return (
            {},
            text,
            ["front-matter line 1: '---' is never closed by a '---' line; read as ordinary text"],
        )
    block = text[first_end + 1 : closer.start()]
    body = text[closer.end() + 1 :]
    if len(block.encode("utf-8", "surrogatepass")) > MAX_FRONT_MATTER_BYTES:
        return (
            {},
            body,
            [f"front-matter line 2: block larger than {MAX_FRONT_MATTER_BYTES} bytes; ignored"],
        )
    try:
        data, warnings = _load(block)
    except Exception as error:
        # Not only YAMLError: PyYAML's constructors raise KeyError or IndexError on explicit
        # tags with bad values (`!!bool x`, `!!float`), and one file must never stop a run.
        return {}, body, [_error_warning(error, block)]
    if data is None:
        return {}, body, warnings
    if not isinstance(data, dict):
        kind = _KINDS.get(type(data), type(data).__name__)
        return (
            {},
            body,
            [
                *warnings,
                f"front-matter line 2: YAML is {kind}, not a mapping of keys to values; ignored",
            ],
        )
    normalised = _normalise(data, "", warnings)
    return normalised, body, warnings
