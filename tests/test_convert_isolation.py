"""Hostile files: every conversion ends within its limits, fails with its reason, and the
worker process is always reaped. The spinning, memory-hungry and crashing converters
below are test-only; the worker imports them from this module by name."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from rag_pg.source.convert import ConversionError, ConversionPool, Converted, LibraryConverter
from tests.test_convert import build_docx, build_pdf, build_pptx, build_xlsx

from .waiting import eventually

MB = 1024 * 1024


class SpinConverter(LibraryConverter):
    name = "test-spin"
    extensions = (".spin",)

    def convert(self, data: bytes, name: str) -> Converted:
        while True:  # a parser caught in a loop
            pass


class HogConverter(LibraryConverter):
    name = "test-hog"
    extensions = (".hog",)

    def convert(self, data: bytes, name: str) -> Converted:
        blocks = []
        while True:
            blocks.append(bytearray(64 * MB))


class CrashConverter(LibraryConverter):
    name = "test-crash"
    extensions = (".crash",)

    def convert(self, data: bytes, name: str) -> Converted:
        os.kill(os.getpid(), signal.SIGSEGV)
        raise AssertionError("unreachable")


class NoisyConverter(LibraryConverter):
    """Prints to standard output, as some libraries do: the reply channel must not care."""

    name = "test-noisy"
    extensions = (".noisy",)

    def convert(self, data: bytes, name: str) -> Converted:
        print("library chatter\x00" * 1000)
        sys.stdout.flush()
        return Converted(markdown=data.decode() + "\n", converter=self.name, version=self.version)


def _gone(pid: int) -> bool:
    """Reaped, or at least dead (a zombie left to an init that does not reap)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


def _fails(pool: ConversionPool, data: bytes, name: str, converter=None, **limits) -> ConversionError:
    with pytest.raises(ConversionError) as caught:
        pool.convert(data, name, converter, **limits)
    return caught.value


def _rezip(data: bytes, member: str, payload: bytes) -> bytes:
    """The same archive with ``member`` replaced by ``payload`` (deflated)."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            target.writestr(info.filename, payload if info.filename == member else source.read(info))
    return out.getvalue()


def _bomb(data: bytes, member: str) -> bytes:
    """``member`` padded to 96 MB of blanks: a few hundred kilobytes once deflated."""
    original = zipfile.ZipFile(io.BytesIO(data)).read(member)
    return _rezip(data, member, original + b" " * (96 * MB))


@pytest.fixture
def pool():
    with ConversionPool(memory_limit=512 * MB) as pool:
        yield pool


def test_a_spinning_parser_times_out_and_its_worker_is_reaped(pool):
    assert pool.convert(b"warm", "a.noisy", NoisyConverter()).markdown == "warm\n"
    first = pool.worker_pid
    assert first is not None
    error = _fails(pool, b"x", "loop.spin", SpinConverter(), time_limit=2)
    assert error.kind == "timeout"
    assert str(error) == "loop.spin: timeout after 2 s"
    assert pool.worker_pid is None and _gone(first)
    assert pool.convert(b"after", "b.noisy", NoisyConverter()).markdown == "after\n"
    assert pool.worker_pid not in (None, first)  # a fresh worker for the next file


def test_memory_past_the_limit_fails_the_file(pool):
    error = _fails(pool, b"x", "big.hog", HogConverter())
    assert error.kind == "memory"
    assert error.reason == "exceeds memory limit (512 MB)"
    assert pool.worker_pid is None  # not trusted after a MemoryError
    assert pool.convert(b"ok", "c.noisy", NoisyConverter()).markdown == "ok\n"


def test_a_crashing_parser_fails_the_file_with_its_signal(pool):
    error = _fails(pool, b"x", "boom.crash", CrashConverter())
    assert error.kind == "crashed"
    assert "killed by SIGSEGV" in error.reason
    assert pool.convert(b"ok", "d.noisy", NoisyConverter()).markdown == "ok\n"


def test_library_output_on_stdout_does_not_corrupt_replies(pool):
    for index in range(3):
        assert pool.convert(f"n{index}".encode(), "e.noisy", NoisyConverter()).markdown == f"n{index}\n"


def test_encrypted_pdf(pool):
    error = _fails(pool, build_pdf(2, password="secret"), "coffre.pdf")
    assert error.kind == "encrypted"
    assert error.reason == "encrypted PDF: it needs a password to open"


def test_corrupt_pdf(pool):
    error = _fails(pool, b"%PDF-1.7\n" + bytes(range(256)) * 20, "bruit.pdf")
    assert error.kind == "corrupt" and error.reason.startswith("corrupt PDF: ")


def test_corrupt_docx_truncated_and_with_broken_xml(pool):
    data = build_docx()
    truncated = _fails(pool, data[: len(data) // 2], "tronque.docx")
    assert truncated.kind == "corrupt" and truncated.reason.startswith("corrupt DOCX: not a zip archive")
    broken = _fails(pool, _rezip(data, "word/document.xml", b"<w:document><unclosed"), "casse.docx")
    assert broken.kind == "corrupt" and broken.reason.startswith("corrupt DOCX: ")


@pytest.mark.parametrize(("name", "member", "build"), [
    ("bombe.docx", "word/document.xml", build_docx),
    ("bombe.xlsx", "xl/worksheets/sheet1.xml", build_xlsx),
])
def test_zip_bombs_are_refused_before_they_inflate(pool, name, member, build):
    data = _bomb(build(), member)
    assert len(data) < 2 * MB
    error = _fails(pool, data, name)
    assert error.kind == "too_large"
    assert error.reason.startswith(f"zip bomb: {member} expands to 96 MB")


def test_unsupported_extension(pool):
    error = _fails(pool, b"PK", "notes.odt")
    assert error.kind == "unsupported"
    assert "ragpg[documents]" in error.reason


def test_output_past_its_cap_fails():
    with ConversionPool(max_output_chars=10) as pool:
        error = _fails(pool, b"a" * 50, "long.noisy", NoisyConverter())
    assert error.kind == "too_large" and "exceeds 10 characters" in error.reason


def test_two_thousand_page_pdf_converts_within_the_limits(pool, tmp_path):
    with ConversionPool(memory_limit=512 * MB) as roomy:
        converted = roomy.convert(build_pdf(2000, answer_page=1999), "gros.pdf")
    assert len(converted.regions) == 2000
    line = next(n for n, text in enumerate(converted.markdown.split("\n"), 1) if "zephyr-42" in text)
    assert converted.page_at(line) == 1999
    assert converted.regions[-1].number == 2000


def test_parent_memory_stays_bounded_on_hostile_files(tmp_path):
    """A separate interpreter converts the hostile set; its own peak RSS (the ingest's
    side) stays far below 500 MB, whatever its worker went through."""
    (tmp_path / "gros.pdf").write_bytes(build_pdf(2000))
    (tmp_path / "bombe.docx").write_bytes(_bomb(build_docx(), "word/document.xml"))
    (tmp_path / "coffre.pdf").write_bytes(build_pdf(2, password="secret"))
    script = textwrap.dedent(f"""
        import json, resource, sys
        from pathlib import Path
        from rag_pg.source.convert import ConversionError, ConversionPool
        from tests.test_convert_isolation import HogConverter
        results = {{}}
        with ConversionPool(time_limit=120, memory_limit={512 * MB}) as pool:
            for path in sorted(Path({str(tmp_path)!r}).iterdir()):
                try:
                    results[path.name] = len(pool.convert(path.read_bytes(), path.name).regions)
                except ConversionError as error:
                    results[path.name] = error.kind
            try:
                pool.convert(b"x", "x.hog", HogConverter())
            except ConversionError as error:
                results["x.hog"] = error.kind
        # VmHWM, not ru_maxrss: ru_maxrss survives exec, so it would count the test runner
        # that forked this interpreter.
        status = Path("/proc/self/status").read_text()
        own = int(next(l.split()[1] for l in status.splitlines() if l.startswith("VmHWM:"))) * 1024
        workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        print(json.dumps({{"results": results, "own": own, "workers": workers}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["results"] == {"bombe.docx": "too_large", "coffre.pdf": "encrypted",
                                 "gros.pdf": 2000, "x.hog": "memory"}
    assert report["own"] < 500 * MB
    assert report["workers"] <= 512 * MB  # the hog was stopped at its address-space limit


def test_the_worker_dies_with_its_parent(tmp_path):
    script = textwrap.dedent("""
        import sys
        from rag_pg.source.convert import ConversionPool
        from tests.test_convert_isolation import NoisyConverter, SpinConverter
        pool = ConversionPool(time_limit=600)
        pool.convert(b"x", "x.noisy", NoisyConverter())
        print(pool.worker_pid, flush=True)
        pool.convert(b"x", "x.spin", SpinConverter())
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parent.parent)
    worker = None
    try:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        assert not _gone(worker)
        parent.kill()
        parent.wait()
        eventually(lambda: _gone(worker), "the worker gone with its parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
        if worker is not None and not _gone(worker):
            os.kill(worker, signal.SIGKILL)


@pytest.mark.parametrize(("name", "member", "text", "build"), [
    ("xxe.docx", "word/document.xml", "Ce guide explique", build_docx),
    ("xxe.xlsx", "xl/worksheets/sheet1.xml", "ZX-9981", build_xlsx),
    ("xxe.pptx", "ppt/slides/slide1.xml", "Plan de reprise", build_pptx),
])
def test_office_xml_never_reads_an_external_entity(pool, tmp_path, name, member, text, build):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-XXE")
    data = build()
    xml = zipfile.ZipFile(io.BytesIO(data)).read(member).decode()
    declaration, body = xml.split("?>", 1) if xml.startswith("<?xml") else ("", xml)
    root = body.lstrip().split()[0][1:]
    doctype = f'<!DOCTYPE {root} [<!ENTITY xxe SYSTEM "file://{secret}">]>'
    assert text in body
    hostile = (declaration + "?>" if declaration else "") + doctype + body.replace(text, "&xxe; " + text)
    try:
        converted = pool.convert(_rezip(data, member, hostile.encode()), name)
    except ConversionError as error:  # refused by name before any parser sees it
        assert error.kind == "unsupported" and "declares a DTD" in str(error)
    else:
        assert "TOPSECRET" not in converted.markdown
