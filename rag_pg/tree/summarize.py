"""Structure-driven summaries: ``summary.md`` files for a book tree.

``ROOT`` is the folder you ingest (``parent_source_file`` paths are relative to it). Each
subfolder of ``ROOT`` holding a ``source.md`` somewhere below is a **work**; inside it a
folder with a ``source.md`` is a front-matter piece (preface, introduction), any other
folder is a **part** whose subfolders with a ``source.md`` are its **chapters**::

    ROOT/work/summary.md                      level 3, no parent (the root of the tree)
    ROOT/work/preface/summary.md              level 1, parent work/summary.md
    ROOT/work/part/summary.md                 level 2, parent work/summary.md
    ROOT/work/part/chapter/summary.md         level 1, parent work/part/summary.md
    ROOT/work/part/chapter/source.md          level 0, parent its chapter's summary.md

Modes: ``bottom-up`` (default) builds a chapter from its source, a part from its chapter
summaries, the work from its part and front-matter summaries; ``direct`` builds a part from
its chapters' sources and the work from every level-1 summary (fewer levels of paraphrase).

Each summary records ``inputs_hash`` (sha256 of the mode, the prompt and its input texts)
in its front-matter and is regenerated only when that hash changes, so a re-run after
editing one chapter calls the LLM for that chapter, its part and the work — nothing else.
A summary's title and extra front-matter keys written by hand are kept.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

from rag_pg.errors import ConfigError, LLMError
from rag_pg.models import FailedDocument
from rag_pg.source.parse import parse_document
from rag_pg.tree.context import resolve_lang
from rag_pg.tree.sidecar import write_atomic

MODES = ("bottom-up", "direct")
SOURCE, SUMMARY = "source.md", "summary.md"
_SKIP_DIRS = frozenset({".git", ".hg", ".svn"})
_OWN_KEYS = ("title", "level", "node_type", "parent_source_file", "inputs_hash", "summary_mode",
             "summary_model")
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")

KINDS = {
    "fr": {1: "la section", 2: "la partie", 3: "l'ouvrage entier"},
    "en": {1: "the section", 2: "the part", 3: "the whole work"},
}
PROMPTS = {
    "fr": (
        "Résume fidèlement $kind « $title » de l'ouvrage « $work ». Reste fidèle au texte :"
        " n'ajoute rien qui n'y figure pas, garde les idées principales et leur enchaînement,"
        " en quelques paragraphes. Réponds par le résumé seul, en français, sans titre.\n"
        "---\n$inputs\n"
    ),
    "en": (
        "Summarise $kind \"$title\" of the work \"$work\" faithfully. Stay true to the text:"
        " add nothing it does not say, keep the main ideas and how they connect, in a few"
        " paragraphs. Answer with the summary only, in English, without a title.\n"
        "---\n$inputs\n"
    ),
}
SUFFIX = {"fr": "résumé", "en": "summary"}


@dataclass(slots=True)
class Node:
    """A folder that gets a ``summary.md``."""

    rel: str  # folder, relative to ROOT, posix
    level: int
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)

    @property
    def summary(self) -> str:
        return f"{self.rel}/{SUMMARY}"

    @property
    def source(self) -> str:
        return f"{self.rel}/{SOURCE}"

    def work(self) -> Node:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def sections(self) -> list[Node]:
        """Every level-1 node below (or this one), in path order."""
        if self.level == 1:
            return [self]
        return [s for c in self.children for s in c.sections()]


@dataclass(slots=True)
class SummaryReport:
    root: str
    mode: str
    dry_run: bool = False
    generated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    linked: list[str] = field(default_factory=list)
    unlinked: list[str] = field(default_factory=list)
    failures: list[FailedDocument] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    calls: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root, "mode": self.mode, "dry_run": self.dry_run,
            "generated": list(self.generated), "unchanged": list(self.unchanged),
            "linked": list(self.linked), "unlinked": list(self.unlinked), "calls": self.calls,
            "failures": [{"path": f.path, "error": f.error, "kind": f.kind} for f in self.failures],
            "warnings": list(self.warnings),
        }


# -- structure -----------------------------------------------------------------------------------


def _subdirs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in _SKIP_DIRS
                  and not p.name.startswith("."))


def _has_source(folder: Path) -> bool:
    return any(p.is_file() for p in folder.rglob(SOURCE))


def scan(root: Path) -> tuple[list[Node], list[str]]:
    """The works under ``root`` as trees of nodes, and the folders that fit no level."""
    works: list[Node] = []
    problems: list[str] = []
    if any((d / SOURCE).is_file() for d in _subdirs(root)):
        raise ConfigError(
            f"{root} looks like a work folder (its subfolders hold {SOURCE}): pass the folder"
            " above it, the one you ingest, so parent_source_file paths match the index"
        )
    for work_dir in _subdirs(root):
        if not _has_source(work_dir):
            continue
        rel = work_dir.relative_to(root).as_posix()
        if (work_dir / SOURCE).is_file():
            problems.append(f"{rel}: a work folder holds {SOURCE} directly; move it into a section folder")
            continue
        work = Node(rel, 3)
        for child in _subdirs(work_dir):
            crel = child.relative_to(root).as_posix()
            if (child / SOURCE).is_file():
                work.children.append(Node(crel, 1, work))
            elif _has_source(child):
                part = Node(crel, 2, work)
                for chapter in _subdirs(child):
                    chrel = chapter.relative_to(root).as_posix()
                    if (chapter / SOURCE).is_file():
                        part.children.append(Node(chrel, 1, part))
                    elif _has_source(chapter):
                        problems.append(f"{chrel}: nested deeper than work/part/chapter; skipped")
                if part.children:
                    work.children.append(part)
        works.append(work)
    return works, problems


# -- front-matter --------------------------------------------------------------------------------


def _yaml_value(value: Any) -> str:
    """JSON is valid YAML: strings quoted and escaped, numbers, booleans, lists and maps."""
    return json.dumps(value, ensure_ascii=False)


def render_summary(front_matter: Mapping[str, Any], body: str) -> bytes:
    lines = ["---"]
    for key, value in front_matter.items():
        if value is None:
            continue
        name = key if _PLAIN_KEY.match(key) else json.dumps(key, ensure_ascii=False)
        lines.append(f"{name}: {_yaml_value(value)}")
    lines += ["---", "", body.strip(), ""]
    return "\n".join(lines).encode("utf-8")


def _read(root: Path, rel: str) -> tuple[dict[str, Any], str, str] | None:
    """(front-matter, body, title) of a Markdown file, or None when it does not exist."""
    path = root / rel
    try:
        data = path.read_bytes()
    except OSError:
        return None
    document = parse_document(rel, data)
    return dict(document.front_matter), document.content.strip(), document.title


def _humanise(folder: str) -> str:
    name = folder.rsplit("/", 1)[-1].replace("-", " ").replace("_", " ").strip()
    return name[:1].upper() + name[1:]


def link_source(root: Path, node: Node) -> str | None:
    """Add ``parent_source_file``, ``level: 0`` and ``node_type: source`` to a chapter's source.md
    when missing; returns a warning when it names another parent (left as is)."""
    path = root / node.source
    data = path.read_bytes()
    text = data.decode("utf-8-sig")
    newline = "\r\n" if "\r\n" in text else "\n"
    current = parse_document(node.source, data).front_matter
    parent = current.get("parent_source_file")
    if parent not in (None, ""):
        if parent != node.summary:
            return f"{node.source}: parent_source_file is {parent!r}, expected {node.summary!r}; left as is"
        if "level" in current and "node_type" in current:
            return None
    wanted = {"parent_source_file": node.summary, "level": 0, "node_type": "source"}
    added = [f"{k}: {_yaml_value(v)}" for k, v in wanted.items() if current.get(k) in (None, "")]
    lines = text.split(newline)
    if lines and lines[0].rstrip() == "---":
        for i in range(1, len(lines)):
            if re.fullmatch(r"(?:---|\.\.\.)[ \t]*", lines[i]):
                lines[i:i] = added
                break
        else:
            lines = ["---", *added, "---", *lines]
    else:
        lines = ["---", *added, "---", *lines]
    write_atomic(path, newline.join(lines).encode("utf-8"))
    return None


# -- generation ----------------------------------------------------------------------------------


class _Run:
    def __init__(self, root: Path, client: Any, report: SummaryReport, *, lang: str | None,
                 force: bool, prompts: Mapping[str, str] | None) -> None:
        self.root = root
        self.client = client
        self.report = report
        self.lang = lang
        self.force = force
        self.prompts = dict(prompts or {})
        # source or summary path -> (title, body), None when missing or failed this run
        self.known: dict[str, tuple[str, str] | None] = {}
        self.pending: set[str] = set()  # dry run: would be regenerated

    def input_of(self, rel: str) -> tuple[str, str] | None:
        if rel not in self.known:
            found = _read(self.root, rel)
            self.known[rel] = (found[2], found[1]) if found else None
        return self.known[rel]

    def title_of(self, node: Node, lang: str) -> str:
        existing = _read(self.root, node.summary)
        if existing and isinstance(existing[0].get("title"), str) and existing[0]["title"].strip():
            return str(existing[0]["title"]).strip()
        if node.level == 1:
            found = _read(self.root, node.source)
            name = found[2] if found and found[2] != "source" else _humanise(node.rel)
        else:
            name = _humanise(node.rel)
        return f"{name} ({SUFFIX[lang]})"

    def inputs(self, node: Node, mode: str) -> list[tuple[str, str]] | None:
        """(label, path) of what the node is made from, or None for a missing input."""
        if node.level == 1:
            refs = [node.source]
        elif node.level == 2:
            refs = [c.source if mode == "direct" else c.summary for c in node.children]
        else:
            refs = ([s.summary for s in node.sections()] if mode == "direct"
                    else [c.summary for c in node.children])
        return [(r, r) for r in refs]

    def generate(self, node: Node, mode: str, model: str) -> None:
        report = self.report
        refs = self.inputs(node, mode) or []
        texts: list[tuple[str, str]] = []
        blocked = [r for _, r in refs if r in self.pending]
        for label, rel in refs:
            found = self.input_of(rel)
            if found is None and rel not in self.pending:
                report.failures.append(FailedDocument(
                    node.summary, f"input {rel} is missing or failed; not summarised", "missing_input"))
                self.known[node.summary] = None
                return
            texts.append(found if found is not None else (label, ""))
        sample = texts[0][1] if texts else ""
        lang = resolve_lang(self.lang, sample) if sample or self.lang else "en"
        work_title = self.title_of(node.work(), lang).rsplit(" (", 1)[0]
        title = self.title_of(node, lang)
        template = self.prompts.get(lang, PROMPTS[lang])
        inputs_text = "\n\n".join(f"## {label}\n\n{text}" for label, text in texts)
        prompt = Template(template).safe_substitute(
            kind=KINDS[lang][node.level], title=title.rsplit(" (", 1)[0], work=work_title,
            level=str(node.level), inputs=inputs_text,
        )
        digest = "sha256:" + hashlib.sha256(
            json.dumps([mode, template, texts], ensure_ascii=False).encode("utf-8")
        ).hexdigest()
        existing = _read(self.root, node.summary)
        if existing and existing[0].get("inputs_hash") == digest and not self.force and not blocked:
            report.unchanged.append(node.summary)
            self.known[node.summary] = (existing[2], existing[1])
            return
        if report.dry_run:
            report.generated.append(node.summary)
            self.pending.add(node.summary)
            return
        try:
            completion = self.client.complete([{"role": "user", "content": prompt}])
        except LLMError as exc:
            if exc.kind == "unavailable":
                raise
            report.calls += 1
            report.failures.append(FailedDocument(node.summary, str(exc), exc.kind))
            self.known[node.summary] = None
            return
        report.calls += 1
        text = completion.text.strip()
        if not text:
            report.failures.append(FailedDocument(node.summary, "the model returned an empty summary", "empty"))
            self.known[node.summary] = None
            return
        front: dict[str, Any] = {
            "title": title,
            "level": node.level,
            "node_type": "summary",
            "parent_source_file": node.parent.summary if node.parent else None,
            "inputs_hash": digest,
            "summary_mode": mode,
            "summary_model": completion.model or model,
        }
        if existing:
            front.update({k: v for k, v in existing[0].items() if k not in _OWN_KEYS})
        write_atomic(self.root / node.summary, render_summary(front, text))
        report.generated.append(node.summary)
        self.known[node.summary] = (title, text)


def summarize(
    root: str | Path,
    client: Any,
    *,
    mode: str = "bottom-up",
    lang: str | None = None,
    force: bool = False,
    dry_run: bool = False,
    link_sources: bool = False,
    prompts: Mapping[str, str] | None = None,
) -> SummaryReport:
    """Write or refresh every ``summary.md`` under ``root``; see the module docstring.

    ``client`` has ``complete(messages) -> Completion`` (``llm.ChatClient``); with
    ``dry_run`` it may be None and nothing is written or sent. ``prompts`` maps ``fr``/``en``
    to templates using ``$kind $title $work $level $inputs``.
    """
    if mode not in MODES:
        raise ConfigError(f"summary mode must be one of {', '.join(MODES)} (got {mode!r})")
    root_path = Path(root).expanduser()
    if not root_path.is_dir():
        raise ConfigError(f"not a directory: {root_path}")
    if client is None and not dry_run:
        raise ConfigError("summarize needs a chat endpoint: set [llm] url and model")
    report = SummaryReport(root=str(root_path.resolve()), mode=mode, dry_run=dry_run)
    works, problems = scan(root_path)
    report.warnings.extend(problems)
    if not works:
        raise ConfigError(f"no work under {root_path}: expected work/part/chapter/{SOURCE} folders")
    run = _Run(root_path, client, report, lang=lang, force=force, prompts=prompts)
    model = str(getattr(client, "model", "") or "")
    for work in works:
        for section in work.sections():
            current = _read(root_path, section.source)
            parent = current[0].get("parent_source_file") if current else None
            if parent in (None, ""):
                if link_sources and not dry_run:
                    warning = link_source(root_path, section)
                    if warning:
                        report.warnings.append(warning)
                    else:
                        report.linked.append(section.source)
                        run.known.pop(section.source, None)
                else:
                    report.unlinked.append(section.source)
            elif parent != section.summary:
                report.warnings.append(
                    f"{section.source}: parent_source_file is {parent!r}, expected {section.summary!r}")
    if report.unlinked:
        report.warnings.append(
            f"{len(report.unlinked)} {SOURCE} file(s) have no parent_source_file:"
            " run with --link-sources to add it")
    # Level by level across all works: a part is summarised only after all its chapters.
    for level in (1, 2, 3):
        for work in works:
            nodes = (work.sections() if level == 1 else [work] if level == 3
                     else [c for c in work.children if c.level == 2])
            for node in nodes:
                run.generate(node, mode, model)
    return report
