"""Weights sent to a sampler in buckets of whole decoder layers: the one rule both the sharded
trainer's checkpoint (`weights.distributed.sharded_checkpoint`) and the Ray weight broadcast
(`rollouts.backends.weight_broadcast`) bucket by, so a sampler that fuses a layer's parts finds
them together."""

from __future__ import annotations

import re

# A decoder layer's tensors share this prefix; a bucket never splits one (vLLM reloads a fused
# q/k/v or gate/up layer only whole, and the parts of one fused layer sit in one decoder layer).
LAYER_PREFIX = re.compile(r"^(.*?\.layers\.\d+)\.")


def layer_buckets(sizes: list[tuple[str, int]], bucket_bytes: int) -> list[list[str]]:
    """(name, bytes) pairs in buckets of about `bucket_bytes`, in order: consecutive decoder layers
    go together until the next would pass the limit; a layer larger than the limit is a bucket of
    its own; a tensor outside the layers (embeddings, final norm, head) joins the bucket being
    filled. A layer is never split, so a sampler that fuses a layer's parts (vLLM's q/k/v) finds
    them in one bucket."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    groups: list[tuple[str, list[str], int]] = []  # (layer prefix or name, names, bytes)
    for name, size in sizes:
        match = LAYER_PREFIX.match(name)
        key = match.group(1) if match else name
        if groups and groups[-1][0] == key:
            groups[-1] = (key, [*groups[-1][1], name], groups[-1][2] + size)
        else:
            groups.append((key, [name], size))
    buckets: list[list[str]] = []
    filled = 0
    for _, names, size in groups:
        if not buckets or filled + size > bucket_bytes:
            buckets.append([])
            filled = 0
        buckets[-1].extend(names)
        filled += size
    return [b for b in buckets if b]
