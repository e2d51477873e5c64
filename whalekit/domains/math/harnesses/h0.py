"""Math h0, after the authors' ReTool base harness (krafton-ai/WHALE,
domains/math_reasoning/environments/retool/base_harness.py) and its strict boxed reward.

The question plus one line asking for the answer in \\boxed{}, and a Python code tool; at
most 2 turns; a turn without a tool call ends the episode; the answer is the last
\\boxed{} the model wrote, and nothing else (no last-number fallback). The code sent to
the tool is normalised as the authors' tool does: a fenced block inside is unwrapped and
a last line that is not a print is printed. SmolLM2's chat template has no tool calling,
so a text protocol stands in for the tool schema the authors' template renders as a
system block (their harness itself has no system prompt): the model writes a ```python
block (generation stops at its closing fence) and the output comes back as the tool
message the template would render, inside <tool_response>. Its other levers are class
attributes, off by default, so the mechanism catalogue can change them independently."""

import re

from whalekit.harness import FinalAnswer, GenerationSettings, Harness, ToolCalls
from whalekit.types import ToolCall

CODE_BLOCK = re.compile(r"```(?:python|py)[ \t]*\n(.*?)(?:```|$)", re.S)
FENCED = re.compile(r"```python(.*?)```", re.S)


def last_boxed(text):
    """Contents of the last \\boxed{...} with balanced braces; None if there is none closed."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 1, start + len("\\boxed{")
    for i in range(begin, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[begin:i]
    return None


class MathH0(Harness):
    name = "math-h0"
    max_turns = 2
    max_new_tokens = 256  # per turn (the authors cap only the whole response)
    first_prefill = ""  # text that starts the first reply (e.g. an opened code block)
    answer_prefill = ""  # text that starts a reply after a tool result (e.g. "\\boxed{")
    output_chars = 100000  # tool output shown to the model, from the end (all of it by default)

    def system_prompt(self, task):
        return ("Tool: code_interpreter(code) runs Python code and returns what it printed. To call it, write the "
                "code in a ```python block; the output comes back in the next message.")

    def first_user_message(self, task, initial_results):
        return task.inputs["question"] + "\nThe answer format must be: \\boxed{'The final answer goes here.'}"

    def generation_settings(self, state):
        last = state.messages[-1] if state.messages else None
        prefill = self.first_prefill if state.turn == 0 else ""
        if last is not None and last.kind == "tool_result" and self.answer_prefill:
            prefill = self.answer_prefill
        stop = ["}"] if prefill.rstrip().endswith("{") else ["\n```\n", "```output"]
        return GenerationSettings(max_new_tokens=self.max_new_tokens, stop=stop, prefill=prefill)

    def normalise_code(self, code):
        inner = FENCED.findall(code)
        if inner:
            code = inner[0].strip()
        lines = code.split("\n")
        for i in range(len(lines) - 1, -1, -1):
            if lines[i] == "":
                continue
            if not lines[i].startswith("print"):
                lines[i] = f"print({lines[i]})"
            break
        return "\n".join(lines)

    def parse(self, reply, state):
        code = CODE_BLOCK.search(reply)
        if code and code.group(1).strip():
            return ToolCalls([ToolCall("python", {"code": self.normalise_code(code.group(1))})])
        return FinalAnswer(reply)  # a turn without a tool call ends the episode

    def format_tool_result(self, result, state):
        text = result.output
        if not result.ok and not text.strip():
            text = "no stdout here"
        return "<tool_response>\n" + text[-self.output_chars:] + "\n</tool_response>"

    def extract_answer(self, state):
        replies = "\n".join(m.content for m in state.messages if m.role == "assistant" and m.kind != "few_shot")
        if state.final_answer is not None and state.final_answer not in replies:
            replies += "\n" + state.final_answer  # a mechanism's own answer text
        boxed = last_boxed(replies)
        return None if boxed is None else "\\boxed{" + boxed + "}"
