r'''The harness contract: the code around the model that WHALE searches over.

A harness is a Python module that defines exactly one subclass of `Harness`. Its hooks
are small, pure functions over plain data (strings, lists, dicts and the records in
`whalekit.types`): they never call the model, never touch files or the network, and
never see a task's reference answer. The rollout engine calls them in this order:

1. `system_prompt(task)` and `first_user_message(task, initial_results)` open the
   conversation; `few_shot(task)` may insert example exchanges between them.
   `initial_tool_calls(task)` may run tools *before* the model speaks (e.g. a forced
   first search); their results are passed to `first_user_message`.
2. Each turn: `manage_context(messages, state)` may shorten the conversation, then
   `generation_settings(state)` chooses max new tokens, stop strings, a `prefill`
   (text placed at the start of the assistant's reply, which the model continues) and
   optionally `choices`: the reply after the prefill will be exactly one of these
   strings (constrained decoding), e.g. the legal moves of a chess position.
3. The model's reply (prefill + completion) goes to `parse(reply, state)`, which
   returns a `ToolCalls`, a `FinalAnswer` or a `FormatError`.
4. Tool calls run through the domain's toolbox (outside the harness);
   `format_tool_result(result, state)` turns each result into the text the model sees.
   A `FormatError` goes to `error_feedback(error, state)`: a message to the model, or
   None to end the episode.
5. `should_stop(state)` is asked after every turn; `extract_answer(state)` gives the
   answer handed to the verifier when the episode ends.

`state` is an `EpisodeState`: the task view, the messages so far, the turn index, and
counters for tool calls and format errors. Tools each domain offers are listed in the
domain's `TOOLS` description (e.g. chess: `move`, the puzzle's environment; math:
`python`; search QA: `search`). A harness may import pure helpers such as `re`, `json`,
`whalekit.harness` and the display helpers in `whalekit.harness_helpers`; never an
engine such as python-chess.

A complete example (math, with a Python tool):

    import re
    from whalekit.harness import Harness, ToolCalls, FinalAnswer, FormatError, GenerationSettings
    from whalekit.types import ToolCall

    class PythonHarness(Harness):
        max_turns = 3

        def system_prompt(self, task):
            return ("Solve the problem. You may run Python in a ```python block. "
                    "Give the final answer as \\boxed{...}.")

        def first_user_message(self, task, initial_results):
            return task.inputs["question"]

        def generation_settings(self, state):
            return GenerationSettings(max_new_tokens=256, stop=["```output"])

        def parse(self, reply, state):
            boxed = re.findall(r"\\boxed\{([^}]*)\}", reply)
            if boxed:
                return FinalAnswer(boxed[-1])
            code = re.search(r"```python\n(.*?)```", reply, re.S)
            if code:
                return ToolCalls([ToolCall("python", {"code": code.group(1)})])
            return FormatError("no code block and no \\boxed{} answer")

        def format_tool_result(self, result, state):
            return "Output:\n" + result.output[:1000]
'''

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from whalekit.types import Message, TaskView, ToolCall, ToolResult


@dataclass
class GenerationSettings:
    """Per-turn generation choices a harness makes (sampling temperature is the run's)."""

    max_new_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    prefill: str = ""  # starts the assistant reply; the model continues from here
    # A constrained answer format: the reply (after the prefill) is exactly one of these
    # strings, then end of turn. For a small model that rarely writes a well-formed answer
    # on its own (a legal chess move, a multiple-choice letter) the harness can make the
    # format certain and leave only the choice to the model.
    choices: list[str] | None = None


@dataclass
class ToolCalls:
    calls: list[ToolCall]


@dataclass
class FinalAnswer:
    text: str


@dataclass
class FormatError:
    message: str


Action = ToolCalls | FinalAnswer | FormatError


@dataclass
class EpisodeState:
    task: TaskView
    messages: list[Message] = field(default_factory=list)
    turn: int = 0  # number of model turns completed
    tool_calls: int = 0
    tool_errors: int = 0
    format_errors: int = 0
    last_reply: str = ""
    final_answer: str | None = None
    scratch: dict[str, Any] = field(default_factory=dict)  # harness-owned memory


class Harness:
    """Base class: override the hooks you need. Defaults give a one-turn QA harness."""

    name: str = "harness"
    max_turns: int = 1

    def system_prompt(self, task: TaskView) -> str | None:
        return None

    def initial_tool_calls(self, task: TaskView) -> list[ToolCall]:
        return []

    def first_user_message(self, task: TaskView, initial_results: list[ToolResult]) -> str:
        return str(task.inputs.get("question", ""))

    def few_shot(self, task: TaskView) -> list[Message]:
        return []

    def generation_settings(self, state: EpisodeState) -> GenerationSettings:
        return GenerationSettings()

    def parse(self, reply: str, state: EpisodeState) -> Action:
        return FinalAnswer(reply.strip())

    def format_tool_result(self, result: ToolResult, state: EpisodeState) -> str:
        return result.output

    def error_feedback(self, error: FormatError, state: EpisodeState) -> str | None:
        return f"Your reply could not be used: {error.message}. Please follow the format."

    def manage_context(self, messages: list[Message], state: EpisodeState) -> list[Message]:
        return messages

    def should_stop(self, state: EpisodeState) -> bool:
        return state.final_answer is not None or state.turn >= self.max_turns

    def extract_answer(self, state: EpisodeState) -> str | None:
        return state.final_answer
