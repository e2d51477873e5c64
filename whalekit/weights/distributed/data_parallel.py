"""Data-parallel RSFT steps on `torch.distributed`: each rank holds the whole model, takes its
share of a global mini-batch, and the ranks sum their gradients before every rank takes the
same optimiser step (the verl / OpenRLHF pattern: one trainer process per GPU, NCCL on GPU,
gloo on CPU), so N ranks compute what one rank does on the whole mini-batch, up to float
summation order (tests/test_data_parallel.py). The loss of every rank is normalised by the
global mini-batch's trained tokens, as `token_normalised_loss` does for one rank.

A building block for issue 54's sharded weight phase: the RSFT trainer still trains on one
device; FSDP2 sharding, sharded checkpoints and launching ranks as Ray actors are not here yet.

    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)   # or torchrun
    loss, tokens = data_parallel_step(model, optimizer, global_sequences, micro_batch=8, pad_id=pad)
"""

from __future__ import annotations

from typing import Any

from whalekit.weights.rsft_loss import token_normalised_loss, trained_token_count

Sequences = list[tuple[list[int], list[int]]]


def rank_share(sequences: Sequences, rank: int, world: int) -> Sequences:
    """The sequences rank `rank` of `world` trains on: every world-th one from its rank on, so
    shares differ by at most one sequence and their lengths mix alike."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in 0..{world - 1}")
    return sequences[rank::world]


def data_parallel_step(model: Any, optimizer: Any, sequences: Sequences, micro_batch: int, pad_id: int,
                       autocast: bool = False, max_grad_norm: float = 1.0, group: Any = None,
                       **loss_options: Any) -> tuple[float, int]:
    """One optimiser step on the global mini-batch `sequences` (the same list on every rank):
    this rank's share forward and backward, normalised by the global trained-token count; the
    gradients summed over the ranks in one flat all-reduce; clipped and stepped alike on every
    rank. `loss_options` go to `token_normalised_loss` (e.g. `loss_chunk_tokens`). Returns
    the global mini-batch's token-normalised loss and its trained tokens."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    total = trained_token_count(sequences)
    optimizer.zero_grad(set_to_none=True)
    loss, _ = token_normalised_loss(model, rank_share(sequences, rank, world), micro_batch, pad_id, autocast,
                                    normaliser=total, **loss_options)
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:  # a rank whose share trained no token still takes part in the sum
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params] + [torch.tensor([loss], dtype=params[0].grad.dtype,
                                                                          device=params[0].grad.device)])
    dist.all_reduce(flat, group=group)
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()
    torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()
    return float(flat[-1]), total
