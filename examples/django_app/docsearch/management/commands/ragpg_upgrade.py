"""``manage.py ragpg_upgrade``: bring ragpg's schema to the installed release's head revision."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from docsearch import engine
from rag_pg import RagError


class Command(BaseCommand):
    help = "Create or upgrade ragpg's schema (what the docsearch 0001 migration does)."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            revision = engine.rag().init()
        except RagError as exc:
            raise CommandError(str(exc).splitlines()[0]) from None
        self.stdout.write(f"ragpg schema at revision {revision}")
