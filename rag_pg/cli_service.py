"""CLI commands of the service area, attached to the main `ragpg` group."""

from __future__ import annotations

from .cli import cli  # noqa: F401
