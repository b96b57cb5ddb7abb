"""Which renderer builds a documentation tree's site, told from its configuration files.

An ``auto`` anchor style needs no setting for the common generators: a tree whose root (or
the folder above it, where MkDocs and VitePress keep their configuration beside ``docs/``)
holds ``mkdocs.yml`` is rendered by Python-Markdown, one with ``.vitepress/`` by VitePress;
anything else (GitHub, Docusaurus, Astro/Starlight, Nextra) slugs the github way.
"""

from __future__ import annotations

from pathlib import Path

from rag_pg.source.markdown.slugs import SlugStyle

_MARKERS: tuple[tuple[str, SlugStyle], ...] = (
    ("mkdocs.yml", "mkdocs"),
    ("mkdocs.yaml", "mkdocs"),
    (".vitepress", "vitepress"),
)


def detect_style(root: Path) -> SlugStyle:
    """The anchor style of the site built from ``root``; ``github`` when nothing says."""
    root = Path(root)
    for folder in (root, root.parent):
        for name, style in _MARKERS:
            try:
                if (folder / name).exists():
                    return style
            except OSError:
                continue  # an unreadable folder says nothing
    return "github"
