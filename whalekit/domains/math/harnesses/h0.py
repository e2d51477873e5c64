"""Math h0: the deliberately plain harness. It offers a Python tool in fenced code
blocks, runs the first block of a turn and shows stdout/stderr, and asks for the final
answer in \\boxed{}. A reply with a \\boxed{} answer, or with no code block at all, ends
the episode (the whole reply goes to the verifier, which reads the last \\boxed{} or,
failing that, the last expression). Its levers are class attributes, plain by default,
so the mechanism catalogue can change them independently."""

import re

from whalekit.harness import FinalAnswer, GenerationSettings, Harness, ToolCalls
from whalekit.types import ToolCall

CODE_BLOCK = re.compile(r"```(?:python|py)[ \t]*\n(.*?)(?:```|$)", re.S)


class MathH0(Harness):
    name = "math-h0"
    max_turns = 3
    max_new_tokens = 192
    first_prefill = ""  # text that starts the first reply (e.g. an opened code block)
    answer_prefill = ""  # text that starts a reply after a tool result (e.g. "\\boxed{")
    output_chars = 1000  # tool output shown to the model, from the end

    def system_prompt(self, task):
        return ("You are a helpful math assistant. You can run Python: write code in a ```python block "
                "and it will be executed; print the values you need. When you know the answer, "
                "write it as \\boxed{answer}.")

    def first_user_message(self, task, initial_results):
        return task.inputs["question"]

    def generation_settings(self, state):
        last = state.messages[-1] if state.messages else None
        prefill = self.first_prefill if state.turn == 0 else ""
        if last is not None and last.kind == "tool_result" and self.answer_prefill:
            prefill = self.answer_prefill
        stop = ["```output"]
        if prefill.rstrip().endswith("{"):
            stop = ["}"]
        elif prefill.startswith("```"):
            stop = ["```\n", "```output"]
        return GenerationSettings(max_new_tokens=self.max_new_tokens, stop=stop, prefill=prefill)

    def parse(self, reply, state):
        if "\\boxed" in reply:
            return FinalAnswer(reply if reply.count("{") <= reply.count("}") else reply + "}")
        code = CODE_BLOCK.search(reply)
        if code and code.group(1).strip():
            return ToolCalls([ToolCall("python", {"code": code.group(1)})])
        return FinalAnswer(reply)

    def format_tool_result(self, result, state):
        text = result.output.strip() or "(no output: use print() to see values)"
        return "```output\n" + text[-self.output_chars:] + "\n```"
