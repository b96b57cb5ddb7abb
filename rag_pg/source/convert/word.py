"""DOCX: mammoth maps Word's paragraph styles to HTML (Heading 1 → ``<h1>``, lists, tables,
bold), then the HTML converter's Markdown writer makes Markdown of it.

Mammoth reads meaning, not looks: a paragraph styled "Heading 2" becomes a second-level
heading however it is formatted, which is what a section needs. Images are not read
(their alt text stays), nor are comments, headers, footers or tracked changes.
"""

from __future__ import annotations

import io
import zipfile
from typing import Any

from rag_pg.source.convert.base import Converted, LibraryConverter
from rag_pg.source.convert.zipguard import check_archive

# Word's own "Title"/"Subtitle" styles name the document, so they are headings too.
_STYLE_MAP = """
p[style-name='Title'] => h1:fresh
p[style-name='Subtitle'] => h2:fresh
"""


def _no_image(image: Any) -> dict[str, str]:
    return {"alt": str(image.alt_text or "")}  # the picture's bytes are never read


class DocxConverter(LibraryConverter):
    name = "docx-mammoth"
    label = "DOCX"
    extensions = (".docx",)
    modules = ("mammoth", "bs4", "markdownify")
    distributions = ("mammoth", "markdownify")

    def convert(self, data: bytes, name: str) -> Converted:
        import mammoth
        from bs4 import BeautifulSoup

        from rag_pg.source.convert.web import (
            _parser,
            html_title,
            mark_heading_ids,
            soup_to_markdown,
        )

        check_archive(data, name, self.label)
        try:
            result = mammoth.convert_to_html(
                io.BytesIO(data), style_map=_STYLE_MAP,
                convert_image=mammoth.images.img_element(_no_image),
            )
        except (KeyError, ValueError, OSError, zipfile.BadZipFile) as error:
            raise self.fail(name, "corrupt", f"{type(error).__name__}: {error}") from error
        soup = BeautifulSoup(result.value, _parser())
        root = soup.body or soup
        mark_heading_ids(root)
        title = html_title(soup)
        return Converted(
            markdown=soup_to_markdown(root), converter=self.name, version=self.version, title=title,
        )
