"""The recorded session in the Anthropic Messages API wire format (POST /v1/messages):
content blocks, `tool_use` / `tool_result` pairing, usage, and typed errors.

    with FakeAnthropicServer(load_recording("proposer_session")) as server: ...
"""

from __future__ import annotations

from typing import Any

from fakes.recorded import RecordedServer

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


class FakeAnthropicServer(RecordedServer):
    path = "/v1/messages"

    def check(self, headers: dict[str, str], body: dict[str, Any]) -> str | None:
        has_key = headers.get("x-api-key") or headers.get("authorization", "").startswith("Bearer ")
        if not has_key or not headers.get("anthropic-version"):
            return "missing API key (x-api-key or bearer) or anthropic-version header"
        if not body.get("model") or not body.get("max_tokens") or not body.get("messages"):
            return "model, max_tokens and messages are required"
        last = body["messages"][-1]
        answered = [b.get("tool_use_id") for b in last["content"] if b.get("type") == "tool_result"] \
            if last["role"] == "user" and isinstance(last["content"], list) else []
        if self.pending_ids and sorted(answered) != sorted(self.pending_ids):
            return f"tool_use ids {self.pending_ids} must each have a tool_result in the next user message"
        roles = [m["role"] for m in body["messages"]]
        if any(a == b for a, b in zip(roles, roles[1:])):
            return "messages must alternate between user and assistant"
        return None

    def render(self, turn: dict[str, Any], number: int) -> tuple[dict[str, Any], list[str]]:
        content: list[dict[str, Any]] = [{"type": "text", "text": turn["text"]}] if turn.get("text") else []
        ids = []
        for k, use in enumerate(turn.get("tool_uses", [])):
            ids.append(f"toolu_{number:02d}{k}")
            content.append({"type": "tool_use", "id": ids[-1], "name": use["name"], "input": use["input"]})
        return {"id": f"msg_{number:04d}", "type": "message", "role": "assistant", "model": "recorded",
                "content": content, "stop_reason": "tool_use" if ids else "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": turn.get("tokens_in", 1000), "output_tokens": turn.get("tokens_out", 200)}
                }, ids

    def error(self, status: int, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": _ERROR_TYPES.get(status, "api_error"), "message": message}}
