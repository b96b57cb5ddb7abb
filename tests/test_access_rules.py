"""Who reads each document, from the source: the rules file and the front matter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rag_pg.errors import ConfigError
from rag_pg.source.access import ACCESS_FILE, AccessRules, front_matter_readers


def rules(root: Path, text: str, default: str = "everyone") -> AccessRules:
    (root / ACCESS_FILE).write_text(text, encoding="utf-8")
    return AccessRules.load(root, default)


def test_the_last_matching_rule_decides(tmp_path: Path) -> None:
    access = rules(tmp_path, "# comment\n\nhr/**  @hr\ninternal/** @staff @hr\n"
                             "internal/faq.md public\nhr/old/** nobody\n")
    assert access.by_rules("hr/pay.md") == ("hr",)
    assert access.by_rules("internal/x/y.md") == ("hr", "staff")
    assert access.by_rules("internal/faq.md") is None
    assert access.by_rules("hr/old/a.md") == ()
    assert access.by_rules("readme.md") is None
    assert AccessRules.load(tmp_path, "nobody").by_rules("readme.md") == ()


def test_the_front_matter_wins_over_the_rules(tmp_path: Path) -> None:
    access = rules(tmp_path, "hr/** @hr\n")
    assert access.readers("hr/a.md", {"access": "public"}) is None
    assert access.readers("hr/a.md", {"access": ["user:alice", "hr", "hr"]}) == ("hr", "user:alice")
    assert access.readers("hr/a.md", {"access": "finance"}) == ("finance",)
    assert access.readers("hr/a.md", {"access": []}) == ()
    assert access.readers("hr/a.md", {}) == ("hr",)
    assert front_matter_readers({"title": "x"}) == (False, None)
    for bad in (None, 3, {"a": 1}, ["two words"], ["@at"], ['quo"te']):
        with pytest.raises(ConfigError):
            front_matter_readers({"access": bad})


@pytest.mark.parametrize("text, message", [
    ("hr/**\n", "names nobody"),
    ("hr/** hr\n", "expected @principal"),
    ("hr/** @hr public\n", "expected @principal"),
    ("!hr/** @hr\n", "cannot negate"),
    ("ok.md @ok\nhr/** @a,b\n", ":2: "),
])
def test_a_bad_line_stops_the_run_naming_its_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        rules(tmp_path, text)


def test_the_rules_file_is_confined_to_the_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("** public\n", encoding="utf-8")
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside, root / ACCESS_FILE)
    with pytest.raises(ConfigError, match="outside the source root"):
        AccessRules.load(root)
    (root / ACCESS_FILE).unlink()
    (root / ACCESS_FILE).write_bytes(b"\xff\xfe bad")
    with pytest.raises(ConfigError, match="UTF-8"):
        AccessRules.load(root)


def test_only_a_change_of_what_the_rules_give_a_path_changes_its_fingerprint(tmp_path: Path) -> None:
    before = rules(tmp_path, "hr/** @hr\n")
    after = rules(tmp_path, "hr/** @hr\ninternal/** @staff\n")
    assert before.fingerprint_part("readme.md") == after.fingerprint_part("readme.md") == ""
    assert before.fingerprint_part("hr/a.md") == after.fingerprint_part("hr/a.md") != ""
    assert before.fingerprint_part("internal/a.md") != after.fingerprint_part("internal/a.md")
