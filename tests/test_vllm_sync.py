"""Weight sync into vLLM through shared memory: after a sync, the engine samples what the
trainer's weights would, for a full state dict and for a LoRA partial update alike.

vLLM runs are marked slow (the engine takes ~20 s to start on CPU) and skip with the
reason when vllm is not importable or WHALEKIT_NO_VLLM=1 is set."""

from __future__ import annotations

import pytest
from greedy_reference import argmax_continuations

from whalekit.samplers.base import GenerationRequest, SamplingParams

pytestmark = pytest.mark.slow
GREEDY = SamplingParams(temperature=0.0)


def _tiny_vllm_policy(**options):
    from whalekit.samplers.models import load_policy

    return load_policy("tiny-random", sampler="vllm", vllm_options={"dtype": "float32", **options})


@pytest.fixture(scope="module")
def vllm_policy(require_vllm):
    policy = _tiny_vllm_policy()
    yield policy
    policy.sampler.close()


def _requests(tokenizer) -> list[GenerationRequest]:
    texts = ["What is 2 + 2?", "Name a colour.", "Write a haiku about the sea."]
    return [GenerationRequest(tokenizer.apply_chat_template([{"role": "user", "content": t}],
                                                            add_generation_prompt=True, tokenize=True,
                                                            return_dict=False), 10) for t in texts]


def _trainer(policy, lora: bool):
    from whalekit.domains.base import get_domain
    from whalekit.rollouts.budget import RolloutBudget
    from whalekit.weights.rsft import RSFTTrainer
    from whalekit.weights.rsft_config import RSFTConfig

    domain = get_domain("toy")
    tasks = domain.load_splits(n_train=4, n_search=0, n_test=0, seed=0).train
    config = RSFTConfig(lora=lora, bf16_autocast=False, train_dtype="float32")
    return RSFTTrainer(policy, domain, tasks, config, RolloutBudget(16))


def _perturb(model, scale: float, seed: int, only_lora: bool) -> None:
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            # Embeddings included: the tiny model ties lm_head to them, which the sync must repack too.
            if parameter.ndim == 2 and (not only_lora or "lora_B" in name):
                parameter.add_(scale * torch.randn(parameter.shape, generator=generator))


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_after_a_sync_greedy_decoding_follows_the_trainers_new_weights(vllm_policy, lora):
    sampler = vllm_policy.sampler
    requests = _requests(sampler.tokenizer)
    before = [c.token_ids for c in sampler.generate(requests, GREEDY)]
    trainer = _trainer(vllm_policy, lora)
    version = sampler.version
    try:
        for step in range(2):  # the first sync lays out the buffer, the second (LoRA: a partial one) reuses it
            _perturb(trainer.model, 0.5 if lora else 0.3, seed=step, only_lora=lora)
            trainer.sync_sampler()
            completions = sampler.generate(requests, GREEDY)
            trainer.model.eval()
            assert [c.token_ids for c in completions] == argmax_continuations(trainer.model, requests, completions)
        assert [c.token_ids for c in completions] != before, "new weights must change the outputs"
        assert sampler.version == version + 2
    finally:  # the module's engine goes back to the base model for the next test
        from whalekit.samplers.models import load_model

        sampler.load_weights(load_model(vllm_policy.path).state_dict())
    assert [c.token_ids for c in sampler.generate(requests, GREEDY)] == before


def test_a_partial_update_keeps_the_other_weights_and_completes_fused_layers(vllm_policy):
    """Only layer 0's q_proj changes; vLLM fuses it with k and v, which keep their values."""
    import torch

    from whalekit.samplers.models import load_model

    sampler = vllm_policy.sampler
    reference = load_model(vllm_policy.path)
    requests = _requests(sampler.tokenizer)
    sampler.load_weights(reference.state_dict())
    name = next(n for n in reference.state_dict() if "layers.0." in n and "q_proj.weight" in n)
    with torch.no_grad():
        reference.get_parameter(name).add_(0.5 * torch.randn_like(reference.get_parameter(name)))
    try:
        sampler.load_changed_weights({name: reference.state_dict()[name]})
        completions = sampler.generate(requests, GREEDY)
        assert [c.token_ids for c in completions] == argmax_continuations(reference, requests, completions)
    finally:
        sampler.load_weights(load_model(vllm_policy.path).state_dict())


@pytest.fixture(scope="module")
def vllm_lora_policy(require_vllm):
    policy = _tiny_vllm_policy(lora_rank=16)
    yield policy
    policy.sampler.close()


def test_with_vllm_lora_support_the_trainer_syncs_its_adapter_not_merged_weights(vllm_lora_policy, monkeypatch):
    """vllm_options.lora_rank: the trainer hands vLLM its PEFT adapter (a few MB, applied at
    run time) and greedy decoding then follows the PEFT model; no merged weights are sent."""
    sampler = vllm_lora_policy.sampler
    requests = _requests(sampler.tokenizer)
    before = [c.token_ids for c in sampler.generate(requests, GREEDY)]
    trainer = _trainer(vllm_lora_policy, lora=True)
    merged = []
    monkeypatch.setattr(type(sampler), "load_changed_weights", lambda self, sd: merged.append(sd))
    folders = []
    for step in range(2):  # the second adapter replaces the first
        _perturb(trainer.model, 0.5, seed=step, only_lora=True)
        trainer.sync_sampler()
        folders.append(trainer._adapter_dir)
        completions = sampler.generate(requests, GREEDY)
        trainer.model.eval()
        assert [c.token_ids for c in completions] == argmax_continuations(trainer.model, requests, completions)
        assert set(sampler.llm.llm_engine.list_loras()) == {sampler.version}  # only the current adapter is held
    assert merged == [], "no merged weights cross over when the engine applies adapters"
    assert [c.token_ids for c in completions] != before
    assert not folders[0].exists() and (folders[1] / "adapter_config.json").exists()


def test_an_adapter_is_refused_once_merged_weights_replaced_the_base(vllm_lora_policy):
    from whalekit.samplers.models import load_model

    sampler = vllm_lora_policy.sampler
    sampler.load_weights(load_model(vllm_lora_policy.path).state_dict())
    assert sampler.base_modified and sampler._lora is None
    with pytest.raises(RuntimeError, match="merged weights were loaded"):
        sampler.load_lora_adapter("/nonexistent")
    trainer = _trainer(vllm_lora_policy, lora=True)
    assert not trainer._syncs_adapters()  # the trainer falls back to merged syncs
