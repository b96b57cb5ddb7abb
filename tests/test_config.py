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


def test_sections_are_checked_when_built_by_hand():
    from rag_pg.config import ChunkSettings, EmbeddingSettings, RetrievalSettings

    with pytest.raises(ConfigError, match=r"chunk\.overlap"):
        Settings(chunk=ChunkSettings(size=40))
    with pytest.raises(ConfigError, match=r"retrieval\.mode"):
        RetrievalSettings(mode="fuzzy")
    with pytest.raises(ConfigError, match=r"embedding\.timeout"):
        EmbeddingSettings(providers=(EmbeddingSettings(provider="http"),
                                     EmbeddingSettings(provider="http", timeout=-1)))
    with pytest.raises(ConfigError, match=r"embedding\.providers\[2\]\.timeout"):
        Settings.load(environ={"RAGPG_EMBEDDING_PROVIDERS": '[{"provider": "http"},'
                               ' {"provider": "http", "timeout": -1}]'})
    with pytest.raises(ConfigError, match="collection"):
        Settings(collection="")
    from dataclasses import replace

    with pytest.raises(ConfigError, match=r"chunk\.size"):
        replace(Settings().chunk, size=0)


def test_a_section_is_checked_on_its_merged_values(tmp_path):
    # The file alone would be invalid (size 40 < default overlap 45); with the environment's
    # overlap the final values are fine, and only those are checked.
    (tmp_path / "ragpg.toml").write_text("[chunk]\nsize = 40\n")
    s = Settings.load(environ={"RAGPG_CHUNK_OVERLAP": "5"}, cwd=tmp_path)
    assert (s.chunk.size, s.chunk.overlap) == (40, 5)


def test_unknown_ragpg_variables_are_reported(tmp_path):
    seen: list[str] = []
    Settings.load(environ={"RAGPG_CHUNK_SIZ": "200", "RAGPG_HOME": str(tmp_path)}, cwd=tmp_path,
                  warn=seen.append)
    assert seen == ["unknown environment variable RAGPG_CHUNK_SIZ is ignored"
                    " (did you mean RAGPG_CHUNK_SIZE?)"]


def test_ragpg_home_moves_the_embedded_data_dir_unless_set(tmp_path):
    s = Settings.load(environ={"RAGPG_HOME": str(tmp_path / "h")}, cwd=tmp_path)
    assert s.database.data_dir == str(tmp_path / "h" / "pg")
    s = Settings.load(environ={"RAGPG_HOME": str(tmp_path / "h"),
                               "RAGPG_DATABASE_DATA_DIR": str(tmp_path / "d")}, cwd=tmp_path)
    assert s.database.data_dir == str(tmp_path / "d")


def test_the_library_reads_the_environment_only_in_the_settings_loader():
    from .conftest import ROOT

    readers = sorted(
        str(path.relative_to(ROOT)) for path in (ROOT / "rag_pg").rglob("*.py")
        if "os.environ" in path.read_text() or "getenv(" in path.read_text()
    )
    # convert/pool.py hands the environment on to its worker process (plus the parent's import
    # path); it reads no setting from it.
    allowed = {"rag_pg/config/loader.py", "rag_pg/source/convert/pool.py"}
    assert set(readers) <= allowed, readers


def test_markdown_and_document_settings_come_from_the_environment():
    env = {
        "RAGPG_CHUNK_MAX_TOKENS": "500", "RAGPG_SOURCE_ANCHOR_STYLE": "vitepress",
        "RAGPG_SOURCE_READ_HARDLINKS": "true", "RAGPG_SOURCE_FORMATS": "md,pdf",
        "RAGPG_SOURCE_MAX_DOCUMENT_BYTES": "2048",
        "RAGPG_CITATION_URL": "https://x.org/{path_noext}.html#{anchor}",
        "RAGPG_CONVERT_TIME_LIMIT": "5.5", "RAGPG_CONVERT_MEMORY_LIMIT_MB": "256",
    }
    warnings: list[str] = []
    s = Settings.load(environ=env, cwd=Path("/nonexistent-dir-for-test"), warn=warnings.append)
    assert warnings == []
    assert (s.chunk.max_tokens, s.source.anchor_style, s.source.read_hardlinks) == (500, "vitepress", True)
    assert (s.source.formats, s.source.max_document_bytes) == (("md", "pdf"), 2048)
    assert s.citation.url == "https://x.org/{path_noext}.html#{anchor}"
    assert (s.convert.time_limit, s.convert.memory_limit_mb) == (5.5, 256)
    defaults = Settings()
    assert (defaults.chunk.max_tokens, defaults.source.anchor_style, defaults.source.formats) == (
        None, "github", None)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"chunk.max_tokens": 100}, "chunk.max_tokens must be >= chunk.size"),
    ({"chunk.size": 4, "chunk.overlap": 1, "chunk.max_tokens": 6}, ">= 8"),
    ({"source.anchor_style": "hugo"}, "source.anchor_style must be one of"),
    ({"citation.url": "https://x/{slug}"}, r"citation.url: .*unknown field \{slug\}"),
    ({"convert.time_limit": 0}, "convert.time_limit must be > 0"),
    ({"convert.memory_limit_mb": -1}, "convert.memory_limit_mb must be > 0"),
    ({"source.max_document_bytes": 0}, "source.max_document_bytes must be > 0"),
])
def test_bad_markdown_and_document_settings(overrides, message):
    with pytest.raises(ConfigError, match=message):
        Settings.load(environ={}, cwd=Path("/nonexistent-dir-for-test"), overrides=overrides)


def test_server_clients_parse_from_the_environment_and_never_print_their_tokens():
    env = {"RAGPG_SERVER_CLIENTS": '[{"name": "hr", "token": "tok-CANARY-0123456789ab",'
                                   ' "principals": ["hr", "user:ann"]}, {"name": "ops",'
                                   ' "token_env": "OPS_TOKEN"}]'}
    settings = Settings.load(environ=env)
    hr, ops = settings.server.clients
    assert (hr.name, hr.principals, ops.token_env) == ("hr", ("hr", "user:ann"), "OPS_TOKEN")
    assert "tok-CANARY" not in str(settings.to_dict())
    for bad, message in (('[{"name": "x"}]', "exactly one of token_env and token"),
                         ('[{"name": "x", "token": "t", "principals": ["a b"]}]', "not a principal"),
                         ('[{"name": "x", "tokn": "t"}]', "unknown key"),
                         ('{"name": "x"}', "list of tables")):
        with pytest.raises(ConfigError, match=message):
            Settings.load(environ={"RAGPG_SERVER_CLIENTS": bad})
