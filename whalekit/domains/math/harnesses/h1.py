"""Math h1: h0 tuned for a very small model. It shows one worked exchange (question,
code block, output, boxed answer), opens the first reply with a ```python fence so the
model only has to write the code, and opens the reply after the tool output with
"The answer is \\boxed{" so the model only has to copy the number. Short replies: the
code is one or two lines, and a long reply is a derailed one."""

import re

from whalekit.harness import FinalAnswer, GenerationSettings, Harness, ToolCalls
from whalekit.types import Message, ToolCall

CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|$)", re.S)
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


class MathH1(Harness):
    name = "math-h1"
    max_turns = 3
    code_tokens = 96
    answer_tokens = 16

    def system_prompt(self, task):
        return ("Solve the problem with Python. Write a short ```python block that prints the answer. "
                "After you see the output, give the final answer as \\boxed{answer}.")

    def few_shot(self, task):
        return [
            Message("user", "What is 12 * 7 + 5?", kind="few_shot"),
            Message("assistant", "```python\nprint(12 * 7 + 5)\n```", kind="few_shot"),
            Message("user", "```output\n89\n```", kind="few_shot"),
            Message("assistant", "The answer is \\boxed{89}.", kind="few_shot"),
        ]

    def first_user_message(self, task, initial_results):
        return task.inputs["question"]

    def generation_settings(self, state):
        last = state.messages[-1]
        if last.kind == "tool_result" or state.turn == self.max_turns - 1:
            return GenerationSettings(max_new_tokens=self.answer_tokens, stop=["}"], prefill="The answer is \\boxed{")
        return GenerationSettings(max_new_tokens=self.code_tokens, stop=["```\n", "```output"], prefill="```python\n")

    def parse(self, reply, state):
        if "\\boxed{" in reply:
            return FinalAnswer(reply if reply.rstrip().endswith("}") else reply + "}")
        code = CODE_BLOCK.search(reply)
        if code and code.group(1).strip():
            return ToolCalls([ToolCall("python", {"code": code.group(1)})])
        return FinalAnswer(reply)

    def format_tool_result(self, result, state):
        if result.ok and result.output.strip():
            return "```output\n" + result.output.strip()[-500:] + "\n```"
        if result.ok:
            return "```output\n(nothing printed)\n```"
        last_line = result.output.strip().splitlines()[-1] if result.output.strip() else result.error
        return "```output\nError: " + str(last_line)[-300:] + "\n```"

    def extract_answer(self, state):
        if state.final_answer is not None:
            return state.final_answer
        for message in reversed(state.messages):  # turn limit hit: fall back to the last printed number
            if message.kind == "tool_result":
                numbers = NUMBER.findall(message.content)
                return numbers[-1] if numbers else None
        return None
