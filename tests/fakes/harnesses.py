"""Calculator harnesses for the toy domain ("What is a + b?"), each exercising a path of
the engine: a tool turn then an answer, initial tool calls, several tool turns.

    rollout(get_domain("toy"), [Episode(task, InProcessHarness(CalculatorThenAnswer()))], sampler)
"""

from __future__ import annotations

import re

from whalekit.harness import FinalAnswer, GenerationSettings, Harness, ToolCalls
from whalekit.types import ToolCall


class CalculatorThenAnswer(Harness):
    """Calls the toy calculator on turn one, answers with its output on turn two."""

    max_turns = 2

    def generation_settings(self, state):
        return GenerationSettings(max_new_tokens=3, prefill="Sure: ")

    def parse(self, reply, state):
        if state.turn == 1:
            a, b = [int(x) for x in state.task.inputs["question"].rstrip("?").split("is ")[1].split(" + ")]
            return ToolCalls([ToolCall("calculator", {"expression": f"{a} + {b}"})])
        return FinalAnswer(state.scratch["result"])

    def format_tool_result(self, result, state):
        state.scratch["result"] = result.output
        return f"Result: {result.output}"


class CalculatorThenAnswerFromReply(Harness):
    """Asks the calculator for a + b when the reply starts with CALL (ContinuousScriptedSampler's
    first reply), else answers with its result; a question starting "What is 99" makes the
    hook fail on purpose."""

    max_turns = 2

    def generation_settings(self, state):
        return GenerationSettings(max_new_tokens=16)

    def parse(self, reply, state):
        if reply.startswith("CALL"):
            a, b = re.findall(r"\d+", state.task.inputs["question"])[:2]
            return ToolCalls([ToolCall("calculator", {"expression": f"{a} + {b}"})])
        if state.task.inputs["question"].startswith("What is 99"):
            raise RuntimeError("hook failed on purpose")
        return FinalAnswer(state.scratch["result"])

    def format_tool_result(self, result, state):
        state.scratch["result"] = result.output
        return f"Result: {result.output}"


class CalculatorTwice(Harness):
    """Two tool turns, then an answer: three turns per episode, with a stop string on the first."""

    max_turns = 3

    def generation_settings(self, state):
        return GenerationSettings(max_new_tokens=4 + 3 * state.turn, stop=["\n"] if state.turn == 1 else [])

    def parse(self, reply, state):
        if state.turn < 3:
            return ToolCalls([ToolCall("calculator", {"expression": f"{state.turn} + {len(reply)}"})])
        return FinalAnswer(reply)


# A multi-turn candidate that runs behind the sandbox: a tool call first, then an answer. As
# source: the Ray backend's workers build it from text, as they build a proposed harness.
CALCULATOR_FIRST_SOURCE = '''
from whalekit.harness import FinalAnswer, FormatError, GenerationSettings, Harness, ToolCalls
from whalekit.types import ToolCall


class CalculatorFirst(Harness):
    max_turns = 2

    def initial_tool_calls(self, task):
        a, b = task.inputs["question"].rstrip("?").split("is ")[1].split(" + ")
        return [ToolCall("calculator", {"expression": a + " + " + b})]

    def first_user_message(self, task, initial_results):
        return task.inputs["question"] + " (calculator says " + initial_results[0].output + ")"

    def generation_settings(self, state):
        return GenerationSettings(max_new_tokens=6, prefill="Answer: ")

    def parse(self, reply, state):
        digits = [w for w in reply.split() if w.isdigit()]
        return FinalAnswer(digits[-1]) if digits else FormatError("no number")

    def error_feedback(self, error, state):
        return "Reply with a number."
'''
