"""Scripted samplers: the `Sampler` interface with replies that depend only on the prompt
(and the turn seed), so engine, harness and domain tests run without a model.

    sampler = ScriptedSampler(tokenizer, [solve_with_code, copy_output])   # reply k after k tool outputs
    sampler = ContinuousScriptedSampler(slow_steps=4)                      # vLLM-like submit / poll
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from whalekit.samplers.base import Completion, GenerationRequest, Sampler, SamplingParams


class ScriptedSampler(Sampler):
    """Replies by turn: `replies[k]` (a function of the decoded prompt) once the prompt holds k
    tool outputs, the last one after that (math: a code block first, then the boxed answer)."""

    def __init__(self, tokenizer, replies):
        self.tokenizer = tokenizer
        self.replies = replies

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        out = []
        for request in requests:
            prompt = self.tokenizer.decode(request.prompt_ids)
            outputs = sum(prompt.count(m) - prompt.count(m + "89") for m in ("```output\n", "<tool_response>\n"))
            turn = min(outputs, len(self.replies) - 1)
            text = self.replies[turn](prompt)
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: request.max_new_tokens]
            out.append(Completion(ids, self.tokenizer.decode(ids), "stop"))
        return out

    def load_weights(self, state_dict):  # pragma: no cover - not used
        raise NotImplementedError


EOS = 0


class CharTokenizer:
    """One id per character (EOS is 0): prompts and replies stay readable in tests."""

    eos_token_id = EOS

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True, return_dict=False):
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages) + ("<assistant>" if add_generation_prompt
                                                                              else "")
        return self.encode(text)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i == EOS))


class ContinuousScriptedSampler(Sampler):
    """Replies "CALL" to a first turn and "DONE" after a tool result, each tagged with the
    turn seed; a prompt that mentions "slow" needs `slow_steps` polls to finish, others one.
    `events` records ("submit" | "complete", task question, turn number) in order."""

    continuous = True

    def __init__(self, slow_steps: int = 4, refuse: str | None = None):
        self.tokenizer = CharTokenizer()
        self.slow_steps, self.refuse = slow_steps, refuse
        self.events: list[tuple[str, str, int]] = []
        self._running: dict[str, list[Any]] = {}  # key -> [steps left, request]

    def reply(self, request: GenerationRequest) -> Completion:
        prompt = self.tokenizer.decode(request.prompt_ids)
        text = ("DONE" if "Result:" in prompt else "CALL") + f" {request.seed % 997}"
        ids = self.tokenizer.encode(text)[: request.max_new_tokens - 1] + [EOS]
        return Completion(ids, self.tokenizer.decode(ids), "eos")

    def _tag(self, request: GenerationRequest) -> tuple[str, int]:
        prompt = self.tokenizer.decode(request.prompt_ids)
        question = re.findall(r"What is [^?]*\?", prompt)[0]
        return question, 2 if "Result:" in prompt else 1

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        for r in requests:
            self.events.append(("submit", *self._tag(r)))
        for r in requests:
            self.events.append(("complete", *self._tag(r)))
        return [self.reply(r) for r in requests]

    def submit(self, key: str, request: GenerationRequest, params: SamplingParams) -> None:
        question, _ = self._tag(request)
        if self.refuse and self.refuse in question:
            raise ValueError("this request is refused on purpose")
        self.events.append(("submit", *self._tag(request)))
        self._running[key] = [self.slow_steps if "slow" in question else 1, request]

    def poll(self) -> list[tuple[str, Completion]]:
        done = []
        for key, entry in list(self._running.items()):
            entry[0] -= 1
            if entry[0] == 0:
                del self._running[key]
                self.events.append(("complete", *self._tag(entry[1])))
                done.append((key, self.reply(entry[1])))
        return done

    def load_weights(self, state_dict: Mapping[str, Any]) -> None: ...
