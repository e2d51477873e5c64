"""The engine's continuous schedule: each episode advances on its own, so a quick
episode's next turn is submitted while a slow sibling is still sampling, and the
trajectories are the ones lock-step gives (same ids, finish reasons, messages, rewards).

A scripted sampler stands in for vLLM here (its replies depend only on the prompt and the
turn seed, and a "slow" task needs several engine steps per reply), so these tests
check ordering and records, not timing; tests/test_sampler_conformance.py runs the real
vLLM sampler through both schedules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from whalekit.domains.base import get_domain
from whalekit.engine import Episode, InProcessHarness, RolloutConfig, rollout
from whalekit.harness import FinalAnswer, GenerationSettings, Harness, ToolCalls
from whalekit.samplers.base import Completion, GenerationRequest, Sampler, SamplingParams
from whalekit.types import ToolCall

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


class ScriptedSampler(Sampler):
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


class CalculateThenAnswer(Harness):
    """Turn one asks the calculator for a + b, turn two answers with its result."""

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


def _tasks(n: int = 4, slow: int | None = 0):
    tasks = get_domain("toy").load_splits(n, 1, 1, seed=0).train
    if slow is not None:
        tasks[slow].inputs["question"] = tasks[slow].inputs["question"].replace("?", " (slow)?")
    return tasks


def _run(sampler, tasks, scheduling: str, seed: int = 0):
    runtime = InProcessHarness(CalculateThenAnswer())
    return rollout(get_domain("toy"), [Episode(t, runtime, 0) for t in tasks], sampler,
                   RolloutConfig(seed=seed, progress=False, scheduling=scheduling))


def test_an_episodes_next_turn_is_submitted_before_a_slow_siblings_completion_returns():
    sampler = ScriptedSampler(slow_steps=4)
    tasks = _tasks(slow=0)
    trajectories = _run(sampler, tasks, "continuous")
    slow, fast = tasks[0].inputs["question"], tasks[1].inputs["question"]
    events = sampler.events
    assert events.index(("submit", fast, 2)) < events.index(("complete", slow, 1))
    assert events.index(("complete", fast, 2)) < events.index(("complete", slow, 1))
    assert all(t.correct and len(t.turns) == 2 for t in trajectories)


def test_lockstep_waits_for_the_slowest_completion_of_each_turn():
    sampler = ScriptedSampler(slow_steps=4)
    tasks = _tasks(slow=0)
    _run(sampler, tasks, "lockstep")
    events = sampler.events
    first_turn_done = max(i for i, e in enumerate(events) if e[0] == "complete" and e[2] == 1)
    assert min(i for i, e in enumerate(events) if e[0] == "submit" and e[2] == 2) > first_turn_done


def test_continuous_and_lockstep_record_the_same_trajectories():
    tasks = _tasks(n=6, slow=2)
    continuous = _run(ScriptedSampler(), tasks, "continuous", seed=5)
    lockstep = _run(ScriptedSampler(), tasks, "lockstep", seed=5)
    assert [t.task_id for t in continuous] == [t.id for t in tasks]
    for c, s in zip(continuous, lockstep):
        assert [(u.prompt_ids, u.completion_ids, u.text, u.finish_reason) for u in c.turns] == \
               [(u.prompt_ids, u.completion_ids, u.text, u.finish_reason) for u in s.turns]
        assert [(u.tool_calls, u.tool_results) for u in c.turns] == [(u.tool_calls, u.tool_results) for u in s.turns]
        assert c.messages == s.messages
        assert (c.seed, c.correct, c.reward, c.final_answer, c.error) == (s.seed, s.correct, s.reward, s.final_answer,
                                                                         s.error)
        assert c.turns[-1].completion_ids[-1] == EOS  # ids exactly as sampled, the final EOS kept


def test_a_failing_episode_stays_isolated_in_the_continuous_schedule():
    tasks = _tasks(n=4, slow=None)
    tasks[1].inputs["question"] = "What is 99 + 1?"  # its harness raises after the tool result
    tasks[2].inputs["question"] = "What is 7 + 7 (refused)?"  # the sampler refuses its request
    trajectories = _run(ScriptedSampler(refuse="refused"), tasks, "continuous")
    assert "hook failed on purpose" in trajectories[1].error and trajectories[1].reward == 0.0
    assert "refused on purpose" in trajectories[2].error and not trajectories[2].turns
    for i in (0, 3):
        assert trajectories[i].error is None and trajectories[i].correct


def test_context_overflow_ends_only_that_episode_in_the_continuous_schedule():
    tasks = _tasks(n=2, slow=None)
    tasks[0].inputs["question"] = "What is 1 + 2?" + " padding" * 100
    runtime = InProcessHarness(CalculateThenAnswer())
    trajectories = rollout(get_domain("toy"), [Episode(t, runtime) for t in tasks], ScriptedSampler(),
                           RolloutConfig(progress=False, scheduling="continuous", max_context_tokens=200))
    assert trajectories[0].error.startswith("context_overflow")
    assert trajectories[1].correct


def test_auto_picks_continuous_only_for_samplers_that_support_it():
    sampler = ScriptedSampler(slow_steps=4)
    tasks = _tasks(slow=0)
    _run(sampler, tasks, "auto")
    fast, slow = tasks[1].inputs["question"], tasks[0].inputs["question"]
    assert sampler.events.index(("submit", fast, 2)) < sampler.events.index(("complete", slow, 1))
    sampler.continuous = False
    with pytest.raises(ValueError, match="lock-step only"):
        _run(sampler, tasks, "continuous")
    with pytest.raises(ValueError, match="scheduling"):
        RolloutConfig(scheduling="eventually")
