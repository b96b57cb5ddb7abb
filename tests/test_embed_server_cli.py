"""`ragpg embed-server` as a process: its flags, its start line, its stop on SIGTERM, the extra."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import httpx
import pytest

from rag_pg.serve.embed_server import DEFAULT_CACHE_SIZE, ServerLimits
from rag_pg.testing.embedserver import FakeEmbeddingServer

from .waiting import eventually

TOKEN = "tok-canary-embed-server-5150"


@pytest.fixture
def upstream() -> Iterator[FakeEmbeddingServer]:
    with FakeEmbeddingServer(dim=16, model="fake-16") as srv:
        yield srv


def test_the_command_line_defaults_are_the_servers():
    from rag_pg.cli import embeddings as cli

    limits = ServerLimits()
    assert (cli.DEFAULT_MAX_TEXTS, cli.DEFAULT_MAX_REQUEST_BYTES) == (
        limits.max_texts, limits.max_request_bytes)
    assert cli.DEFAULT_CACHE_SIZE == DEFAULT_CACHE_SIZE


def test_command_line_serves_the_configured_provider_and_stops_gracefully(upstream):
    upstream.delay = 1.0
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPG_")}
    env.update({"RAGPG_EMBEDDING_URL": upstream.url, "RAGPG_EMBED_SERVER_TOKEN": TOKEN})
    proc = subprocess.Popen([sys.executable, "-m", "rag_pg", "embed-server", "--port", "0",
                             "--grace", "30"], stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
        assert match, line
        assert "fake-16 (16 d)" in line and TOKEN not in line
        answers: list[httpx.Response] = []
        worker = threading.Thread(target=lambda: answers.append(httpx.post(
            match.group(1) + "/embed", json={"type": "query", "texts": ["q"]},
            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)))
        worker.start()
        eventually(lambda: upstream.calls, "the first request reaching the model")
        proc.send_signal(signal.SIGTERM)
        worker.join()
        assert proc.wait(timeout=20) == 0
        assert answers[0].status_code == 200
        assert "stopping" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_sigterm_stops_at_once_even_with_a_call_stalled_upstream(upstream):
    upstream.delay = 60.0  # never answers while the test runs
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPG_")}
    env.update({"RAGPG_EMBEDDING_URL": upstream.url, "RAGPG_EMBEDDING_TIMEOUT": "60"})
    proc = subprocess.Popen([sys.executable, "-m", "rag_pg", "embed-server", "--port", "0",
                             "--grace", "0"], stderr=subprocess.PIPE, text=True, env=env)
    answers: list[object] = []
    worker: threading.Thread | None = None
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
        assert match, line

        def call() -> None:
            try:
                answers.append(httpx.post(match.group(1) + "/embed", timeout=60,
                                          json={"type": "query", "texts": ["q"]}))
            except httpx.HTTPError as exc:
                answers.append(exc)

        worker = threading.Thread(target=call)
        worker.start()
        eventually(lambda: upstream.calls, "the first request reaching the model")
        proc.send_signal(signal.SIGTERM)
        # Well before the upstream's 60 s: the stalled call does not hold the process.
        assert proc.wait(timeout=30) == 0
        worker.join()
        assert len(answers) == 1
        reply = answers[0]
        assert isinstance(reply, httpx.Response) and reply.status_code == 503, reply
        assert "stopping" in reply.json()["detail"]
        said = proc.stderr.read()
        assert "stopping" in said and "Traceback" not in said, said
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
        upstream.stop()  # releases the stalled answer
        if worker is not None:
            worker.join()


def test_without_the_serve_extra_it_says_what_to_install_in_one_line():
    # None in sys.modules makes `import fastapi` fail as it does when it is not installed.
    code = ("import sys; sys.modules['fastapi'] = None; sys.argv = ['ragpg', 'embed-server'];"
            " from rag_pg.cli import main; main()")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPG_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'ragpg[serve]'" in lines[0], out.stderr
