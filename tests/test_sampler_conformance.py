"""Every sampler keeps the same contract: the exact sampled token ids, stop strings, token
limits, batching that changes nothing, and weight sync that changes the outputs and can
be undone exactly. The same tests run over the transformers and the vLLM sampler on the
tiny random model, with one engine of each kind per test session.

vLLM runs are marked slow (the engine takes ~20 s to start on CPU) and skip with the
reason when vllm is not importable or WHALEKIT_NO_VLLM=1 is set.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fakes.harnesses import CalculatorTwice

from whalekit.samplers import GenerationRequest, SamplingParams

GREEDY = SamplingParams(temperature=0.0)
SAMPLER_KINDS = ["hf", pytest.param("vllm", marks=pytest.mark.slow)]


@pytest.fixture(scope="session")
def _engines():
    """One sampler per kind for the whole session, created on first use: a vLLM engine
    takes many seconds to start."""
    engines: dict[str, object] = {}
    yield engines
    for sampler in engines.values():
        sampler.close()


@pytest.fixture(params=SAMPLER_KINDS)
def sampler(request, _engines):
    kind = request.param
    if kind == "vllm":
        request.getfixturevalue("require_vllm")
    if kind not in _engines:
        from whalekit.samplers.models import load_policy

        # float32 on both sides, so greedy decoding can be compared token for token.
        policy = load_policy("tiny-random", sampler=kind, **({"vllm_options": {"dtype": "float32"}}
                                                            if kind == "vllm" else {}))
        _engines[kind] = policy.sampler
    return _engines[kind]


@pytest.fixture(scope="session")
def reference_model():
    from whalekit.samplers.models import load_model, resolve_model_dir

    return load_model(resolve_model_dir("tiny-random"))


def _prompts(tokenizer, n=6):
    texts = ["What is 2 + 2?", "Name a colour.", "Hello there, how are you doing today my friend?", "1 2 3",
             "Write a haiku about the sea and the long long night.", "ok"]
    return [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                          tokenize=True, return_dict=False) for t in texts[:n]]


def _greedy_argmax(model, prompt: list[int], generated: list[int]) -> list[int]:
    """What greedy decoding must produce: the argmax after each prefix, teacher-forced."""
    import torch

    with torch.inference_mode():
        logits = model(torch.tensor([prompt + generated])).logits[0]
    return logits[len(prompt) - 1: len(prompt) + len(generated) - 1].argmax(-1).tolist()


# -- exact token ids -------------------------------------------------------------------
def test_greedy_ids_are_the_models_argmax_continuation(sampler, reference_model):
    prompts = _prompts(sampler.tokenizer, 3)
    completions = sampler.generate([GenerationRequest(p, 16) for p in prompts], GREEDY)
    for prompt, completion in zip(prompts, completions):
        assert len(completion.token_ids) == 16
        assert completion.token_ids == _greedy_argmax(reference_model, prompt, completion.token_ids)


def test_sampled_ids_decode_to_the_returned_text(sampler):
    prompt = _prompts(sampler.tokenizer, 1)[0]
    completions = sampler.generate([GenerationRequest(prompt, 20, ["."])] * 8, SamplingParams(temperature=1.0))
    for c in completions:
        assert c.text == sampler.tokenizer.decode(c.token_ids, skip_special_tokens=True)
        assert c.finish_reason in {"eos", "stop", "length"}
    assert len({tuple(c.token_ids) for c in completions}) > 1, "temperature 1 must not give 8 identical samples"


# -- stop conditions -------------------------------------------------------------------
def test_max_new_tokens_ends_a_turn_with_finish_reason_length(sampler):
    [completion] = sampler.generate([GenerationRequest(_prompts(sampler.tokenizer, 1)[0], 5)], GREEDY)
    assert len(completion.token_ids) == 5
    assert completion.finish_reason == "length"


def test_stop_string_ends_a_turn_at_the_token_that_completes_it(sampler):
    tokenizer = sampler.tokenizer
    prompt = _prompts(tokenizer, 1)[0]
    [free] = sampler.generate([GenerationRequest(prompt, 24)], GREEDY)
    stop = tokenizer.decode(free.token_ids[4:6]).strip() or tokenizer.decode(free.token_ids[4:6])
    [stopped] = sampler.generate([GenerationRequest(prompt, 24, [stop])], GREEDY)
    assert stopped.finish_reason == "stop"
    assert stop in stopped.text
    assert stopped.token_ids == free.token_ids[: len(stopped.token_ids)]
    assert len(stopped.token_ids) < len(free.token_ids)
    assert stop not in tokenizer.decode(stopped.token_ids[:-1], skip_special_tokens=True)


# -- constrained answers ---------------------------------------------------------------
CHOICES = ["Nf3", "e4", "Qh7#", "O-O", "exd5"]


def test_choices_make_the_reply_exactly_one_of_them_then_end_the_turn(sampler):
    prompts = _prompts(sampler.tokenizer, 2)
    requests = [GenerationRequest(prompts[i % 2], 12, seed=i, choices=CHOICES) for i in range(12)]
    for params in (GREEDY, SamplingParams(temperature=1.0)):
        for completion in sampler.generate(requests, params):
            assert completion.text in CHOICES
            assert completion.finish_reason == "eos"
            assert completion.text == sampler.tokenizer.decode(completion.token_ids, skip_special_tokens=True)


def test_a_constrained_row_leaves_the_other_rows_of_its_batch_alone(sampler):
    prompts = _prompts(sampler.tokenizer, 2)
    free = GenerationRequest(prompts[0], 10)
    [alone] = sampler.generate([free], GREEDY)
    mixed = sampler.generate([GenerationRequest(prompts[1], 10, choices=CHOICES), free], GREEDY)
    assert mixed[0].text in CHOICES
    assert mixed[1].token_ids == alone.token_ids


def test_choices_must_be_non_empty_strings():
    with pytest.raises(ValueError, match="choices"):
        GenerationRequest([1, 2], 4, choices=[])
    with pytest.raises(ValueError, match="choices"):
        GenerationRequest([1, 2], 4, choices=["a", ""])


# -- batching --------------------------------------------------------------------------
def test_batched_greedy_equals_one_at_a_time_and_keeps_request_order(sampler):
    prompts = _prompts(sampler.tokenizer, 4)
    # Different limits and stop strings per row: each result must belong to its own request.
    requests = [GenerationRequest(p, 6 + i, ["\n"] if i % 2 else []) for i, p in enumerate(prompts)]
    batched = sampler.generate(requests, GREEDY)
    single = [sampler.generate([r], GREEDY)[0] for r in requests]
    assert [c.token_ids for c in batched] == [c.token_ids for c in single]
    assert [c.finish_reason for c in batched] == [c.finish_reason for c in single]
    for request, completion in zip(requests, batched):
        assert len(completion.token_ids) <= request.max_new_tokens
        if completion.finish_reason == "length":
            assert len(completion.token_ids) == request.max_new_tokens


def test_empty_batch_gives_no_completions(sampler):
    assert sampler.generate([], GREEDY) == []


# -- weight sync -----------------------------------------------------------------------
def test_weight_sync_changes_outputs_and_reloading_the_originals_restores_them(sampler, reference_model):
    import torch

    prompts = _prompts(sampler.tokenizer, 3)
    requests = [GenerationRequest(p, 12) for p in prompts]
    original = {k: v.detach().clone() for k, v in reference_model.state_dict().items()}
    torch.manual_seed(1)
    perturbed = {k: v + 0.5 * torch.randn_like(v) if v.ndim == 2 else v for k, v in original.items()}
    version = sampler.version
    before = sampler.generate(requests, GREEDY)
    try:
        sampler.load_weights(perturbed)
        changed = sampler.generate(requests, GREEDY)
    finally:
        sampler.load_weights(original)
    restored = sampler.generate(requests, GREEDY)
    assert [c.token_ids for c in changed] != [c.token_ids for c in before], "new weights must change the outputs"
    assert [c.token_ids for c in restored] == [c.token_ids for c in before]
    assert sampler.version == version + 2


def test_weight_sync_rejects_a_state_dict_missing_tensors(sampler, reference_model):
    partial = {k: v for k, v in reference_model.state_dict().items() if "layers.1." not in k}
    version = sampler.version
    with pytest.raises(KeyError, match="lacks"):
        sampler.load_weights(partial)
    assert sampler.version == version


def test_a_sync_in_buckets_of_whole_layers_is_one_sync_with_the_whole_state_dicts_outputs(sampler, reference_model):
    """What a sharded trainer sends (TrainerRanks.state_dict_buckets): the weights a bucket of
    layers at a time, several buckets, one version; a layer that never arrives is an error."""
    import torch

    from whalekit.weights.distributed.sharded_checkpoint import bucket_plan

    requests = [GenerationRequest(p, 12) for p in _prompts(sampler.tokenizer, 3)]
    original = {k: v.detach().clone() for k, v in reference_model.state_dict().items()}
    torch.manual_seed(2)
    perturbed = {k: v + 0.5 * torch.randn_like(v) if v.ndim == 2 else v for k, v in original.items()}
    # the tiny model ties its head to its embeddings: one tensor, which the buckets send once
    assert reference_model.lm_head.weight is reference_model.model.embed_tokens.weight
    perturbed["lm_head.weight"] = perturbed["model.embed_tokens.weight"]
    layer = sum(v.numel() * v.element_size() for k, v in original.items() if ".layers.0." in k)
    plan = bucket_plan(reference_model, layer)
    assert len(plan) >= 3, "the embeddings and each decoder layer apart"
    try:
        sampler.load_weights(perturbed)
        whole = sampler.generate(requests, GREEDY)
        sampler.load_weights(original)
        version = sampler.version
        sampler.load_weight_buckets({n: perturbed[n] for n in names} for names in plan)
        assert sampler.version == version + 1
        assert [c.token_ids for c in sampler.generate(requests, GREEDY)] == [c.token_ids for c in whole]
        with pytest.raises(KeyError, match="lacked"):
            sampler.load_weight_buckets({n: original[n] for n in names} for names in plan
                                        if not any(".layers.1." in n for n in names))
    finally:
        sampler.load_weights(original)


# -- the full multi-turn engine --------------------------------------------------------
def test_rollout_through_the_engine_records_ids_that_decode_to_the_turn_text(sampler):
    from whalekit.domains.base import get_domain
    from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, rollout

    domain = get_domain("toy")
    tasks = domain.load_splits(4, 2, 2, seed=0).train
    harness = InProcessHarness(domain.initial_harness_source())
    trajectories = rollout(domain, [Episode(t, harness, i) for t in tasks for i in range(2)], sampler,
                           RolloutConfig(seed=3, progress=False))
    assert len(trajectories) == 8
    for traj in trajectories:
        assert traj.turns
        for turn in traj.turns:
            assert sampler.tokenizer.decode(turn.completion_ids, skip_special_tokens=True) == turn.text


# -- light checks, no engine -----------------------------------------------------------
@pytest.mark.parametrize("finish, stop_reason, expected", [
    ("length", None, "length"), ("stop", None, "eos"), ("stop", 2, "eos"), ("stop", "\n", "stop")])
def test_vllm_finish_reasons_map_to_the_samplers_vocabulary(tiny_policy, finish, stop_reason, expected):
    from whalekit.samplers.vllm import VLLMSampler

    fake = SimpleNamespace(tokenizer=tiny_policy.tokenizer)
    output = SimpleNamespace(token_ids=[28, 29], finish_reason=finish, stop_reason=stop_reason)
    completion = VLLMSampler._completion(fake, output)
    assert completion.finish_reason == expected
    assert completion.token_ids == [28, 29]
    assert completion.text == tiny_policy.tokenizer.decode([28, 29], skip_special_tokens=True)


def test_auto_sampler_falls_back_to_transformers_when_vllm_is_opted_out(monkeypatch):
    from whalekit.samplers import HFSampler
    from whalekit.samplers.models import load_policy

    monkeypatch.setenv("WHALEKIT_NO_VLLM", "1")
    assert isinstance(load_policy("tiny-random", sampler="auto").sampler, HFSampler)


def test_unknown_sampler_names_the_choices():
    from whalekit.samplers.models import ModelSpecError, load_policy

    with pytest.raises(ModelSpecError, match="'hf'.*'vllm'.*'auto'"):
        load_policy("tiny-random", sampler="tgi")


# -- continuous batching (samplers with submit/poll: vLLM) ----------------------------------
def _continuous_or_skip(sampler):
    if not sampler.continuous:
        pytest.skip(f"{type(sampler).__name__} samples in lock-step only (no submit/poll)")


def test_submitted_requests_finish_as_generate_would_sample_them(sampler):
    _continuous_or_skip(sampler)
    prompts = _prompts(sampler.tokenizer, 4)
    requests = [GenerationRequest(prompts[0], 9), GenerationRequest(prompts[1], 14, ["\n"]),
                GenerationRequest(prompts[2], 12, choices=CHOICES), GenerationRequest(prompts[3], 5)]
    expected = sampler.generate(requests, GREEDY)
    for i, request in enumerate(requests[:2]):
        sampler.submit(f"k{i}", request, GREEDY)
    done = dict(sampler.poll())
    for i, request in enumerate(requests[2:], start=2):  # join while the first two are decoding
        sampler.submit(f"k{i}", request, GREEDY)
    while len(done) < len(requests):
        done.update(sampler.poll())
    assert sampler.poll() == []
    for i, completion in enumerate(expected):
        assert done[f"k{i}"].token_ids == completion.token_ids
        assert done[f"k{i}"].finish_reason == completion.finish_reason
        assert done[f"k{i}"].text == completion.text
    assert done["k2"].text in CHOICES


def test_continuous_and_lockstep_rollouts_record_the_same_greedy_trajectories(sampler):
    from whalekit.domains.base import get_domain
    from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, rollout

    _continuous_or_skip(sampler)

    domain = get_domain("toy")
    tasks = domain.load_splits(5, 1, 1, seed=0).train
    episodes = [Episode(t, InProcessHarness(CalculatorTwice())) for t in tasks]
    greedy = SamplingParams(temperature=0.0)
    runs = {s: rollout(domain, episodes, sampler, RolloutConfig(sampling=greedy, progress=False, scheduling=s))
            for s in ("lockstep", "continuous")}
    for a, b in zip(runs["lockstep"], runs["continuous"]):
        assert len(a.turns) == 3 and a.error is None
        assert [(t.prompt_ids, t.completion_ids, t.finish_reason) for t in a.turns] == \
               [(t.prompt_ids, t.completion_ids, t.finish_reason) for t in b.turns]
        assert a.messages == b.messages
