"""The two tiers of the suite: ``make test-fast`` leaves out every test that starts a process
(the command line run as a user runs it, a private PostgreSQL, a server stopped and started
again, a killed child); ``make test`` runs everything.

A test is of the process tier when its own code, a helper of its module it calls, or a
fixture of its module it takes, reaches one of the calls below (read from the source, so a
new test is sorted without a marker to remember)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

# Calls and names that start a process, directly or through the suite's own helpers.
STARTERS = frozenset({"run_cli", "private_server", "Popen", "check_output", "executable", "fork"})
# Modules every test of which starts processes (their fixtures do, in shared helpers).
PROCESS_MODULES = ("reliability/", "test_crash.py", "test_packaging.py", "test_db_cli.py",
                   "test_db_deadline.py", "test_embed_server_cli.py", "test_replica.py",
                   "test_embedded.py", "test_example_django.py", "test_example_flask.py",
                   "test_citus.py")


def _called_names(node: ast.AST) -> set[str]:
    names: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            names.add(sub.attr)
            if isinstance(sub.value, ast.Name) and sub.value.id == "subprocess":
                names.add("Popen")  # subprocess.run, .call, .check_call all start one
    return names


@functools.cache
def process_functions(path: Path) -> frozenset[str]:
    """The module-level functions (tests, helpers, fixtures) of ``path`` that start a process."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = {n.name: _called_names(n) for n in tree.body
                 if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    starting = {name for name, calls in functions.items() if calls & STARTERS}
    changed = True
    while changed:  # helpers calling helpers
        changed = False
        for name, calls in functions.items():
            if name not in starting and calls & starting:
                starting.add(name)
                changed = True
    return frozenset(starting)


def starts_processes(path: Path, function: str, fixtures: list[str]) -> bool:
    if any(part in path.as_posix() for part in PROCESS_MODULES):
        return True
    starting = process_functions(path)
    return function in starting or any(f in starting for f in fixtures)
