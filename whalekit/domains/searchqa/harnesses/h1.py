"""Search-QA h1: what a 135M model needs. The harness searches the question itself
before the model speaks (forced first search), shows 3 documents cut to 300 characters,
shows one worked example (few-shot), prefills "<answer>" so the model only has to copy
a short span, stops at </answer>, and parses leniently (first line, trailing
punctuation dropped)."""

import re

from whalekit.harness import FinalAnswer, FormatError, GenerationSettings, Harness
from whalekit.types import Message, ToolCall

K = 3
CUT = 300


class SearchH1(Harness):
    max_turns = 1

    def system_prompt(self, task):
        return "Answer the question with a few words copied from the documents."

    def initial_tool_calls(self, task):
        return [ToolCall("search", {"query": task.inputs["question"], "k": K})]

    def few_shot(self, task):
        example = ("Document 1: Anna Brel (born 1901) was a poet. Brel was born in the city of Ostin.\n"
                   "Document 2: Ostin is a city in Valmar, on the cold Dree river.\n\n"
                   "Question: In which city was Anna Brel born?")
        return [Message("user", example, kind="few_shot"),
                Message("assistant", "<answer>Ostin</answer>", kind="few_shot")]

    def first_user_message(self, task, initial_results):
        blocks = []
        for result in initial_results:
            for i, doc in enumerate(result.meta.get("documents", [])[:K], 1):
                blocks.append(f"Document {i}: {doc['text'][:CUT]}")
        return "\n".join(blocks) + "\n\nQuestion: " + task.inputs["question"]

    def generation_settings(self, state):
        return GenerationSettings(max_new_tokens=24, stop=["</answer>", "\n"], prefill="<answer>")

    def parse(self, reply, state):
        text = reply.split("<answer>", 1)[-1].split("</answer>", 1)[0].strip().split("\n")[0]
        text = re.sub(r"[\s.!,;:]+$", "", text)
        return FinalAnswer(text) if text else FormatError("empty answer")
