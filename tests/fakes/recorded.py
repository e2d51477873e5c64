"""A local HTTP server on 127.0.0.1 that replays a recorded agent session: each POST
gets the next recorded assistant turn, rendered in the wire format of one API by a
subclass. It checks what a real server would: the key header, and that every tool call
of the previous turn is answered in the next request (else a 400, as the real APIs do).

Why real HTTP: the proposers must be tested through the real `anthropic` and `openai`
SDKs (retries, parsing, headers), so the fake stands at the network boundary only.

    with FakeAnthropicServer(load_recording("proposer_session"), {"seed_id": seed}) as server:
        AnthropicProposer(domain, api_key="test", base_url=server.url)
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RECORDINGS = Path(__file__).parent / "recordings"


def load_recording(name: str) -> list[dict[str, Any]]:
    return json.loads((RECORDINGS / f"{name}.json").read_text())["turns"]


def _substitute(value: Any, variables: dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, replacement in variables.items():
            value = value.replace("{" + key + "}", replacement)
        return value
    if isinstance(value, dict):
        return {k: _substitute(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, variables) for v in value]
    return value


class LocalServer:
    """An HTTP server on 127.0.0.1 (a free port) in a daemon thread, for as long as a `with`
    block lasts: every POST goes to `respond(path, headers, body)`, which answers (status,
    JSON payload, server-sent events or None)."""

    protocol_version = "HTTP/1.0"
    extra_headers: dict[str, str] = {}  # sent with every reply

    def __init__(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = server.protocol_version

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["content-length"])) or b"{}")
                status, payload, stream = server.respond(self.path, {k.lower(): v for k, v in self.headers.items()},
                                                         body)
                if stream is not None and status == 200:
                    data = "".join(f"event: {name}\ndata: {json.dumps(event)}\n\n" for name, event in stream).encode()
                    kind = "text/event-stream"
                else:
                    data, kind = json.dumps(payload).encode(), "application/json"
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                for name, value in server.extra_headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def respond(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any, Any]:
        raise NotImplementedError

    def __enter__(self) -> Any:  # the subclass itself
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class RecordedServer(LocalServer):
    path = "/"  # the endpoint a subclass serves
    extra_headers = {"retry-after-ms": "20"}  # the SDKs' retries wait 20 ms, not seconds

    def __init__(self, turns: list[dict[str, Any]], variables: dict[str, str] | None = None,
                 fail_first: tuple[int, ...] = ()):
        self.turns = _substitute(turns, variables or {})
        self.fail_first = list(fail_first)  # HTTP statuses answered before the first real turn (retry tests)
        self.requests: list[dict[str, Any]] = []  # every request body received, failures included
        self.headers: list[dict[str, str]] = []
        self.pending_ids: list[str] = []  # tool-call ids the next request must answer
        self.served = 0
        super().__init__()

    def respond(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any, Any]:
        self.requests.append(body)
        self.headers.append(headers)
        if path.rstrip("/") != self.path:
            return 404, self.error(404, f"no route {path}"), None
        problem = self.check(headers, body)
        if problem:
            return 400, self.error(400, problem), None
        if self.fail_first:
            status = self.fail_first.pop(0)
            return status, self.error(status, "recorded transient failure"), None
        if self.served >= len(self.turns):
            return 400, self.error(400, "the recording has no more turns"), None
        turn = self.turns[self.served]
        self.served += 1
        payload, self.pending_ids = self.render(turn, self.served)
        return 200, payload, None

    def check(self, headers: dict[str, str], body: dict[str, Any]) -> str | None:
        raise NotImplementedError

    def render(self, turn: dict[str, Any], number: int) -> tuple[dict[str, Any], list[str]]:
        raise NotImplementedError

    def error(self, status: int, message: str) -> dict[str, Any]:
        raise NotImplementedError
