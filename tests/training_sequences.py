"""Random training sequences for the distributed-step tests (tests/test_data_parallel.py,
tests/test_sharded_training.py): one definition, so both compare ranks on the same kind of batch."""

from __future__ import annotations

import random

from whalekit.weights.rsft_loss import IGNORE_INDEX


def sequences(count: int = 7, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """`count` (input ids, labels) pairs: a random prompt of 6-29 tokens, masked, then a random
    completion of 2-11 tokens, trained."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        prompt, completion = rng.randrange(6, 30), rng.randrange(2, 12)
        ids = [rng.randrange(100, 49000) for _ in range(prompt + completion)]
        out.append((ids, [IGNORE_INDEX] * prompt + ids[prompt:]))
    return out
