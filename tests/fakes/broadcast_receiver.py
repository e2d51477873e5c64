"""A weight-broadcast receiver in a process of its own (the part a Ray rollout worker plays),
for tests/test_weight_broadcast.py: it reports what it received through a queue."""

from __future__ import annotations

from typing import Any


def receive(meeting: Any, rank: int, queue: Any) -> None:
    from whalekit.rollouts.backends.weight_broadcast import receive_buckets

    got: list[dict[str, Any]] = []
    try:
        for bucket in receive_buckets(meeting, rank):
            got.append({name: (str(t.dtype), tuple(t.shape), t.float().reshape(-1).tolist())
                        for name, t in bucket.items()})
    except Exception as exc:  # reported, not raised: the test reads it
        queue.put((rank, got, f"{type(exc).__name__}: {exc}"))
        return
    queue.put((rank, got, None))
