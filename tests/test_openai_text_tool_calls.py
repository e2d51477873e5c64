"""Tool calls a server leaves in the reply's text: llama.cpp's Python server on Qwen2.5-Coder's
GGUF template answers a tool request with `{"name": ..., "arguments": {...}}` as content (the
`<tool_call>` tags are special tokens and vanish). The `openai` backend reads such a reply as
those calls, and only such a reply: prose, unknown tools or malformed arguments stay text."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from whalekit.search.proposers.agent_loop import TOOLS, AgentConfig
from whalekit.search.proposers.openai_agent import _ChatBackend, tool_calls_in_text

NAMES = {"read_file", "write_candidate", "list_files"}


def test_a_bare_object_naming_an_offered_tool_is_a_call():
    text = '{\n  "name": "read_file",\n  "arguments": {\n    "path": "candidates/h0/harness.py"\n  }\n}'
    assert tool_calls_in_text(text, NAMES) == [("read_file", {"path": "candidates/h0/harness.py"})]


def test_tagged_fenced_and_several_calls_are_read_in_order():
    text = ('<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>\n'
            '```json\n{"name": "read_file", "arguments": "{\\"path\\": \\"README.md\\"}"}\n```')
    assert tool_calls_in_text(text, NAMES) == [("list_files", {}), ("read_file", {"path": "README.md"})]


@pytest.mark.parametrize("text", [
    "",
    "I will read the file now.",
    'Let me look: {"name": "read_file", "arguments": {"path": "x"}}',  # prose around it
    '{"name": "delete_everything", "arguments": {}}',  # not an offered tool
    '{"name": "read_file", "arguments": ["x"]}',  # arguments not an object
    '{"name": "read_file", "arguments": "not json"}',
    '{"name": "read_file", "arguments": {"path": "x"}, "extra": 1}',  # not the call shape
    '{"name": "read_file", "arguments": {"path": "x"}} and then some',  # trailing prose
    '{"name": "read_file", "arguments": {"path": "x"}',  # cut off
])
def test_anything_else_stays_text(text: str):
    assert tool_calls_in_text(text, NAMES) == []


def _completion(content: str | None, tool_calls: list[Any] | None = None) -> Any:
    message = SimpleNamespace(content=content, tool_calls=tool_calls)
    return SimpleNamespace(choices=[SimpleNamespace(message=message)],
                           usage=SimpleNamespace(prompt_tokens=120, completion_tokens=30))


class _Client:
    """Stands in for `openai.OpenAI`: answers each create() with the next scripted completion."""

    def __init__(self, replies: list[Any]):
        self.replies, self.requests = list(replies), []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def _create(self, **request: Any) -> Any:
        self.requests.append(json.loads(json.dumps(request)))
        return self.replies.pop(0)


def test_the_backend_turns_a_text_call_into_a_tool_turn_the_next_request_answers_by_id():
    client = _Client([_completion('{"name": "read_file", "arguments": {"path": "README.md"}}'),
                      _completion("done")])
    backend = _ChatBackend(client, AgentConfig(model="local"))
    backend.start("system", "user", TOOLS)
    turn = backend.step()
    assert [(u.name, u.arguments) for u in turn.tool_uses] == [("read_file", {"path": "README.md"})]
    assert (turn.tokens_in, turn.tokens_out) == (120, 30) and backend.turns_read_from_text == 1
    backend.add_tool_results([(turn.tool_uses[0].id, "# README")])
    backend.step()
    sent = client.requests[1]["messages"]
    assistant, tool = sent[-2], sent[-1]
    assert assistant["tool_calls"][0]["id"] == tool["tool_call_id"] == turn.tool_uses[0].id
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"path": "README.md"}
    assert tool["content"] == "# README"


def test_a_plain_text_reply_stays_a_text_turn():
    client = _Client([_completion("I think the parser is the problem.")])
    backend = _ChatBackend(client, AgentConfig(model="local"))
    backend.start("system", "user", TOOLS)
    turn = backend.step()
    assert turn.tool_uses == [] and turn.text.startswith("I think") and backend.turns_read_from_text == 0
    assert "tool_calls" not in backend.messages[-1]
