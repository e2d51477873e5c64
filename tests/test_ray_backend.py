"""The Ray backend on one single-node cluster for the whole session (2 CPUs, no dashboard,
a real cluster, not local mode): two rollout workers give exactly the local engine's
trajectories, get new weights over a gloo group and not through the object store, survive a
worker killed mid-stage (its replacement replays the last sync from the driver's disk), and
refuse to sample with stale weights."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed: pip install -e '.[ray]' (the backend is an extra)")

from fakes.harnesses import CALCULATOR_FIRST_SOURCE  # noqa: E402

from whalekit.domains.base import get_domain  # noqa: E402
from whalekit.rollouts.backends import BackendConfig, StaleWeightsError, WorkerLostError, make_backend  # noqa: E402
from whalekit.rollouts.engine import Episode, InProcessHarness, RolloutConfig, rollout  # noqa: E402
from whalekit.samplers.base import SamplingParams  # noqa: E402
from whalekit.samplers.models import load_policy  # noqa: E402


@pytest.fixture(scope="session")
def ray_cluster():
    from whalekit.rollouts.backends.ray_backend import connect

    started = connect(BackendConfig(kind="ray", init_options={"num_cpus": 2, "include_dashboard": False,
                                                              "log_to_driver": False}))
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def backend(ray_cluster):
    backend = make_backend(BackendConfig(kind="ray", num_workers=2, cpus_per_worker=1), model="tiny-random")
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def local():
    """A local policy of its own (the session's tiny_policy must keep its weights)."""
    return load_policy("tiny-random")


_BASE: dict = {}


def _weights(scale: float) -> dict:
    """tiny-random's weights, moved by `scale` times fixed noise (0: the base weights)."""
    import torch

    if not _BASE:
        _BASE.update({k: v.clone() for k, v in load_policy("tiny-random").model.state_dict().items()})
    generator = torch.Generator().manual_seed(1)
    return {k: v + scale * torch.randn(v.shape, generator=generator) for k, v in _BASE.items()}


def _sync(backend, local, scale: float) -> None:
    """The same weights in the local sampler and on every worker, under the same version label."""
    state = _weights(scale)
    local.sampler.load_weights(state)
    backend.load_weights(state)
    local.sampler.version = backend.version


def _episodes(domain, isolated: bool = True, n_tasks: int = 4, samples: int = 2):
    from whalekit.sandbox.isolation import IsolatedHarness

    tasks = domain.load_splits(n_tasks, 1, 1, seed=0).train
    h0 = InProcessHarness(domain.initial_harness_source())
    episodes = [Episode(t, h0, i) for t in tasks for i in range(samples)]
    runtimes = []
    if isolated:
        runtimes.append(IsolatedHarness(CALCULATOR_FIRST_SOURCE))
        episodes += [Episode(t, runtimes[-1], i) for t in tasks for i in range(samples)]
    return episodes, runtimes


def _record(trajectories) -> list[dict]:
    return [{**dataclasses.asdict(t), "timings": {}} for t in trajectories]


def _compare(backend, local, isolated: bool = True, config: RolloutConfig | None = None):
    domain = get_domain("toy")
    config = config or RolloutConfig(seed=3, step=2, progress=False)
    episodes, runtimes = _episodes(domain, isolated)
    try:
        expected = rollout(domain, episodes, local.sampler, config)
        got = backend.rollout(domain, episodes, config)
    finally:
        for runtime in runtimes:
            runtime.close()
    return expected, got


def test_two_workers_give_exactly_the_local_trajectories(backend, local):
    _sync(backend, local, 0.0)
    before = [s.episodes for s in backend.stats]
    expected, got = _compare(backend, local)
    assert _record(got) == _record(expected)
    assert any(t.turns and t.turns[0].tool_results == [] for t in got)  # h0
    assert any(t.flags.get("initial_tool_results") for t in got)  # the sandboxed multi-turn candidate
    assert all(s.episodes > b for s, b in zip(backend.stats, before)), "both workers must have sampled"
    assert {t.policy_version for t in got} == {backend.version}
    # greedy too, and the sampler bound to the backend answers direct generate calls
    greedy = RolloutConfig(sampling=SamplingParams(temperature=0.0), seed=0, progress=False)
    expected, got = _compare(backend, local, isolated=False, config=greedy)
    assert _record(got) == _record(expected)


def test_new_weights_reach_every_worker_and_change_the_samples(backend, local):
    _sync(backend, local, 0.0)
    _, at_base = _compare(backend, local, isolated=False)
    _sync(backend, local, 0.05)
    assert backend.worker_versions() == [backend.version] * 2
    expected, got = _compare(backend, local, isolated=False)
    assert _record(got) == _record(expected)
    assert [t.turns[0].completion_ids for t in got] != [t.turns[0].completion_ids for t in at_base]


def test_weights_reach_the_workers_bucket_by_bucket_without_the_object_store(backend, local):
    puts = []
    real_put = ray.put  # the backend calls `ray.put` on the module, so this sees every put it makes

    def counting_put(value, *args, **kwargs):
        puts.append(type(value).__name__)
        return real_put(value, *args, **kwargs)

    ray.put = counting_put
    try:
        _sync(backend, local, 0.02)
    finally:
        ray.put = real_put
    assert puts == []
    assert backend.last_sync["workers"] == 2 and backend.last_sync["version"] == backend.version
    weights = sum(t.numel() * t.element_size() for t in _weights(0.0).values())
    assert weights <= backend.last_sync["bytes"] < weights + 64 * len(_BASE)  # once each, at most aligned
    assert backend.worker_versions() == [backend.version] * 2
    expected, got = _compare(backend, local, isolated=False)
    assert _record(got) == _record(expected)


def test_a_worker_killed_mid_stage_is_replaced_and_its_episodes_rerun_to_the_same_result(backend, local):
    _sync(backend, local, 0.05)  # the replacement must come back holding these weights, not the base ones
    killed = []

    def kill_worker_one(event):
        # Its chunk is submitted and worker 0 is sampling: the stage is under way. (Killed
        # here, not after a delay, so that the chunk cannot have finished first.)
        if event["event"] == "dispatch" and event["worker"] == 1 and not killed:
            ray.kill(backend.workers[1])
            killed.append(event)

    restarts = backend.restarts
    backend.on_event = kill_worker_one
    try:
        expected, got = _compare(backend, local)
    finally:
        backend.on_event = None
    assert killed and backend.restarts == restarts + 1
    assert _record(got) == _record(expected)
    assert backend.worker_versions() == [backend.version] * 2


def test_without_the_spill_a_replaced_worker_is_refused_rather_than_sampling_the_base_weights(backend, local):
    backend.config.spill_weights = False
    try:
        _sync(backend, local, 0.03)
        ray.kill(backend.workers[0])
        domain = get_domain("toy")
        episodes, _ = _episodes(domain, isolated=False, n_tasks=2, samples=1)
        with pytest.raises(WorkerLostError, match="nowhere to replay from: set backend.spill_weights=true"):
            backend.rollout(domain, episodes, RolloutConfig(progress=False))
    finally:
        backend.config.spill_weights = True
    _sync(backend, local, 0.05)  # the next sync reaches the fresh worker too
    assert backend.worker_versions() == [backend.version] * 2
    expected, got = _compare(backend, local, isolated=False)
    assert _record(got) == _record(expected)


def test_a_worker_holding_old_weights_is_refused(backend, local):
    old = _weights(0.0)
    _sync(backend, local, 0.05)
    ray.get(backend.workers[1].load_weights.remote(old, backend.version - 1))  # worker 1 falls behind
    domain = get_domain("toy")
    episodes, _ = _episodes(domain, isolated=False)
    with pytest.raises(StaleWeightsError, match=rf"worker 1 .* version {backend.version - 1}, the driver is at "
                                                rf"version {backend.version}"):
        backend.rollout(domain, episodes, RolloutConfig(progress=False))
    _sync(backend, local, 0.05)  # a fresh broadcast brings it back
    assert backend.worker_versions() == [backend.version] * 2


def test_it_runs_inside_a_running_event_loop_as_in_a_notebook(backend, local):
    _sync(backend, local, 0.0)
    domain = get_domain("toy")
    episodes, _ = _episodes(domain, isolated=False, n_tasks=2, samples=1)

    async def cell():  # a notebook cell: the kernel's loop is running
        return backend.rollout(domain, episodes, RolloutConfig(seed=1, progress=False))

    got = asyncio.run(cell())
    assert _record(got) == _record(rollout(domain, episodes, local.sampler, RolloutConfig(seed=1, progress=False)))
    assert backend.progress()["episodes"] >= len(episodes)


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_a_whale_run_on_ray_logs_exactly_the_events_of_a_local_run(backend, local, tmp_path):
    from whalekit.infra.runs import without_timings
    from whalekit.run.driver import resolve_config, run_method

    base = _weights(0.0)
    backend.load_weights(base)
    backend.sampler.version = 0

    def config(name):
        return resolve_config("smoke", domain="toy", method="whale", runs_root=str(tmp_path / name))

    on_local = run_method(config("local"), policy=load_policy("tiny-random"))
    episodes_before = backend.progress()["episodes"]
    on_ray = run_method(config("ray"), policy=backend.policy())
    assert backend.progress()["episodes"] > episodes_before  # it really ran on the workers
    assert without_timings(on_ray.events()) == without_timings(on_local.events())
    assert {e["event"] for e in on_ray.events()} >= {"rsft_batch", "search_iteration", "test_eval"}
