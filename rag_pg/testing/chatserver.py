"""A deterministic fake OpenAI-compatible chat server on loopback, for ``ask`` and ``summarize``.

::

    with FakeChatServer() as server:
        client = ChatClient(server.url, "fake-chat")
        server.reply = "Forty-two [Source 1]."     # a fixed answer, or a callable(messages)

By default the answer is predictable from the prompt: for a prompt with numbered sources it
quotes the first sentence of source 1 and cites ``[Source 1]``; for any other prompt it
returns ``Summary: `` and the first 25 words after the prompt's ``---`` line. Requests are
recorded (body and headers) so tests can check what was sent, and that nothing was.
"""

from __future__ import annotations

import json
import re
import signal
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = str | Callable[[list[dict[str, Any]]], str]
_SOURCE = re.compile(r"^\[Source 1: [^\n]*\]\n(.+?)(?:\n\n|\Z)", re.MULTILINE | re.DOTALL)


def default_reply(messages: list[dict[str, Any]]) -> str:
    """What a well-behaved model would say, computed from the prompt alone."""
    prompt = str(messages[-1].get("content", "")) if messages else ""
    match = _SOURCE.search(prompt)
    if match:
        first = " ".join(match.group(1).split())
        sentence = first.split(". ")[0].rstrip(".")
        return f"{sentence}. [Source 1]"
    body = prompt.split("\n---\n", 1)[1] if "\n---\n" in prompt else prompt
    words = body.split()[:25]
    return "Summary: " + " ".join(words)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(400, {"error": {"message": "body is not JSON"}})
            return
        with fake.lock:
            fake.requests.append({"body": body, "headers": dict(self.headers.items())})
        if fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
            self._send(401, {"error": {"message": "invalid API key"}})
            return
        if fake.fault is not None:
            if fake.fault == "non_json":
                self._send_raw(200, b"<html>oops</html>", "text/html")
            elif fake.fault == "no_choices":
                self._send(200, {"id": "x", "choices": []})
            else:
                self._send(int(fake.fault), {"error": {"message": f"fake fault {fake.fault}"}})
            return
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages:
            self._send(400, {"error": {"message": "messages must be a non-empty list"}})
            return
        reply = fake.reply if isinstance(fake.reply, str) else fake.reply(messages)
        prompt_words = sum(len(str(m.get("content", "")).split()) for m in messages)
        self._send(200, {
            "id": f"chatcmpl-{len(fake.requests)}",
            "object": "chat.completion",
            "model": body.get("model", fake.model),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_words, "completion_tokens": len(reply.split()),
                      "total_tokens": prompt_words + len(reply.split())},
        })

    def _send(self, status: int, data: Any) -> None:
        self._send_raw(status, json.dumps(data).encode("utf-8"), "application/json")

    def _send_raw(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeChatServer


class FakeChatServer:
    """Serves ``POST /v1/chat/completions`` on 127.0.0.1; ``fault`` = HTTP code, non_json, no_choices."""

    def __init__(self, *, model: str = "fake-chat", api_key: str | None = None) -> None:
        self.model = model
        self.api_key = api_key
        self.reply: Reply = default_reply
        self.fault: str | None = None
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL, as a user would configure it (``…/v1``)."""
        if self._server is None:
            raise RuntimeError("FakeChatServer is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def calls(self) -> int:
        with self.lock:
            return len(self.requests)

    def prompts(self) -> list[str]:
        """The last message of each request, in order."""
        with self.lock:
            return [str(r["body"]["messages"][-1]["content"]) for r in self.requests]

    def start(self) -> FakeChatServer:
        if self._server is None:
            server = _Server(("127.0.0.1", 0), _Handler)
            server.fake = self
            self._server = server
            self._thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join()
            self._server = None
            self._thread = None

    def __enter__(self) -> FakeChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> int:
    """``python -m rag_pg.testing.chatserver``: run one in the foreground, print its URL."""
    # Ctrl-C stops it even when its parent ignored SIGINT (a background job inherits that).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    server = FakeChatServer().start()
    try:  # from the start: a Ctrl-C right after the URL must still stop the server's threads
        print(server.url, flush=True)
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
