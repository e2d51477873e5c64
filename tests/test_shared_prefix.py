"""RSFT with a shared prompt prefix: a problem's G accepted trajectories begin with the same
prompt, and `rsft.shared_prefix_tokens` runs that prompt through the model once. The loss and
every gradient must be those of training each trajectory whole."""

import random

import pytest

from whalekit.samplers.models import load_policy
from whalekit.weights.rsft_loss import IGNORE_INDEX, shared_prefix_groups, token_normalised_loss


def _group(prompt: list[int], rng: random.Random, members: int) -> list[tuple[list[int], list[int]]]:
    """`members` two-turn episodes of one problem: the prompt, a completion, tool text, a completion."""
    out = []
    for index in range(members):
        first = [rng.randrange(10, 200) for _ in range(3 + index)]
        tool = [rng.randrange(10, 200) for _ in range(7 + 2 * index)]
        second = [rng.randrange(10, 200) for _ in range(4)]
        ids = prompt + first + tool + second
        labels = [IGNORE_INDEX] * len(prompt) + first + [IGNORE_INDEX] * len(tool) + second
        out.append((ids, labels))
    return out


def _batch() -> list[tuple[list[int], list[int]]]:
    rng = random.Random(0)
    a, b = [rng.randrange(10, 200) for _ in range(40)], [rng.randrange(10, 200) for _ in range(33)]
    alone = _group([rng.randrange(10, 200) for _ in range(25)], rng, 1)
    return _group(a, rng, 3) + alone + _group(b, rng, 2)


def _loss_and_gradients(model, sequences, autocast=False, **options):
    model.zero_grad(set_to_none=True)
    loss, tokens = token_normalised_loss(model, sequences, 2, 0, autocast, **options)
    return loss, tokens, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_groups_are_the_sequences_that_begin_alike_and_stop_before_the_first_trained_position():
    sequences = _batch()
    groups = shared_prefix_groups(sequences, min_prefix=16)
    assert [members for _, members in groups] == [[0, 1, 2], [4, 5]]  # the lone episode (3) is not a group
    # The prefix ends one position before the first trained token: that position predicts it.
    assert [prefix for prefix, _ in groups] == [39, 32]
    for prefix, members in groups:
        for index in members:
            ids, labels = sequences[index]
            assert ids[:prefix] == sequences[members[0]][0][:prefix]
            assert all(x == IGNORE_INDEX for x in labels[:prefix + 1])
    assert shared_prefix_groups(sequences, min_prefix=40) == []  # no two share 40 untrained ids


def test_the_shared_prefix_gives_the_whole_sequences_loss_and_gradients_in_float32():
    model = load_policy("tiny-random").model.float()  # full fine-tuning: every weight's gradient passes the prefix
    sequences = _batch()
    whole = _loss_and_gradients(model, sequences)
    shared = _loss_and_gradients(model, sequences, shared_prefix_tokens=16)
    assert shared[1] == whole[1]
    assert shared[0] == pytest.approx(whole[0], rel=1e-5)
    assert shared[2].keys() == whole[2].keys()
    for name, grad in shared[2].items():  # equal up to float32 summation order
        assert (grad - whole[2][name]).norm() <= 1e-5 * whole[2][name].norm() + 1e-9, name


def test_under_bf16_autocast_the_shared_prefix_differs_from_whole_sequences_less_than_bf16_does_from_float32():
    model = load_policy("tiny-random").model.float()
    sequences = _batch()
    exact = _loss_and_gradients(model, sequences)
    whole = _loss_and_gradients(model, sequences, autocast=True)
    shared = _loss_and_gradients(model, sequences, autocast=True, shared_prefix_tokens=16)
    assert shared[0] == pytest.approx(whole[0], rel=1e-2)
    for name, grad in shared[2].items():  # rounding of the same bf16 computation in another order, not an error
        bf16_error = (whole[2][name] - exact[2][name]).norm()
        assert (grad - whole[2][name]).norm() <= 2 * bf16_error + 1e-3 * whole[2][name].norm(), name


def test_a_checkpointed_model_shares_only_micro_batches_below_its_checkpointing_threshold():
    from whalekit.weights.rsft import enable_gradient_checkpointing

    model = load_policy("tiny-random").model.float()
    sequences = _batch()
    reference = _loss_and_gradients(model, sequences)
    enable_gradient_checkpointing(model)
    assert model.is_gradient_checkpointing
    for threshold in (0, 10_000):  # 0: every micro-batch checkpointed, nothing shared; 10,000: all shared, none
        result = _loss_and_gradients(model, sequences, shared_prefix_tokens=16, checkpoint_min_tokens=threshold)
        assert result[0] == pytest.approx(reference[0], rel=1e-5)
        for name, grad in result[2].items():
            assert (grad - reference[2][name]).norm() <= 1e-5 * reference[2][name].norm() + 1e-9, name
    assert model.is_gradient_checkpointing  # the model leaves the loss as it came


def test_a_chunked_loss_and_a_shared_prefix_together_give_the_same_loss_and_gradients():
    model = load_policy("tiny-random").model.float()
    sequences = _batch()
    whole = _loss_and_gradients(model, sequences)
    both = _loss_and_gradients(model, sequences, shared_prefix_tokens=16, loss_chunk_tokens=3)
    assert both[0] == pytest.approx(whole[0], rel=1e-5)
    for name, grad in both[2].items():  # two reorderings of float32 sums (chunks, prefix): 1e-4, not 1e-5
        assert (grad - whole[2][name]).norm() <= 1e-4 * whole[2][name].norm() + 1e-9, name
