"""Where settings come from: the config file, ``RAGPG_*`` variables and flags, as raw layers.

This is the only module of ragpg that reads the process environment: the settings variables,
``RAGPG_HOME``, and the secrets that settings name (``api_key_env``) through :func:`env_secret`.
Each layer is coerced to the settings' types here, with its origin in any error; the caller
merges the layers and builds each section once, so a section is checked on its final values.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, get_type_hints

from rag_pg.config.sections import CHAIN_KEYS, SECTIONS, EmbeddingSettings, ServerClient
from rag_pg.errors import ConfigError

# RAGPG_* variables that are not a section's setting but are still ragpg's own.
OTHER_VARIABLES = frozenset({"RAGPG_COLLECTION", "RAGPG_HOME", "RAGPG_EMBED_SERVER_TOKEN"})
# Switches of ragpg's own test suite and benchmarks.
OTHER_PREFIXES = ("RAGPG_TEST_", "RAGPG_SLOW", "RAGPG_UPDATE_GOLDEN", "RAGPG_TLDR_FR", "RAGPG_BENCH_")

Layer = dict[str, Any]


def environment() -> Mapping[str, str]:
    """The process environment (the one place ragpg reads it)."""
    return os.environ


def env_secret(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of the environment variable a setting names (an API key), or None if unset."""
    value = (environment() if environ is None else environ).get(name)
    return value or None


def client_token(client: ServerClient, environ: Mapping[str, str] | None = None) -> str | None:
    """A service client's token: its own, or the value of the variable it names."""
    return client.token if client.token is not None else env_secret(client.token_env or "", environ)


def setting_variables() -> dict[str, tuple[str, str]]:
    """``RAGPG_SECTION_KEY`` -> (section, key), for every setting of every section."""
    return {
        f"RAGPG_{section.upper()}_{f.name.upper()}": (section, f.name)
        for section, cls in SECTIONS.items() for f in fields(cls) if f.name != "explicit"
    }


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """One line per ``RAGPG_*`` variable that nothing reads (a typo), with a close match."""
    known = set(setting_variables()) | OTHER_VARIABLES
    lines = []
    for name in sorted(env):
        if not name.startswith("RAGPG_") or name in known or name.startswith(OTHER_PREFIXES):
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        lines.append(f"unknown environment variable {name} is ignored{hint}")
    return lines


def from_env(env: Mapping[str, str]) -> Layer:
    """The raw settings layer of the environment (empty values count as unset)."""
    data: dict[str, Any] = {}
    for name, (section, key) in setting_variables().items():
        if env.get(name, "") != "":
            data.setdefault(section, {})[key] = env[name]
    if "url" not in data.get("database", {}) and env.get("DATABASE_URL"):
        data.setdefault("database", {})["url"] = env["DATABASE_URL"]
    if env.get("RAGPG_COLLECTION"):
        data["collection"] = env["RAGPG_COLLECTION"]
    return data


def home_data_dir(env: Mapping[str, str]) -> str | None:
    """``$RAGPG_HOME/pg``: where the embedded server lives unless database.data_dir says."""
    home = env.get("RAGPG_HOME")
    return str(Path(home).expanduser() / "pg") if home else None


def read_file(config_file: str | Path | None, cwd: Path) -> tuple[Layer, Path | None]:
    """The named file, else ./ragpg.toml, else ./pyproject.toml's [tool.ragpg]; with its path."""
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        data = _load_toml(path)
        if path.name == "pyproject.toml":
            return data.get("tool", {}).get("ragpg", {}), path
        return data, path
    local = cwd / "ragpg.toml"
    if local.is_file():
        return _load_toml(local), local
    pyproject = cwd / "pyproject.toml"
    if pyproject.is_file():
        section = _load_toml(pyproject).get("tool", {}).get("ragpg")
        if isinstance(section, dict):
            return section, pyproject
    return {}, None


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


def unflatten(flat: Mapping[str, Any]) -> Layer:
    """``{"chunk.size": 200}`` -> ``{"chunk": {"size": 200}}`` (``None`` values dropped)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        if value is None:
            continue
        if "." in key:
            section, name = key.split(".", 1)
            out.setdefault(section, {})[name] = value
        else:
            out[key] = value
    return out


def coerce_layer(data: Mapping[str, Any], origin: str) -> Layer:
    """A layer with every value converted to its setting's type; unknown keys are errors."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in SECTIONS:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{origin}: [{key}] must be a table")
            out[key] = _coerce_section(SECTIONS[key], key, value, origin)
        elif key == "collection":
            out["collection"] = str(value)
        elif key == "embedding_providers":
            continue
        else:
            raise ConfigError(f"{origin}: unknown section or key {key!r}")
    return out


def merge(layers: list[Layer]) -> Layer:
    """Later layers win, key by key inside each section."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict):
                out.setdefault(key, {}).update(value)
            else:
                out[key] = value
    return out


def _coerce_section(cls: type, section: str, values: Mapping[str, Any], origin: str) -> dict[str, Any]:
    hints = get_type_hints(cls)
    known = {f.name for f in fields(cls)} - {"explicit"}  # the parser's bookkeeping, not a setting
    out: dict[str, Any] = {}
    for key, value in values.items():
        if section == "embedding" and key == "providers":
            out[key] = parse_chain(value, origin)
            continue
        if section == "server" and key == "clients":
            out[key] = parse_clients(value, origin)
            continue
        if key not in known:
            raise ConfigError(f"{origin}: unknown setting {section}.{key}")
        out[key] = _coerce(value, hints[key], f"{section}.{key}", origin)
    return out


def parse_clients(value: Any, origin: str) -> tuple[ServerClient, ...]:
    """``[[server.clients]]`` tables (or RAGPG_SERVER_CLIENTS as a JSON list of them)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ConfigError(f"{origin}: server.clients must be a JSON list of tables") from None
    if not isinstance(value, list | tuple) or not all(isinstance(v, Mapping) for v in value):
        raise ConfigError(f"{origin}: server.clients must be a list of tables")
    known = {f.name for f in fields(ServerClient)}
    clients = []
    for n, entry in enumerate(value, start=1):
        unknown = sorted(set(entry) - known)
        if unknown:
            raise ConfigError(f"{origin}: server.clients[{n}]: unknown key {unknown[0]!r}")
        try:
            clients.append(ServerClient(**dict(entry)))
        except TypeError:
            raise ConfigError(f"{origin}: server.clients[{n}] needs a name") from None
    return tuple(clients)


def parse_chain(value: Any, origin: str) -> tuple[EmbeddingSettings, ...]:
    """``[[embedding.providers]]`` tables (or RAGPG_EMBEDDING_PROVIDERS as a JSON list of them)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError:
            raise ConfigError(f"{origin}: embedding.providers must be a JSON list of tables") from None
    if not isinstance(value, list | tuple):
        raise ConfigError(f"{origin}: embedding.providers must be a list of tables")
    hints = get_type_hints(EmbeddingSettings)
    settable = {f.name for f in fields(EmbeddingSettings)} - {"explicit"}
    entries: list[EmbeddingSettings] = []
    for n, table in enumerate(value, start=1):
        name = f"embedding.providers[{n}]"
        if isinstance(table, EmbeddingSettings):
            entries.append(table)
            continue
        if not isinstance(table, Mapping):
            raise ConfigError(f"{origin}: {name} must be a table")
        values: dict[str, Any] = {}
        for key, raw in table.items():
            if key not in settable:
                raise ConfigError(f"{origin}: unknown setting {name}.{key}")
            if key in CHAIN_KEYS:
                raise ConfigError(f"{origin}: {name}.{key} applies to the whole chain: set embedding.{key}")
            values[key] = _coerce(raw, hints[key], f"{name}.{key}", origin)
        entries.append(EmbeddingSettings(**values, explicit=frozenset(values)))
    return tuple(entries)


def _coerce(value: Any, hint: Any, name: str, origin: str) -> Any:
    text = str(hint)
    try:
        if value is None:
            return None
        if "tuple" in text:
            if isinstance(value, str):
                return tuple(part.strip() for part in value.split(",") if part.strip())
            if isinstance(value, list | tuple):
                return tuple(str(v) for v in value)
            raise TypeError
        if "bool" in text:
            if isinstance(value, bool):
                return value
            lowered = str(value).strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if "int" in text and "float" not in text:
            if isinstance(value, bool):
                raise TypeError
            return int(value)
        if "float" in text:
            return float(value)
        if isinstance(value, list | dict):
            raise TypeError
        return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{origin}: {name} has an invalid value {value!r}") from None
