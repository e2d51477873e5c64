"""The RSFT trainer's sharded ranks as Ray actors (`rsft.trainer_launcher: ray`,
whalekit.weights.distributed.ray_trainer_ranks), on a local Ray cluster with 2 CPUs and 2 gloo ranks: a weight step
trains what the in-process trainer trains (the spawned ranks' tolerance), the sampler gets the
weights bucket by bucket, their sharded checkpoint resumes on spawned ranks, a rank that cannot
start is an error naming it that gives back the actors' CPUs, and close() ends the actors.
Marked slow: a Ray cluster and two torch actors take about 20 s to start on 2 cores."""

from __future__ import annotations

import time

import pytest
import torch
from test_rsft import ShortReply, _trainer
from test_trainer_ranks import IN_PROCESS, SHARDED, assert_all_gone, assert_same_first_adamw_step, wait_gone

from whalekit.rollouts.backends.base import BackendConfig
from whalekit.rollouts.engine import InProcessHarness
from whalekit.samplers.models import load_policy
from whalekit.weights.distributed.trainer_ranks import RankFailedError
from whalekit.weights.rsft_config import RSFTConfig

ray = pytest.importorskip("ray", reason="ray is not installed: pip install -e '.[ray]' (the Ray launcher is an extra)")

pytestmark = pytest.mark.slow
ON_RAY = {**SHARDED, "trainer_launcher": "ray"}


@pytest.fixture(scope="module")
def ray_cluster():
    from whalekit.rollouts.backends.ray_backend import connect

    started = connect(BackendConfig(kind="ray", init_options={"num_cpus": 2, "include_dashboard": False,
                                                              "log_to_driver": False}))
    yield
    if started:
        ray.shutdown()


def _free_cpus_back(total: float, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while ray.available_resources().get("CPU", 0.0) < total and time.monotonic() < deadline:
        time.sleep(0.2)
    return ray.available_resources().get("CPU", 0.0) >= total


def test_ray_ranks_train_what_the_in_process_trainer_trains_and_sync_the_sampler_in_buckets(ray_cluster, tmp_path):
    harness = InProcessHarness(ShortReply())
    single = _trainer(load_policy("tiny-random"), **IN_PROCESS)
    record_single = single.step(harness)
    policy = load_policy("tiny-random")
    on_ray = _trainer(policy, **ON_RAY, sync_bucket_mb=0.5)  # the tiny model's layers: several buckets
    pids = on_ray.ranks.pids
    assert len(set(pids)) == 2 and ray.available_resources().get("CPU", 0.0) == 0, "each rank holds a CPU"
    record = on_ray.step(harness)
    assert (record.sampled, record.accepted, record.trained_tokens) == \
        (record_single.sampled, record_single.accepted, record_single.trained_tokens)
    assert record.loss == pytest.approx(record_single.loss, rel=1e-5)
    expected, got = single.merged_state_dict(), on_ray.merged_state_dict()
    for name, tensor in got.items():
        assert_same_first_adamw_step(tensor, expected[name], name)
    sampler_state = policy.sampler.model.state_dict()
    assert all(torch.equal(sampler_state[k], v.to(sampler_state[k].dtype)) for k, v in got.items())
    assert policy.sampler.version == 1
    on_ray.save_checkpoint(tmp_path / "ckpt")
    spawned = _trainer(load_policy("tiny-random"), **SHARDED)  # the checkpoint knows no launcher
    spawned.load_checkpoint(tmp_path / "ckpt")
    resumed = spawned.merged_state_dict()
    assert all(torch.equal(resumed[k], got[k]) for k in got)
    spawned.ranks.close()
    on_ray.ranks.close()
    assert_all_gone(wait_gone(pids, 20))
    assert _free_cpus_back(2.0), "the actors' CPUs come back to the cluster"


def test_a_ray_rank_that_cannot_start_is_an_error_naming_it_and_frees_its_cpu(ray_cluster, tmp_path):
    from whalekit.weights.distributed.ray_trainer_ranks import RayTrainerRanks

    with pytest.raises(RankFailedError, match=r"trainer rank \d failed during 'start'"):
        RayTrainerRanks(tmp_path / "no-model-here", RSFTConfig(**ON_RAY), pad_id=0)
    assert _free_cpus_back(2.0)


def test_ray_assigns_the_gpus_so_trainer_devices_is_refused_with_it():
    with pytest.raises(ValueError, match="drop one of the two"):
        RSFTConfig(**ON_RAY, trainer_devices=[0, 1])
    with pytest.raises(ValueError, match="trainer_launcher"):
        RSFTConfig(**{**ON_RAY, "trainer_launcher": "torchrun"})
