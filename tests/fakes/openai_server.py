"""The recorded session in the OpenAI chat-completions wire format
(POST /v1/chat/completions): `tool_calls` with JSON-string arguments answered by
`role: tool` messages, usage, and OpenAI-style errors.

    with FakeOpenAIServer(load_recording("proposer_session")) as server:
        OpenAIProposer(domain, api_key="EMPTY", base_url=server.url + "/v1")
"""

from __future__ import annotations

import json
from typing import Any

from fakes.recorded import RecordedServer


class FakeOpenAIServer(RecordedServer):
    path = "/v1/chat/completions"

    def check(self, headers: dict[str, str], body: dict[str, Any]) -> str | None:
        if not headers.get("authorization", "").startswith("Bearer "):
            return "missing bearer token"
        if not body.get("model") or not body.get("messages"):
            return "model and messages are required"
        if self.pending_ids:
            trailing = []
            for message in reversed(body["messages"]):
                if message["role"] != "tool":
                    break
                trailing.append(message["tool_call_id"])
            if sorted(trailing) != sorted(self.pending_ids):
                return f"tool_calls {self.pending_ids} must each be answered by a tool message"
        return None

    def render(self, turn: dict[str, Any], number: int) -> tuple[dict[str, Any], list[str]]:
        calls = [{"id": f"call_{number:02d}{k}", "type": "function",
                  "function": {"name": use["name"], "arguments": json.dumps(use["input"])}}
                 for k, use in enumerate(turn.get("tool_uses", []))]
        message: dict[str, Any] = {"role": "assistant", "content": turn.get("text") or None}
        if calls:
            message["tool_calls"] = calls
        tokens_in, tokens_out = turn.get("tokens_in", 1000), turn.get("tokens_out", 200)
        return {"id": f"chatcmpl-{number}", "object": "chat.completion", "created": 0, "model": "recorded",
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
                "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                          "total_tokens": tokens_in + tokens_out}}, [c["id"] for c in calls]

    def error(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error",
                          "code": status}}
