"""The per-episode state machine that calls a harness's hooks in the contract's order.

It speaks only in plain requests (generate these messages / run these tools / finished),
so the same driver runs in the engine's process or inside an isolated worker.

    driver = EpisodeDriver(load_harness(source), task.view())
    request = driver.begin()   # GenerateRequest | ToolRequest | Finished
"""

from __future__ import annotations

import hashlib
import types as pytypes
from dataclasses import dataclass, field

from whalekit.harness import EpisodeState, FinalAnswer, FormatError, GenerationSettings, Harness, ToolCalls
from whalekit.types import Message, TaskView, ToolCall, ToolResult


@dataclass
class GenerateRequest:
    messages: list[Message]
    settings: GenerationSettings


@dataclass
class ToolRequest:
    calls: list[ToolCall]


@dataclass
class Finished:
    answer: str | None
    error: str | None = None
    messages: list[Message] = field(default_factory=list)  # the final conversation


Request = GenerateRequest | ToolRequest | Finished


class EpisodeDriver:
    def __init__(self, harness: Harness, task: TaskView):
        self.harness = harness
        self.state = EpisodeState(task=task)
        self._awaiting_initial_tools = False

    def begin(self) -> Request:
        calls = self.harness.initial_tool_calls(self.state.task)
        if calls:
            self._awaiting_initial_tools = True
            return ToolRequest(list(calls))
        return self._open([])

    def _open(self, initial_results: list[ToolResult]) -> Request:
        task = self.state.task
        messages: list[Message] = []
        system = self.harness.system_prompt(task)
        if system:
            messages.append(Message("system", system))
        messages.extend(self.harness.few_shot(task))
        messages.append(Message("user", self.harness.first_user_message(task, initial_results)))
        self.state.messages = messages
        return self._next_turn()

    def _next_turn(self) -> Request:
        if self.harness.should_stop(self.state):
            return self._finish()
        self.state.messages = list(self.harness.manage_context(list(self.state.messages), self.state))
        settings = self.harness.generation_settings(self.state)
        return GenerateRequest(list(self.state.messages), settings)

    def _finish(self) -> Finished:
        return Finished(self.harness.extract_answer(self.state), messages=list(self.state.messages))

    def after_generation(self, completion_text: str, prefill: str = "") -> Request:
        state = self.state
        reply = prefill + completion_text
        state.messages.append(Message("assistant", reply))
        state.turn += 1
        state.last_reply = reply
        action = self.harness.parse(reply, state)
        if isinstance(action, FinalAnswer):
            state.final_answer = action.text
            return self._finish()
        if isinstance(action, ToolCalls) and action.calls:
            state.tool_calls += len(action.calls)
            return ToolRequest(list(action.calls))
        if isinstance(action, FormatError):
            state.format_errors += 1
            feedback = self.harness.error_feedback(action, state)
            if feedback is None:
                return self._finish()
            state.messages.append(Message("user", feedback, kind="feedback"))
            return self._next_turn()
        raise TypeError(f"parse() must return ToolCalls, FinalAnswer or FormatError, got {type(action).__name__}")

    def after_tools(self, results: list[ToolResult]) -> Request:
        if self._awaiting_initial_tools:
            self._awaiting_initial_tools = False
            return self._open(results)
        self.state.tool_errors += sum(1 for r in results if not r.ok)
        text = "\n\n".join(self.harness.format_tool_result(r, self.state) for r in results)
        self.state.messages.append(Message("user", text, kind="tool_result"))
        return self._next_turn()


def harness_id(source: str) -> str:
    """Content address of a harness: the same source always gets the same id."""
    return "h-" + hashlib.sha256(source.encode()).hexdigest()[:10]


def load_harness(source: str, module_name: str = "candidate_harness") -> Harness:
    """Execute harness source in a fresh module and instantiate its one Harness subclass.

    This runs the code in the current process: call it only where that is safe (an
    isolated worker, or the trusted seed harnesses shipped with whalekit)."""
    module = pytypes.ModuleType(module_name)
    module.__dict__["__file__"] = f"<{module_name}>"
    exec(compile(source, f"<{module_name}>", "exec"), module.__dict__)
    classes = [
        v for v in module.__dict__.values()
        if isinstance(v, type) and issubclass(v, Harness) and v is not Harness and v.__module__ == module_name
    ]
    if len(classes) != 1:
        raise ValueError(f"a harness module must define exactly one Harness subclass, found {len(classes)}")
    return classes[0]()
