"""A scripted proposer session served on 127.0.0.1 in either wire format, for the session
tests that drive the real SDKs and Claude Code's CLI: unlike the recorded servers
(fakes.recorded), it streams server-sent events when asked, answers a CLI's side requests
and can prefix tool names (Claude Code's MCP tools).

    with ScriptedServer("anthropic", turns) as server:
        AnthropicProposer(domain, config, api_key="test", base_url=server.url)
"""

from __future__ import annotations

import json
from typing import Any

from fakes.recorded import LocalServer


class ScriptedServer(LocalServer):
    """127.0.0.1 server that plays a scripted proposer session in one wire format:
    "anthropic" (POST /v1/messages; JSON, or server-sent events when the request streams)
    or "openai" (POST /v1/chat/completions). It answers 400, as the real APIs do, when a
    tool call of the previous turn is not answered; requests without the session's tools
    (a CLI's side requests) get a short text reply."""

    protocol_version = "HTTP/1.1"  # keep-alive, as this server always spoke (the recorded ones: HTTP/1.0)

    def __init__(self, dialect: str, turns: list[dict[str, Any]], tool_prefix: str = ""):
        self.dialect, self.turns, self.prefix = dialect, turns, tool_prefix
        self.requests: list[dict[str, Any]] = []
        self.pending: list[str] = []
        self.served = 0
        super().__init__()

    def tool_results(self) -> list[str]:
        """Every tool output the model was sent, in order."""
        out = []
        for body in self.requests[-1:]:
            for message in body.get("messages", []):
                if self.dialect == "openai" and message.get("role") == "tool":
                    out.append(str(message["content"]))
                elif isinstance(message.get("content"), list):
                    out += [json.dumps(b.get("content")) for b in message["content"] if b.get("type") == "tool_result"]
        return out

    def respond(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any, Any]:
        route = "/v1/messages" if self.dialect == "anthropic" else "/v1/chat/completions"
        if path.split("?")[0].rstrip("/") != route:
            return 404, {"error": {"type": "not_found_error", "message": path}}, None
        names = [t.get("name") or t.get("function", {}).get("name") for t in body.get("tools", [])]
        if not any(str(n).endswith("write_candidate") for n in names):
            return self.render({"text": "ok"}, body, side=True)
        self.requests.append(body)
        if self.pending:
            last = body["messages"][-1] if self.dialect == "anthropic" else None
            if self.dialect == "anthropic":
                answered = [b.get("tool_use_id") for b in last["content"] if b.get("type") == "tool_result"] \
                    if isinstance(last["content"], list) else []
            else:
                answered = [m.get("tool_call_id") for m in body["messages"] if m.get("role") == "tool"][-len(
                    self.pending):]
            if sorted(answered) != sorted(self.pending):
                return 400, {"type": "error", "error": {"type": "invalid_request_error",
                                                        "message": f"unanswered tool calls {self.pending}"}}, None
        if self.served >= len(self.turns):
            return 400, {"error": {"type": "invalid_request_error", "message": "the script has no more turns"}}, None
        turn = self.turns[self.served]
        self.served += 1
        return self.render(turn, body)

    def render(self, turn: dict[str, Any], body: dict[str, Any], side: bool = False) -> tuple[int, Any, Any]:
        number = self.served
        uses = [(f"toolu_{number:02d}{k}", self.prefix + u["name"], u["input"])
                for k, u in enumerate(turn.get("tool_uses", []))]
        if not side:
            self.pending = [u[0] for u in uses]
        tokens_in, tokens_out = turn.get("tokens_in", 1500), turn.get("tokens_out", 300)
        if self.dialect == "openai":
            message: dict[str, Any] = {"role": "assistant", "content": turn.get("text") or None}
            if uses:
                message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments":
                                                                                     json.dumps(a)}}
                                         for i, n, a in uses]
            return 200, {"id": f"chatcmpl-{number}", "object": "chat.completion", "created": 0, "model": "scripted",
                         "choices": [{"index": 0, "message": message,
                                      "finish_reason": "tool_calls" if uses else "stop"}],
                         "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                                   "total_tokens": tokens_in + tokens_out}}, None
        content: list[dict[str, Any]] = [{"type": "text", "text": turn["text"]}] if turn.get("text") else []
        content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in uses]
        stop = "tool_use" if uses else "end_turn"
        usage = {"input_tokens": tokens_in, "output_tokens": tokens_out}
        message = {"id": f"msg_{number:04d}{'s' if side else ''}", "type": "message", "role": "assistant",
                   "model": body.get("model", "scripted"), "content": content, "stop_reason": stop,
                   "stop_sequence": None, "usage": usage}
        if not body.get("stream"):
            return 200, message, None
        events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": {
            **message, "content": [], "stop_reason": None, "usage": {"input_tokens": tokens_in, "output_tokens": 1}}})]
        for index, block in enumerate(content):
            start = {"type": "text", "text": ""} if block["type"] == "text" else {**block, "input": {}}
            delta = {"type": "text_delta", "text": block["text"]} if block["type"] == "text" else \
                {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events += [("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
                       ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
                       ("content_block_stop", {"type": "content_block_stop", "index": index})]
        events += [("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"output_tokens": tokens_out}}),
                   ("message_stop", {"type": "message_stop"})]
        return 200, None, events
