"""Model specs: the cached SmolLM2 conversion, the tiny model, and clear errors."""

from __future__ import annotations

import pytest

from whalekit.samplers.models import ModelSpecError, resolve_model_dir


@pytest.mark.parametrize("spec", ["", "./no/such/model/dir", "/definitely/not/here"])
def test_bad_model_spec_gives_a_clear_error(spec):
    with pytest.raises(ModelSpecError) as err:
        resolve_model_dir(spec)
    assert spec == "" or spec in str(err.value)


def test_unreachable_hub_id_says_how_to_use_a_local_copy(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelSpecError, match="local"):
        resolve_model_dir("some-org/some-model-that-is-not-cached")


def test_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(ModelSpecError, match="config.json"):
        resolve_model_dir(str(tmp_path))


def test_tiny_random_is_small_llama_with_smollm2_tokenizer(tiny_policy):
    n_params = sum(p.numel() for p in tiny_policy.model.parameters())
    assert 1e6 < n_params < 2e7
    assert tiny_policy.model.config.model_type == "llama"
    assert tiny_policy.tokenizer.eos_token == "<|im_end|>"


@pytest.mark.slow
def test_smollm2_loads_from_the_wheel_and_answers(smollm_policy):
    from whalekit.samplers import GenerationRequest, SamplingParams

    assert sum(p.numel() for p in smollm_policy.model.parameters()) == 134_515_008
    ids = smollm_policy.tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                                      add_generation_prompt=True, tokenize=True, return_dict=False)
    [c] = smollm_policy.sampler.generate([GenerationRequest(ids, 20)], SamplingParams(temperature=0.0))
    assert "Paris" in c.text
