"""RSFT: loss only on generated tokens, token normalisation, rejection, sync, resume."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import whalekit.weights.rsft as rsft
from whalekit.domains.base import Verdict
from whalekit.domains.toy import ToyDomain
from whalekit.harness import FinalAnswer, GenerationSettings, Harness
from whalekit.rollouts.budget import RolloutBudget
from whalekit.rollouts.engine import InProcessHarness
from whalekit.samplers.models import load_policy
from whalekit.types import Trajectory, Turn
from whalekit.weights.rsft import RSFTTrainer
from whalekit.weights.rsft_config import RSFTConfig
from whalekit.weights.rsft_loss import (
    IGNORE_INDEX,
    decoder_and_head,
    packed_training_sequences,
    token_normalised_loss,
    trained_token_count,
    training_sequences,
)


class EvenLengthDomain(ToyDomain):
    """Accepts a reply iff it has an even number of characters: about half are accepted."""

    def verify(self, task, answer):
        ok = answer is not None and len(answer) % 2 == 0
        return Verdict(ok, float(ok), {"format_valid": True})


class ShortReply(Harness):
    def generation_settings(self, state):
        return GenerationSettings(max_new_tokens=6)

    def parse(self, reply, state):
        return FinalAnswer(reply)


def _trainer(policy, **overrides):
    domain = EvenLengthDomain()
    tasks = domain.load_splits(8, 0, 0, seed=0).train
    config = RSFTConfig(batch_problems=4, samples_per_problem=4, learning_rate=5e-3, warmup_steps=1,
                        bf16_autocast=False, **overrides)
    return RSFTTrainer(policy, domain, tasks, config, RolloutBudget(10_000))


def test_loss_mask_covers_exactly_the_generated_tokens():
    traj = Trajectory("t", "toy", "h", 0, turns=[
        Turn(prompt_ids=[1, 2, 3], completion_ids=[4, 5], text="ab", finish_reason="eos", prefill=""),
        Turn(prompt_ids=[1, 2, 3, 4, 5, 6, 7], completion_ids=[8], text="c", finish_reason="eos"),
    ])
    sequences, dropped = training_sequences(traj, max_seq_len=100)
    assert dropped == 0
    assert sequences[0] == ([1, 2, 3, 4, 5], [IGNORE_INDEX] * 3 + [4, 5])
    assert sequences[1] == ([1, 2, 3, 4, 5, 6, 7, 8], [IGNORE_INDEX] * 7 + [8])
    # A turn longer than max_seq_len is dropped whole and counted, never silently cut.
    sequences, dropped = training_sequences(traj, max_seq_len=6)
    assert len(sequences) == 1 and dropped == 1


def test_a_turn_that_continues_the_previous_one_trains_inside_it_as_one_sequence():
    traj = Trajectory("t", "toy", "h", 0, turns=[
        Turn(prompt_ids=[1, 2, 3], completion_ids=[4, 5], text="ab", finish_reason="eos", prefill=""),
        Turn(prompt_ids=[1, 2, 3, 4, 5, 6, 7], completion_ids=[8], text="c", finish_reason="eos"),
    ])
    sequences, dropped = packed_training_sequences(traj, max_seq_len=100)
    assert dropped == 0
    # The authors' agent loop keeps the episode as one sequence with a response mask: the same.
    assert sequences == [([1, 2, 3, 4, 5, 6, 7, 8], [IGNORE_INDEX] * 3 + [4, 5] + [IGNORE_INDEX] * 2 + [8])]
    assert trained_token_count(sequences) == trained_token_count(training_sequences(traj, 100)[0]) == 3


def test_a_turn_whose_history_the_harness_rewrote_starts_its_own_sequence():
    traj = Trajectory("t", "toy", "h", 0, turns=[
        Turn(prompt_ids=[1, 2, 3], completion_ids=[4, 5], text="ab", finish_reason="eos", prefill=""),
        Turn(prompt_ids=[1, 2, 9, 6, 7], completion_ids=[8], text="c", finish_reason="eos"),  # turn 1 trimmed
        Turn(prompt_ids=[1, 2, 9, 6, 7, 8, 10], completion_ids=[11], text="d", finish_reason="eos"),
    ])
    sequences, dropped = packed_training_sequences(traj, max_seq_len=100)
    assert dropped == 0
    assert sequences == [([1, 2, 3, 4, 5], [IGNORE_INDEX] * 3 + [4, 5]),
                         ([1, 2, 9, 6, 7, 8, 10, 11], [IGNORE_INDEX] * 5 + [8, IGNORE_INDEX, 11])]
    # A turn over max_seq_len is still dropped whole and counted.
    sequences, dropped = packed_training_sequences(traj, max_seq_len=7)
    assert [ids for ids, _ in sequences] == [[1, 2, 3, 4, 5], [1, 2, 9, 6, 7, 8]] and dropped == 1


def _loss_and_gradients(model, sequences, **options):
    model.zero_grad(set_to_none=True)
    loss, tokens = token_normalised_loss(model, sequences, micro_batch=2, pad_id=0, **options)
    return loss, tokens, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_packed_turns_and_trained_positions_give_the_per_turn_full_logits_loss_and_gradients():
    policy = load_policy("tiny-random")
    model = policy.model.float()
    generator = torch.Generator().manual_seed(0)
    trajectories = []
    for index in range(3):  # three-turn episodes whose history is kept as sampled
        ids = torch.randint(10, 200, (60,), generator=generator).tolist()
        turns = [Turn(prompt_ids=ids[:10 + index], completion_ids=ids[10 + index:16], text="", finish_reason="eos"),
                 Turn(prompt_ids=ids[:30], completion_ids=ids[30:37], text="", finish_reason="eos"),
                 Turn(prompt_ids=ids[:50 - index], completion_ids=ids[50 - index:60], text="", finish_reason="eos")]
        trajectories.append(Trajectory(f"t{index}", "toy", "h", 0, turns=turns, correct=True, reward=1.0))
    per_turn = [s for t in trajectories for s in training_sequences(t, 100)[0]]
    packed = [s for t in trajectories for s in packed_training_sequences(t, 100)[0]]
    assert len(per_turn) == 9 and len(packed) == 3
    assert sum(len(ids) for ids, _ in packed) < 0.6 * sum(len(ids) for ids, _ in per_turn)
    assert decoder_and_head(model) is not None  # the tiny model is a llama: the projection is split off
    reference = _loss_and_gradients(model, per_turn, trained_positions_only=False)
    for sequences, only in ((per_turn, True), (packed, False), (packed, True)):
        loss, tokens, grads = _loss_and_gradients(model, sequences, trained_positions_only=only)
        assert tokens == reference[1]
        assert loss == pytest.approx(reference[0], rel=1e-5)
        assert grads.keys() == reference[2].keys()
        for name, grad in grads.items():  # equal up to float32 summation order
            assert (grad - reference[2][name]).norm() <= 1e-5 * reference[2][name].norm() + 1e-9, name


def test_a_model_whose_logits_are_not_the_plain_projection_gets_its_own_forward():
    class SoftCapped(torch.nn.Module):
        config = type("Config", (), {"model_type": "gemma2"})()  # soft-caps its logits

        def get_output_embeddings(self):
            return torch.nn.Linear(4, 4)

    assert decoder_and_head(SoftCapped()) is None

def test_token_normalised_loss_equals_a_hand_computation(tiny_policy):
    model = tiny_policy.model
    sequences = [([5, 6, 7, 8, 9], [IGNORE_INDEX] * 3 + [8, 9]),
                 ([10, 11, 12], [IGNORE_INDEX, 11, 12]),
                 ([3, 4, 5, 6, 7, 8, 9], [IGNORE_INDEX] * 6 + [9])]
    total, count = 0.0, 0
    with torch.no_grad():
        for ids, labels in sequences:
            logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
            for pos in range(1, len(ids)):
                if labels[pos] != IGNORE_INDEX:
                    total -= logprobs[pos - 1, labels[pos]].item()
                    count += 1
    with torch.no_grad():
        loss, tokens = token_normalised_loss(model, sequences, micro_batch=2, pad_id=0, backward=False)
    assert tokens == count == 5
    assert loss == pytest.approx(total / count, abs=1e-5)


def test_rejected_trajectories_never_reach_the_optimiser(tiny_policy, monkeypatch):
    seen = []
    original = rsft.token_normalised_loss

    def spy(model, sequences, *args, **kwargs):
        seen.extend(sequences)
        return original(model, sequences, *args, **kwargs)

    monkeypatch.setattr(rsft, "token_normalised_loss", spy)
    trainer = _trainer(load_policy("tiny-random"))
    record = trainer.step(InProcessHarness(ShortReply()))
    accepted = {tuple(t.turns[0].completion_ids) for t in trainer.last_trajectories if t.correct}
    rejected = {tuple(t.turns[0].completion_ids) for t in trainer.last_trajectories if not t.correct}
    assert 0 < record.accepted < record.sampled == 16
    assert len(seen) == record.accepted
    for _ids, labels in seen:
        generated = tuple(x for x in labels if x != IGNORE_INDEX)
        assert generated in accepted and generated not in rejected - accepted


def test_after_a_step_the_sampler_holds_the_trainers_weights_and_budget_is_charged():
    policy = load_policy("tiny-random")
    before = {k: v.clone() for k, v in policy.sampler.model.state_dict().items()}
    trainer = _trainer(policy)
    record = trainer.step(InProcessHarness(ShortReply()))
    assert record.loss is not None and record.step == 1
    merged = trainer.merged_state_dict()
    after = policy.sampler.model.state_dict()
    changed = [k for k in merged if not torch.equal(before[k], after[k])]
    assert changed, "the sync must change the sampler's weights"
    for k, v in merged.items():
        assert torch.allclose(after[k], v.to(after[k].dtype)), k
    assert policy.sampler.version == 1 and record.policy_version == 0
    assert trainer.budget.spent == 16 and trainer.budget.by_phase == {"rsft": 16}


def test_merged_weights_are_peft_s_own_merge_and_lora_layers_only_are_the_layers_it_changes():
    trainer = _trainer(load_policy("tiny-random"))
    with torch.no_grad():
        for name, parameter in trainer.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.1)  # B starts at zero: give the adapter a delta
    merged = trainer.merged_state_dict()
    changed_only = trainer.merged_state_dict(lora_layers_only=True)
    reference = trainer.model.merge_and_unload(safe_merge=True).state_dict()
    assert set(merged) == set(reference)
    assert all(torch.allclose(merged[k], reference[k], atol=1e-6) for k in reference)
    assert changed_only and set(changed_only) < set(merged) and "model.embed_tokens.weight" not in changed_only
    assert all(torch.equal(changed_only[k], merged[k]) for k in changed_only)


def test_fractional_epochs_walk_on_from_where_the_last_call_stopped():
    trainer = _trainer(load_policy("tiny-random"))
    harness = InProcessHarness(ShortReply())
    first = trainer.train(harness, epochs=0.5)  # 4 of 8 problems
    second = trainer.train(harness, epochs=0.5)
    assert [r.epoch_position for r in first + second] == [0.5, 1.0]
    assert trainer.state.problems_seen == 8


def test_a_weight_stage_takes_what_is_left_of_its_epochs_a_batch_at_most_and_what_the_budget_pays_for():
    trainer = _trainer(load_policy("tiny-random"))  # 8 training problems, batches of 4, 4 samples each
    assert trainer.stage_batch_problems(0.75, done=0) == 4  # 6 problems: a whole batch first
    assert trainer.stage_batch_problems(0.75, done=4) == 2  # then the 2 left
    assert trainer.stage_batch_problems(0.75, done=6) <= 0  # the stage's epochs are done
    assert trainer.stage_batch_problems(None, done=1000) == 4  # adaptive: always a whole batch
    trainer.budget = RolloutBudget(11)  # pays for 2 problems of 4 samples
    assert trainer.stage_batch_problems(0.75, done=0) == 2 and trainer.stage_batch_problems(None, done=0) == 2
    trainer.budget = RolloutBudget(3)
    assert trainer.stage_batch_problems(None, done=0) == 0


def test_train_is_a_stage_of_the_weight_phase_s_batches():
    trainer = _trainer(load_policy("tiny-random"))
    records = trainer.train(InProcessHarness(ShortReply()), epochs=0.75)  # the batches above: 4 then 2 problems
    assert [r.sampled for r in records] == [16, 8] and trainer.state.problems_seen == 6


def test_resume_from_checkpoint_reproduces_the_uninterrupted_run(tmp_path):
    harness = InProcessHarness(ShortReply())
    straight = _trainer(load_policy("tiny-random"))
    straight.step(harness)
    straight.step(harness)

    first = _trainer(load_policy("tiny-random"))
    first.step(harness)
    first.save_checkpoint(tmp_path / "ckpt")
    resumed = _trainer(load_policy("tiny-random"))
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert [t.id for t in resumed.next_batch_tasks()] == [t.id for t in first.next_batch_tasks()]
    resumed.step(harness)
    a, b = straight.merged_state_dict(), resumed.merged_state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert resumed.state.rewards == straight.state.rewards


def test_full_fine_tuning_also_syncs():
    policy = load_policy("tiny-random")
    trainer = _trainer(policy, lora=False)
    trainer.step(InProcessHarness(ShortReply()))
    merged = trainer.merged_state_dict()
    after = policy.sampler.model.state_dict()
    assert all(torch.equal(after[k], merged[k]) for k in after if k in merged)


@pytest.mark.parametrize("minibatch, data_parallel", [(1, 1), (3, 1), (0, 1), (1, 3), (2, 2)])
def test_one_optimiser_step_per_global_mini_batch_of_accepted_trajectories(minibatch, data_parallel, monkeypatch):
    """The authors' online RSFT: each of dp ranks splits its share of the accepted batch into
    mini-batches of 64, so ceil(accepted / (64 x dp)) optimiser steps per sampled batch (here
    `minibatch` x `data_parallel` trajectories per step); 0 is one step per sampled batch."""
    calls = []
    original = rsft.token_normalised_loss

    def spy(model, sequences, *args, **kwargs):
        calls.append(len(sequences))
        return original(model, sequences, *args, **kwargs)

    monkeypatch.setattr(rsft, "token_normalised_loss", spy)
    policy = load_policy("tiny-random")
    trainer = _trainer(policy, minibatch_trajectories=minibatch, data_parallel=data_parallel)
    record = trainer.step(InProcessHarness(ShortReply()))
    assert 1 < record.accepted < record.sampled  # single-turn episodes: one sequence per trajectory
    steps = math.ceil(record.accepted / (minibatch * data_parallel)) if minibatch else 1
    assert record.step == trainer.state.step == len(calls) == steps
    assert sum(calls) == record.accepted and policy.sampler.version == 1  # one sync after all the steps
    assert (RSFTConfig().minibatch_trajectories, RSFTConfig().data_parallel) == (64, 1)


@pytest.mark.parametrize("domain, data_parallel", [("searchqa", 6), ("math", 8), ("chess", 4)])
def test_the_paper_preset_steps_once_per_64_accepted_trajectories_per_rank(domain, data_parallel, tmp_path,
                                                                            monkeypatch):
    """paper: the authors' launchers train on 6 (search QA), 8 (math) and 4 (chess) GPUs, so one
    global step covers 64 x dp accepted trajectories; cpu keeps one rank (64 x 1 would be 4 x 1)."""
    from whalekit.presets import data_files, load_preset
    from whalekit.run.driver import resolve_config

    monkeypatch.setenv("WHALEKIT_DATA", str(tmp_path))
    for section in load_preset("paper")["domains"].values():
        for name in data_files(section.get("split_options", {})):
            Path(name).parent.mkdir(parents=True, exist_ok=True)
            Path(name).write_text("")
    paper = resolve_config("paper", domain, "whale").rsft
    assert paper.minibatch_trajectories * paper.data_parallel == 64 * data_parallel
    cpu = resolve_config("cpu", domain, "whale").rsft
    assert cpu.minibatch_trajectories * cpu.data_parallel == 4


# Both sides run in float32 on the same ids; merging B·A into W changes only the order of the
# sums and the kernels (~1e-6 with AVX2, ~1e-4 on AVX-512 / AMX CPUs). A sampler left one sync
# behind is off by the step's whole effect, so a correct sync must be a small fraction of that
# stale gap, whatever the CPU's kernels: no absolute tolerance to outgrow.
STALE_FRACTION = 0.05


def _assert_synced(after, peft, before) -> None:
    sync_error = (after - peft).abs().max().item()
    stale_gap = (before - peft).abs().max().item()
    assert stale_gap > 0, "the step must move the outputs, or the comparison proves nothing"
    assert sync_error <= STALE_FRACTION * stale_gap, (
        f"synced sampler off by {sync_error:.3g}, a stale one by {stale_gap:.3g} "
        f"(ratio {sync_error / stale_gap:.3g} > {STALE_FRACTION})")


def _probe_ids(tokenizer) -> list[int]:
    return tokenizer.apply_chat_template([{"role": "user", "content": "What is 17 + 25? Answer briefly."}],
                                         add_generation_prompt=True, tokenize=True, return_dict=False)


def _peft_logits(trainer, ids):
    trainer.model.eval()
    with torch.no_grad():
        return trainer.model(input_ids=torch.tensor([ids])).logits[0].float()


def test_after_a_lora_step_the_transformers_sampler_computes_the_peft_models_own_logits():
    from peft import PeftModel

    policy = load_policy("tiny-random")
    ids = _probe_ids(policy.tokenizer)
    sampler_model = policy.sampler.model
    with torch.no_grad():
        before = sampler_model(input_ids=torch.tensor([ids])).logits[0].float()
    trainer = _trainer(policy)
    assert isinstance(trainer.model, PeftModel)
    shared = {p.data_ptr() for p in sampler_model.parameters()} & {p.data_ptr() for p in trainer.model.parameters()}
    assert not shared, "the sampler must hold its own copy, or the comparison proves nothing"
    record = trainer.step(InProcessHarness(ShortReply()))
    assert record.loss is not None and policy.sampler.version == 1
    peft = _peft_logits(trainer, ids)
    with torch.no_grad():
        after = sampler_model(input_ids=torch.tensor([ids])).logits[0].float()
    _assert_synced(after, peft, before)


@pytest.mark.slow
def test_after_a_lora_step_the_vllm_sampler_computes_the_peft_models_own_log_probabilities(require_vllm):
    """vLLM returns log-probabilities, not logits: compare each prompt token's log-probability
    under the synced engine with log_softmax of the PEFT model's logits."""
    from vllm import SamplingParams as VLLMParams
    from vllm.inputs import TokensPrompt

    policy = load_policy("tiny-random", sampler="vllm", vllm_options={"dtype": "float32"})
    try:
        ids = _probe_ids(policy.tokenizer)

        def engine_logprobs():
            [out] = policy.sampler.llm.generate([TokensPrompt(prompt_token_ids=ids)],
                                                VLLMParams(max_tokens=1, temperature=0.0, prompt_logprobs=0),
                                                use_tqdm=False)
            return torch.tensor([entry[token].logprob for entry, token in zip(out.prompt_logprobs[1:], ids[1:])])

        before = engine_logprobs()
        trainer = _trainer(policy)
        record = trainer.step(InProcessHarness(ShortReply()))
        assert record.loss is not None and policy.sampler.version == 1
        peft = torch.log_softmax(_peft_logits(trainer, ids), dim=-1)[torch.arange(len(ids) - 1), ids[1:]]
        after = engine_logprobs()
        _assert_synced(after, peft, before)
    finally:
        policy.sampler.close()
