"""`ragpg mcp` as an agent runs it: the MCP SDK's stdio client against a real subprocess."""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .conftest import run_cli

PW_CANARY = "pw-CANARY-5d0c7e11"
QUERY = "restaurer une sauvegarde pg_dump"


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPG_") and k != "DATABASE_URL"}
    env.update(extra)
    return env


def with_password(url: str) -> tuple[str, str]:
    """The URL with a password canary (trust auth ignores it), or its own password as the canary."""
    params = conninfo_to_dict(url)
    if params.get("password"):
        return url, str(params["password"])
    params["password"] = PW_CANARY
    return make_conninfo(**params), PW_CANARY


def ingest(db_url: str, embed_server: Any, corpus: Path, tmp_path: Path) -> None:
    out = run_cli(["ingest", str(corpus)],
                  env={"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed_server.url}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr


def call_tools(env: dict[str, str], errlog: Path, calls: list[tuple[str, dict[str, Any]]],
               cwd: Path) -> tuple[list[Any], list[Any]]:
    """Start `python -m rag_pg mcp` through the SDK's stdio client; list the tools, make the calls."""

    async def main() -> tuple[list[Any], list[Any]]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "rag_pg", "mcp"], env=env, cwd=cwd)
        with errlog.open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    tools = (await session.list_tools()).tools
                    results = [await session.call_tool(name, args) for name, args in calls]
        return tools, results

    return anyio.run(main)


def text_of(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


def test_search_and_get_document_through_the_sdk_client(db_url: str, embed_server: Any, corpus: Path,
                                                        tmp_path: Path) -> None:
    ingest(db_url, embed_server, corpus, tmp_path)
    url, password = with_password(db_url)
    env = server_env(RAGPG_DATABASE_URL=url, RAGPG_EMBEDDING_URL=embed_server.url)
    errlog = tmp_path / "mcp.err"
    bad_calls: list[tuple[str, dict[str, Any]]] = [
        ("search", {"query": QUERY, "k": 0}),
        ("search", {"query": QUERY, "k": 10_000}),
        ("search", {"query": ""}),
        ("search", {"query": "  \t "}),
        ("search", {"query": "x" * 4097}),
        ("search", {"query": "a\x00b"}),
        ("search", {"query": QUERY, "mode": "fuzzy"}),
        ("search", {"k": 3}),
        ("get_document", {"path": "no/such/file.md"}),
        ("get_document", {"path": ""}),
    ]
    tools, results = call_tools(env, errlog, [
        ("search", {"query": QUERY, "k": 3}),
        ("get_document", {"path": "fr/admin/sauvegardes.md"}),
        *bad_calls,
        ("search", {"query": QUERY, "k": 3, "mode": "keyword", "path_prefix": "fr/admin"}),
    ], tmp_path)

    by_name = {tool.name: tool for tool in tools}
    assert set(by_name) == {"search", "get_document"}
    for tool in tools:
        assert tool.description and "path#anchor" in tool.description, tool.name
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
    assert by_name["search"].input_schema["required"] == ["query"]
    assert "1-100" in by_name["search"].input_schema["properties"]["k"]["description"]

    search, document, *refused, keyword = results
    assert not search.is_error, text_of(search)
    hits = search.structured_content["hits"]
    out = run_cli(["search", QUERY, "-k", "3", "--json"],
                  env={"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed_server.url}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert hits == [{**h, "cite": f"{h['path']}#{h['anchor']}" if h["anchor"] else h["path"]}
                    for h in json.loads(out.stdout)]
    assert hits[0]["path"] == "fr/admin/sauvegardes.md" and hits[0]["section"]
    assert json.loads(text_of(search)) == search.structured_content  # the same JSON for text-only clients

    from rag_pg import RagPG, Settings

    with RagPG(db_url, Settings()) as rag:
        record = rag.get_document("fr/admin/sauvegardes.md")
        expected = record.to_dict() if record is not None else None
    assert expected is not None
    assert not document.is_error, text_of(document)
    doc = document.structured_content
    assert [{k: v for k, v in c.items() if k != "cite"} for c in doc["chunks"]] == expected["chunks"]
    assert {k: v for k, v in doc.items() if k != "chunks"} == {k: v for k, v in expected.items() if k != "chunks"}
    assert [c["cite"] for c in doc["chunks"]] == [
        f"fr/admin/sauvegardes.md#{c['anchor']}" if c["anchor"] else "fr/admin/sauvegardes.md"
        for c in expected["chunks"]]

    for (name, args), result in zip(bad_calls, refused, strict=True):
        assert result.is_error, (name, args, text_of(result))
        assert "Traceback" not in text_of(result) and text_of(result).strip(), (name, args)
    assert "between 1 and 100" in text_of(refused[1]) and "4096" in text_of(refused[4])
    assert "NUL" in text_of(refused[5]) and "not_found" in text_of(refused[8])
    # after every refusal the server still answers
    assert not keyword.is_error
    assert keyword.structured_content["hits"]
    assert all(h["path"].startswith("fr/admin/") for h in keyword.structured_content["hits"])
    assert password not in errlog.read_text()


def test_stdout_carries_only_the_protocol(db_url: str, embed_server: Any, corpus: Path, tmp_path: Path) -> None:
    ingest(db_url, embed_server, corpus, tmp_path)
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "raw-test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "search", "arguments": {"query": QUERY, "k": 2}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
         "params": {"name": "search", "arguments": {"query": QUERY, "k": 0}}},
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rag_pg", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, cwd=tmp_path, text=True,
        env=server_env(RAGPG_DATABASE_URL=db_url, RAGPG_EMBEDDING_URL=embed_server.url),
    )
    assert proc.stdin is not None and proc.stdout is not None
    answers: dict[int, Any] = {}
    lines: list[str] = []
    try:
        for message in messages:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
            if "id" in message:
                while message["id"] not in answers:  # this answer before the next request
                    line = proc.stdout.readline()
                    assert line, "the server closed stdout"
                    lines.append(line)
                    data = json.loads(line)  # every stdout line is a JSON-RPC message
                    assert data["jsonrpc"] == "2.0"
                    if "id" in data:
                        answers[data["id"]] = data
        out, err = proc.communicate(timeout=120)
    except BaseException:
        proc.kill()  # never leave the server behind a failed test
        proc.communicate()
        raise
    lines += out.splitlines()
    assert proc.returncode == 0, err
    for line in lines:
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert {t["name"] for t in answers[2]["result"]["tools"]} == {"search", "get_document"}
    assert answers[3]["result"]["structuredContent"]["count"] == 2
    assert answers[4]["result"]["isError"] is True


@pytest.mark.parametrize("form", ["keywords", "url-hash", "url-question", "url-slash"])
def test_database_down_is_a_tool_error_without_secrets(form: str, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # a key=value DSN: config.redact_url leaves it as it is, the scrubber must still hide it;
    # URL passwords holding characters a URL reserves, which libpq takes as they are
    dsn = {
        "keywords": make_conninfo(host="127.0.0.1", port=port, dbname="x", user="ragpg",
                                  password=PW_CANARY),
        "url-hash": f"postgresql://ragpg:Pa#{PW_CANARY}@127.0.0.1:{port}/x",
        "url-question": f"postgresql://ragpg:Pa?{PW_CANARY}@127.0.0.1:{port}/x",
        "url-slash": f"postgresql://ragpg:Pa/{PW_CANARY}@127.0.0.1:{port}/x",
    }[form]
    env = server_env(RAGPG_DATABASE_URL=dsn, RAGPG_EMBEDDING_PROVIDER="none")
    errlog = tmp_path / "mcp.err"
    _, [result] = call_tools(env, errlog, [("search", {"query": QUERY, "mode": "keyword"})], tmp_path)
    assert result.is_error
    assert "database_unavailable" in text_of(result), text_of(result)
    assert PW_CANARY not in text_of(result)
    assert ("password=***" if form == "keywords" else ":***@") in text_of(result)
    log = errlog.read_text()
    assert PW_CANARY not in log and "database unavailable" in log
    assert all(json.loads(line) for line in log.splitlines())  # JSON lines, the pool's warnings too


class RawMCP:
    """`python -m rag_pg mcp` spoken to line by line; a reader thread hands over each stdout line."""

    def __init__(self, env: dict[str, str], cwd: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "rag_pg", "mcp"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env)
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, raw: bytes) -> dict[str, Any]:
        """Write one line and return the one message that answers it."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()
        line = self.lines.get(timeout=60)
        assert line, "the server closed stdout"
        data: dict[str, Any] = json.loads(line)
        return data

    def notify(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def close(self) -> tuple[int, str]:
        """Close stdin and reap the process (killed if it does not exit)."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        assert self.proc.stderr is not None
        err = self.proc.stderr.read().decode("utf-8", "replace")
        self.proc.stderr.close()
        self.reader.join()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code, err


def call(id: int, name: str, arguments: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}}).encode()


def test_every_malformed_message_gets_a_json_rpc_error(db_url: str, embed_server: Any, corpus: Path,
                                                       tmp_path: Path) -> None:
    ingest(db_url, embed_server, corpus, tmp_path)
    mcp = RawMCP(server_env(RAGPG_DATABASE_URL=db_url, RAGPG_EMBEDDING_URL=embed_server.url), tmp_path)
    try:
        hello = mcp.send(json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw-test", "version": "0"}}}).encode())
        assert hello["id"] == 1 and "result" in hello
        mcp.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
        malformed: list[tuple[bytes, int, Any]] = [
            (b"this is not JSON", -32700, None),
            (b"\xff\xfe\x00\x01binary\x80", -32700, None),
            (b"[" * 100_000 + b"]" * 100_000, -32600, None),  # over server.max_body_bytes
            (b'{"a":' * 1000 + b"1" + b"}" * 1000, -32600, None),  # small but deep
            (b'[{"jsonrpc": "2.0", "id": 5, "method": "tools/list"}]', -32600, None),
            (b'{"jsonrpc": "2.0", "id": null, "method": "tools/list"}', -32600, None),
            (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": "search"}', -32602, 7),
            (b'{"jsonrpc": "1.0", "id": 8, "method": "tools/list"}', -32600, 8),
            (b'{"jsonrpc": "2.0", "id": 9}', -32600, 9),
            (b"42", -32600, None),
            # lone surrogates: valid JSON escapes that no UTF-8 text holds, in every field
            (call(10, "search", {"query": "\ud800"}), -32602, 10),
            (b'{"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "search",'
             b' "arguments": {"query": "q", "path_prefix": "a\\udfff"}}}', -32602, 11),
            (b'{"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name":'
             b' "get_document", "arguments": {"path": "\\ud83d.md"}}}', -32602, 12),
            (b'{"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": "search",'
             b' "arguments": {"query": "q", "filters": {"\\ud800": "x"}}}}', -32602, 13),
        ]
        for raw, code, id in malformed:
            answer = mcp.send(raw)
            assert answer["jsonrpc"] == "2.0" and answer["id"] == id, (raw[:60], answer)
            assert answer["error"]["code"] == code, (raw[:60], answer)
            message = answer["error"]["message"]
            assert message and "\n" not in message and len(message) < 300, (raw[:60], message)

        refused = {
            "k as a string": mcp.send(call(20, "search", {"query": QUERY, "k": "5"})),
            "no query": mcp.send(call(21, "search", {"k": 3})),
            "unknown argument": mcp.send(call(22, "search", {"query": QUERY, "top_k": 3})),
            "arguments not an object": mcp.send(call(23, "search", "restaurer")),
            "path not a string": mcp.send(call(24, "get_document", {"path": 5})),
            "no such collection": mcp.send(call(25, "search", {"query": QUERY, "collection": "defualt"})),
        }
        for what, answer in refused.items():
            result = answer["result"]
            text = " ".join(block["text"] for block in result["content"])
            assert result["isError"] is True, (what, answer)
            assert "\n" not in text and "validation error" not in text, (what, text)
        assert "k" in refused["k as a string"]["result"]["content"][0]["text"]
        assert "query" in refused["no query"]["result"]["content"][0]["text"]
        assert "not_found" in refused["no such collection"]["result"]["content"][0]["text"]
        assert "'default'" in refused["no such collection"]["result"]["content"][0]["text"]
        # after all of that the server still answers a good call
        good = mcp.send(call(30, "search", {"query": QUERY, "k": 2}))
        assert good["id"] == 30 and good["result"]["structuredContent"]["count"] == 2
    finally:
        code, err = mcp.close()
    assert code == 0, err
    assert "Traceback" not in err
