"""The reliability scenarios' two tiers and the figures they report.

Each scenario has a fast test (a few iterations, part of every run) and a slow one, marked
``slow`` and run only with ``RAGPG_SLOW=1`` (``make test-slow``), with the counted loops.
``RAGPG_SLOW_SCALE`` (a factor, default 1) shrinks the slow counts to fit a small machine, and
``RAGPG_SLOW_SCALE_<ID>`` (``_A6``, ``_F3``...) one scenario's.
Every test records the figure it measured through the ``figure`` fixture; at the end of the
session the figures are merged into ``tests/artifacts/reliability/latest.json`` (one entry per
test, so several partial runs add up) and rendered as ``latest.md``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SLOW = os.environ.get("RAGPG_SLOW") == "1"
RESULTS = Path(os.environ.get("RAGPG_RELIABILITY_RESULTS")
               or Path(__file__).resolve().parents[1] / "artifacts" / "reliability")

# The slow tier: tests/conftest.py deselects ``slow`` tests unless RAGPG_SLOW=1.
slow = pytest.mark.slow


def scale(scenario: str) -> float:
    """The slow tier's factor for a scenario: RAGPG_SLOW_SCALE_<ID> (e.g. ``_F3``), else
    RAGPG_SLOW_SCALE, else 1 (the counts of the test plan)."""
    own = os.environ.get(f"RAGPG_SLOW_SCALE_{scenario}")
    return float(own if own is not None else os.environ.get("RAGPG_SLOW_SCALE", "1"))


def counted(full: int, scenario: str) -> int:
    """A slow loop's count (or duration in seconds), scaled for this machine (never below 1)."""
    return max(1, round(full * scale(scenario)))


_recorded: dict[str, dict[str, Any]] = {}


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Callable[..., None]:
    """``figure("A2", "200 kills, 0 partial documents", kills=200, ...)``: what this test measured."""

    def record(scenario: str, text: str, **numbers: Any) -> None:
        tier = "slow" if request.node.get_closest_marker("slow") else "fast"
        _recorded[request.node.nodeid] = {
            "scenario": scenario, "tier": tier, "figure": text, "numbers": numbers,
            "test": request.node.nodeid, "at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "scale": scale(scenario) if tier == "slow" else 1.0,
        }

    return record


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _recorded:
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "latest.json"
    merged: dict[str, Any] = {}
    if path.exists():
        try:
            merged = {entry["test"]: entry for entry in json.loads(path.read_text())}
        except (ValueError, KeyError, TypeError):
            merged = {}
    merged.update(_recorded)
    entries = sorted(merged.values(), key=lambda e: (e["scenario"], e["tier"], e["test"]))
    path.write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")
    lines = ["| Scenario | Tier | Figure | Test | When |", "|---|---|---|---|---|"]
    lines += [f"| {e['scenario']} | {e['tier']} | {e['figure']} | `{e['test']}` | {e['at']} |" for e in entries]
    (RESULTS / "latest.md").write_text("\n".join(lines) + "\n")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _recorded:
        terminalreporter.section("reliability figures")
        for entry in sorted(_recorded.values(), key=lambda e: e["scenario"]):
            terminalreporter.write_line(f"{entry['scenario']} [{entry['tier']}] {entry['figure']}")
        terminalreporter.write_line(f"(written to {RESULTS / 'latest.md'})")
