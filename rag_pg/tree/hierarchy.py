"""The summary tree: parent checks after ingest, and the tree ``ragpg tree`` prints.

A document names its parent with front-matter ``parent_source_file`` (a path relative to the
ingest root, stored as ``document.parent_path``). Nothing in the database forces that parent
to exist — the child may be indexed before its parent, or the parent may be pruned later —
so the check runs after the walk, over the whole collection, and a broken link is reported
per document (kind ``missing_parent``) while the document itself stays indexed: losing a
chapter's text because its summary is missing would punish the wrong file.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import class_row, dict_row

from rag_pg.ingest.parents import MISSING_PARENT
from rag_pg.store.queries import Queries


@dataclass(slots=True)
class Node:
    """One document in the tree, with its children in path order."""

    path: str
    title: str
    parent_path: str | None
    level: int
    node_type: str
    embed: bool
    chunk_count: int
    token_count: int
    children: list[Node] = field(default_factory=list)
    problem: str | None = None  # "missing_parent" | "cycle" when it is shown as a root

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": self.path,
            "title": self.title,
            "parent_path": self.parent_path,
            "level": self.level,
            "node_type": self.node_type,
            "embed": self.embed,
            "chunk_count": self.chunk_count,
            "token_count": self.token_count,
        }
        if self.problem:
            data["problem"] = self.problem
        data["children"] = [c.to_dict() for c in self.children]
        return data


@dataclass(slots=True)
class Tree:
    """The forest of a collection: roots (no parent), then orphans, then cycle members."""

    collection: str
    roots: list[Node]
    problems: list[dict[str, str]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "roots": [r.to_dict() for r in self.roots],
            "problems": list(self.problems),
        }


def load_nodes(conn: psycopg.Connection[Any], schema: str, collection: str) -> list[Node]:
    with conn.cursor(row_factory=class_row(Node)) as cur:
        return cur.execute(
            Queries(schema)("tree_nodes"), {"collection": collection}
        ).fetchall()


def build_tree(nodes: Iterable[Node], collection: str = "default") -> Tree:
    """Link nodes to their parents; orphans and cycle members become flagged roots.

    Pure (no database), so the shapes a broken tree can take are tested directly. A node
    naming itself as parent is a cycle of one.
    """
    by_path = {n.path: n for n in nodes}
    for node in by_path.values():
        node.children = []
        node.problem = None
    roots: list[Node] = []
    problems: list[dict[str, str]] = []
    for node in by_path.values():
        parent = by_path.get(node.parent_path) if node.parent_path else None
        if node.parent_path is None:
            roots.append(node)
        elif parent is None:
            node.problem = MISSING_PARENT
            roots.append(node)
            problems.append({"path": node.path, "kind": MISSING_PARENT, "parent": node.parent_path})
        else:
            parent.children.append(node)
    reachable: set[str] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        reachable.add(node.path)
        stack.extend(node.children)
    for node in by_path.values():  # what no root reaches hangs on a cycle
        if node.path in reachable:
            continue
        cycle = _cycle_from(node, by_path)
        head = by_path[min(cycle)]
        parent = by_path[head.parent_path] if head.parent_path else None
        if parent is not None:
            parent.children = [c for c in parent.children if c is not head]
        head.problem = "cycle"
        roots.append(head)
        problems.append({"path": head.path, "kind": "cycle", "parent": head.parent_path or ""})
        stack = [head]
        while stack:
            current = stack.pop()
            reachable.add(current.path)
            stack.extend(current.children)
    for node in by_path.values():
        node.children.sort(key=lambda c: c.path)
    roots.sort(key=lambda r: (r.problem is not None, r.problem or "", r.path))
    problems.sort(key=lambda p: (p["kind"], p["path"]))
    return Tree(collection=collection, roots=roots, problems=problems)


def _cycle_from(node: Node, by_path: dict[str, Node]) -> list[str]:
    """The paths of the cycle reached by climbing parents from ``node``."""
    order: dict[str, int] = {}
    current: Node | None = node
    while current is not None and current.path not in order:
        order[current.path] = len(order)
        current = by_path.get(current.parent_path) if current.parent_path else None
    assert current is not None  # unreachable nodes always end in a cycle
    start = order[current.path]
    return [p for p, i in order.items() if i >= start]


def subtree(tree: Tree, path: str) -> Tree:
    """The part of ``tree`` at ``path``: the node itself, or the roots under a folder prefix.

    A folder prefix keeps every node under it whose parent lies outside it, so the part of
    a work under ``essai/partie-1`` shows as the forest it is.
    """
    prefix = path.strip("/")
    found: list[Node] = []

    def visit(node: Node, inside_parent: bool) -> None:
        inside = node.path == prefix or node.path.startswith(prefix + "/")
        if node.path == prefix or (inside and not inside_parent):
            found.append(node)
        for child in node.children:
            visit(child, inside)

    for root in tree.roots:
        visit(root, False)
    exact = [n for n in found if n.path == prefix]
    roots = exact or found
    paths = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        paths.add(node.path)
        stack.extend(node.children)
    problems = [p for p in tree.problems if p["path"] in paths]
    return Tree(collection=tree.collection, roots=roots, problems=problems)


def load_tree(rag: Any, collection: str | None = None, path: str | None = None) -> Tree:
    """The collection's tree (or the part at ``path``), for ``ragpg tree`` and library callers."""
    collection = collection or rag.settings.collection
    with rag.source.connection() as conn:
        rag._checked(conn)
        nodes = load_nodes(conn, rag.settings.database.schema, collection)
    tree = build_tree(nodes, collection)
    return subtree(tree, path) if path else tree


def render(tree: Tree) -> list[str]:
    """Text lines: one node a line, indented by depth, with level, type and size."""
    lines: list[str] = []

    def visit(node: Node, depth: int) -> None:
        flags = [] if node.embed else ["keyword only"]
        if node.problem == MISSING_PARENT:
            flags.append(f"parent missing: {node.parent_path}")
        elif node.problem == "cycle":
            flags.append(f"cycle via {node.parent_path}")
        extra = f"  ({'; '.join(flags)})" if flags else ""
        lines.append(
            f"{'  ' * depth}L{node.level} {node.node_type:<7} {node.path}  \"{node.title}\""
            f"  [{node.chunk_count} chunks, {node.token_count} tokens]{extra}"
        )
        for child in node.children:
            visit(child, depth + 1)

    for root in tree.roots:
        visit(root, 0)
    return lines


def index_path(rag: Any, collection: str | None, given: str) -> str:
    """A path as typed on the command line, as the index knows it (relative to the root).

    An existing file or folder is made relative to the ingest root it lies under (from
    ``document.source_root``); anything else is taken as an index path already.
    """
    candidate = Path(given).expanduser()
    if not candidate.exists():
        return given.strip("/")
    resolved = candidate.resolve()
    collection = collection or rag.settings.collection
    with rag.source.connection() as conn:
        rag._checked(conn)
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(
                Queries(rag.settings.database.schema)("tree_roots"),
                {"collection": collection},
            ).fetchall()
    for root in sorted((str(r["source_root"]) for r in rows), key=len, reverse=True):
        try:
            relative = resolved.relative_to(Path(root))
        except ValueError:
            continue
        return "" if str(relative) == "." else relative.as_posix()
    return given.strip("/")


