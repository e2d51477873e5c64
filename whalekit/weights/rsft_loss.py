"""What RSFT trains on and how it scores it: an accepted trajectory's turns become
(input_ids, labels) sequences with the loss on generated tokens only, and the loss is
normalised per token over the whole batch.

They live apart from the trainer so tests, benchmarks and the trace viewer use exactly
the sequences and loss the trainer does, without building one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

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


def packed_training_sequences(trajectory: Trajectory,
                              max_seq_len: int) -> tuple[list[tuple[list[int], list[int]]], int]:
    """`training_sequences` with each turn folded into the next where the next turn's prompt
    begins with this turn's prompt and completion (the harness kept the history as sampled),
    as the authors' verl agent loop keeps a whole episode as one sequence with a response
    mask. The loss is the same: a causal model's logits at a position see only the tokens
    before it, so a completion predicted inside the longer sequence is predicted from the
    same tokens; the training tokens are fewer (turn k's prefix is not run again for turn
    k+1). A turn whose prompt was rewritten (a harness that trims or edits the history)
    starts a new sequence. Returns the sequences and how many turns were dropped for length."""
    sequences, dropped = training_sequences(trajectory, max_seq_len)
    packed: list[tuple[list[int], list[int]]] = []
    for ids, labels in sequences:
        if packed and ids[:len(packed[-1][0])] == packed[-1][0]:
            head_ids, head_labels = packed.pop()
            labels = head_labels + labels[len(head_labels):]
        packed.append((ids, labels))
    return packed, dropped


def trained_token_count(sequences: list[tuple[list[int], list[int]]]) -> int:
    """The tokens a batch trains on: labelled positions after the first (a position's
    logits predict the next token, so the first label is never a target)."""
    return sum(sum(1 for x in labels[1:] if x != IGNORE_INDEX) for _, labels in sequences)


def micro_batch_indices(lengths: list[int], micro_batch: int,
                        micro_batch_tokens: int | None = None) -> list[list[int]]:
    """Which sequences (indices into `lengths`) share each forward pass: sorted by length so
    each micro-batch pads little, at most `micro_batch` sequences each and, with
    `micro_batch_tokens`, at most that many padded tokens each (its sequences x its longest
    one); a sequence longer than the cap is a micro-batch alone. None: by count only."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    if micro_batch_tokens is None:
        return [order[start:start + micro_batch] for start in range(0, len(order), micro_batch)]
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:  # ascending: the sequence joining a micro-batch is its longest
        if current and (len(current) >= micro_batch or (len(current) + 1) * lengths[index] > micro_batch_tokens):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def padded_micro_batches(sequences: list[tuple[list[int], list[int]]], micro_batch: int, pad_id: int,
                         micro_batch_tokens: int | None = None) -> Iterator[tuple[Any, Any, Any]]:
    """(input_ids, labels, attention_mask) CPU tensors per micro-batch (`micro_batch_indices`:
    sorted by length, capped by sequences and optionally by padded tokens); right padding
    keeps positions 0..n-1."""
    import torch

    for indices in micro_batch_indices([len(ids) for ids, _ in sequences], micro_batch, micro_batch_tokens):
        chunk = [sequences[i] for i in indices]
        width = max(len(ids) for ids, _ in chunk)
        input_ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        labels = torch.full((len(chunk), width), IGNORE_INDEX, dtype=torch.long)
        attention = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, (ids, lab) in enumerate(chunk):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, : len(lab)] = torch.tensor(lab)
            attention[row, : len(ids)] = 1
        yield input_ids, labels, attention


# Model types whose logits are exactly the output embedding applied to the decoder's last
# hidden state (no logit scaling or soft-capping): for these the loss runs the vocabulary
# projection on trained positions only. Others get the model's own full forward.
# qwen3_5 (Qwen3.5's conditional-generation checkpoints, whose `model` is the multimodal
# backbone: text-only input gives the language model's last hidden state) and qwen3_5_text
# (its text-only causal LM) apply the plain head too (transformers' modeling_qwen3_5).
PLAIN_HEAD_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "qwen3_5", "qwen3_5_text"})


def decoder_and_head(model: Any) -> tuple[Any, Any] | None:
    """(decoder, output embedding) of a causal LM (through a PEFT wrapper) whose logits are
    `head(decoder(...).last_hidden_state)`; None for any other model. The projection onto
    a 49k vocabulary is about a fifth of SmolLM2-135M's forward, and an RSFT batch trains
    on a few percent of its positions (the rest is prompt and tool text)."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(causal_lm, "config", None)
    if getattr(config, "model_type", None) not in PLAIN_HEAD_MODEL_TYPES:
        return None
    decoder, head = getattr(causal_lm, "model", None), causal_lm.get_output_embeddings()
    return None if decoder is None or head is None else (decoder, head)


# Model types whose positions are 0..n-1 whatever the attention mask says and whose attention
# is causal: with right padding a real position attends only to real positions before it, so
# the padding mask changes nothing the loss reads and may be dropped (`padding_mask=False`).
CAUSAL_POSITION_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})


def model_type(model: Any) -> str | None:
    """The Hugging Face `model_type` of a causal LM, through a PEFT wrapper."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(getattr(causal_lm, "config", None), "model_type", None)


def token_normalised_loss(model: Any, sequences: list[tuple[list[int], list[int]]], micro_batch: int,
                          pad_id: int, autocast: bool = False, backward: bool = True,
                          trained_positions_only: bool = True, micro_batch_tokens: int | None = None,
                          padding_mask: bool = True, loss_chunk_tokens: int | None = None,
                          normaliser: int | None = None, shared_prefix_tokens: int | None = None,
                          checkpoint_min_tokens: int = 0) -> tuple[float, int]:
    """Sum of next-token cross-entropy over all generated tokens of the batch, divided by
    their count, so a long trajectory weighs per token, not per sequence. Gradients
    accumulate across micro-batches (when `backward`), each of at most `micro_batch`
    sequences and, with `micro_batch_tokens`, at most that many padded tokens
    (`micro_batch_indices`). `trained_positions_only`: project onto the vocabulary only
    where a token is trained (same loss; `decoder_and_head` says for which models); False
    computes every position's logits (the reference that bench/rsft_speed.py times against).
    `padding_mask=False`: the right-padding mask is not passed to models of
    `CAUSAL_POSITION_MODEL_TYPES` (causal attention alone keeps real positions off the
    padding), so attention builds no (B, 1, L, L) mask and keeps none for backward.
    `loss_chunk_tokens`: the cross-entropy runs over at most that many positions at a time,
    each chunk's float32 logits recomputed in backward (`chunked_cross_entropy`), so a
    micro-batch never holds (tokens x vocab) float32 logits at once; None: all at once.
    `normaliser`: the token count to divide by instead of these sequences' own (a data-parallel
    rank divides by its global mini-batch's: `whalekit.weights.distributed.data_parallel`).
    `shared_prefix_tokens`: sequences sharing an untrained prefix of at least that many tokens
    (a problem's G trajectories share its prompt) run the prefix once (`shared_prefix_loss`);
    None: every sequence whole (the records' computation). `checkpoint_min_tokens`: on a model
    built with gradient checkpointing, only micro-batches of at least that many padded tokens
    are checkpointed (smaller ones keep little and recomputing them costs time); 0: all.
    Returns (loss, token count)."""

    total_tokens = trained_token_count(sequences)
    if total_tokens == 0:
        return 0.0, 0
    divisor = total_tokens if normaliser is None else normaliser
    device = next(model.parameters()).device
    split = decoder_and_head(model) if trained_positions_only else None
    keep_mask = padding_mask or model_type(model) not in CAUSAL_POSITION_MODEL_TYPES
    loss_sum = 0.0
    checkpointed = bool(getattr(model, "is_gradient_checkpointing", False))
    groups: list[tuple[int, list[int]]] = []
    # Sharing hands the prefix's keys and values over as a plain cache: decoders of full causal
    # attention only (a hybrid's recurrent layers keep other state).
    if shared_prefix_tokens is not None and split is not None and model_type(model) in CAUSAL_POSITION_MODEL_TYPES:
        groups = shared_prefix_groups(sequences, shared_prefix_tokens)
        if checkpointed:  # a shared prefix's forwards keep their activations: only where checkpointing would not run
            limit = checkpoint_min_tokens or 0
            groups = [(p, members) for p, members in groups
                      if max(p, len(members) * max(len(sequences[i][0]) - p for i in members)) < limit]
    shared = {i for _, members in groups for i in members}
    rest = [s for i, s in enumerate(sequences) if i not in shared]
    try:
        for prefix, members in groups:
            _set_checkpointing(model, False, checkpointed)
            loss_sum += shared_prefix_loss(cast(tuple[Any, Any], split), [sequences[i] for i in members], prefix,
                                           micro_batch, pad_id, autocast, divisor, keep_mask, backward,
                                           micro_batch_tokens, loss_chunk_tokens)
        for batch in padded_micro_batches(rest, micro_batch, pad_id, micro_batch_tokens):
            _set_checkpointing(model, batch[0].numel() >= checkpoint_min_tokens, checkpointed)
            loss_sum += _micro_batch_loss(model, split, batch, device, autocast, divisor, keep_mask, backward,
                                          loss_chunk_tokens)
    finally:
        _set_checkpointing(model, True, checkpointed)
    return loss_sum, total_tokens


def _set_checkpointing(model: Any, on: bool, built_with: bool) -> None:
    """Turn the decoder layers' checkpointing on or off for the next forward (transformers'
    per-layer flag); a model built without it is left alone."""
    if not built_with:
        return
    for module in model.modules():
        if isinstance(getattr(module, "gradient_checkpointing", None), bool) and \
                hasattr(module, "_gradient_checkpointing_func"):
            module.gradient_checkpointing = on


def _micro_batch_loss(model: Any, split: tuple[Any, Any] | None, batch: tuple[Any, Any, Any], device: Any,
                      autocast: bool, divisor: int, keep_mask: bool, backward: bool,
                      loss_chunk_tokens: int | None) -> float:
    """One padded micro-batch's share of the token-normalised loss (backward when asked)."""
    import torch
    import torch.nn.functional as F

    input_ids, labels, attention = batch
    input_ids, labels = input_ids.to(device), labels.to(device)
    mask = attention.to(device) if keep_mask else None
    targets = labels[:, 1:]
    chunked = loss_chunk_tokens is not None and int((targets != IGNORE_INDEX).sum()) > loss_chunk_tokens
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        if split is None:
            logits = model(input_ids=input_ids, attention_mask=mask, use_cache=False).logits[:, :-1]
        else:  # the vocabulary projection only where a token is trained
            decoder, head = split
            hidden = decoder(input_ids=input_ids, attention_mask=mask, use_cache=False).last_hidden_state
            trained = hidden[:, :-1][targets != IGNORE_INDEX]
            targets = targets[targets != IGNORE_INDEX]
            if chunked:  # the head runs a chunk at a time, here and in backward
                chunk_sum = chunked_cross_entropy(trained, targets, head, cast(int, loss_chunk_tokens))
            else:
                logits = head(trained)
    if not chunked:  # the records' computation, unchanged
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=IGNORE_INDEX, reduction="sum") / divisor
    elif split is None:  # the model made every position's logits; their float32 copy is made a chunk at a time
        loss = chunked_cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), None,
                                     cast(int, loss_chunk_tokens)) / divisor
    else:
        loss = chunk_sum / divisor
    if backward:
        loss.backward()
    return float(loss.item())


def shared_prefix_groups(sequences: list[tuple[list[int], list[int]]],
                         min_prefix: int) -> list[tuple[int, list[int]]]:
    """(prefix length, member indices) for every set of two or more sequences that begin with
    the same `min_prefix` or more ids (a problem's G trajectories begin with its prompt). The
    prefix stops before the position that predicts any member's first trained token, so no
    trained position lies in it, and leaves every member at least one token after it."""
    order = sorted(range(len(sequences)), key=lambda i: sequences[i][0])  # shared beginnings sit side by side

    def untrained(index: int) -> int:  # the prefix may hold positions 0..first_label-2
        ids, labels = sequences[index]
        first = next((k for k, x in enumerate(labels) if x != IGNORE_INDEX), len(ids))
        return min(first - 1, len(ids) - 1)

    def common(a: list[int], b: list[int]) -> int:
        n = min(len(a), len(b))
        return next((k for k in range(n) if a[k] != b[k]), n)

    groups: list[tuple[int, list[int]]] = []
    members: list[int] = []
    length = 0
    for index in order + [-1]:  # -1 closes the last group
        if members and index >= 0:
            shared = min(length, common(sequences[members[-1]][0], sequences[index][0]), untrained(index))
            if shared >= min_prefix:
                members.append(index)
                length = shared
                continue
        if len(members) > 1:
            groups.append((length, sorted(members)))
        members, length = ([index], untrained(index)) if index >= 0 else ([], 0)
    return groups


def shared_prefix_loss(split: tuple[Any, Any], sequences: list[tuple[list[int], list[int]]], prefix: int,
                       micro_batch: int, pad_id: int, autocast: bool, divisor: int, keep_mask: bool,
                       backward: bool = True, micro_batch_tokens: int | None = None,
                       loss_chunk_tokens: int | None = None) -> float:
    """The token-normalised loss of sequences that share their first `prefix` ids, none of them
    trained (`shared_prefix_groups`), with the prefix run once: its keys and values are computed
    for one row, the continuations attend to them (at most `micro_batch` rows a forward), and
    their gradient, summed over every continuation, is sent back through the prefix's forward
    in one backward. The same loss and gradients as running every sequence whole (a causal
    model's prefix positions never see what follows), up to float rounding; the prompt's
    tokens are pushed through the model once instead of once per trajectory. `loss_chunk_tokens`
    as in `token_normalised_loss`."""
    import torch
    import torch.nn.functional as F
    from transformers.cache_utils import DynamicCache

    decoder, head = split
    device = next(decoder.parameters()).device
    head_ids = torch.tensor([sequences[0][0][:prefix]], device=device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        cache = decoder(input_ids=head_ids, use_cache=True).past_key_values
    states = [(layer.keys, layer.values) for layer in cache.layers]
    leaves = [(k.detach().requires_grad_(backward), v.detach().requires_grad_(backward)) for k, v in states]
    rest = [(ids[prefix:], labels[prefix:]) for ids, labels in sequences]
    loss_sum = 0.0
    for batch in padded_micro_batches(rest, micro_batch, pad_id, micro_batch_tokens):
        input_ids, labels, attention = (t.to(device) for t in batch)
        rows = input_ids.shape[0]
        mask = torch.cat([attention.new_ones((rows, prefix)), attention], dim=1) if keep_mask else None
        past = DynamicCache(ddp_cache_data=[(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1))
                                            for k, v in leaves])
        targets = labels[:, 1:]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            hidden = decoder(input_ids=input_ids, attention_mask=mask, past_key_values=past,
                             use_cache=True).last_hidden_state
            trained, wanted = hidden[:, :-1][targets != IGNORE_INDEX], targets[targets != IGNORE_INDEX]
            if loss_chunk_tokens is not None and wanted.shape[0] > loss_chunk_tokens:
                summed = chunked_cross_entropy(trained, wanted, head, loss_chunk_tokens)
            else:
                summed = F.cross_entropy(head(trained).float(), wanted, reduction="sum")
        loss = summed / divisor
        if backward:
            loss.backward()
        loss_sum += float(loss.item())
    if backward:
        tensors = [t for pair in states for t in pair]
        grads = [t.grad for pair in leaves for t in pair]
        kept = [(t, g) for t, g in zip(tensors, grads, strict=True) if g is not None]
        if kept:
            torch.autograd.backward([t for t, _ in kept], [g for _, g in kept])
    return loss_sum


def chunked_cross_entropy(inputs: Any, targets: Any, head: Any, chunk_tokens: int) -> Any:
    """Summed next-token cross-entropy of `inputs` (positions x hidden, projected by `head`;
    or positions x vocab logits when `head` is None) against `targets`, `chunk_tokens`
    positions at a time. Each chunk is checkpointed (non-reentrant): forward keeps its input
    slice and its scalar, backward recomputes that chunk's float32 logits alone, so the
    peak holds one chunk's (chunk x vocab) logits, not the micro-batch's. Equal to the
    unchunked sum up to float32 summation order."""
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    def chunk_loss(chunk: Any, chunk_targets: Any) -> Any:  # under the caller's autocast, kept on recompute
        logits = chunk if head is None else head(chunk)
        return F.cross_entropy(logits.float(), chunk_targets, ignore_index=IGNORE_INDEX, reduction="sum")

    total = inputs.new_zeros((), dtype=torch.float32)
    for start in range(0, targets.shape[0], chunk_tokens):
        piece, piece_targets = inputs[start:start + chunk_tokens], targets[start:start + chunk_tokens]
        if bool((piece_targets != IGNORE_INDEX).any()):
            total = total + checkpoint(chunk_loss, piece, piece_targets, use_reentrant=False)
    return total
