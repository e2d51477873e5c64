"""RSFT's memory, bounded by design and given back (issue 52).

* Gradient checkpointing (RSFTConfig.gradient_checkpointing, on by default) keeps one input
  per decoder layer instead of all its activations, and changes no number: losses and
  gradients are bit-identical with and without it, in float32 and under bf16 autocast.
* No (B, 1, L, L) tensor is kept per layer: with checkpointing, attention's mask is made
  again in backward; with `padding_mask=False` none is made at all.
* `micro_batch_tokens` caps a forward pass's padded tokens as well as its sequences.
* `release_freed_memory` gives the heap that training and evaluation freed back to the
  operating system; a smoke run's driver does not grow from cycle to cycle.

Measured on a random model with SmolLM2-135M's widths and two layers (tests/smollm2_shaped.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from smollm2_shaped import long_sequences, loss_and_gradients, saved_activations, smollm2_shaped, with_lora

from whalekit.domains.toy import ToyDomain
from whalekit.infra.memory import release_freed_memory, rss_anon_mib
from whalekit.rollouts.budget import RolloutBudget
from whalekit.samplers.models import load_model
from whalekit.types import Trajectory, Turn
from whalekit.weights.rsft import RSFTTrainer
from whalekit.weights.rsft_config import RSFTConfig
from whalekit.weights.rsft_loss import micro_batch_indices, padded_micro_batches

# A layer's input with checkpointing: SmolLM2's hidden size x 4 bytes (float32 residual
# stream, also under autocast) = 2,304 bytes a token; the final norm's input and output add
# 2 x 2,304 / 2 layers on this two-layer model. Without checkpointing a layer keeps
# 18-30 KB a token (bf16 autocast / float32) plus a float copy of the (B, 1, L, L) mask.
CHECKPOINTED_BYTES_PER_TOKEN_PER_LAYER = 4096
UNCHECKPOINTED_AT_LEAST = 16384


# --- what a layer keeps -----------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_layers():
    return {checkpointing: with_lora(smollm2_shaped(layers=2, checkpointing=checkpointing))
            for checkpointing in (False, True)}


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
def test_with_both_options_a_layer_keeps_under_4_kib_a_token_and_no_l_by_l_tensor(smollm2_layers, autocast):
    sequences = long_sequences(4, 480, 520)  # right-padded to the longest
    kept = saved_activations(smollm2_layers[True], sequences, autocast, padding_mask=False)
    assert kept.bytes_per_token_per_layer < CHECKPOINTED_BYTES_PER_TOKEN_PER_LAYER
    assert kept.square == []


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
def test_checkpointing_alone_keeps_no_per_layer_mask(smollm2_layers, autocast):
    """The padding mask stays (the default: bit-identical to the records), but attention's
    float copy of it is made again in backward, not kept per layer. What checkpointing holds
    besides the saved inputs is the one boolean (B, 1, L, L) mask all layers share, B x L^2
    bytes in all (its closure keeps it, which saved_tensors_hooks does not see)."""
    kept = saved_activations(smollm2_layers[True], long_sequences(4, 480, 520), autocast)
    assert kept.bytes_per_token_per_layer < CHECKPOINTED_BYTES_PER_TOKEN_PER_LAYER
    assert kept.square == []


def test_without_checkpointing_every_layer_keeps_its_activations_and_its_own_mask(smollm2_layers):
    """What the options remove (the measurement sees it): each layer's activations, and a
    float (B, 1, L, L) copy of the padding mask per layer."""
    sequences = long_sequences(4, 480, 520)
    width = max(len(ids) for ids, _ in sequences)
    kept = saved_activations(smollm2_layers[False], sequences)
    assert kept.bytes_per_token_per_layer > UNCHECKPOINTED_AT_LEAST
    assert kept.square == [((4, 1, width, width), torch.float32)] * 2  # one per layer
    assert saved_activations(smollm2_layers[False], sequences, padding_mask=False).square == []


# --- the same numbers -----------------------------------------------------------------------


def _equal(a, b):
    assert a[0] == b[0], "losses differ"
    assert a[1].keys() == b[1].keys() and a[1]
    assert [name for name in a[1] if not torch.equal(a[1][name], b[1][name])] == []


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
@pytest.mark.parametrize("micro_batch", [8, 3])
def test_checkpointing_gives_bit_identical_losses_and_gradients(smollm2_layers, autocast, micro_batch):
    sequences = long_sequences(6, 100, 400)
    _equal(loss_and_gradients(smollm2_layers[False], sequences, micro_batch, autocast),
           loss_and_gradients(smollm2_layers[True], sequences, micro_batch, autocast))


def test_dropping_the_padding_mask_keeps_the_loss_and_the_gradients_up_to_rounding(smollm2_layers):
    """Exact for the real positions in exact arithmetic (right padding, causal attention); in
    floats SDPA takes its causal kernel instead of the masked one: measured relative gradient
    differences 4e-7 in float32 (7e-3 of the largest under bf16 autocast), so it is an option,
    off by default."""
    model = smollm2_layers[False]
    sequences = long_sequences(6, 100, 400)
    loss, grads = loss_and_gradients(model, sequences)
    loss_unmasked, grads_unmasked = loss_and_gradients(model, sequences, padding_mask=False)
    assert loss_unmasked == pytest.approx(loss, rel=1e-6)
    for name, grad in grads.items():
        assert torch.allclose(grads_unmasked[name], grad, rtol=0, atol=1e-5 * grad.abs().max().item()), name


def _trajectory(index, prompt, completion):
    ids = list(range(100 + index, 100 + index + prompt))
    turn = Turn(prompt_ids=ids, completion_ids=list(range(7, 7 + completion)), text="", finish_reason="eos")
    return Trajectory(f"t{index}", "toy", "h", 0, turns=[turn], correct=True, reward=1.0)


def test_the_trainer_checkpoints_by_default_and_trains_the_same_weights_without(tiny_policy):
    """End to end through the optimiser: two trainers, one with checkpointing, one without,
    updated on the same accepted trajectories, hold bit-identical weights."""
    accepted = [_trajectory(i, 40 + 25 * i, 5 + i) for i in range(6)]
    domain = ToyDomain()
    merged = {}
    for checkpointing in (True, False):
        config = RSFTConfig(bf16_autocast=False, minibatch_trajectories=3, micro_batch_sequences=2,
                            gradient_checkpointing=checkpointing)
        trainer = RSFTTrainer(tiny_policy, domain, domain.load_splits(4, 0, 0).train, config, RolloutBudget(0))
        trainer.sync_sampler = lambda: None
        assert trainer.model.get_base_model().is_gradient_checkpointing is checkpointing
        trainer.update(accepted)
        trainer.update(accepted)
        merged[checkpointing] = trainer.merged_state_dict(lora_layers_only=True)
    assert RSFTConfig().gradient_checkpointing is True
    assert [k for k in merged[True] if not torch.equal(merged[True][k], merged[False][k])] == []


# --- micro-batches capped by tokens ---------------------------------------------------------


def test_micro_batches_are_capped_by_sequences_and_by_padded_tokens():
    lengths = [5, 100, 7, 50, 20, 90, 300]  # sorted: 5 7 20 50 90 100 300 (indices 0 2 4 3 5 1 6)
    assert micro_batch_indices(lengths, 4) == [[0, 2, 4, 3], [5, 1, 6]]  # None: by count, as before
    capped = micro_batch_indices(lengths, 4, micro_batch_tokens=200)
    # 4 x 50 = 200 fits; then 2 x 100 = 200 fits; 300 exceeds the cap and goes alone
    assert capped == [[0, 2, 4, 3], [5, 1], [6]]
    for batch in capped:
        assert len(batch) <= 4
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 200
    assert sorted(i for batch in capped for i in batch) == list(range(len(lengths)))
    assert micro_batch_indices(lengths, 8, micro_batch_tokens=100) == [[0, 2, 4], [3], [5], [1], [6]]


def test_padded_micro_batches_follow_the_token_cap():
    sequences = [([1] * n, [-100] * (n - 1) + [1]) for n in (5, 100, 7, 50, 20, 90, 300)]
    shapes = [tuple(ids.shape) for ids, _labels, _mask in padded_micro_batches(sequences, 4, 0, 200)]
    assert shapes == [(4, 50), (2, 100), (1, 300)]


def test_a_token_cap_regroups_but_keeps_the_loss_and_gradients_up_to_rounding(tiny_policy):
    model = with_lora(load_model(tiny_policy.path))
    sequences = long_sequences(6, 40, 200, vocab_size=tiny_policy.model.config.vocab_size)
    loss, grads = loss_and_gradients(model, sequences, micro_batch=8)
    loss_capped, grads_capped = loss_and_gradients(model, sequences, micro_batch=8, micro_batch_tokens=400)
    assert loss_capped == pytest.approx(loss, rel=1e-6)
    for name, grad in grads.items():
        assert torch.allclose(grads_capped[name], grad, rtol=0, atol=1e-5 * grad.abs().max().item()), name


def test_memory_options_are_checked_and_default_to_the_records_computation():
    config = RSFTConfig()
    assert (config.micro_batch_tokens, config.padding_mask, config.gradient_checkpointing) == (None, True, True)
    with pytest.raises(ValueError, match="micro_batch_tokens"):
        RSFTConfig(micro_batch_tokens=0)


# --- memory given back --------------------------------------------------------------------


def _child(code: str, timeout: float = 600) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, WHALEKIT_QUIET="1"), check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RssAnon and malloc_trim are Linux's")
def test_release_freed_memory_returns_the_heap_that_freed_buffers_left():
    """300 buffers of 2 MB from the heap, every other one freed: glibc keeps the 300 MB of
    holes between the live ones (only a free top of the heap shrinks by itself); trimmed,
    they go back to the system."""
    assert rss_anon_mib() is not None and release_freed_memory() in (True, False)
    out = _child("""
        import json
        from whalekit.infra.memory import release_freed_memory, rss_anon_mib
        big = bytearray(16 << 20); del big  # glibc raises its mmap threshold to 16 MB: 2 MB buffers come from the heap
        buffers = [b"x" * (2 << 20) for _ in range(300)]
        held = rss_anon_mib()
        del buffers[::2]
        freed = rss_anon_mib()
        trimmed = release_freed_memory()
        print(json.dumps([held, freed, rss_anon_mib(), trimmed]))
    """)
    held, freed, after, trimmed = json.loads(out)
    assert trimmed is True
    assert held - freed < 50, "glibc gave the holes back by itself: nothing left to show"
    assert held - after > 250


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RssAnon is Linux's")
def test_a_smoke_whale_run_does_not_grow_from_its_first_cycle_to_its_last_stage(tmp_path):
    """A smoke WHALE run on chess (budget 240: six cycles) in a child process: the driver's
    RssAnon at the end of its last stage is within 100 MiB of where it was after its first
    cycle (weight stage and harness stage)."""
    out = _child(f"""
        import json
        import whalekit.run.driver as whale
        from whalekit.run.config import resolve_config
        from whalekit.infra.memory import rss_anon_mib
        marks = []
        end_stage = whale._Driver.end_stage
        def marked(self, state, stage, budget_exhausted=False):
            end_stage(self, state, stage, budget_exhausted)
            marks.append(rss_anon_mib())
        whale._Driver.end_stage = marked
        whale.run_method(resolve_config("smoke", domain="chess", method="whale", budget=240,
                                        runs_root={str(tmp_path)!r}))
        print(json.dumps(marks))
    """)
    marks = json.loads(out)
    assert len(marks) >= 6
    assert marks[-1] - marks[1] < 100, marks
