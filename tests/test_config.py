"""Settings precedence: flags > environment > file > defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_pg.config import Settings, redact_url
from rag_pg.errors import ConfigError


def test_defaults():
    s = Settings.load(environ={}, cwd=Path("/nonexistent-dir-for-test"))
    assert (s.chunk.size, s.chunk.overlap, s.retrieval.k, s.embedding.batch_size) == (300, 45, 5, 32)
    assert s.database.schema == "ragpg" and s.database.url is None


def test_precedence_flag_over_env_over_file(tmp_path):
    (tmp_path / "ragpg.toml").write_text(
        '[chunk]\nsize = 100\noverlap = 10\n[retrieval]\nk = 3\n[source]\nexcluded_paths = ["a", "b"]\n'
        '[database]\nurl = "postgresql://file/db"\n'
    )
    env = {"RAGPG_CHUNK_SIZE": "200", "RAGPG_SOURCE_EXCLUDED_PATHS": "docs/old,tmp"}
    s = Settings.load(environ=env, cwd=tmp_path, overrides={"chunk.size": 250, "retrieval.k": None})
    assert s.chunk.size == 250  # flag
    assert s.chunk.overlap == 10  # file
    assert s.retrieval.k == 3  # file, the flag was not given
    assert s.source.excluded_paths == ("docs/old", "tmp")  # env list, comma-separated
    assert s.database.url == "postgresql://file/db"
    assert s.config_file == str(tmp_path / "ragpg.toml")


def test_database_url_falls_back_to_DATABASE_URL(tmp_path):
    s = Settings.load(environ={"DATABASE_URL": "postgresql://x/y"}, cwd=tmp_path)
    assert s.database.url == "postgresql://x/y"
    s = Settings.load(environ={"DATABASE_URL": "postgresql://x/y", "RAGPG_DATABASE_URL": "postgresql://r/s"}, cwd=tmp_path)
    assert s.database.url == "postgresql://r/s"


def test_pyproject_tool_section(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.ragpg.embedding]\nprovider = "none"\n')
    assert Settings.load(environ={}, cwd=tmp_path).embedding.provider == "none"
    other = tmp_path / "sub"
    other.mkdir()
    cfg = Settings.load(environ={}, cwd=other, config_file=tmp_path / "pyproject.toml")
    assert cfg.embedding.provider == "none"


@pytest.mark.parametrize(
    "env, message",
    [
        ({"RAGPG_CHUNK_SIZE": "0"}, "chunk.size"),
        ({"RAGPG_CHUNK_OVERLAP": "300"}, "chunk.overlap"),
        ({"RAGPG_CHUNK_SIZE": "big"}, "chunk.size"),
        ({"RAGPG_EMBEDDING_PROVIDER": "magic"}, "embedding.provider"),
        ({"RAGPG_DATABASE_SCHEMA": "x; drop"}, "database.schema"),
    ],
)
def test_bad_values_are_config_errors(tmp_path, env, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        Settings.load(environ=env, cwd=tmp_path)


def test_unknown_keys_and_bad_toml(tmp_path):
    (tmp_path / "ragpg.toml").write_text("[chunk]\nsizee = 3\n")
    with pytest.raises(ConfigError, match="chunk.sizee"):
        Settings.load(environ={}, cwd=tmp_path)
    (tmp_path / "ragpg.toml").write_text("[chunk\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        Settings.load(environ={}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="not found"):
        Settings.load(environ={}, config_file=tmp_path / "missing.toml")


def test_secrets_are_redacted():
    assert redact_url("postgresql://bob:s3cret@host/db") == "postgresql://bob:***@host/db"
    assert redact_url("postgresql://host/db") == "postgresql://host/db"
    s = Settings.load(environ={"RAGPG_DATABASE_URL": "postgresql://u:canarypw@h/d", "RAGPG_SERVER_TOKEN": "canarytok"})
    assert "canarypw" not in str(s.to_dict()) and "canarytok" not in str(s.to_dict())
