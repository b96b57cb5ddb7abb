"""``python -m rag_pg`` runs the CLI."""

from .cli import main

main()
