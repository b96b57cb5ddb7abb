"""Walking, governance and root confinement of rag_pg.source.walk (SPEC §2.1, RELIABILITY E3 E4 E5 G1)."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import unicodedata
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pathspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_pg.errors import ConfigError
from rag_pg.models import SkippedFile
from rag_pg.source.confined_read import read_limited
from rag_pg.source.rules import governance_reason, load_aiignore
from rag_pg.source.walk import SourceFile, WalkRules, is_markdown_name, walk

CANARY = "CANARY-4f1d-must-never-be-read"


def make(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


UNCOUNTED = ("not_markdown", "vcs")


def outcome(
    root: Path, rules: WalkRules | None = None, hide: tuple[str, ...] = UNCOUNTED
) -> dict[str, str]:
    """path → 'ok' or the skip reason, for every entry the walk reports (less ``hide``)."""
    result: dict[str, str] = {}
    for item in walk(root, rules or WalkRules()):
        assert item.path not in result, f"{item.path} reported twice"
        reason = "ok" if isinstance(item, SourceFile) else item.reason
        if reason not in hide:
            result[item.path] = reason
    return result


def read_everything(root: Path, rules: WalkRules) -> bytes:
    return b"".join(item.data for item in walk(root, rules) if isinstance(item, SourceFile))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the root holding canary files that must never be read."""
    folder = tmp_path / "outside"
    make(folder, {"secret.md": f"# Secret\n\n{CANARY}\n", "sub/deep.md": CANARY})
    return folder


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "root"
    folder.mkdir()
    return folder


# --- candidates ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "markdown"),
    [
        ("a.md", True),
        ("A.MD", True),
        ("b.markdown", True),
        ("c.MarkDown", True),
        (".hidden.md", True),
        ("x.md.jsonl", False),
        ("x.mdx", True),
        ("x.MDX", True),
        ("md", False),
        (".md", False),
        ("notes.txt", False),
        ("archive.md.bak", False),
    ],
)
def test_markdown_names(name: str, markdown: bool) -> None:
    assert is_markdown_name(name) is markdown


def test_source_file_fields(root: Path) -> None:
    raw = "\ufeff# Title\r\n\r\nbody\r\n".encode()
    make(root, {"docs/a.md": raw})
    (item,) = list(walk(root))
    assert item == SourceFile(path="docs/a.md", data=raw, text="# Title\r\n\r\nbody\r\n")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty"),
        (b"   \n\t\r\n  ", "empty"),
        (b"\xef\xbb\xbf", "empty"),  # a BOM alone
        (b"\xef\xbb\xbf \n", "empty"),
        ("\u3000\u2003\n".encode(), "empty"),  # Unicode spaces only
        (b"caf\xe9", "not_utf8"),  # Latin-1
        (b"\xc3\x28", "not_utf8"),
        ("utf-16".encode("utf-16"), "not_utf8"),  # BOM + NUL bytes: an encoding problem
        ("utf-16".encode("utf-16-be"), "binary"),  # NULs without a BOM: binary
        (b"a\x00b", "binary"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"),
        (b"---\ntitle: only front matter\n---\n", "ok"),  # parse decides, not the walk
        (b"x", "ok"),
    ],
)
def test_content_classification(root: Path, content: bytes, reason: str) -> None:
    make(root, {"f.md": content})
    assert outcome(root) == {"f.md": reason}


def test_too_large_is_skipped_before_reading(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open(root / "huge.md", "wb") as handle:
        handle.truncate(10 * 1024**3)  # a sparse 10 GB file
    make(root, {"small.md": "x" * 100, "edge.md": "y" * 101})
    reads: list[int] = []
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        reads.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", counting_read)
    assert outcome(root, WalkRules(max_file_bytes=100)) == {
        "edge.md": "too_large",
        "huge.md": "too_large",
        "small.md": "ok",
    }
    assert sum(reads) < 1024  # the 10 GB file was never read


def test_default_limit_is_ten_megabytes(root: Path) -> None:
    with open(root / "big.md", "wb") as handle:
        handle.truncate(10 * 1024 * 1024 + 1)
    assert outcome(root) == {"big.md": "too_large"}


def test_read_stops_once_a_growing_file_passes_the_limit() -> None:
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"z" * 300)
        os.close(write_end)
        assert read_limited(read_end, 100) is None
    finally:
        os.close(read_end)


def test_non_markdown_files_and_vcs_folders_are_counted(root: Path) -> None:
    make(
        root,
        {
            "keep.md": "x",
            "x.md.jsonl": "{}",
            "notes.txt": "x",
            ".git/HEAD.md": "x",
            ".hg/a.md": "x",
            ".svn/b.md": "x",
            "sub/.git/c.md": "x",
            ".github/d.md": "x",
            ".gitignore": "*",
        },
    )
    assert outcome(root, hide=()) == {
        ".git/": "vcs",
        ".github/d.md": "ok",
        ".gitignore": "not_markdown",
        ".hg/": "vcs",
        ".svn/": "vcs",
        "keep.md": "ok",
        "notes.txt": "not_markdown",
        "sub/.git/": "vcs",
        "x.md.jsonl": "not_markdown",
    }


def test_order_is_sorted_per_directory(root: Path) -> None:
    names = [
        "b.md",
        "a/z.md",
        "a/b/c.md",
        "A.md",
        "é.md",
        "a.md",
        "ab.md",
        "a b.md",
        "Z/a.md",
        "_.md",
    ]
    make(root, {name: "x" for name in names})
    paths = [item.path for item in walk(root)]
    assert paths == sorted(paths, key=lambda path: path.split("/"))
    assert sorted(paths) == sorted(names)
    assert paths == [item.path for item in walk(root)]


def test_walk_is_lazy(root: Path) -> None:
    make(root, {"a.md": "x", "b/c.md": "x"})
    iterator = walk(root)
    assert isinstance(iterator, Iterator)
    assert next(iterator).path == "a.md"


# --- paths (E4) ----------------------------------------------------------------------


def test_unicode_and_odd_names_round_trip_exactly(root: Path) -> None:
    nfc = unicodedata.normalize("NFC", "café.md")
    nfd = unicodedata.normalize("NFD", "café.md")
    names = [
        nfc,
        nfd,
        "new\nline.md",
        "quote'\"s.md",
        "100%.md",
        "back\\slash.md",
        "sp ace.md",
        "x" * 252 + ".md",
    ]
    make(root, {name: "x" for name in names})
    assert sorted(outcome(root)) == sorted(names)  # NFC and NFD twins stay apart


def test_non_utf8_name_is_reported_not_stored(root: Path) -> None:
    fd = os.open(os.fsencode(root) + b"/bad\xff.md", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"x")
    os.close(fd)
    assert outcome(root) == {"bad\\xff.md": "not_utf8"}


# --- governance ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "rules", "reason"),
    [
        ("SCRATCH.md", WalkRules(), "hard_excluded"),
        ("deep/Scratch.MD", WalkRules(), "hard_excluded"),
        ("scratch.markdown", WalkRules(), None),
        ("legacy/a.md", WalkRules(), "hard_excluded"),
        ("x/LeGaCy/y/a.md", WalkRules(), "hard_excluded"),
        ("legacy.md", WalkRules(), None),  # a file named legacy is not a folder
        ("legacy-notes/a.md", WalkRules(), None),
        ("notlegacy/a.md", WalkRules(), None),
        ("docs/old/a.md", WalkRules(excluded_paths=("docs/old",)), "excluded_path"),
        ("docs/old", WalkRules(excluded_paths=("docs/old",)), "excluded_path"),
        ("docs/older.md", WalkRules(excluded_paths=("docs/old",)), None),
        ("docs/old.md", WalkRules(excluded_paths=("docs/old",)), None),
        ("docs/old.md", WalkRules(excluded_paths=("docs/old.md",)), "excluded_path"),
        ("docs2/a.md", WalkRules(included_paths=("docs",)), "not_included"),
        ("docs/a.md", WalkRules(included_paths=("docs",)), None),
        ("a.md", WalkRules(included_paths=("docs",)), "not_included"),
        ("a.md", WalkRules(included_paths=(".",)), None),  # '.' is the whole root
        ("docs/a.md", WalkRules(included_paths=("./docs/",)), None),
        ("docs/x/a.md", WalkRules(included_paths=("docs//x",)), None),
        ("Docs/a.md", WalkRules(included_paths=("docs",)), "not_included"),  # case matters
        # order: hard exclusion before excluded_paths before included_paths
        ("legacy/a.md", WalkRules(excluded_paths=("legacy",)), "hard_excluded"),
        (
            "docs/a.md",
            WalkRules(included_paths=("docs",), excluded_paths=("docs",)),
            "excluded_path",
        ),
    ],
)
def test_governance_table(path: str, rules: WalkRules, reason: str | None) -> None:
    assert governance_reason(path, rules, None) == reason


AIIGNORE = (
    "# a comment line\n"
    "   \n"
    "b.md\n"
    "drafts/\n"
    "**/private/\n"
    "/top.md\n"
    "\\#notacomment.md\n"
    "docs/**/c.md\n"
    "*.tmp.md\n"
    "!keep.tmp.md\n"
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a.md", None),
        ("b.md", "aiignore"),
        ("sub/b.md", "aiignore"),  # a pattern without a slash matches at any depth
        ("drafts/x.md", "aiignore"),  # trailing slash: everything under a directory
        ("notes/drafts/y.md", "aiignore"),
        ("drafts.md", None),
        ("deep/er/private/z.md", "aiignore"),  # **/private/
        ("private.md", None),
        ("top.md", "aiignore"),  # anchored by the leading slash
        ("sub/top.md", None),
        ("#notacomment.md", "aiignore"),  # escaped '#'
        ("# a comment line", None),
        ("docs/a/b/c.md", "aiignore"),  # ** spans directories
        ("docs/c.md", "aiignore"),  # ... including none
        ("x/docs/c.md", None),
        ("x.tmp.md", "aiignore"),
        ("keep.tmp.md", None),  # negated
    ],
)
def test_aiignore_semantics(root: Path, path: str, expected: str | None) -> None:
    make(root, {".aiignore": AIIGNORE})
    spec = load_aiignore(root)
    assert spec is not None
    assert governance_reason(path, WalkRules(), spec) == expected
    reference = pathspec.GitIgnoreSpec.from_lines(AIIGNORE.splitlines()).match_file(path)
    assert (expected == "aiignore") is reference


def test_aiignore_with_crlf_and_bom(root: Path) -> None:
    make(root, {".aiignore": b"\xef\xbb\xbf*.md\r\n!keep.md\r\n", "keep.md": "x", "drop.md": "x"})
    assert outcome(root) == {"drop.md": "aiignore", "keep.md": "ok"}


def test_no_aiignore_is_none(root: Path) -> None:
    assert load_aiignore(root) is None


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda root: (root / ".aiignore").write_text("ok.md\n!\n"), ":2:"),
        (lambda root: (root / ".aiignore").write_bytes(b"\xff\xfe*\x00"), "UTF-8"),
        (lambda root: (root / ".aiignore").mkdir(), "regular"),
        (lambda root: os.mkfifo(root / ".aiignore"), "regular"),
        (
            lambda root: (root / ".aiignore").symlink_to(root.parent / "outside" / "secret.md"),
            "outside",
        ),
        (lambda root: (root / ".aiignore").symlink_to(root / "missing"), "cannot be read"),
        (lambda root: (root / ".aiignore").write_bytes(b"#" * (2 * 1024 * 1024)), "larger"),
    ],
)
def test_unusable_aiignore_fails_closed(
    root: Path, outside: Path, setup: object, message: str
) -> None:
    setup(root)  # type: ignore[operator]
    make(root, {"a.md": "x"})
    with pytest.raises(ConfigError, match=message):
        walk(root)


def test_aiignore_may_link_inside_the_root(root: Path) -> None:
    make(root, {"rules/ignore.txt": "b.md\n", "a.md": "x", "b.md": "x"})
    (root / ".aiignore").symlink_to("rules/ignore.txt")
    assert outcome(root) == {"a.md": "ok", "b.md": "aiignore"}


def test_walk_reports_governance_reasons(root: Path) -> None:
    make(
        root,
        {
            "SCRATCH.md": "x",
            "legacy/a.md": "x",
            "docs/old/b.md": "x",
            "docs/older.md": "x",
            "docs2/c.md": "x",
            "docs/private.md": "x",
            ".aiignore": "private.md\n",
        },
    )
    rules = WalkRules(included_paths=("docs",), excluded_paths=("docs/old",))
    assert outcome(root, rules) == {
        "SCRATCH.md": "hard_excluded",
        "docs/old/b.md": "excluded_path",
        "docs/older.md": "ok",
        "docs/private.md": "aiignore",
        "docs2/c.md": "not_included",
        "legacy/a.md": "hard_excluded",
    }


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        (("./docs/",), ("docs",)),
        (("docs//old/", "docs/old"), ("docs/old",)),
        (("  docs  ",), ("docs",)),
        (("", "   "), ()),
        ((".",), ("",)),
        (["docs", "notes"], ("docs", "notes")),
        ("docs", ("docs",)),
    ],
)
def test_prefix_normalisation(raw: object, normalised: tuple[str, ...]) -> None:
    rules = WalkRules(included_paths=raw, excluded_paths=raw)  # type: ignore[arg-type]
    assert rules.included_paths == rules.excluded_paths == normalised
    assert rules.validate() is rules


@pytest.mark.parametrize(
    "kwargs",
    [
        {"included_paths": ("../etc",)},
        {"excluded_paths": ("docs/../../x",)},
        {"included_paths": ("..",)},
        {"included_paths": ("/etc",)},
        {"included_paths": (3,)},
        {"max_file_bytes": 0},
        {"max_file_bytes": True},
    ],
)
def test_bad_rules_are_config_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        WalkRules(**kwargs)  # type: ignore[arg-type]


def test_bad_root_is_a_config_error_at_call_time(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        walk(tmp_path / "missing")
    (tmp_path / "file.md").write_text("x")
    with pytest.raises(ConfigError):
        walk(tmp_path / "file.md")


# --- differential: governance vs a reference built on pathspec (E5) -------------------

SEGMENTS = [
    "docs",
    "docs2",
    "old",
    "older",
    "legacy",
    "Legacy",
    "legacy-notes",
    "a",
    "b",
    "private",
]
FILES = ["x.md", "SCRATCH.md", "scratch.MD", "old.md", "keep.md", "legacy.md", "y.markdown"]
PATTERNS = [
    "*.md",
    "!keep.md",
    "docs/",
    "**/old",
    "# comment",
    "",
    "a/**/x.md",
    "/x.md",
    "docs/*.md",
    "!docs/x.md",
    "old/",
    "b",
    "!b/keep.md",
    "**/private/**",
    "*.markdown",
    "legacy*",
    "!/a",
    "\\#x",
    "docs2",
    "a/b/",
    "?.md",
    "[ab]/x.md",
]
PREFIXES = ["docs", "docs/old", "a", "a/b", "./docs/", "docs2", "b/", "."]

paths_strategy = st.tuples(
    st.lists(st.sampled_from(SEGMENTS), max_size=3), st.sampled_from(FILES)
).map(lambda parts: "/".join([*parts[0], parts[1]]))
rules_strategy = st.builds(
    lambda included, excluded: WalkRules(
        included_paths=tuple(included), excluded_paths=tuple(excluded)
    ),
    st.lists(st.sampled_from(PREFIXES), max_size=2),
    st.lists(st.sampled_from(PREFIXES), max_size=2),
)
aiignore_strategy = st.none() | st.lists(st.sampled_from(PATTERNS), max_size=6)


def reference_reason(
    path: str, included: list[str], excluded: list[str], patterns: list[str] | None
) -> str | None:
    """The documented rules, written independently of walk.py."""
    pure = PurePosixPath(path)
    if pure.name.lower() == "scratch.md" or "legacy" in (part.lower() for part in pure.parts[:-1]):
        return "hard_excluded"

    def covered(prefix: str) -> bool:
        base = PurePosixPath(prefix.strip())
        return base == PurePosixPath(".") or base == pure or base in pure.parents

    if any(covered(prefix) for prefix in excluded):
        return "excluded_path"
    if included and not any(covered(prefix) for prefix in included):
        return "not_included"
    if patterns is not None and path in git_ignored(patterns, [path]):
        return "aiignore"
    return None


_GIT_REPOSITORY: list[Path] = []


def git_ignored(patterns: list[str], paths: list[str]) -> set[str]:
    """The paths git itself ignores under these patterns: ``git check-ignore`` as the reference."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed: gitignore semantics need git as their reference")
    if not _GIT_REPOSITORY:
        folder = Path(tempfile.mkdtemp(prefix="ragpg-gitignore-"))
        subprocess.run([git, "init", "-q", str(folder)], check=True)
        _GIT_REPOSITORY.append(folder)
    repository = _GIT_REPOSITORY[0]
    (repository / ".gitignore").write_text("\n".join(patterns) + "\n", encoding="utf-8")
    result = subprocess.run(
        [git, "-c", "core.excludesFile=/dev/null", "check-ignore", "--no-index", "--stdin",
         "-z", "-v", "-n"],
        cwd=repository,
        input="\0".join(paths) + "\0",
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    fields = result.stdout.split("\0")
    ignored: set[str] = set()
    for index in range(0, len(fields) - 3, 4):
        pattern, path = fields[index + 2], fields[index + 3]
        if pattern and not pattern.startswith("!"):
            ignored.add(path)
    return ignored


@given(
    st.lists(paths_strategy, min_size=1, max_size=20),
    st.lists(st.sampled_from(PREFIXES), max_size=2),
    st.lists(st.sampled_from(PREFIXES), max_size=2),
    aiignore_strategy,
)
@settings(max_examples=300, deadline=None)
def test_governance_agrees_with_reference(
    paths: list[str], included: list[str], excluded: list[str], patterns: list[str] | None
) -> None:
    rules = WalkRules(included_paths=tuple(included), excluded_paths=tuple(excluded))
    spec = None if patterns is None else pathspec.GitIgnoreSpec.from_lines(patterns)
    for path in paths:
        assert governance_reason(path, rules, spec) == reference_reason(
            path, included, excluded, patterns
        )


@given(
    st.lists(paths_strategy, min_size=1, max_size=12, unique=True),
    rules_strategy,
    aiignore_strategy,
)
@settings(max_examples=40, deadline=None)
def test_walk_agrees_with_reference_on_real_trees(
    paths: list[str], rules: WalkRules, patterns: list[str] | None
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for path in paths:  # a file path may collide with a directory of another: skip it
            target = root / path
            if any(parent.is_file() for parent in target.parents) or target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("x")
        if patterns is not None:
            (root / ".aiignore").write_text("\n".join(patterns) + "\n")
        created = [p for p in paths if (root / p).is_file()]
        expected = {
            path: reference_reason(
                path, list(rules.included_paths), list(rules.excluded_paths), patterns
            )
            or "ok"
            for path in created
        }
        assert outcome(root, rules) == expected


# --- root confinement (G1) -----------------------------------------------------------


@pytest.mark.parametrize("follow", [False, True])
def test_symlink_to_a_file_outside_is_never_read(root: Path, outside: Path, follow: bool) -> None:
    make(root, {"a.md": "inside"})
    (root / "link.md").symlink_to(outside / "secret.md")
    (root / "relative.md").symlink_to(Path("..") / "outside" / "secret.md")
    (root / "zero.md").symlink_to("/dev/zero")
    rules = WalkRules(follow_symlinks=follow)
    assert outcome(root, rules) == {
        "a.md": "ok",
        "link.md": "symlink",
        "relative.md": "symlink",
        "zero.md": "symlink",
    }
    assert CANARY.encode() not in read_everything(root, rules)


@pytest.mark.parametrize("follow", [False, True])
def test_symlinked_directory_outside_is_not_descended(
    root: Path, outside: Path, follow: bool
) -> None:
    make(root, {"a.md": "inside"})
    (root / "ext").symlink_to(outside)
    (root / "ext2").symlink_to(outside / "sub")
    assert outcome(root, WalkRules(follow_symlinks=follow)) == {
        "a.md": "ok",
        "ext/": "symlink",
        "ext2/": "symlink",
    }
    assert CANARY.encode() not in read_everything(root, WalkRules(follow_symlinks=follow))


def test_symlinks_inside_the_root_are_skipped_by_default(root: Path) -> None:
    make(root, {"a.md": "x", "dir/b.md": "y"})
    (root / "alias.md").symlink_to("a.md")
    (root / "dirlink").symlink_to("dir")
    assert outcome(root) == {
        "a.md": "ok",
        "alias.md": "symlink",
        "dir/b.md": "ok",
        "dirlink/": "symlink",  # counted, not silently passed over
    }


def test_followed_symlinks_inside_the_root_are_read_under_their_own_path(root: Path) -> None:
    make(root, {"a.md": "x", "dir/b.md": "y", "dir/c.txt": "z"})
    (root / "alias.md").symlink_to("a.md")
    (root / "dirlink").symlink_to("dir")
    (root / "text.md").symlink_to("dir/c.txt")  # the link's name decides, as for a file
    assert outcome(root, WalkRules(follow_symlinks=True)) == {
        "a.md": "ok",
        "alias.md": "ok",
        "dir/b.md": "ok",
        "dirlink/b.md": "ok",
        "text.md": "ok",
    }


@pytest.mark.parametrize("follow", [False, True])
def test_symlink_loops_terminate(root: Path, follow: bool) -> None:
    make(root, {"a.md": "x", "sub/b.md": "y"})
    (root / "self").symlink_to(".")
    (root / "sub" / "up").symlink_to("..")
    (root / "ping.md").symlink_to("pong.md")
    (root / "pong.md").symlink_to("ping.md")
    (root / "dangling.md").symlink_to("missing.md")
    result = outcome(root, WalkRules(follow_symlinks=follow))
    assert result == {
        "a.md": "ok",
        "dangling.md": "symlink",
        "ping.md": "symlink",
        "pong.md": "symlink",
        "self/": "symlink",
        "sub/b.md": "ok",
        "sub/up/": "symlink",
    }


@pytest.mark.parametrize("follow", [False, True])
def test_fifo_socket_and_device_names_do_not_hang(root: Path, follow: bool) -> None:
    make(root, {"a.md": "x"})
    os.mkfifo(root / "fifo.md")
    (root / "fifolink.md").symlink_to("fifo.md")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(root / "sock.md"))
        result = outcome(root, WalkRules(follow_symlinks=follow))
    finally:
        server.close()
    assert result == {
        "a.md": "ok",
        "fifo.md": "not_regular",
        "fifolink.md": "not_regular" if follow else "symlink",
        "sock.md": "not_regular",
    }


def test_root_given_as_a_symlink_is_resolved(tmp_path: Path, root: Path) -> None:
    make(root, {"a.md": "x"})
    (tmp_path / "rootlink").symlink_to(root)
    assert outcome(tmp_path / "rootlink") == {"a.md": "ok"}


# --- files that change or cannot be read (E3) ----------------------------------------


def test_file_deleted_after_listing_is_unreadable(root: Path) -> None:
    make(root, {"a.md": "x", "b.md": "y", "c.md": "z"})
    iterator = walk(root)
    assert next(iterator).path == "a.md"
    (root / "b.md").unlink()
    assert list(iterator) == [SkippedFile("b.md", "unreadable"), SourceFile("c.md", b"z", "z")]


def test_directory_removed_after_listing_is_reported(root: Path) -> None:
    make(root, {"a.md": "x", "sub/b.md": "y", "z.md": "z"})
    iterator = walk(root)
    assert next(iterator).path == "a.md"
    shutil.rmtree(root / "sub")
    assert [(item.path, getattr(item, "reason", "ok")) for item in iterator] == [
        ("sub/", "unreadable"),
        ("z.md", "ok"),
    ]


def test_file_swapped_for_an_outside_symlink_after_listing(root: Path, outside: Path) -> None:
    make(root, {"a.md": "x", "b.md": "y"})
    iterator = walk(root)
    assert next(iterator).path == "a.md"
    (root / "b.md").unlink()
    (root / "b.md").symlink_to(outside / "secret.md")  # TOCTOU: O_NOFOLLOW catches it
    assert list(iterator) == [SkippedFile("b.md", "symlink")]


def test_directory_swapped_for_an_outside_symlink_after_listing(root: Path, outside: Path) -> None:
    make(root, {"a.md": "x", "sub/b.md": "y"})
    iterator = walk(root, WalkRules(follow_symlinks=True))
    assert next(iterator).path == "a.md"
    shutil.rmtree(root / "sub")
    (root / "sub").symlink_to(outside)
    assert list(iterator) == []


def test_file_swapped_for_a_fifo_after_listing_does_not_hang(root: Path) -> None:
    make(root, {"a.md": "x", "b.md": "y"})
    iterator = walk(root)
    assert next(iterator).path == "a.md"
    (root / "b.md").unlink()
    os.mkfifo(root / "b.md")  # the descriptor is opened O_NONBLOCK and checked by fstat
    assert list(iterator) == [SkippedFile("b.md", "not_regular")]


def test_permission_denied_maps_to_unreadable(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests run as root here, where chmod cannot deny a read: the refusal is injected."""
    make(root, {"a.md": "x", "denied.md": "y", "locked/c.md": "z"})
    real_open = os.open

    def refusing_open(
        path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None
    ) -> int:
        if path in ("denied.md", "locked"):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", refusing_open)
    assert outcome(root) == {"a.md": "ok", "denied.md": "unreadable", "locked/": "unreadable"}


def test_chmod_000(root: Path) -> None:
    """Without privileges, mode 000 means unreadable; root reads anyway, and so do we."""
    make(root, {"a.md": "x", "locked/b.md": "y"})
    (root / "a.md").chmod(0)
    (root / "locked").chmod(0)
    try:
        result = outcome(root)
    finally:
        (root / "locked").chmod(stat.S_IRWXU)
        (root / "a.md").chmod(stat.S_IRUSR | stat.S_IWUSR)
    if os.geteuid() == 0:
        assert result == {"a.md": "ok", "locked/b.md": "ok"}
    else:
        assert result == {"a.md": "unreadable", "locked/": "unreadable"}


def test_the_read_bytes_are_the_bytes_yielded(root: Path) -> None:
    raw = "# T\n\n" + "é" * 1000
    make(root, {"a.md": raw})
    (item,) = walk(root)
    assert isinstance(item, SourceFile)
    assert item.data == raw.encode() and item.text == raw


def test_paths_longer_than_path_max_are_walked(root: Path) -> None:
    """Every open is relative to its directory's descriptor, so depth has no path limit."""
    segment = "d" * 200
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for _ in range(25):
            os.mkdir(segment, dir_fd=fds[-1])
            fds.append(os.open(segment, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        fd = os.open("deep.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fds[-1])
        os.write(fd, b"deep")
        os.close(fd)
    finally:
        for fd in fds:
            os.close(fd)
    (item,) = walk(root)
    assert isinstance(item, SourceFile)
    assert item.path == "/".join([segment] * 25 + ["deep.md"]) and len(item.path) > 4096


def test_abandoned_walk_closes_its_descriptors(root: Path) -> None:
    make(root, {f"d{i}/e/f/a.md": "x" for i in range(3)})
    before = len(os.listdir("/proc/self/fd"))
    iterator = walk(root)
    next(iterator)
    assert len(os.listdir("/proc/self/fd")) > before
    iterator.close()  # type: ignore[attr-defined]
    assert len(os.listdir("/proc/self/fd")) == before


# --- gitignore's parent rule, hard links, MDX ------------------------------------------


@pytest.mark.parametrize(
    ("patterns", "path", "expected"),
    [
        (["private/", "!private/keepme.md"], "private/keepme.md", "aiignore"),
        (["private", "!private/keepme.md"], "private/keepme.md", "aiignore"),
        (["private/", "!private/keepme.md"], "private/sub/keepme.md", "aiignore"),
        (["**/private/", "!**/keepme.md"], "a/private/keepme.md", "aiignore"),
        # ``dir/**`` matches what the directory holds, not the directory: re-included
        (["private/**", "!private/keepme.md"], "private/keepme.md", None),
        (["*.md", "!keepme.md"], "keepme.md", None),
        (["private/", "!private/"], "private/keepme.md", None),
    ],
)
def test_aiignore_cannot_reinclude_a_file_under_an_excluded_directory(
    root: Path, patterns: list[str], path: str, expected: str | None
) -> None:
    make(root, {".aiignore": "\n".join(patterns) + "\n", path: "x"})
    spec = load_aiignore(root)
    assert spec is not None
    assert governance_reason(path, WalkRules(), spec) == expected
    assert (expected == "aiignore") is (path in git_ignored(patterns, [path]))
    assert outcome(root) == {path: expected or "ok"}


def test_hard_link_is_refused_unless_allowed(root: Path, outside: Path) -> None:
    make(root, {"a.md": "plain"})
    os.link(outside / "secret.md", root / "smuggled.md")
    assert outcome(root) == {"a.md": "ok", "smuggled.md": "hardlink"}
    assert CANARY.encode() not in read_everything(root, WalkRules())
    allowed = WalkRules(read_hardlinks=True)
    assert outcome(root, allowed) == {"a.md": "ok", "smuggled.md": "ok"}


def test_mdx_pages_are_indexed(root: Path) -> None:
    make(root, {"page.mdx": "# Page\n", "notes.MDX": "x", "image.png": b"\x89PNG"})
    assert outcome(root, hide=()) == {
        "image.png": "not_markdown",
        "notes.MDX": "ok",
        "page.mdx": "ok",
    }


# -- documents to convert ------------------------------------------------------------------------


PDF_BYTES = b"%PDF-1.4\n\x00\x01binary\xff\n%%EOF\n"


def test_formats_yield_raw_bytes_to_convert_and_name_what_is_not_read(tmp_path):
    root = make(tmp_path, {
        "a.md": "# A\n\ntexte\n", "b.mdx": "# B\n\ntexte\n", "m.pdf": PDF_BYTES,
        "w.docx": b"PK\x03\x04", "empty.pdf": b"", "notes.txt": "x", "old/x.pdf": PDF_BYTES,
    })
    rules = WalkRules(excluded_paths=("old",), formats=frozenset({".md", ".markdown", ".pdf"}))
    items = {item.path: item for item in walk(root, rules)}
    pdf = items["m.pdf"]
    assert isinstance(pdf, SourceFile) and (pdf.kind, pdf.data, pdf.text) == ("convert", PDF_BYTES, "")
    assert outcome(root, rules, hide=()) == {
        "a.md": "ok", "b.mdx": "ok", "m.pdf": "ok", "empty.pdf": "empty",
        "w.docx": "unsupported_format",  # a format ragpg reads, not asked for
        "notes.txt": "not_markdown",  # no format at all
        "old/x.pdf": "excluded_path",  # governance first
    }
    assert [i.kind for i in items.values() if isinstance(i, SourceFile) and i.path.endswith("md")] == [
        "markdown"]


def test_formats_without_markdown_skip_it_as_unsupported(tmp_path):
    root = make(tmp_path, {"a.md": "# A\n\nx\n", "m.pdf": PDF_BYTES})
    assert outcome(root, WalkRules(formats=frozenset({".pdf"})), hide=()) == {
        "a.md": "unsupported_format", "m.pdf": "ok"}


def test_documents_have_their_own_size_limit(tmp_path):
    root = make(tmp_path, {"big.pdf": PDF_BYTES * 10, "big.md": "# x\n\n" + "mot " * 100})
    rules = WalkRules(max_file_bytes=len(PDF_BYTES) * 20, max_document_bytes=len(PDF_BYTES) * 5,
                      formats=frozenset({".md", ".pdf"}))
    assert outcome(root, rules, hide=()) == {"big.pdf": "too_large", "big.md": "ok"}
    with pytest.raises(ConfigError, match="max_document_bytes"):
        WalkRules(max_document_bytes=0)


def test_a_followed_link_to_a_document_is_read_as_bytes(tmp_path):
    root = make(tmp_path, {"real/m.pdf": PDF_BYTES})
    (root / "link.pdf").symlink_to(root / "real" / "m.pdf")
    rules = WalkRules(follow_symlinks=True, formats=frozenset({".md", ".pdf"}))
    items = {item.path: item for item in walk(root, rules)}
    link = items["link.pdf"]
    assert isinstance(link, SourceFile) and (link.kind, link.data) == ("convert", PDF_BYTES)
    assert outcome(root, WalkRules(formats=frozenset({".md", ".pdf"})), hide=())["link.pdf"] == "symlink"
