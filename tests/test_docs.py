"""Documentation does not drift: every command and every setting is documented (sqlite-utils style)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from rag_pg.cli import cli
from rag_pg.config import SECTIONS

ROOT = Path(__file__).resolve().parent.parent
DOCS = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def test_every_command_is_documented():
    missing = []
    for name, command in cli.commands.items():
        if f"ragpg {name}" not in DOCS and f"`{name}`" not in DOCS:
            missing.append(name)
        if isinstance(command, click.Group):
            for sub in command.commands:
                if sub not in DOCS:
                    missing.append(f"{name} {sub}")
    assert missing == []


def test_every_setting_is_documented():
    missing = []
    for section, cls in SECTIONS.items():
        for field in dataclasses.fields(cls):
            if field.name in ("providers", "explicit"):
                continue
            if f"{section}.{field.name}" not in DOCS and f"`{field.name}`" not in DOCS:
                missing.append(f"{section}.{field.name}")
    assert missing == []


def test_readme_starts_with_the_two_commands():
    head = (ROOT / "README.md").read_text().split("\n")[:6]
    assert any(line.startswith("make demo") for line in head)
    assert any(line.startswith("make test") for line in head)


def test_linked_docs_exist():
    import re

    for link in re.findall(r"\]\((docs/[^)]+)\)", (ROOT / "README.md").read_text()):
        assert (ROOT / link).is_file(), link
