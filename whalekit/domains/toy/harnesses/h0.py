"""Toy h0: ask for the number, take the last integer in the reply."""

import re

from whalekit.harness import FinalAnswer, FormatError, GenerationSettings, Harness


class ToyH0(Harness):
    max_turns = 1

    def system_prompt(self, task):
        return "You are a careful calculator. Reply with the number only."

    def first_user_message(self, task, initial_results):
        return task.inputs["question"]

    def generation_settings(self, state):
        return GenerationSettings(max_new_tokens=16, stop=["\n"])

    def parse(self, reply, state):
        numbers = re.findall(r"-?\d+", reply)
        return FinalAnswer(numbers[-1]) if numbers else FormatError("no number in the reply")
