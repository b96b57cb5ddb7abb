"""Every option of every command says what it does; -v shows what stays quiet otherwise."""

from __future__ import annotations

import logging

import click
import pytest
from psycopg_pool import PoolTimeout

from rag_pg.cli import cli
from rag_pg.cli._common import Context
from rag_pg.store.db import PoolSource


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            out += _commands(command, f"{prefix}{name} ")
        else:
            out.append((f"{prefix}{name}", command))
    return out


COMMANDS = _commands(cli)


@pytest.mark.parametrize(("name", "command"), COMMANDS, ids=[n for n, _ in COMMANDS])
def test_every_option_has_help_text(name: str, command: click.Command) -> None:
    options = [p for p in command.params if isinstance(p, click.Option)]
    assert [p.opts for p in options if not (p.help or "").strip()] == []
    assert (command.help or "").strip(), name
    for flag in ("--collection", "--mode", "--json"):
        for option in options:
            if flag in option.opts:
                assert len(option.help or "") > 10, (name, flag)


def test_search_and_every_reader_take_collection_with_its_short_form() -> None:
    readers = {"search", "stats", "tree", "export", "context", "ask", "eval", "reembed", "ingest"}
    for name, command in COMMANDS:
        if name in readers:
            [option] = [p for p in command.params if "--collection" in getattr(p, "opts", [])]
            assert "-c" in option.opts, name


def test_the_pool_log_shows_only_with_verbose(caplog: pytest.LogCaptureFixture) -> None:
    """psycopg_pool logs each failed connection attempt of its workers: quiet by default (the
    command says the failure in one line), shown with -v (the CLI configures no handler, so
    logging's last-resort handler writes it to stderr)."""
    for verbose in (False, True):
        caplog.clear()
        Context(None, None, {}, verbose=verbose)
        source = PoolSource("postgresql://nobody@127.0.0.1:1/none", connect_timeout=1)
        try:
            source.pool.open(wait=False)  # the pool's own workers, without ragpg's probe first
            with pytest.raises(PoolTimeout), source.pool.connection(timeout=1):
                pass
        finally:
            source.close()
        logged = [r for r in caplog.records if r.name == "psycopg.pool"]
        assert bool(logged) is verbose, logged
    Context(None, None, {})  # back to quiet for the tests that follow
    assert not logging.getLogger("psycopg.pool").isEnabledFor(logging.WARNING)
