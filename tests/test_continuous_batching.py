"""The engine's continuous schedule: each episode advances on its own, so a quick
episode's next turn is submitted while a slow sibling is still sampling, and the
trajectories are the ones lock-step gives (same ids, finish reasons, messages, rewards).

A scripted sampler stands in for vLLM here (its replies depend only on the prompt and the
turn seed, and a "slow" task needs several engine steps per reply), so these tests
check ordering and records, not timing; tests/test_sampler_conformance.py runs the real
vLLM sampler through both schedules.
"""

from __future__ import annotations

import pytest
from fakes.harnesses import CalculatorThenAnswerFromReply
from fakes.samplers import EOS, ContinuousScriptedSampler

from whalekit.domains.base import get_domain
from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, rollout


def _tasks(n: int = 4, slow: int | None = 0):
    tasks = get_domain("toy").load_splits(n, 1, 1, seed=0).train
    if slow is not None:
        tasks[slow].inputs["question"] = tasks[slow].inputs["question"].replace("?", " (slow)?")
    return tasks


def _run(sampler, tasks, scheduling: str, seed: int = 0):
    runtime = InProcessHarness(CalculatorThenAnswerFromReply())
    return rollout(get_domain("toy"), [Episode(t, runtime, 0) for t in tasks], sampler,
                   RolloutConfig(seed=seed, progress=False, scheduling=scheduling))


def test_an_episodes_next_turn_is_submitted_before_a_slow_siblings_completion_returns():
    sampler = ContinuousScriptedSampler(slow_steps=4)
    tasks = _tasks(slow=0)
    trajectories = _run(sampler, tasks, "continuous")
    slow, fast = tasks[0].inputs["question"], tasks[1].inputs["question"]
    events = sampler.events
    assert events.index(("submit", fast, 2)) < events.index(("complete", slow, 1))
    assert events.index(("complete", fast, 2)) < events.index(("complete", slow, 1))
    assert all(t.correct and len(t.turns) == 2 for t in trajectories)


def test_lockstep_waits_for_the_slowest_completion_of_each_turn():
    sampler = ContinuousScriptedSampler(slow_steps=4)
    tasks = _tasks(slow=0)
    _run(sampler, tasks, "lockstep")
    events = sampler.events
    first_turn_done = max(i for i, e in enumerate(events) if e[0] == "complete" and e[2] == 1)
    assert min(i for i, e in enumerate(events) if e[0] == "submit" and e[2] == 2) > first_turn_done


def test_continuous_and_lockstep_record_the_same_trajectories():
    tasks = _tasks(n=6, slow=2)
    continuous = _run(ContinuousScriptedSampler(), tasks, "continuous", seed=5)
    lockstep = _run(ContinuousScriptedSampler(), tasks, "lockstep", seed=5)
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
    trajectories = _run(ContinuousScriptedSampler(refuse="refused"), tasks, "continuous")
    assert "hook failed on purpose" in trajectories[1].error and trajectories[1].reward == 0.0
    assert "refused on purpose" in trajectories[2].error and not trajectories[2].turns
    for i in (0, 3):
        assert trajectories[i].error is None and trajectories[i].correct


def test_context_overflow_ends_only_that_episode_in_the_continuous_schedule():
    tasks = _tasks(n=2, slow=None)
    tasks[0].inputs["question"] = "What is 1 + 2?" + " padding" * 100
    runtime = InProcessHarness(CalculatorThenAnswerFromReply())
    trajectories = rollout(get_domain("toy"), [Episode(t, runtime) for t in tasks], ContinuousScriptedSampler(),
                           RolloutConfig(progress=False, scheduling="continuous", max_context_tokens=200))
    assert trajectories[0].error.startswith("context_overflow")
    assert trajectories[1].correct


def test_auto_picks_continuous_only_for_samplers_that_support_it():
    sampler = ContinuousScriptedSampler(slow_steps=4)
    tasks = _tasks(slow=0)
    _run(sampler, tasks, "auto")
    fast, slow = tasks[1].inputs["question"], tasks[0].inputs["question"]
    assert sampler.events.index(("submit", fast, 2)) < sampler.events.index(("complete", slow, 1))
    sampler.continuous = False
    with pytest.raises(ValueError, match="lock-step only"):
        _run(sampler, tasks, "continuous")
    with pytest.raises(ValueError, match="scheduling"):
        RolloutConfig(scheduling="eventually")
