"""A rollout worker: one sampler, its own harness runtimes and tool sandboxes, running
chunks of episodes through the ordinary engine. The Ray backend makes it an actor; the
class itself imports no Ray, so its logic is the local engine's, word for word.

What travels to a worker is plain data: tasks, harness *specs* (source strings, never
live runtimes: a worker builds its own `IsolatedHarness` processes behind its own
sandbox). The weights arrive a bucket at a time over a torch.distributed group the driver
leads (`receive_weights`, `whalekit.rollouts.backends.weight_broadcast`), not through the object store.

    worker = RolloutWorker(0, "tiny-random")
    out = worker.rollout(domain, chunk, specs, RolloutConfig(seed=0), None, expected_version=0)
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import pickle
import socket
import time
import warnings
from dataclasses import dataclass
from typing import Any

from whalekit.rollouts.backends.base import StaleWeightsError
from whalekit.rollouts.backends.weight_broadcast import receive_buckets
from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, rollout
from whalekit.samplers.models import load_policy
from whalekit.sandbox.bwrap import isolation_mode, set_isolation_mode
from whalekit.sandbox.isolation import IsolatedHarness
from whalekit.types import Task


@dataclass(frozen=True)
class HarnessSpec:
    """How a worker rebuilds a harness runtime. `trusted`: whalekit's own h0, run in the
    worker's process (as the driver would); `isolated`: a candidate, run in a sandboxed
    worker process of the rollout worker; `object`: a trusted runtime the driver built
    from a Harness instance (tests, notebooks), pickled."""

    kind: str  # trusted | isolated | object
    harness_id: str
    source: str | None = None
    limits: Any = None  # IsolationLimits for `isolated`
    respawn: bool = False
    payload: bytes | None = None  # `object`: the runtime, cloudpickled

    @property
    def key(self) -> str:
        digest = hashlib.sha256(repr((self.kind, self.harness_id, self.source, self.limits, self.respawn)).encode())
        if self.payload is not None:
            digest.update(self.payload)
        return f"{self.harness_id}:{digest.hexdigest()[:12]}"

    @property
    def persistent(self) -> bool:
        """Kept by a worker across calls. A one-off candidate (isolated, no respawn) lives
        for one call, as in `search.evaluate_candidates`: its episodes share one worker process
        whose failure ends them all, so they must all run on the same rollout worker."""
        return self.kind != "isolated" or self.respawn


def harness_spec(runtime: Any) -> HarnessSpec:
    if isinstance(runtime, IsolatedHarness):
        return HarnessSpec("isolated", runtime.harness_id, runtime.source, runtime.limits, runtime.respawn)
    if isinstance(runtime, InProcessHarness) and runtime.source is not None:
        return HarnessSpec("trusted", runtime.harness_id, runtime.source)
    from ray import cloudpickle

    return HarnessSpec("object", runtime.harness_id, payload=cloudpickle.dumps(runtime))


def build_runtime(spec: HarnessSpec) -> Any:
    if spec.kind == "trusted":
        return InProcessHarness(spec.source or "", spec.harness_id)
    if spec.kind == "isolated":
        return IsolatedHarness(spec.source or "", spec.limits, spec.harness_id, respawn=spec.respawn)

    return pickle.loads(spec.payload or b"")


def plan_chunks(specs: list[HarnessSpec], num_workers: int, capacity: int) -> list[list[int]]:
    """Cut episode indices into chunks of at most `capacity` (about an even share per
    worker when everything fits at once), never splitting a one-off candidate's episodes.
    Each chunk keeps the episodes' original order, so a candidate's worker process sees
    exactly the calls it would see in the local engine."""
    groups: list[list[int]] = []
    owner: dict[str, int] = {}
    for index, spec in enumerate(specs):
        if not spec.persistent:
            if spec.key in owner:
                groups[owner[spec.key]].append(index)
                continue
            owner[spec.key] = len(groups)
        groups.append([index])
    target = max(1, min(capacity, math.ceil(len(specs) / num_workers)))
    chunks: list[list[int]] = []
    current: list[int] = []
    for group in groups:
        if current and len(current) + len(group) > target:
            chunks.append(sorted(current))
            current = []
        current += group
    if current:
        chunks.append(sorted(current))
    return chunks


class RolloutWorker:
    """One sampler and its harness runtimes. Methods take and return plain picklable data."""

    def __init__(self, index: int, model: str, sampler_kind: str = "hf", sampler_options: dict[str, Any] | None = None,
                 isolation: str = "sandbox", threads: int = 0):
        if threads > 0:
            import torch

            torch.set_num_threads(threads)
        if isolation != isolation_mode():
            with warnings.catch_warnings():  # the driver already warned, once, where the user sees it
                warnings.simplefilter("ignore")
                set_isolation_mode(isolation)
        options = dict(sampler_options or {})
        if sampler_kind in ("vllm", "auto"):  # options are VLLMSampler's (RunConfig.vllm_options)
            policy = load_policy(model, sampler=sampler_kind, vllm_options=options)
        else:  # options are load_policy's (dtype, max_batch_size)
            policy = load_policy(model, **options)
        self.index, self.sampler = index, policy.sampler
        self._domains: dict[str, Any] = {}
        self._runtimes: dict[str, Any] = {}  # persistent runtimes by spec key

    def info(self) -> dict[str, Any]:
        return {"index": self.index, "pid": os.getpid(), "host": socket.gethostname(), "version": self.sampler.version}

    def load_weights(self, state_dict: Any, version: int) -> int:
        self.sampler.load_weights(state_dict)
        self.sampler.version = version  # the driver's count is the one truth, also for a replaced worker
        return version

    def receive_weights(self, meeting: Any, rank: int, version: int) -> int:
        """One sync from the driver (`weight_broadcast.BroadcastSource.send`): each bucket goes
        into the sampler as it arrives. The whole stream is read even if the sampler refuses a
        bucket, so that the driver's broadcast ends for every rank; the error is then raised, and
        the worker marks itself stale (version -1: the driver refuses to sample with it)."""
        stream = receive_buckets(meeting, rank)
        load = getattr(self.sampler, "load_weight_buckets", None)
        try:
            if load is not None:
                load(stream)
            else:  # a sampler that takes only whole state dicts (each bucket's views keep its own buffer)
                whole: dict[str, Any] = {}
                for bucket in stream:
                    whole.update(bucket)
                self.sampler.load_weights(whole)
        except BaseException:
            self.sampler.version = -1  # a mix of two versions: no driver version matches it
            raise
        finally:
            for _ in stream:
                pass
        self.sampler.version = version
        return version

    def set_version(self, version: int) -> int:
        self.sampler.version = version
        return version

    def _check(self, expected_version: int) -> None:
        if self.sampler.version != expected_version:
            raise StaleWeightsError(
                f"rollout worker {self.index} (pid {os.getpid()}) holds weights version {self.sampler.version}, "
                f"the driver is at version {expected_version}: refusing to sample with stale weights "
                f"(broadcast the current weights with backend.load_weights, or replace the worker)")

    def generate(self, requests: list[Any], params: Any, expected_version: int) -> list[Any]:
        self._check(expected_version)
        return self.sampler.generate(requests, params)

    def _domain(self, key: str, box: list[Any]) -> Any:
        """The domain, fetched from the object store once per worker (`box` holds its ref,
        inside a list so that Ray does not fetch it on every call)."""
        if key not in self._domains:
            item = box[0]
            if type(item).__name__ == "ObjectRef":
                import ray

                item = ray.get(item)
            self._domains[key] = item
        return self._domains[key]

    def rollout(self, domain_key: str, domain_box: list[Any], episodes: list[tuple[int, Task, str, int]],
                specs: dict[str, HarnessSpec], config: RolloutConfig, policy_version: int | None,
                expected_version: int) -> dict[str, Any]:
        """Run one chunk; `episodes` are (index, task, spec key, sample index)."""
        self._check(expected_version)
        domain = self._domain(domain_key, domain_box)
        runtimes: dict[str, Any] = {}
        for key, spec in specs.items():
            if spec.persistent:
                if key not in self._runtimes:
                    self._runtimes[key] = build_runtime(spec)
                runtimes[key] = self._runtimes[key]
            else:
                runtimes[key] = build_runtime(spec)
        started = time.perf_counter()
        try:
            trajectories = rollout(domain, [Episode(task, runtimes[key], sample) for _, task, key, sample in episodes],
                                   self.sampler, dataclasses.replace(config, progress=False), policy_version)
        finally:
            failures = {key: getattr(rt, "failure", None) for key, rt in runtimes.items()}
            for key, runtime in runtimes.items():
                if not specs[key].persistent and hasattr(runtime, "close"):
                    runtime.close()
        return {"indices": [i for i, _, _, _ in episodes], "trajectories": trajectories, "failures": failures,
                "worker": self.index, "wall_s": time.perf_counter() - started,
                "generated_tokens": sum(t.generated_tokens for t in trajectories), "version": self.sampler.version}

    def close(self) -> None:
        for runtime in self._runtimes.values():
            if hasattr(runtime, "close"):
                runtime.close()
        self._runtimes.clear()
        self.sampler.close()
