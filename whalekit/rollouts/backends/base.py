"""The backends' shared vocabulary: `BackendConfig` (the `backend:` config section) and the
errors a backend raises. Every backend module imports it; it imports none of them.

    config = BackendConfig(kind="ray", num_workers=2)
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any

BACKEND_KINDS = ("local", "ray")
RAY_HINT = "pip install -e '.[ray]'  (or: pip install 'ray>=2.40')"


class StaleWeightsError(RuntimeError):
    """A rollout worker holds other weights than the driver's current version: sampling
    with them would train on, or score harnesses with, a policy that no longer exists."""


class WorkerLostError(RuntimeError):
    """Rollout workers kept dying: more replacements than `BackendConfig.max_restarts`."""


@dataclass
class BackendConfig:
    kind: str = "local"  # local | ray
    address: str | None = None  # ray: an existing cluster ("auto", "ray://head:10001"); None starts a local one
    num_workers: int = 2  # ray: rollout-worker actors, each with its own sampler and harness workers
    worker_capacity: int = 64  # ray: most episodes one worker runs in one lock-step call
    cpus_per_worker: float = 1.0  # ray: CPUs each actor reserves (also its torch threads)
    gpus_per_worker: float = 0.0  # ray: GPUs each actor reserves (1 for a vLLM replica)
    max_restarts: int = 3  # ray: dead workers replaced per rollout call before it fails
    init_options: dict[str, Any] = field(default_factory=dict)  # ray: extra ray.init kwargs (runtime_env, ...)
    # ray: a weight sync reaches the workers over a gloo group in buckets of whole decoder layers of
    # about this many MiB (whalekit.rollouts.backends.weight_broadcast): the driver and each worker hold one
    # bucket beyond their model; the object store holds none of it
    sync_bucket_mb: float = 512.0
    spill_weights: bool = True  # ray: keep the last sync on the driver's disk, for replaced workers
    sync_timeout_s: float = 600.0  # ray: how long a rank waits for the others in a weight sync

    def __post_init__(self) -> None:
        if self.kind not in BACKEND_KINDS:
            raise ValueError(f"backend kind must be one of {', '.join(BACKEND_KINDS)}, got {self.kind!r}")
        if self.num_workers < 1 or self.worker_capacity < 1 or self.max_restarts < 0:
            raise ValueError("num_workers and worker_capacity must be >= 1, max_restarts >= 0")
        if self.cpus_per_worker < 0 or self.gpus_per_worker < 0:
            raise ValueError("cpus_per_worker and gpus_per_worker must be >= 0")
        if self.sync_bucket_mb <= 0 or self.sync_timeout_s <= 0:
            raise ValueError(f"sync_bucket_mb and sync_timeout_s must be > 0, got {self.sync_bucket_mb} and "
                             f"{self.sync_timeout_s}")


def ray_available() -> bool:
    return importlib.util.find_spec("ray") is not None
