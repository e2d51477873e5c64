"""Search-QA h0: deliberately plain. The system prompt describes a `search` tool in a
simple text format (<search>query</search>); each search returns k=5 documents
untruncated; the answer must come as <answer>...</answer>; at most 3 turns, 64 new tokens a turn."""

import re

from whalekit.harness import FinalAnswer, FormatError, GenerationSettings, Harness, ToolCalls
from whalekit.types import ToolCall


class SearchH0(Harness):
    max_turns = 3

    def system_prompt(self, task):
        return ("You answer questions using a search engine. To search, write <search>your query</search> and "
                "stop; the results will be shown to you. When you know the answer, write "
                "<answer>the answer</answer>.\n\nFor example, write <search>Eiffel Tower</search> to search for the "
                "Eiffel Tower, or <answer>Paris</answer> to answer Paris.")

    def first_user_message(self, task, initial_results):
        return ("Question: " + task.inputs["question"] + "\n\nSearch with <search>query</search> or answer with "
                "<answer>answer</answer>.")

    def generation_settings(self, state):
        return GenerationSettings(max_new_tokens=64, stop=["</search>", "</answer>"])

    def parse(self, reply, state):
        answer = re.search(r"<answer>(.*?)(</answer>|$)", reply, re.S)
        search = re.search(r"<search>(.*?)(</search>|$)", reply, re.S)
        if search and (not answer or search.start() < answer.start()):
            return ToolCalls([ToolCall("search", {"query": search.group(1).strip(), "k": 5})])
        if answer:
            return FinalAnswer(answer.group(1).strip())
        return FormatError("write <search>query</search> or <answer>answer</answer>")

    def format_tool_result(self, result, state):
        return result.output
