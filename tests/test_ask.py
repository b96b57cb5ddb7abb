"""`ask`: context to an OpenAI-compatible chat endpoint on loopback, then the citations checked."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from rag_pg import RagPG, Settings
from rag_pg.errors import ConfigError, LLMError
from rag_pg.testing.chatserver import FakeChatServer
from rag_pg.tree.context import ask, check_citations
from rag_pg.tree.llm import ChatClient, completions_url, make_chat_client

from .conftest import run_cli

BOOK = Path(__file__).parent / "data" / "book"
LUMIERE = "essai-phares/partie-1-les-phares/chapitre-01-la-lumiere/source.md"
QUESTION = "Qu'est-ce que la lentille de Fresnel ?"
SECRET = "sk-test-0123456789abcdef"


@pytest.fixture
def chat() -> Iterator[FakeChatServer]:
    with FakeChatServer() as server:
        yield server


@pytest.fixture
def indexed(db_url: str, tmp_path: Path) -> str:
    target = tmp_path / "book"
    shutil.copytree(BOOK, target)
    with RagPG(db_url, Settings.load(environ={}, overrides={"embedding.provider": "none"})) as rag:
        assert rag.ingest(target).failures == []
    return db_url


def rag_for(db_url: str, chat: FakeChatServer | None = None, **overrides: object) -> RagPG:
    values: dict[str, object] = {"embedding.provider": "none", **overrides}
    if chat is not None:
        values.update({"llm.url": chat.url, "llm.model": "fake-chat"})
    return RagPG(db_url, Settings.load(environ={}, overrides=values))


def test_check_citations_keeps_valid_ones_and_removes_the_others():
    checked = check_citations(
        "Vrai [Source 1] et faux [Source 9]. Mixte [Source 1, 7]. [source 2: titre] Fin [Sources 2 et 3].", 2)
    assert checked.text == "Vrai [Source 1] et faux. Mixte [Source 1]. [Source 2] Fin [Source 2]."
    assert checked.cited == [1, 2] and checked.removed == [9, 7, 3]
    assert check_citations("Rien à citer.", 3) == check_citations("Rien à citer.", 0)
    assert check_citations("[Source 0] x", 3).removed == [0]


def test_ask_sends_the_context_and_returns_a_cited_answer(indexed, chat):
    with rag_for(indexed, chat) as rag:
        answer = ask(rag, QUESTION, k=3)
    assert answer.sent and answer.removed == []
    assert answer.text == "Au dix-neuvième siècle, la lentille de Fresnel change tout. [Source 1]"
    assert [s.n for s in answer.cited] == [1] and answer.cited[0].path == LUMIERE
    assert answer.cited[0].location == f"{LUMIERE}#la-lentille-à-échelons"
    assert chat.calls == 1
    body = chat.requests[0]["body"]
    assert {k: body[k] for k in ("model", "temperature", "max_tokens")} == {
        "model": "fake-chat", "temperature": 0.3, "max_tokens": 2048}
    assert body["messages"] == [{"role": "user", "content": answer.context.text}]
    assert "Authorization" not in chat.requests[0]["headers"]
    assert answer.usage["total_tokens"] > 0 and answer.model == "fake-chat"


def test_citations_of_sources_that_do_not_exist_are_removed_and_reported(indexed, chat):
    chat.reply = "La lentille concentre la lumière [Source 1][Source 12]. Voir aussi [Source 5]."
    with rag_for(indexed, chat) as rag:
        answer = ask(rag, QUESTION, k=2)
    assert len(answer.context.sources) <= 2
    assert answer.text == "La lentille concentre la lumière [Source 1]. Voir aussi."
    assert answer.removed == [12, 5]
    assert answer.to_dict()["removed_citations"] == ["[Source 12]", "[Source 5]"]


def test_nothing_is_sent_when_no_source_matches(indexed, chat):
    with rag_for(indexed, chat) as rag:
        answer = ask(rag, "zyxwvut qwertzuiop", mode="keyword", lang="en")
    assert not answer.sent and chat.calls == 0
    assert answer.text == "The indexed sources contain nothing about this question."


def test_unconfigured_llm_is_a_config_error_and_sends_nothing(indexed, chat):
    with rag_for(indexed) as rag, pytest.raises(ConfigError, match=r"set \[llm\] url and model"):
        ask(rag, QUESTION)
    with pytest.raises(ConfigError, match="'RAGPG_TEST_KEY'.* is not set"):
        make_chat_client(Settings.load(environ={}, overrides={
            "llm.url": chat.url, "llm.model": "m", "llm.api_key_env": "RAGPG_TEST_KEY"}).llm, environ={})
    assert chat.calls == 0


def test_the_api_key_comes_from_the_named_variable_and_is_never_shown(indexed):
    with FakeChatServer(api_key=SECRET) as chat:
        llm = Settings.load(environ={}, overrides={
            "llm.url": chat.url, "llm.model": "fake-chat", "llm.api_key_env": "MY_KEY"}).llm
        with make_chat_client(llm, environ={"MY_KEY": SECRET}) as client, rag_for(indexed) as rag:
            answer = ask(rag, QUESTION, client=client)
            assert SECRET not in repr(client)
        assert answer.sent and chat.requests[0]["headers"]["Authorization"] == f"Bearer {SECRET}"
        with make_chat_client(llm, environ={"MY_KEY": SECRET + "x"}) as client, pytest.raises(LLMError) as caught:
            client.complete([{"role": "user", "content": "hi"}])
    assert caught.value.kind == "refused" and caught.value.exit_code == 1
    assert "HTTP 401" in str(caught.value) and SECRET not in str(caught.value)


def test_chat_failures_are_typed(chat):
    with ChatClient(chat.url, "m") as client:
        for fault, kind in (("503", "unavailable"), ("non_json", "malformed"), ("no_choices", "malformed")):
            chat.fault = fault
            with pytest.raises(LLMError) as caught:
                client.complete([{"role": "user", "content": "x"}])
            assert caught.value.kind == kind, fault
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with ChatClient(f"http://me:hunter22@127.0.0.1:{port}/v1", "m") as client, pytest.raises(LLMError) as caught:
        client.complete([{"role": "user", "content": "x"}])
    assert caught.value.kind == "unavailable" and caught.value.exit_code == 3
    assert "http://me:***@127.0.0.1" in str(caught.value) and "hunter22" not in str(caught.value) + repr(client)
    assert completions_url("http://h/v1/") == "http://h/v1/chat/completions"
    assert completions_url("http://h/x/chat/completions") == "http://h/x/chat/completions"
    with pytest.raises(ConfigError, match="temperature"):
        ChatClient("http://h/v1", "m", temperature=3.0)


def test_cli_ask(indexed, chat, tmp_path):
    env = {"RAGPG_DATABASE_URL": indexed, "RAGPG_EMBEDDING_PROVIDER": "none",
           "RAGPG_LLM_URL": chat.url, "RAGPG_LLM_MODEL": "fake-chat"}
    out = run_cli(["ask", QUESTION, "-k", "3"], env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "Au dix-neuvième siècle, la lentille de Fresnel change tout. [Source 1]"
    assert f"[Source 1] Chapitre I : la lumière › La lentille à échelons — {LUMIERE}#la-lentille-à-échelons" in out.stdout
    chat.reply = "Oui [Source 1] et [Source 40]."
    out = run_cli(["ask", QUESTION, "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["answer"] == "Oui [Source 1] et." and data["removed_citations"] == ["[Source 40]"]
    assert "removed 1 citation(s) of sources that do not exist: [Source 40]" in out.stderr
    calls = chat.calls
    out = run_cli(["ask", QUESTION], env={k: v for k, v in env.items() if k != "RAGPG_LLM_URL"}, cwd=tmp_path)
    assert out.returncode == 2 and "no chat endpoint configured" in out.stderr
    out = run_cli(["ask", QUESTION], env={**env, "RAGPG_LLM_API_KEY_ENV": "RAGPG_NO_SUCH_KEY"}, cwd=tmp_path)
    assert out.returncode == 2 and "'RAGPG_NO_SUCH_KEY'" in out.stderr
    assert chat.calls == calls and "Traceback" not in out.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = run_cli(["ask", QUESTION], env={**env, "RAGPG_LLM_URL": f"http://127.0.0.1:{port}/v1"}, cwd=tmp_path)
    assert out.returncode == 3 and "unreachable" in out.stderr and "Traceback" not in out.stderr
