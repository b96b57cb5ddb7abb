"""XLSX: one ``## sheet name`` section per worksheet, its cells as Markdown tables.

openpyxl reads the workbook in read-only mode (rows streamed, not loaded whole) and the
values as last computed by Excel (``data_only``), not the formulas. The first non-empty
row is the header; the rows are written in tables of ``ROWS_PER_TABLE``, each repeating
the header, so a chunk of a long sheet still says what its columns are. Charts, images,
formatting and hidden-ness are lost; past ``MAX_ROWS`` or ``MAX_COLUMNS`` a sheet is cut,
with a warning.
"""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

from rag_pg.source.convert.base import (
    Converted,
    LibraryConverter,
    MarkdownBuilder,
    cell_text,
    markdown_table,
)
from rag_pg.source.convert.zipguard import check_archive

ROWS_PER_TABLE = 40
MAX_ROWS = 100_000
MAX_COLUMNS = 200


def format_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return cell_text(value)


def _sheet_rows(sheet: Any, warnings: list[str]) -> list[list[str]]:
    rows: list[list[str]] = []
    wide = False
    for values in sheet.iter_rows(values_only=True):
        cells = [format_cell(value) for value in values[:MAX_COLUMNS]]
        if not wide and any(value is not None for value in values[MAX_COLUMNS:]):
            wide = True
            warnings.append(f"sheet {sheet.title!r}: only the first {MAX_COLUMNS} columns are read")
        while cells and not cells[-1]:
            cells.pop()
        if cells:
            rows.append(cells)
        if len(rows) >= MAX_ROWS:
            warnings.append(f"sheet {sheet.title!r}: cut after {MAX_ROWS} rows")
            break
    return rows


class XlsxConverter(LibraryConverter):
    name = "xlsx-openpyxl"
    label = "XLSX"
    extensions = (".xlsx", ".xlsm")
    modules = ("openpyxl",)
    distributions = ("openpyxl",)

    def convert(self, data: bytes, name: str) -> Converted:
        from openpyxl import load_workbook

        check_archive(data, name, self.label)
        try:
            book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        except (KeyError, ValueError, OSError, TypeError) as error:
            raise self.fail(name, "corrupt", f"{type(error).__name__}: {error}") from error
        builder = MarkdownBuilder()
        warnings: list[str] = []
        try:
            for number, sheet in enumerate(book.worksheets, start=1):
                builder.begin("sheet", number, sheet.title)
                rows = _sheet_rows(sheet, warnings)
                if not rows:
                    continue
                builder.add(f"## {cell_text(sheet.title)}")
                width = max(len(row) for row in rows)
                header = (rows[0] + [""] * width)[:width]
                body = rows[1:]
                if not body:
                    builder.add(markdown_table(header, []))
                for start in range(0, len(body), ROWS_PER_TABLE):
                    builder.add(markdown_table(header, body[start:start + ROWS_PER_TABLE]))
            title = str(book.properties.title or "").strip() or None
        finally:
            book.close()
        return Converted(
            markdown=builder.markdown(), converter=self.name, version=self.version, title=title,
            regions=builder.regions(), warnings=tuple(warnings),
        )
