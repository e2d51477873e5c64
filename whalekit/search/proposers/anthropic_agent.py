"""The `anthropic` proposer: Claude, through the official `anthropic` SDK, as an agent
with tools over the archive (the loop is whalekit.search.proposers.agent_loop).

Why only a backend here: the SDK gives retries with exponential backoff on 429, 5xx
and connection errors (`max_retries`), honouring the server's retry-after; this module
converts between the loop's neutral turns and Messages API content blocks, keeping the
assistant's blocks (thinking included) verbatim in the conversation as the API requires.

    proposer = AnthropicProposer(domain, AgentConfig(model="claude-sonnet-4-6", effort="high"))
    candidates = proposer.propose(archive, n=4)          # needs ANTHROPIC_API_KEY
"""

from __future__ import annotations

from typing import Any

from whalekit.search.proposers.agent_loop import AgentConfig, AssistantTurn, HostedAgentProposer, ToolUse
from whalekit.search.proposers.base import ProposerError

DEFAULT_MODEL = "claude-sonnet-4-6"


class AnthropicProposer(HostedAgentProposer):
    name = "anthropic"
    default_model, key_variable, url_variable = DEFAULT_MODEL, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"

    def _backend(self) -> _MessagesBackend:
        key = self.key()
        if not key:
            raise ProposerError("the anthropic proposer needs an API key: set ANTHROPIC_API_KEY or pass "
                                "api_key=...; for an offline search use the reflective proposer")
        import anthropic

        client = anthropic.Anthropic(api_key=key, base_url=self.endpoint(), max_retries=self.config.max_retries,
                                     timeout=self.config.timeout_s)
        return _MessagesBackend(client, self.config)


class _MessagesBackend:
    def __init__(self, client: Any, config: AgentConfig):
        self.client, self.config = client, config
        self.system = ""
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []

    def start(self, system: str, user: str, tools: list[dict[str, Any]]) -> None:
        self.system, self.messages = system, [{"role": "user", "content": user}]
        self.tools = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
                      for t in tools]

    def step(self) -> AssistantTurn:
        import anthropic

        extra: dict[str, Any] = {}
        if self.config.effort:
            extra["output_config"] = {"effort": self.config.effort}
        try:
            response = self.client.messages.create(model=self.config.model, max_tokens=self.config.max_tokens,
                                                   system=self.system, messages=self.messages, tools=self.tools,
                                                   **extra)
        except anthropic.APIError as exc:  # retries are spent: the proposer cannot go on
            raise ProposerError(f"anthropic API error after {self.config.max_retries} retries: {exc}") from exc
        blocks = [block.model_dump(exclude_none=True) for block in response.content]
        self.messages.append({"role": "assistant", "content": blocks})
        text = "".join(b.get("text", "") for b in blocks if b["type"] == "text")
        uses = [ToolUse(b["id"], b["name"], dict(b.get("input") or {})) for b in blocks if b["type"] == "tool_use"]
        return AssistantTurn(text, uses, response.usage.input_tokens, response.usage.output_tokens)

    def add_tool_results(self, results: list[tuple[str, str]]) -> None:
        self.messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use_id, "content": output} for use_id, output in results]})

    def nudge(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})
