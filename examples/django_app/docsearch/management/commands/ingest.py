"""``manage.py ingest ROOT``: index a Markdown tree into ragpg, on the project's database."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from docsearch import engine
from rag_pg import RagError


class Command(BaseCommand):
    help = "Index the Markdown files under ROOT into ragpg's schema (incremental)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("root", help="Folder of Markdown files.")
        parser.add_argument("--collection", default=None, help="Collection to index into.")
        parser.add_argument("--full", action="store_true", help="Reprocess every document.")
        parser.add_argument("--prune", action="store_true", help="Delete documents gone from ROOT.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = engine.rag().ingest(
                options["root"], collection=options["collection"], full=options["full"],
                prune=options["prune"],
            )
        except RagError as exc:
            raise CommandError(str(exc).splitlines()[0]) from None
        self.stdout.write(json.dumps(report.to_dict(), ensure_ascii=False))
        if report.documents_failed:
            raise CommandError(f"{report.documents_failed} document(s) could not be indexed")
