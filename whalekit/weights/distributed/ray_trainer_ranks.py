"""The RSFT trainer's sharded ranks as Ray actors (`rsft.trainer_launcher: ray`): the same ranks as
`whalekit.weights.distributed.trainer_ranks` (each a `RankState`: FSDP2 shards of the float32 master weights, AdamW,
the warm-up schedule), placed by Ray instead of spawned beside the driver.

Why Ray: it is how verl and OpenRLHF place trainer ranks. Ray counts each rank's GPU (`num_gpus: 1`
per actor on CUDA), so the ranks never land on a GPU a Ray rollout worker holds, and a cluster's
ranks may sit on several nodes: they rendezvous at rank 0's node address (NCCL on GPU, gloo on
CPU), not at 127.0.0.1. The model folder must be readable at the same path on every node.

What goes where: each command's payload (a mini-batch's token sequences) is put in the object
store once and read by every rank; rank 0's answer comes back (the loss; a bucket of gathered
weights for the sampler's sync, `state_dict_buckets`). A rank that raises or dies ends the group
with `RankFailedError` naming it. `close()` kills the actors and, when this trainer started the
Ray cluster, stops it; actors also die with the driver (Ray fate-shares non-detached actors
with their owner), as does a cluster `ray.init` started.

    ranks = RayTrainerRanks(model_dir, RSFTConfig(lora=False, trainer_ranks=2, trainer_launcher="ray"), pad_id=0)
    loss, tokens = ranks.step(sequences)
    sampler.load_weight_buckets(ranks.state_dict_buckets(512 * 2**20))
    ranks.close()
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any

from whalekit.infra.ports import free_port
from whalekit.rollouts.backends.base import BackendConfig
from whalekit.rollouts.backends.ray_backend import connect
from whalekit.weights.distributed.trainer_ranks import START_TIMEOUT_S, RankCommands, RankFailedError, RankState
from whalekit.weights.rsft_config import RSFTConfig


class RankActor:
    """One trainer rank inside a Ray actor (wrapped with `ray.remote` when the ranks start)."""

    def __init__(self) -> None:
        self.state: RankState | None = None

    def rendezvous(self) -> str:
        """An address the group can meet at: this node's IP and a port free on it (rank 0's)."""
        import ray

        return f"tcp://{ray.util.get_node_ip_address()}:{free_port()}"

    def start(self, rank: int, world: int, init_method: str, model_dir: str, config: RSFTConfig, pad_id: int,
              device_type: str) -> int:
        """Join the group and shard the policy; returns this actor's pid. Ray makes the GPU it
        reserved for this actor the only visible one: cuda:0 here."""
        self.state = RankState(rank, world, init_method, Path(model_dir), config, pad_id, device_type,
                               device_index=0, threads=1 if device_type != "cuda" else None)
        return os.getpid()

    def run(self, name: str, payload: Any) -> Any:
        if self.state is None:
            raise RuntimeError("this trainer rank was not started")
        return self.state.run(name, payload)

    def close(self) -> None:
        if self.state is not None:
            self.state.close()


class RayTrainerRanks(RankCommands):
    """`TrainerRanks`' interface (its `RankCommands`, close, pids) over N Ray actors; see the
    module docstring."""

    def __init__(self, model_dir: Path, config: RSFTConfig, pad_id: int, device_type: str = "cpu",
                 start_timeout_s: float = START_TIMEOUT_S):
        if config.trainer_ranks < 2:
            raise ValueError(f"RayTrainerRanks needs rsft.trainer_ranks >= 2, got {config.trainer_ranks}")
        self.world = config.trainer_ranks
        # joins the run's cluster when the Ray backend (or the caller) started one; else a local one
        owns = connect(BackendConfig(kind="ray", num_workers=self.world, cpus_per_worker=1.0))
        import ray  # after connect: ray is an optional extra (whalekit[ray])

        resources = {"num_gpus": 1, "num_cpus": 1} if device_type == "cuda" else {"num_cpus": 1}
        actor = ray.remote(RankActor)
        # handles typed Any: Ray's stubs type an actor method as the plain method, not its `.remote`
        self._actors: list[Any] = [actor.options(name=None, max_restarts=0, **resources).remote()
                                   for _ in range(self.world)]
        self._finalizer = weakref.finalize(self, _stop, list(self._actors), owns)
        init_method = self._first("rendezvous", self._actors[0].rendezvous.remote(), start_timeout_s)
        self._pids: list[int] = self._all("start", [a.start.remote(rank, self.world, init_method, str(model_dir),
                                                                   config, pad_id, device_type)
                                                    for rank, a in enumerate(self._actors)], start_timeout_s)

    def close(self) -> None:
        """Kill every rank actor (and the Ray cluster this trainer started). Safe to call twice."""
        self._finalizer()

    @property
    def pids(self) -> list[int]:
        return list(self._pids)

    def _command(self, name: str, payload: Any = None) -> Any:
        import ray

        if not self._finalizer.alive:
            raise RuntimeError("the trainer ranks are closed")
        shared = ray.put(payload)  # once, read by every rank
        return self._all(name, [a.run.remote(name, shared) for a in self._actors])[0]

    def _first(self, name: str, ref: Any, timeout: float) -> Any:
        return self._all(name, [ref], timeout)[0]

    def _all(self, name: str, refs: list[Any], timeout: float | None = None) -> list[Any]:
        """Every rank's answer, in rank order; the first failure (or no answer within `timeout`)
        stops the group, since the other ranks would wait in a collective forever."""
        import ray

        answers: dict[int, Any] = {}
        index = {ref: rank for rank, ref in enumerate(refs)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=timeout)
            if not ready:
                self.close()
                raise RankFailedError(f"trainer ranks gave no answer to {name!r} within {timeout:g} s")
            rank = index[ready[0]]
            try:
                answers[rank] = ray.get(ready[0])
            except ray.exceptions.RayError as error:
                self.close()
                raise RankFailedError(f"trainer rank {rank} failed during {name!r}:\n{error}") from None
        return [answers[rank] for rank in range(len(refs))]


def _stop(actors: list[Any], owns_cluster: bool) -> None:
    import ray

    if not ray.is_initialized():
        return
    for actor in actors:
        try:
            ray.get(actor.close.remote(), timeout=10)
        except Exception:  # a dead or stuck rank: killed below
            pass
        ray.kill(actor, no_restart=True)
    if owns_cluster:
        ray.shutdown()


__all__ = ["RankActor", "RayTrainerRanks"]
