"""The rollout engine: batching, exact token ids, stop conditions and fault isolation."""

from __future__ import annotations

import pytest
from fakes.harnesses import CalculatorThenAnswer

from whalekit.domains.base import get_domain
from whalekit.harness import FinalAnswer, Harness
from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, RolloutSettings, rollout
from whalekit.samplers import GenerationRequest, SamplingParams


def _prompts(tokenizer, n=6):
    texts = ["What is 2 + 2?", "Name a colour.", "Hello there, how are you doing today my friend?", "1 2 3",
             "Write a haiku about the sea and the long long night.", "ok"]
    return [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                          tokenize=True, return_dict=False) for t in texts[:n]]


def test_batched_greedy_equals_one_at_a_time_greedy(tiny_policy):
    sampler = tiny_policy.sampler
    prompts = _prompts(tiny_policy.tokenizer)
    requests = [GenerationRequest(p, 12) for p in prompts]
    batched = sampler.generate(requests, SamplingParams(temperature=0.0))
    single = [sampler.generate([r], SamplingParams(temperature=0.0))[0] for r in requests]
    assert [c.token_ids for c in batched] == [c.token_ids for c in single]
    assert all(len(c.token_ids) > 0 for c in batched)


def test_max_new_tokens_ends_a_turn_with_finish_reason_length(tiny_policy):
    [completion] = tiny_policy.sampler.generate([GenerationRequest(_prompts(tiny_policy.tokenizer, 1)[0], 5)],
                                                SamplingParams(temperature=0.0))
    assert len(completion.token_ids) <= 5
    if len(completion.token_ids) == 5:
        assert completion.finish_reason == "length"


def test_stop_string_ends_a_turn_at_the_first_occurrence(tiny_policy):
    sampler, tokenizer = tiny_policy.sampler, tiny_policy.tokenizer
    prompt = _prompts(tokenizer, 1)[0]
    [free] = sampler.generate([GenerationRequest(prompt, 24)], SamplingParams(temperature=0.0))
    assert len(free.token_ids) >= 8, "the tiny model should not stop this early"
    # Use the text of tokens 4..6 as a stop string: generation must now end right there.
    stop = tokenizer.decode(free.token_ids[4:6]).strip() or tokenizer.decode(free.token_ids[4:6])
    [stopped] = sampler.generate([GenerationRequest(prompt, 24, [stop])], SamplingParams(temperature=0.0))
    assert stopped.finish_reason == "stop"
    assert stop in stopped.text
    assert len(stopped.token_ids) < len(free.token_ids)
    assert stopped.token_ids == free.token_ids[: len(stopped.token_ids)]
    assert stop not in tokenizer.decode(stopped.token_ids[:-1], skip_special_tokens=True)


def test_trajectory_token_ids_decode_to_the_logged_text(tiny_policy):
    domain = get_domain("toy")
    tasks = domain.load_splits(4, 2, 2, seed=0).train
    harness = InProcessHarness(domain.initial_harness_source())
    trajectories = rollout(domain, [Episode(t, harness, i) for t in tasks for i in range(2)], tiny_policy.sampler,
                           RolloutConfig(seed=3, progress=False))
    assert len(trajectories) == 8
    for traj in trajectories:
        for turn in traj.turns:
            assert tiny_policy.tokenizer.decode(turn.completion_ids, skip_special_tokens=True) == turn.text
            assert turn.prompt_ids[-3:] == tiny_policy.tokenizer.encode("<|im_start|>assistant\n",
                                                                        add_special_tokens=False)[-3:]
        assistant = [m.content for m in traj.messages if m.role == "assistant"]
        assert assistant == [t.prefill + t.text for t in traj.turns]


class _Exploding(Harness):
    max_turns = 2

    def parse(self, reply, state):
        if state.task.id.endswith("boom"):
            raise RuntimeError("hook failed on purpose")
        return FinalAnswer(reply)


def test_a_harness_that_raises_fails_only_its_own_episode(tiny_policy):
    domain = get_domain("toy")
    tasks = domain.load_splits(3, 1, 1, seed=0).train
    tasks[1].id = tasks[1].id + "-boom"
    runtime = InProcessHarness(_Exploding())
    trajectories = rollout(domain, [Episode(t, runtime) for t in tasks], tiny_policy.sampler,
                           RolloutConfig(sampling=SamplingParams(temperature=0.0), progress=False))
    assert "hook failed on purpose" in trajectories[1].error
    assert trajectories[1].reward == 0.0
    assert trajectories[0].error is None and trajectories[2].error is None
    assert trajectories[0].final_answer is not None


def test_multi_turn_tool_use_prefill_and_verification(tiny_policy):
    domain = get_domain("toy")
    tasks = domain.load_splits(2, 1, 1, seed=1).train
    trajectories = rollout(domain, [Episode(t, InProcessHarness(CalculatorThenAnswer())) for t in tasks],
                           tiny_policy.sampler, RolloutConfig(progress=False))
    for traj, task in zip(trajectories, tasks):
        assert len(traj.turns) == 2
        assert traj.turns[0].tool_results[0].output == task.reference
        assert traj.correct and traj.reward == 1.0
        assert traj.turns[0].prefill == "Sure: "
        assert traj.messages[1].role == "assistant" and traj.messages[1].content.startswith("Sure: ")
        assert [m.kind for m in traj.messages].count("tool_result") == 1


def test_context_overflow_ends_the_episode_with_a_recorded_error(tiny_policy):
    domain = get_domain("toy")
    task = domain.load_splits(1, 1, 1, seed=0).train[0]
    [traj] = rollout(domain, [Episode(task, InProcessHarness(domain.initial_harness_source()))], tiny_policy.sampler,
                     RolloutConfig(max_context_tokens=20, progress=False))
    assert traj.error.startswith("context_overflow") and not traj.correct


def test_a_token_cap_bounds_every_turn_whatever_the_harness_asks(tiny_policy):
    """The smoke preset's max_new_tokens_cap: the tiny random model never samples EOS, so
    without it each math turn runs to the harness's 256 tokens."""
    domain = get_domain("math")
    tasks = domain.load_splits(2, 1, 1, seed=0).train
    harness = InProcessHarness(domain.initial_harness_source())
    episodes = [Episode(t, harness, 0) for t in tasks]
    free = rollout(domain, episodes, tiny_policy.sampler, RolloutConfig(seed=1, progress=False))
    assert max(len(turn.completion_ids) for t in free for turn in t.turns) > 16
    capped = rollout(domain, episodes, tiny_policy.sampler, RolloutConfig(seed=1, progress=False,
                                                                          max_new_tokens_cap=16))
    assert all(len(turn.completion_ids) <= 16 for t in capped for turn in t.turns)
    by_run = rollout(domain, episodes, tiny_policy.sampler,
                     RolloutConfig(seed=1, progress=False, max_new_tokens_cap=16),
                     settings=RolloutSettings(max_new_tokens_cap=8))  # the run's cap, passed by the driver
    assert all(len(turn.completion_ids) <= 8 for t in by_run for turn in t.turns)  # the tighter cap wins
    assert not hasattr(tiny_policy.sampler, "max_new_tokens_cap")  # nothing is planted on the sampler


def test_an_episode_stops_when_its_response_budget_is_spent_and_each_turn_asks_for_what_is_left(tiny_policy):
    """The paper preset's per-episode response budget (the authors' 8,192 assistant tokens):
    turns together never generate more; the turn that would start past it ends the episode."""
    domain = get_domain("toy")
    tasks = domain.load_splits(2, 1, 1, seed=1).train
    episodes = [Episode(t, InProcessHarness(CalculatorThenAnswer())) for t in tasks]  # 3 + 3 tokens, 2 turns

    def run(config):
        return rollout(domain, episodes, tiny_policy.sampler, config)

    assert all(t.correct and [len(turn.completion_ids) for turn in t.turns] == [3, 3]
               for t in run(RolloutConfig(seed=1, progress=False)))
    for t in run(RolloutConfig(seed=1, progress=False, max_response_tokens=5)):  # turn 2 may take what is left
        assert [len(turn.completion_ids) for turn in t.turns] == [3, 2] and t.correct
    for t in run(RolloutConfig(seed=1, progress=False, max_response_tokens=3)):  # nothing left for turn 2
        assert len(t.turns) == 1 and t.error.startswith("response_budget") and not t.correct
    by_run = rollout(domain, episodes, tiny_policy.sampler, RolloutConfig(seed=1, progress=False),
                     settings=RolloutSettings(max_response_tokens=3))  # the run's budget, passed by the driver
    assert all(len(t.turns) == 1 for t in by_run)


def test_the_paper_preset_raises_the_h0s_per_turn_limit_to_the_episode_budget():
    from whalekit.run.driver import per_turn_limit

    for name in ("searchqa", "math", "chess"):
        h0 = get_domain(name).initial_harness_source()
        assert "    max_new_tokens = 256" in h0
        assert per_turn_limit(h0, None) == h0  # cpu: unchanged
        raised = per_turn_limit(h0, 8192)
        assert "    max_new_tokens = 8192" in raised and "max_new_tokens = 256" not in raised


def test_rollout_config_rejects_nonsense():
    with pytest.raises(ValueError):
        RolloutConfig(max_context_tokens=0)
    with pytest.raises(ValueError):
        RolloutConfig(max_new_tokens_cap=0)
    with pytest.raises(ValueError):
        RolloutConfig(max_response_tokens=0)
    with pytest.raises(ValueError):
        SamplingParams(temperature=-1)


def test_a_seeded_sample_does_not_depend_on_the_batch_it_was_drawn_in(tiny_policy):
    sampler = tiny_policy.sampler
    prompts = _prompts(tiny_policy.tokenizer)
    params = SamplingParams(temperature=1.0, top_p=0.9)
    together = sampler.generate([GenerationRequest(p, 10, seed=100 + i) for i, p in enumerate(prompts)], params)
    alone = sampler.generate([GenerationRequest(prompts[3], 10, seed=103)], params)[0]
    assert together[3].token_ids == alone.token_ids
    other_seed = sampler.generate([GenerationRequest(prompts[3], 10, seed=7)], params)[0]
    assert other_seed.token_ids != alone.token_ids


def test_seeded_sampling_follows_the_model_distribution(tiny_policy):
    import torch

    sampler = tiny_policy.sampler
    prompt = _prompts(tiny_policy.tokenizer, 1)[0]
    with torch.no_grad():
        probs = torch.softmax(sampler.model(torch.tensor([prompt])).logits[0, -1].float(), -1)
    # The default keeps the 20 likeliest tokens (the authors' top_k) and renormalises over them.
    kept = torch.topk(probs, 20).indices
    probs = torch.zeros_like(probs).index_fill_(0, kept, 1.0) * probs
    probs = probs / probs.sum()
    draws = sampler.generate([GenerationRequest(prompt, 1, seed=s) for s in range(400)], SamplingParams(1.0))
    top = int(probs.argmax())
    frequency = sum(d.token_ids[0] == top for d in draws) / len(draws)
    assert abs(frequency - float(probs[top])) < 4 * (float(probs[top]) * (1 - float(probs[top])) / 400) ** 0.5 + 0.01


@pytest.mark.parametrize("seeded", [True, False])
def test_sampling_defaults_to_the_authors_top_k_20_and_top_k_0_turns_it_off(tiny_policy, seeded):
    """T 1 / top_p 1 / top_k 20 is the default (whalekit sampled the full vocabulary before)."""
    import torch

    sampler = tiny_policy.sampler
    prompt = _prompts(tiny_policy.tokenizer, 1)[0]
    with torch.no_grad():
        logits = sampler.model(torch.tensor([prompt])).logits[0, -1].float()
    top20 = set(torch.topk(logits, 20).indices.tolist())
    assert SamplingParams().top_k == RolloutConfig().sampling.top_k == 20 and SamplingParams().top_p == 1.0

    def first_tokens(params: SamplingParams) -> set[int]:
        requests = [GenerationRequest(prompt, 1, seed=s if seeded else None) for s in range(200)]
        return {c.token_ids[0] for c in sampler.generate(requests, params)}

    assert first_tokens(SamplingParams(1.0)) <= top20
    assert first_tokens(SamplingParams(1.0, top_k=0)) - top20  # the tiny random model is nearly flat
    with pytest.raises(ValueError):
        SamplingParams(top_k=-1)


def test_the_vllm_sampler_passes_top_k_through():
    from types import SimpleNamespace

    from whalekit.samplers.vllm import VLLMSampler

    sampler = VLLMSampler.__new__(VLLMSampler)
    sampler.eos_ids, sampler.on_gpu, sampler._vllm = {0}, False, SimpleNamespace(SamplingParams=dict)
    request = GenerationRequest([1, 2], 4)
    assert sampler._sampling_params(request, SamplingParams(1.0), 0)["top_k"] == 20
    assert sampler._sampling_params(request, SamplingParams(1.0, top_k=0), 0)["top_k"] == 0
    assert sampler._sampling_params(request, SamplingParams(0.0), 0)["top_k"] == 0  # greedy
