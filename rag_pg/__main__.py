"""``python -m rag_pg`` runs the CLI."""

from rag_pg.cli import main

main()
