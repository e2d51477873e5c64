"""Search-QA h0, after the authors' minimal Search-R1 harness (krafton-ai/WHALE,
domains/search_qa/environments/search_r1/base_harness.py and stupid_harness.py).

A one-line system prompt, the question with one line of instruction, and one search tool
that returns the top-1 passage cut to 200 tokens; only the first query of a turn is
run. At most 2 turns; the episode ends at the first turn without a search; the answer
is the innermost closed <answer>...</answer> of the last turn. SmolLM2's chat template
has no tool calling, so a text protocol stands in for the authors' tool schema: the
model writes <search>query</search> (generation stops there) and the result comes back
as the tool message the authors' template would render, <tool_response> around the
JSON the tool returns."""

import json
import re

from whalekit.harness import FinalAnswer, FormatError, GenerationSettings, Harness, ToolCalls
from whalekit.types import ToolCall

SEARCH = re.compile(r"<search>(.*?)</search>", re.S)


def innermost_answer(text):
    """The text between the last </answer> and the nearest <answer> before it, or None."""
    close = text.rfind("</answer>")
    start = text.rfind("<answer>", 0, close) if close >= 0 else -1
    return text[start + len("<answer>"):close].strip() if start >= 0 else None


class SearchH0(Harness):
    name = "searchqa-h0"
    max_turns = 2
    top_k = 1  # passages per search, whatever the model asks for
    max_doc_tokens = 200
    max_new_tokens = 256  # per turn (the authors' only cap is the response length)

    def system_prompt(self, task):
        return ("Answer factual questions using search when needed.\n\n"
                "Tool: search(query) looks up relevant information and returns exactly one passage. To call it, "
                "write <search>your query</search>; the result comes back in the next message.")

    def first_user_message(self, task, initial_results):
        return ("Question: " + task.inputs["question"] + "\nUse the search tool if you need it. Put only the "
                "final answer inside <answer>...</answer>.")

    def generation_settings(self, state):
        return GenerationSettings(max_new_tokens=self.max_new_tokens, stop=["</search>"])

    def parse(self, reply, state):
        match = SEARCH.search(reply)  # only the first query of a turn is run
        if match:
            return ToolCalls([ToolCall("search", {"query": match.group(1).strip(), "k": self.top_k,
                                                  "max_doc_tokens": self.max_doc_tokens})])
        answer = innermost_answer(reply)
        if answer is None:
            return FormatError("no closed <answer>...</answer> in the reply")
        return FinalAnswer(answer)

    def error_feedback(self, error, state):
        return None  # a turn without a tool call ends the episode, answered or not

    def format_tool_result(self, result, state):
        documents = result.meta.get("documents", [])
        if not result.ok:
            text = "Error: " + result.output
        elif not documents:
            text = "No search results found."
        else:
            text = "\n".join(f"Doc {i} (Title: {d['title']})\n{d['text']}\n" for i, d in
                             enumerate(documents[:self.top_k], 1)).strip()
        return "<tool_response>\n" + json.dumps({"result": text}, ensure_ascii=False) + "\n</tool_response>"

    def extract_answer(self, state):
        if state.final_answer is not None:
            return state.final_answer
        return innermost_answer(state.last_reply)  # the turn limit came after a search
