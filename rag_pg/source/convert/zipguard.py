"""Office files are zip archives: refuse one whose members would expand past a bound.

Checked from the archive's directory before any library opens it, so a zip bomb (a few
kilobytes that inflate to gigabytes of XML) costs nothing. Python's ``zipfile``, which
python-docx, python-pptx, openpyxl and mammoth all read through, stops a member at its
declared size, so a directory that lies about sizes cannot inflate past them either; the
worker's memory limit stands behind both.
"""

from __future__ import annotations

import io
import zipfile

from rag_pg.source.convert.base import ConversionError

MAX_EXPANDED_BYTES = 256 * 1024 * 1024  # all members together, uncompressed
MAX_RATIO = 200  # a member this much larger than its compressed bytes...
RATIO_FLOOR = 16 * 1024 * 1024  # ...is refused once it is past this size
MAX_MEMBERS = 20_000


def _mb(size: int) -> str:
    if size < 1024 * 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size / (1024 * 1024):.0f} MB"


def open_archive(data: bytes, name: str, label: str) -> zipfile.ZipFile:
    """The archive, checked; a file that is not a zip is a corrupt ``label``."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise ConversionError(name, "corrupt", f"corrupt {label}: not a zip archive ({error})") from error
    members = archive.infolist()
    if len(members) > MAX_MEMBERS:
        raise ConversionError(name, "too_large", f"{label} holds {len(members)} files (limit {MAX_MEMBERS})")
    total = 0
    for member in members:
        total += member.file_size
        ratio_bomb = (member.file_size > RATIO_FLOOR
                      and member.file_size > MAX_RATIO * max(member.compress_size, 1))
        if total > MAX_EXPANDED_BYTES or ratio_bomb:
            raise ConversionError(
                name, "too_large",
                f"zip bomb: {member.filename} expands to {_mb(member.file_size)} from "
                f"{_mb(member.compress_size)} ({label} limit {_mb(MAX_EXPANDED_BYTES)} expanded)",
            )
    return archive


def check_archive(data: bytes, name: str, label: str) -> None:
    with open_archive(data, name, label) as archive:
        refuse_dtd(archive, name, label)


# The prolog of an XML part: a declaration of a DTD comes before its first element.
_PROLOG_BYTES = 4096


def refuse_dtd(archive: zipfile.ZipFile, name: str, label: str) -> None:
    """Refuse an archive whose XML declares a DTD: Office never writes one, and its entities
    are what an XML bomb or an external-entity read is made of."""
    for member in archive.infolist():
        if not member.filename.endswith((".xml", ".rels")):
            continue
        with archive.open(member) as part:
            if b"<!DOCTYPE" in part.read(_PROLOG_BYTES).upper():
                raise ConversionError(name, "unsupported",
                                      f"{label} declares a DTD in {member.filename}: refused")
