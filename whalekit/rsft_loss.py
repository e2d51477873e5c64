"""What RSFT trains on and how it scores it: an accepted trajectory's turns become
(input_ids, labels) sequences with the loss on generated tokens only, and the loss is
normalised per token over the whole batch.

They live apart from the trainer so tests, benchmarks and the trace viewer use exactly
the sequences and loss the trainer does, without building one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from whalekit.types import Trajectory

IGNORE_INDEX = -100


def training_sequences(trajectory: Trajectory, max_seq_len: int) -> tuple[list[tuple[list[int], list[int]]], int]:
    """(input_ids, labels) per turn, labels = IGNORE_INDEX on prompt tokens (system, user,
    tool results, the harness's prefill) and the sampled ids on completion tokens.
    Returns the sequences and how many turns were dropped for length."""
    sequences, dropped = [], 0
    for turn in trajectory.turns:
        if not turn.completion_ids:
            continue
        ids = list(turn.prompt_ids) + list(turn.completion_ids)
        if len(ids) > max_seq_len:
            dropped += 1
            continue
        labels = [IGNORE_INDEX] * len(turn.prompt_ids) + list(turn.completion_ids)
        sequences.append((ids, labels))
    return sequences, dropped


def trained_token_count(sequences: list[tuple[list[int], list[int]]]) -> int:
    """The tokens a batch trains on: labelled positions after the first (a position's
    logits predict the next token, so the first label is never a target)."""
    return sum(sum(1 for x in labels[1:] if x != IGNORE_INDEX) for _, labels in sequences)


def padded_micro_batches(sequences: list[tuple[list[int], list[int]]], micro_batch: int,
                         pad_id: int) -> Iterator[tuple[Any, Any, Any]]:
    """(input_ids, labels, attention_mask) CPU tensors per micro-batch, the sequences sorted
    by length so each micro-batch pads little; right padding keeps positions 0..n-1."""
    import torch

    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i][0]))
    for start in range(0, len(order), micro_batch):
        chunk = [sequences[i] for i in order[start:start + micro_batch]]
        width = max(len(ids) for ids, _ in chunk)
        input_ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        labels = torch.full((len(chunk), width), IGNORE_INDEX, dtype=torch.long)
        attention = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, (ids, lab) in enumerate(chunk):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, : len(lab)] = torch.tensor(lab)
            attention[row, : len(ids)] = 1
        yield input_ids, labels, attention


def token_normalised_loss(model: Any, sequences: list[tuple[list[int], list[int]]], micro_batch: int,
                          pad_id: int, autocast: bool = False, backward: bool = True) -> tuple[float, int]:
    """Sum of next-token cross-entropy over all generated tokens of the batch, divided by
    their count, so a long trajectory weighs per token, not per sequence. Gradients
    accumulate across micro-batches (when `backward`). Returns (loss, token count)."""
    import torch
    import torch.nn.functional as F

    total_tokens = trained_token_count(sequences)
    if total_tokens == 0:
        return 0.0, 0
    device = next(model.parameters()).device
    loss_sum = 0.0
    for input_ids, labels, attention in padded_micro_batches(sequences, micro_batch, pad_id):
        input_ids, labels, attention = input_ids.to(device), labels.to(device), attention.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=input_ids, attention_mask=attention).logits
        loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                               ignore_index=IGNORE_INDEX, reduction="sum") / total_tokens
        if backward:
            loss.backward()
        loss_sum += loss.item()
    return loss_sum, total_tokens
