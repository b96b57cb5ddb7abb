"""[embedding] and [[embedding.providers]]: parsing, inheritance, environment, bounds, secrets."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

import rag_pg.embed
from rag_pg.config import EmbeddingSettings, Settings
from rag_pg.errors import ConfigError

CHAIN = """
[embedding]
model = "e5-large"
dimension = 1024
timeout = 7
concurrency = 2

[[embedding.providers]]
provider = "http"
url = "http://embed:s3cret-pw@127.0.0.1:8080"

[[embedding.providers]]
provider = "openai"
url = "http://127.0.0.1:8000/v1"
timeout = 3
api_key_env = "TEI_KEY"
passage_prefix = "passage: "
"""


def load(tmp_path: Path, text: str, **environ: str) -> Settings:
    (tmp_path / "ragpg.toml").write_text(text)
    return Settings.load(environ=environ, cwd=tmp_path)


def test_embed_reexports_the_one_settings_class():
    assert rag_pg.embed.EmbeddingSettings is EmbeddingSettings


def test_chain_entries_inherit_what_they_do_not_set(tmp_path):
    links = load(tmp_path, CHAIN).embedding.links()
    summary = [(e.provider, e.model, e.dimension, e.timeout, e.api_key_env, e.passage_prefix)
               for e in links]
    assert summary == [
        ("http", "e5-large", 1024, 7.0, None, ""),
        ("openai", "e5-large", 1024, 3.0, "TEI_KEY", "passage: "),
    ]
    assert all(e.providers == () for e in links)


def test_environment_changes_reach_the_entries_that_inherit(tmp_path):
    links = load(tmp_path, CHAIN, RAGPG_EMBEDDING_TIMEOUT="9").embedding.links()
    assert [e.timeout for e in links] == [9.0, 3.0]  # the second sets its own


def test_environment_replaces_the_whole_chain_with_json(tmp_path):
    chain = json.dumps([{"provider": "ollama", "url": "http://127.0.0.1:11434"},
                        {"provider": "local", "model": None, "dimension": None}])
    settings = load(tmp_path, CHAIN, RAGPG_EMBEDDING_PROVIDERS=chain)
    links = settings.embedding.links()
    assert [(e.provider, e.model, e.timeout) for e in links] == [
        ("ollama", "e5-large", 7.0), ("local", None, 7.0)]


def test_a_single_table_is_the_simple_case(tmp_path):
    settings = load(tmp_path, '[embedding]\nprovider = "ollama"\nmodel = "bge-m3"\n')
    assert settings.embedding.links() == (settings.embedding,)


def test_chain_entries_built_in_code_inherit_their_defaults():
    settings = EmbeddingSettings(model="m", timeout=4.0, providers=(
        EmbeddingSettings(provider="http", url="http://127.0.0.1:1"),
        EmbeddingSettings(provider="openai", url="http://127.0.0.1:2", timeout=1.0),
    ))
    assert [(e.model, e.timeout) for e in settings.links()] == [("m", 4.0), ("m", 1.0)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[embedding.providers]]\nprovider = "http"\nconcurrency = 3\n',
         r"embedding.providers\[1\].concurrency applies to the whole chain"),
        ('[[embedding.providers]]\nprovider = "magic"\n', r"embedding.providers\[1\].provider"),
        ('[[embedding.providers]]\nprovider = "none"\n', "cannot be part of a chain"),
        ('[[embedding.providers]]\nurl = "http://x"\ncolour = 1\n', "providers.1..colour"),
        ('[embedding]\nproviders = "nope"\n', "JSON list"),
        ('[embedding]\nconcurrency = 0\n', "embedding.concurrency"),
        ('[embedding]\nattempts = 0\n', "embedding.attempts"),
        ('[embedding]\ndeadline = 0\n', "embedding.deadline"),
        ('[embedding]\nbatch_tokens = -1\n', "embedding.batch_tokens"),
        ('[embedding]\nbackoff = -1\n', "backoff"),
        ('[embedding]\nprovider = "http"\nsend_dimensions = true\n', "send_dimensions"),
        ('[embedding]\napi_key_env = "sk-live-abc def"\n', "NAME of an environment variable"),
        ('[embedding]\nexplicit = ["model"]\n', "embedding.explicit"),
    ],
)
def test_bad_chain_settings_name_the_setting(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, text)


def test_provider_names_accepted():
    for name in ("http", "openai", "ollama", "local", "none"):
        assert Settings.load(environ={"RAGPG_EMBEDDING_PROVIDER": name}).embedding.provider == name


def test_urls_with_passwords_are_redacted_and_keys_are_never_settings(tmp_path):
    settings = load(tmp_path, CHAIN, TEI_KEY="sk-canary-never-printed")
    shown = json.dumps(settings.to_dict(), default=str)
    assert "s3cret-pw" not in shown and "sk-canary" not in shown
    assert "http://embed:***@127.0.0.1:8080" in shown and '"TEI_KEY"' in shown
    assert "explicit" not in shown


ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "docs" / "embeddings.md"


def test_every_embedding_setting_is_documented():
    text = README.read_text(encoding="utf-8") + (ROOT / "README.md").read_text(encoding="utf-8")
    names = [f.name for f in fields(EmbeddingSettings) if f.name != "explicit"]
    missing = [n for n in names if f"`{n}`" not in text and f"embedding.{n}" not in text]
    assert missing == []


def test_the_readme_chain_example_builds_without_a_request(tmp_path):
    text = README.read_text(encoding="utf-8")
    example = text.split("```toml", 1)[1].split("```", 1)[0]
    settings = load(tmp_path, example)
    chain = rag_pg.embed.make_provider(settings.embedding,
                                       environ={"RAGPG_EMBED_SERVER_TOKEN": "tok"})
    try:
        assert isinstance(chain, rag_pg.embed.EmbeddingChain)
        assert [link.provider.kind for link in chain.links] == ["http", "local"]
        assert (chain.model, chain.dimension) == (rag_pg.embed.LOCAL_MODEL, 384)
    finally:
        chain.close()
