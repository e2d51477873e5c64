"""Rollout backends without a cluster: the config, the local backend, how episodes are cut
into worker chunks, and that `import whalekit.rollouts.backends` never imports Ray."""

from __future__ import annotations

import subprocess
import sys

import pytest

from whalekit.domains.base import get_domain
from whalekit.rollouts.backends import BackendConfig, LocalBackend, make_backend
from whalekit.rollouts.backends.worker import HarnessSpec, plan_chunks
from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, rollout


def test_local_is_the_default_and_nonsense_is_rejected():
    assert BackendConfig().kind == "local"
    for bad in ({"kind": "slurm"}, {"num_workers": 0}, {"worker_capacity": 0}, {"max_restarts": -1},
                {"gpus_per_worker": -1}):
        with pytest.raises(ValueError):
            BackendConfig(**bad)
    with pytest.raises(ValueError, match="needs the sampler"):
        make_backend(BackendConfig())


def test_the_local_backend_is_exactly_the_engine(tiny_policy):
    domain = get_domain("toy")
    tasks = domain.load_splits(3, 1, 1, seed=0).train
    harness = InProcessHarness(domain.initial_harness_source())
    episodes = [Episode(t, harness, i) for t in tasks for i in range(2)]
    config = RolloutConfig(seed=5, progress=False)
    backend = make_backend(BackendConfig(), tiny_policy.sampler)
    assert isinstance(backend, LocalBackend) and backend.version == tiny_policy.sampler.version
    via_backend = backend.rollout(domain, episodes, config)
    direct = rollout(domain, episodes, tiny_policy.sampler, config)
    strip = [(t.turns[0].completion_ids, t.seed, t.reward) for t in direct]
    assert [(t.turns[0].completion_ids, t.seed, t.reward) for t in via_backend] == strip


def _spec(name: str, persistent: bool = True) -> HarnessSpec:
    return HarnessSpec("trusted" if persistent else "isolated", name, source=name)


def test_chunks_share_the_episodes_evenly_within_capacity_and_keep_their_order():
    specs = [_spec("h0")] * 10
    assert plan_chunks(specs, num_workers=2, capacity=64) == [list(range(5)), list(range(5, 10))]
    chunks = plan_chunks(specs, num_workers=2, capacity=3)
    assert chunks == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]  # more chunks than workers: handed to whoever is free


def test_a_one_off_candidates_episodes_stay_on_one_worker():
    # Two candidates, interleaved: each one's episodes share one harness worker process in
    # the local engine (whose death ends them all), so they must not be split.
    a, b = _spec("cand-a", persistent=False), _spec("cand-b", persistent=False)
    specs = [a, b, a, b, a, b]
    chunks = plan_chunks(specs, num_workers=2, capacity=64)
    assert sorted(map(sorted, chunks)) == [[0, 2, 4], [1, 3, 5]]
    assert not a.persistent and _spec("h0").persistent


def test_importing_whalekit_backends_does_not_import_ray():
    code = "import sys, whalekit.rollouts.backends, whalekit.rollouts.backends.worker; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
