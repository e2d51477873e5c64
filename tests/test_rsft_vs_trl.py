"""whalekit's RSFT loss is TRL's completion-only SFT loss: same mask, same normalisation."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from whalekit.weights.rsft_loss import IGNORE_INDEX, training_sequences

BENCH = Path(__file__).resolve().parents[1] / "bench" / "rsft_vs_trl.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("rsft_vs_trl", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def test_both_trainers_get_the_same_ids_and_mask(bench):
    trajectories = bench.fixed_trajectories(vocab_size=1000, count=3, seq_len=32, seed=1)
    assert trajectories == bench.fixed_trajectories(vocab_size=1000, count=3, seq_len=32, seed=1)
    for traj, row in zip(trajectories, bench.trl_rows(trajectories), strict=True):
        (ids, labels), = training_sequences(traj, 32)[0]
        assert row["input_ids"] == ids and len(ids) == 32
        # TRL keeps a token in the loss iff its completion_mask is 1; whalekit iff its label is not ignored.
        assert row["completion_mask"] == [int(label != IGNORE_INDEX) for label in labels]


@pytest.mark.slow
def test_first_batch_loss_agrees_with_trl_to_1e4(bench, tiny_policy):
    trajectories = bench.fixed_trajectories(len(tiny_policy.tokenizer), count=8, seq_len=64)
    trl_loss, whalekit_loss = bench.fp32_first_batch_losses(tiny_policy, trajectories, batch=4, seq_len=64)
    assert abs(trl_loss - whalekit_loss) <= bench.TOLERANCE
    # The check can tell normalisations apart: a per-sequence mean of the same batch differs by more.
    from whalekit.samplers.models import load_model
    from whalekit.weights.rsft_loss import token_normalised_loss

    model = load_model(tiny_policy.path)  # fresh: other tests train the shared sampler
    pad_id = tiny_policy.tokenizer.pad_token_id
    batch = [training_sequences(traj, 64)[0][0] for traj in trajectories[:4]]
    assert token_normalised_loss(model, batch, 4, pad_id, backward=False)[0] == pytest.approx(whalekit_loss, abs=1e-5)
    per_sequence_mean = sum(token_normalised_loss(model, [s], 1, pad_id, backward=False)[0] for s in batch) / 4
    assert abs(per_sequence_mean - whalekit_loss) > 10 * bench.TOLERANCE


@pytest.mark.slow
def test_first_training_step_loss_agrees_with_trl_under_bf16_autocast(bench, tiny_policy):
    if not bench.bf16_supported():
        pytest.skip("this CPU/GPU has no bf16")
    trajectories = bench.fixed_trajectories(len(tiny_policy.tokenizer), count=4, seq_len=64)
    whalekit, _ = bench.run_whalekit(tiny_policy, trajectories, lora=True, autocast=True, batch=4, seq_len=64,
                                     learning_rate=2e-4)
    trl = bench.run_trl(tiny_policy, trajectories, lora=True, autocast=True, batch=4, seq_len=64, learning_rate=2e-4)
    assert whalekit.first_tokens == trl.first_tokens == sum(len(t.turns[0].completion_ids) for t in trajectories)
    assert abs(whalekit.first_loss - trl.first_loss) <= bench.TOLERANCE
