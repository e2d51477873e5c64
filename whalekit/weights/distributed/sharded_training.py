"""Sharded RSFT steps with FSDP2 (`torch.distributed.fsdp.fully_shard`): every rank holds 1/N of
the policy's float32 weights and of AdamW's moments, all-gathers a layer's weights in bf16 just
before it runs and reduce-scatters its gradients in float32 (the paper's verl FSDP setting:
float32 master weights, bf16 compute), so a model whose weights, gradients and moments do not fit
one GPU trains on N. Each rank trains on its share of the global mini-batch (`rank_share`) with
the RSFT loss of `rsft_loss`, normalised by the global trained tokens as `data_parallel_step`
does; N ranks compute what one rank does on the whole mini-batch, up to float summation order
(tests/test_sharded_training.py). Checkpoints and the sampler's full state dict:
`whalekit.weights.distributed.sharded_checkpoint`; the processes that run them for the RSFT trainer:
`whalekit.weights.distributed.trainer_ranks`.

    torch.distributed.init_process_group("gloo")          # or "nccl"; launched by torchrun
    model = shard_policy(model, ShardingConfig(compute_dtype="bfloat16"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    loss, tokens = sharded_step(model, optimizer, global_sequences, micro_batch=8, pad_id=pad)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from whalekit.weights.distributed.data_parallel import Sequences, rank_share
from whalekit.weights.rsft_config import COMPUTE_DTYPES
from whalekit.weights.rsft_loss import micro_batch_indices, token_normalised_loss, trained_token_count


@dataclass(frozen=True)
class ShardingConfig:
    """How the policy is sharded; the weights FSDP keeps (the master copy the optimiser steps)
    are always float32."""

    compute_dtype: str = "bfloat16"  # dtype of the all-gathered weights in forward and backward (the paper's bf16)
    gradient_checkpointing: bool = False  # recompute each decoder layer's activations in backward (memory for time)

    def __post_init__(self) -> None:
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise ValueError(f"compute_dtype must be one of {COMPUTE_DTYPES}, got {self.compute_dtype!r}")


def sharded_units(model: Any) -> list[Any]:
    """The modules that become FSDP units of their own, below the root: every instance of the
    classes the Hugging Face model names in `_no_split_modules` (its decoder layers, and a
    vision tower's blocks where it has one), so one layer's weights are gathered at a time."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(causal_lm, "_no_split_modules", None) or ())
    units = [module for module in causal_lm.modules() if type(module).__name__ in names]
    if not units:
        raise ValueError(f"{type(causal_lm).__name__} names no decoder layer class (_no_split_modules): "
                         "nothing to shard layer by layer")
    return units


def shard_policy(model: Any, config: ShardingConfig | None = None, mesh: Any = None) -> Any:
    """Shard `model` in place over the default process group (or `mesh`) and return it: its
    weights become float32 DTensor shards, each decoder layer an FSDP unit, the rest (embeddings,
    final norm, head; tied embeddings stay tied) the root unit. Gradients are summed over the
    ranks, not averaged: each rank's loss is already divided by the global token count. Sum is
    also the only reduction gloo has (it lacks AVG and PREMUL_SUM, FSDP2's defaults)."""
    import torch
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    config = config or ShardingConfig()
    model.to(torch.float32)  # the master weights: AdamW steps float32 shards
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy = MixedPrecisionPolicy(param_dtype=getattr(torch, config.compute_dtype), reduce_dtype=torch.float32)
    for unit in sharded_units(model):
        fully_shard(unit, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return model


def forward_passes(sequences: Sequences, micro_batch: int, micro_batch_tokens: int | None = None) -> int:
    """How many forward and backward passes `token_normalised_loss` makes over `sequences`: one
    per micro-batch, none when no token is trained."""
    if trained_token_count(sequences) == 0:
        return 0
    return len(micro_batch_indices([len(ids) for ids, _ in sequences], micro_batch, micro_batch_tokens))


def sharded_step(model: Any, optimizer: Any, sequences: Sequences, micro_batch: int, pad_id: int,
                 max_grad_norm: float = 1.0, group: Any = None, **loss_options: Any) -> tuple[float, int]:
    """One optimiser step of a `shard_policy` model on the global mini-batch `sequences` (the same
    list on every rank): this rank's share forward and backward through `token_normalised_loss`
    (normalised by the global trained tokens; FSDP sums the ranks' gradients), clipped by the
    global norm and stepped. `loss_options` go to `token_normalised_loss` (e.g.
    `loss_chunk_tokens`, `micro_batch_tokens`). Returns the global mini-batch's token-normalised
    loss and its trained tokens.

    Two differences from one device, both forced by sharding: every rank makes as many passes as
    the busiest one (a rank with fewer micro-batches adds passes whose loss is multiplied by 0),
    since each pass all-gathers and reduce-scatters with all ranks; and the loss projects every
    position onto the vocabulary through the model's own forward (`trained_positions_only=False`):
    the trained-positions-only path calls the decoder and the head apart, bypassing the root
    unit that gathers the embeddings and head."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    cap = loss_options.get("micro_batch_tokens")
    total = trained_token_count(sequences)
    busiest = max(forward_passes(rank_share(sequences, r, world), micro_batch, cap) for r in range(world))
    share = rank_share(sequences, rank, world)
    optimizer.zero_grad(set_to_none=True)
    loss, _ = token_normalised_loss(model, share, micro_batch, pad_id, normaliser=total,
                                    **{**loss_options, "trained_positions_only": False})
    device = next(model.parameters()).device
    for _ in range(busiest - forward_passes(share, micro_batch, cap)):
        idle = model(input_ids=torch.tensor([[pad_id]], device=device), use_cache=False).logits
        (idle.sum() * 0.0).backward()
    clip_sharded_gradients(model, max_grad_norm)
    optimizer.step()
    summed = torch.tensor([loss], dtype=torch.float64)
    dist.all_reduce(summed, group=group)
    return float(summed), total


def clip_sharded_gradients(model: Any, max_norm: float) -> float:
    """`clip_grad_norm_` over sharded gradients: the norm of the whole gradient (its shards'
    norms combined over the ranks), every shard scaled alike. Returns that norm."""
    import torch
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads, 2.0)
    if isinstance(norm, DTensor):  # a partial norm per rank: reduce it
        norm = norm.full_tensor()
    torch.nn.utils.clip_grads_with_norm_([p for p in model.parameters() if p.grad is not None], max_norm, norm)
    return float(norm)


__all__ = ["ShardingConfig", "clip_sharded_gradients", "forward_passes", "shard_policy", "sharded_step",
           "sharded_units"]
