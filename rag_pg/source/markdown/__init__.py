"""Markdown as documentation sites write it: parsed by markdown-it, read as the site renders it.

``outline`` turns a page body into headings (plain titles, the site's anchors) and blocks
(cleaned Markdown with source line spans); ``split`` cuts blocks too large for one chunk at
their own boundaries; ``slugs`` makes anchors the way GitHub, VitePress and MkDocs do.
"""

from __future__ import annotations

# Bumped whenever a change here could chunk the same bytes differently, so that the
# pipeline fingerprint re-indexes exactly the documents the new parser reads otherwise.
# 2: an explicit id runs to the next space ({#vue.js-x}); 3: long URLs and blobs weigh their
# short form in a chunk's budget (rag_pg.source.markdown.noise)
PARSER_VERSION = "markdown-it/3"
