"""A Django app that indexes and searches Markdown with ragpg, on the project's own database."""
