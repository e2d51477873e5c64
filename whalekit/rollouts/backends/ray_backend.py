"""The Ray backend: rollout workers as Ray actors, episodes dispatched to whichever
worker is free, weights broadcast over a torch.distributed group, stale workers refused.

    backend = RayBackend(BackendConfig(kind="ray", num_workers=2), model="tiny-random")
    policy = backend.policy()            # a Policy whose sampler runs everything on the workers
    run_method(config, policy=policy)    # RSFT, search and test evaluation, unchanged

Every call is synchronous (`ray.wait` / `ray.get`, no event loop of its own), so it works
the same from a script and from a notebook whose kernel already runs an asyncio loop.
The trainer stays in the driver (or in its own ranks): after each RSFT step `load_weights`
(a whole state dict) or `load_weight_buckets` (a sharded trainer's buckets) broadcasts the weights
to every worker a bucket at a time over a gloo group (`whalekit.rollouts.backends.weight_broadcast`), never
through the object store, and keeps the last sync on the driver's disk for replaced workers. The
driver's version counter is the only truth, and a worker whose weights differ from it refuses to
sample.
"""

from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whalekit.rollouts.backends.base import BackendConfig, StaleWeightsError, WorkerLostError
from whalekit.rollouts.backends.weight_broadcast import (
    BroadcastSource,
    WeightSpill,
    pack_buckets,
    state_dict_buckets,
)
from whalekit.rollouts.backends.worker import HarnessSpec, RolloutWorker, harness_spec, plan_chunks
from whalekit.rollouts.engine import RolloutConfig, _progress
from whalekit.samplers.base import Completion, GenerationRequest, Sampler, SamplingParams
from whalekit.samplers.model_files import load_tokenizer, resolve_model_dir
from whalekit.samplers.models import Policy
from whalekit.sandbox.bwrap import isolation_mode


@dataclass
class WorkerStats:
    """What one worker slot has done, summed over its replacements."""

    episodes: int = 0
    chunks: int = 0
    generated_tokens: int = 0
    busy_s: float = 0.0
    restarts: int = 0


def connect(config: BackendConfig) -> bool:
    """Join the cluster at `config.address` (or the one this process already joined), or
    start a single-node one. Returns whether this call started it (and so should stop it)."""
    import ray

    if ray.is_initialized():
        return False
    options = dict(config.init_options)
    if config.address:
        ray.init(address=config.address, **options)
        return True
    # Workers import whalekit from the same tree as the driver (a source checkout is not
    # necessarily the installed one); a remote cluster gets it through init_options' runtime_env.
    root = str(Path(__file__).resolve().parents[3])
    path = os.environ.get("PYTHONPATH", "")
    if root not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = root + (os.pathsep + path if path else "")
    options.setdefault("include_dashboard", False)
    options.setdefault("num_cpus", max(1, int(config.num_workers * max(config.cpus_per_worker, 1))))
    ray.init(**options)
    return True


class RayBackend:
    """`num_workers` RolloutWorker actors; see the module docstring."""

    def __init__(self, config: BackendConfig, model: str = "tiny-random", sampler_kind: str = "hf",
                 sampler_options: dict[str, Any] | None = None):
        import ray

        self.config, self.model, self.sampler_kind = config, model, sampler_kind
        self.sampler_options = dict(sampler_options or {})
        self._owns_cluster = connect(config)
        self._isolation = isolation_mode()
        self._actor = ray.remote(RolloutWorker).options(
            num_cpus=config.cpus_per_worker, num_gpus=config.gpus_per_worker, max_restarts=0, max_task_retries=0)
        self._version = 0
        self._source: BroadcastSource | None = None  # the sync's meeting point, made at the first sync
        self._spill: WeightSpill | None = None  # the last sync's buckets on disk, for replacement workers
        self.last_sync: dict[str, Any] = {}  # bytes and seconds of the last broadcast
        self._domains: dict[int, tuple[Any, str, Any]] = {}  # id(domain) -> (domain, key, ref)
        self.restarts = 0
        self.stats = [WorkerStats() for _ in range(config.num_workers)]
        self.on_event: Any = None  # callable(dict): dispatch / done / restarted events, for progress and tests
        self.workers = [self._spawn(i) for i in range(config.num_workers)]
        self.worker_info = ray.get([w.info.remote() for w in self.workers])
        self.path = resolve_model_dir(model)
        self.sampler = BackendSampler(self, load_tokenizer(self.path))

    # -- workers ---------------------------------------------------------------------------
    def _spawn(self, index: int) -> Any:
        threads = max(1, int(self.config.cpus_per_worker)) if self.config.gpus_per_worker == 0 else 0
        return self._actor.remote(index, self.model, self.sampler_kind, self.sampler_options, self._isolation,
                                  threads)

    def _emit(self, **event: Any) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def _replace(self, slot: int, reason: str) -> None:
        """A fresh actor in `slot`, holding the current weights before it gets any work."""
        import ray

        try:
            ray.kill(self.workers[slot], no_restart=True)
        except Exception:  # already gone
            pass
        worker = self._spawn(slot)
        self.workers[slot] = worker
        if self._spill is not None and self._spill.holds_weights:
            self._broadcast([slot], self._spill.replay(), self._version)
        elif self.last_sync:
            raise WorkerLostError(f"rollout worker {slot} was replaced ({reason[:200]}), but the current weights "
                                  f"are nowhere to replay from: set backend.spill_weights=true")
        elif self._version != 0:
            ray.get(worker.set_version.remote(self._version))
        self.worker_info[slot] = ray.get(worker.info.remote())
        self.restarts += 1
        self.stats[slot].restarts += 1
        self._emit(event="restarted", worker=slot, reason=reason[:300])

    # -- weights ---------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self._version

    def load_weights(self, state_dict: Any) -> None:
        """Every worker gets `state_dict`, a bucket of whole decoder layers at a time
        (`BackendConfig.sync_bucket_mb`); the version moves on only once every worker holds it."""
        self.load_weight_buckets(state_dict_buckets(state_dict, self._bucket_bytes()))

    def load_weight_buckets(self, buckets: Any) -> None:
        """One sync whose tensors arrive in buckets (a sharded trainer's
        `state_dict_buckets`), each broadcast to every worker before the next is asked for."""
        packed = pack_buckets(buckets)
        if self.config.spill_weights:
            if self._spill is None:
                self._spill = WeightSpill()
            packed = self._spill.recording(packed)
        elif self._spill is not None:  # it holds the version before this one: a replay would be stale
            self._spill.close()
            self._spill = None
        version = self._version + 1
        self._broadcast(list(range(len(self.workers))), packed, version)
        if self._spill is not None:
            self._spill.commit()
        self._version = version

    def _bucket_bytes(self) -> int:
        return max(1, int(self.config.sync_bucket_mb * 2**20))

    def _broadcast(self, slots: list[int], packed: Any, version: int) -> None:
        """`packed` (PackedBucket iterable) to the workers in `slots`, labelled `version`."""
        import ray

        if self._source is None:
            self._source = BroadcastSource(ray.util.get_node_ip_address(), self.config.sync_timeout_s)
        meeting = self._source.meeting(world=1 + len(slots))
        refs = [self.workers[slot].receive_weights.remote(meeting, rank, version)
                for rank, slot in enumerate(slots, start=1)]
        started = time.perf_counter()
        try:
            sent = self._source.send(meeting, packed)
        except Exception:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=5)
            for ref in ready:  # a worker's own error says more than the broadcast's
                ray.get(ref)
            raise
        ray.get(refs)
        self.last_sync = {"bytes": sent, "seconds": time.perf_counter() - started, "workers": len(slots),
                          "version": version}

    def set_version(self, version: int) -> None:
        """Relabel the current weights (a trainer restoring its checkpoint's count)."""
        import ray

        ray.get([w.set_version.remote(version) for w in self.workers])
        self._version = version

    def worker_versions(self) -> list[int]:
        import ray

        return [info["version"] for info in ray.get([w.info.remote() for w in self.workers])]

    # -- rollouts --------------------------------------------------------------------------
    def _domain_ref(self, domain: Any) -> tuple[str, list[Any]]:
        import ray

        if id(domain) not in self._domains:  # the domain object is kept, so its id is not reused
            self._domains[id(domain)] = (domain, f"{domain.name}-{len(self._domains)}", ray.put(domain))
        _, key, ref = self._domains[id(domain)]
        return key, [ref]

    def rollout(self, domain: Any, episodes: list[Any], config: Any = None,
                policy_version: int | None = None) -> list[Any]:
        """`engine.rollout`'s contract: one verified Trajectory per episode, in order, the
        same ones the local engine returns."""
        import ray

        config = config or RolloutConfig()
        if not episodes:
            return []
        spec_of: dict[int, HarnessSpec] = {}  # one spec per runtime object
        runtimes_by_key: dict[str, list[Any]] = collections.defaultdict(list)
        for ep in episodes:
            if id(ep.harness) not in spec_of:
                spec_of[id(ep.harness)] = spec = harness_spec(ep.harness)
                runtimes_by_key[spec.key].append(ep.harness)
        specs = [spec_of[id(ep.harness)] for ep in episodes]
        chunks = plan_chunks(specs, len(self.workers), self.config.worker_capacity)
        domain_key, domain_box = self._domain_ref(domain)
        results: list[Any] = [None] * len(episodes)
        queue = collections.deque(range(len(chunks)))
        free = collections.deque(range(len(self.workers)))
        inflight: dict[Any, tuple[int, int, float]] = {}
        bar = _progress(len(episodes), config)
        lost = 0

        def submit(slot: int, c: int) -> None:
            chunk = chunks[c]
            payload = [(i, episodes[i].task, specs[i].key, episodes[i].sample_index) for i in chunk]
            used = {specs[i].key: specs[i] for i in chunk}
            ref = self.workers[slot].rollout.remote(domain_key, domain_box, payload, used, config, policy_version,
                                                    self._version)
            inflight[ref] = (slot, c, time.perf_counter())
            self._emit(event="dispatch", worker=slot, chunk=c, episodes=len(chunk))

        try:
            while queue and free:
                submit(free.popleft(), queue.popleft())
            while inflight:
                [ref], _ = ray.wait(list(inflight), num_returns=1)
                slot, c, started = inflight.pop(ref)
                try:
                    out = ray.get(ref)
                except ray.exceptions.RayActorError as exc:  # the worker died: a fresh one re-runs the chunk
                    lost += 1
                    if lost > self.config.max_restarts:
                        raise WorkerLostError(f"rollout workers died {lost} times in one rollout (max_restarts="
                                              f"{self.config.max_restarts}); last: {exc}") from exc
                    self._replace(slot, str(exc))
                    queue.appendleft(c)
                except ray.exceptions.RayTaskError as exc:
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, StaleWeightsError):
                        raise StaleWeightsError(str(cause)) from None
                    raise
                else:
                    self._collect(out, results, runtimes_by_key, slot, time.perf_counter() - started)
                    bar.update(len(chunks[c]))
                    self._emit(event="done", worker=slot, chunk=c, episodes=len(chunks[c]),
                               finished=sum(r is not None for r in results), total=len(results))
                free.append(slot)
                while queue and free:
                    submit(free.popleft(), queue.popleft())
        finally:
            bar.close()
        return results

    def _collect(self, out: dict[str, Any], results: list[Any], runtimes_by_key: dict[str, list[Any]], slot: int,
                 seconds: float) -> None:
        for index, trajectory in zip(out["indices"], out["trajectories"]):
            results[index] = trajectory
        # A candidate's worker failure (crash, hook timeout) is read by the search stage from
        # the runtime it built; it happened on the rollout worker, so carry it back.
        for key, failure in out["failures"].items():
            for runtime in runtimes_by_key.get(key, []):
                if failure and hasattr(runtime, "failure") and not getattr(runtime, "respawn", False) \
                        and runtime.failure is None:
                    runtime.failure = failure
        stats = self.stats[slot]
        stats.episodes += len(out["indices"])
        stats.chunks += 1
        stats.generated_tokens += out["generated_tokens"]
        stats.busy_s += seconds

    def progress(self) -> dict[str, Any]:
        """Totals across workers, and per worker."""
        return {"workers": len(self.workers), "restarts": self.restarts, "version": self._version,
                "episodes": sum(s.episodes for s in self.stats),
                "generated_tokens": sum(s.generated_tokens for s in self.stats),
                "per_worker": [vars(s).copy() for s in self.stats]}

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        import ray

        return ray.get(self.workers[0].generate.remote(requests, params, self._version))

    # -- lifetime --------------------------------------------------------------------------
    def policy(self) -> Any:
        """A Policy for the drivers: the tokenizer and model path for the trainer, and a
        sampler that runs on the workers. It holds no model in the driver."""
        return Policy(self.model, self.path, self.sampler.tokenizer, None, self.sampler)

    def close(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        for worker in self.workers:
            try:
                ray.get(worker.close.remote(), timeout=30)
            except Exception:
                pass
            ray.kill(worker, no_restart=True)
        self.workers = []
        if self._spill is not None:
            self._spill.close()
            self._spill = None
        self._source = None
        if self._owns_cluster:
            ray.shutdown()

    def __enter__(self) -> RayBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BackendSampler(Sampler):
    """A Sampler bound to a backend: a rollout whose RolloutSettings name the backend
    (`backends.backend_of(sampler)`) goes to it whole, `generate` runs one batch on the
    workers, `load_weights` broadcasts, `version` is the driver's count."""

    def __init__(self, backend: Any, tokenizer: Any):
        self.rollout_backend = backend
        self.tokenizer = tokenizer

    @property
    def version(self) -> int:
        return self.rollout_backend.version

    @version.setter
    def version(self, value: int) -> None:
        self.rollout_backend.set_version(int(value))

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        return self.rollout_backend.generate(requests, params)

    def load_weights(self, state_dict: Any) -> None:
        self.rollout_backend.load_weights(state_dict)

    def load_weight_buckets(self, buckets: Any) -> None:
        self.rollout_backend.load_weight_buckets(buckets)

    def close(self) -> None:
        self.rollout_backend.close()
