"""Where rollouts run: `local` (this process, the default) or `ray` (rollout-worker actors
on a Ray cluster). Both give the same trajectories: every episode's sampling seed derives
from (run seed, step, task id, sample index), never from which worker or batch drew it.

    backend = make_backend(BackendConfig(kind="ray", num_workers=2), model="tiny-random")
    trajectories = backend.rollout(domain, episodes, RolloutConfig(seed=0))
    backend.load_weights(trainer.merged_state_dict())   # reaches every worker; version + 1

`backend.sampler` is a `Sampler` bound to the backend: its weight syncs broadcast to every
worker, and with `RolloutSettings(backend=backend)` (what the driver passes every phase,
`backend_of(sampler)`) whole rollouts run on the workers; handed to `engine.rollout` without
it, each turn's batch is generated on the workers. Ray is imported only by the `ray` backend
(`pip install -e .[ray]`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from whalekit.rollouts.backends.base import (
    BACKEND_KINDS,
    RAY_HINT,
    BackendConfig,
    StaleWeightsError,
    WorkerLostError,
    ray_available,
)
from whalekit.rollouts.backends.ray_backend import BackendSampler, RayBackend
from whalekit.rollouts.engine import rollout

if TYPE_CHECKING:
    from whalekit.domains.base import Domain
    from whalekit.rollouts.engine import Episode, RolloutConfig
    from whalekit.samplers.base import Sampler
    from whalekit.types import Trajectory

class RolloutBackend(Protocol):
    """The seam between the drivers (RSFT, search, test evaluation) and where rollouts run."""

    sampler: Sampler  # bound to this backend: its load_weights reaches every worker

    @property
    def version(self) -> int: ...

    def rollout(self, domain: Domain, episodes: list[Episode], config: RolloutConfig | None = None,
                policy_version: int | None = None) -> list[Trajectory]: ...

    def load_weights(self, state_dict: Any) -> None: ...

    def close(self) -> None: ...


class LocalBackend:
    """Rollouts in this process with one sampler: exactly `engine.rollout`."""

    def __init__(self, sampler: Sampler):
        self.sampler = sampler

    @property
    def version(self) -> int:
        return self.sampler.version

    def rollout(self, domain: Domain, episodes: list[Episode], config: RolloutConfig | None = None,
                policy_version: int | None = None) -> list[Trajectory]:
        return rollout(domain, episodes, self.sampler, config, policy_version)

    def load_weights(self, state_dict: Any) -> None:
        self.sampler.load_weights(state_dict)

    def close(self) -> None:
        pass


def make_backend(config: BackendConfig, sampler: Sampler | None = None, model: str = "tiny-random",
                 sampler_kind: str = "hf", sampler_options: dict[str, Any] | None = None) -> Any:
    """`local`: wraps `sampler` (required). `ray`: starts or joins a cluster and its workers,
    each loading `model` with `sampler_kind` ("hf" | "vllm") and `sampler_options`."""
    if config.kind == "local":
        if sampler is None:
            raise ValueError("the local backend needs the sampler it runs rollouts with")
        return LocalBackend(sampler)
    if not ray_available():
        raise ImportError(f"backend 'ray' needs the ray package: {RAY_HINT}")
    return RayBackend(config, model=model, sampler_kind=sampler_kind, sampler_options=sampler_options)


def backend_of(sampler: Sampler) -> RolloutBackend | None:
    """The backend a sampler is bound to (a `ray` backend's `sampler`), None for a sampler of
    this process: the driver passes it on in its RolloutSettings, so whole rollouts go to it."""
    return sampler.rollout_backend if isinstance(sampler, BackendSampler) else None


__all__ = ["BACKEND_KINDS", "BackendConfig", "LocalBackend", "RolloutBackend", "StaleWeightsError",
           "WorkerLostError", "backend_of", "make_backend", "ray_available"]
