"""The `openai` proposer: the same agent loop through the `openai` SDK, against any
OpenAI-compatible chat-completions endpoint (OpenAI itself, or a local vLLM server
with an open coder model).

Why a separate backend: chat completions carries tool calls as `tool_calls` with JSON
string arguments and answers them with `role: tool` messages; the loop, tools and
ledger are shared (whalekit.search.proposers.agent_loop). Retries with backoff on 429/5xx are
the SDK's (`max_retries`).

A server that does not parse the model's tool calls (llama.cpp's Python server on a GGUF chat
template, e.g. Qwen2.5-Coder's) returns them as the reply's text: Qwen's
`{"name": ..., "arguments": {...}}` objects, their `<tool_call>` tags stripped as special
tokens. A reply that is nothing but such objects naming offered tools is read as those calls
(`tool_calls_in_text`), the way vLLM's `hermes` parser reads them server-side; any other text
stays text.

    proposer = OpenAIProposer(domain, AgentConfig(model="Qwen/Qwen2.5-Coder-32B-Instruct"),
                              base_url="http://localhost:8000/v1", api_key="EMPTY")
"""

from __future__ import annotations

import json
import re
from typing import Any

from whalekit.search.proposers.agent_loop import AgentConfig, AssistantTurn, HostedAgentProposer, ToolUse
from whalekit.search.proposers.base import ProposerError

DEFAULT_MODEL = "gpt-4o"


class OpenAIProposer(HostedAgentProposer):
    name = "openai"
    default_model, key_variable, url_variable = DEFAULT_MODEL, "OPENAI_API_KEY", "OPENAI_BASE_URL"

    def _backend(self) -> _ChatBackend:
        key = self.key()
        if not key:
            raise ProposerError("the openai proposer needs an API key: set OPENAI_API_KEY or pass api_key=... "
                                "(any string, e.g. 'EMPTY', for a local vLLM server); for an offline search use "
                                "the reflective proposer")
        import openai

        client = openai.OpenAI(api_key=key, base_url=self.endpoint(), max_retries=self.config.max_retries,
                               timeout=self.config.timeout_s)
        return _ChatBackend(client, self.config)


class _ChatBackend:
    def __init__(self, client: Any, config: AgentConfig):
        self.client, self.config = client, config
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.turns_read_from_text = 0  # replies whose tool calls came as text (`tool_calls_in_text`)

    def start(self, system: str, user: str, tools: list[dict[str, Any]]) -> None:
        self.messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        self.tools = [{"type": "function", "function": t} for t in tools]

    def step(self) -> AssistantTurn:
        import openai

        extra: dict[str, Any] = {"reasoning_effort": self.config.effort} if self.config.effort else {}
        try:
            response = self.client.chat.completions.create(model=self.config.model, messages=self.messages,
                                                           tools=self.tools, max_tokens=self.config.max_tokens,
                                                           **extra)
        except openai.APIError as exc:
            raise ProposerError(f"openai API error after {self.config.max_retries} retries: {exc}") from exc
        message = response.choices[0].message
        usage = response.usage
        tokens = (usage.prompt_tokens if usage else 0, usage.completion_tokens if usage else 0)
        calls = message.tool_calls or []
        offered = {t["function"]["name"] for t in self.tools}
        in_text = [] if calls else tool_calls_in_text(message.content or "", offered)
        if in_text:
            self.turns_read_from_text += 1
            uses = [ToolUse(f"text-{len(self.messages)}-{i}", name, arguments)
                    for i, (name, arguments) in enumerate(in_text)]
            self.messages.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": u.id, "type": "function", "function": {"name": u.name, "arguments": json.dumps(u.arguments)}}
                for u in uses]})
            return AssistantTurn(message.content or "", uses, *tokens)
        self.messages.append({"role": "assistant", "content": message.content or "",
                              "tool_calls": [c.model_dump(exclude_none=True) for c in calls] or None})
        if not calls:
            self.messages[-1].pop("tool_calls")
        uses = []
        for call in calls:
            try:
                arguments = json.loads(call.function.arguments or "{}")
            except json.JSONDecodeError:
                arguments = {"__unparsed__": call.function.arguments}
            uses.append(ToolUse(call.id, call.function.name, arguments if isinstance(arguments, dict) else {}))
        return AssistantTurn(message.content or "", uses, *tokens)

    def add_tool_results(self, results: list[tuple[str, str]]) -> None:
        self.messages.extend({"role": "tool", "tool_call_id": call_id, "content": output}
                             for call_id, output in results)

    def nudge(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})


_TOOL_CALL_WRAPPING = re.compile(r"</?tool_call>|^```(?:json)?\s*$", re.MULTILINE)


def tool_calls_in_text(text: str, tool_names: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls a reply's text consists of, or [] when it is anything else.

    Accepted: one or more JSON objects `{"name": <an offered tool>, "arguments": {...}}` (the
    arguments may also come as a JSON string), optionally each in `<tool_call>` tags or a json
    code fence, separated only by whitespace. Prose around them, an unknown tool name or
    arguments that are not an object make the whole reply text: a half-read reply must not
    run half of its calls."""
    body = _TOOL_CALL_WRAPPING.sub("", text).strip()
    decoder, at = json.JSONDecoder(), 0
    found: list[tuple[str, dict[str, Any]]] = []
    while at < len(body):
        try:
            value, end = decoder.raw_decode(body, at)
        except json.JSONDecodeError:
            return []
        if not isinstance(value, dict) or set(value) != {"name", "arguments"} or value["name"] not in tool_names:
            return []
        arguments = value["arguments"]
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                return []
        if not isinstance(arguments, dict):
            return []
        found.append((value["name"], arguments))
        at = end
        while at < len(body) and body[at].isspace():
            at += 1
    return found
