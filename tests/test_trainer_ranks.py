"""The RSFT trainer on sharded ranks (`rsft.trainer_ranks`, whalekit.weights.distributed.trainer_ranks), with the tiny
random model on 2 gloo ranks: a weight step trains what the in-process trainer trains on the same
accepted trajectories (float32 compute: to float32 summation order), the sampler gets the gathered
weights, a run resumes from the ranks' sharded checkpoint as if never stopped, a rank's failure is
an error that names it, and no rank process outlives its trainer. Each 2-rank trainer spawns two
processes that load torch (about 10 s on 2 cores): the module is marked slow."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_rsft import ShortReply, _trainer

from whalekit.infra.lifetime import pid_alive
from whalekit.rollouts.engine import InProcessHarness
from whalekit.samplers.models import load_policy
from whalekit.weights.distributed.trainer_ranks import RankFailedError, TrainerRanks
from whalekit.weights.rsft_config import RSFTConfig

pytestmark = pytest.mark.slow

LR = 5e-3  # test_rsft._trainer's
SHARDED = {"lora": False, "trainer_ranks": 2, "sharded_compute_dtype": "float32"}
IN_PROCESS = {"lora": False, "train_dtype": "float32"}


def assert_same_first_adamw_step(got: torch.Tensor, expected: torch.Tensor, name: str) -> None:
    """The two trainers' weights after one AdamW step from the same start: equal to 1e-6 but for
    rare elements whose gradient is near 0, where AdamW's first step, lr x g / (|g| + eps), turns a
    float-summation rounding of g into up to 2 x lr (docs/gpu.md); at most 1 in 1,000 of a tensor."""
    difference = (got - expected).abs()
    assert float(difference.max()) <= 2 * LR, name
    assert int((difference > 1e-6).sum()) <= max(1, got.numel() // 1000), name


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """`pids`, once none is alive or after `timeout` seconds (a process killed by a signal, or by
    Ray's kill, exits a moment after the kill returns)."""
    deadline = time.monotonic() + timeout
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return pids


def assert_all_gone(pids: list[int]) -> None:
    assert pids and not [pid for pid in pids if pid_alive(pid)], "a trainer rank outlived its trainer"


def test_lora_on_sharded_ranks_is_refused_with_what_to_set():
    with pytest.raises(ValueError, match="rsft.lora=false"):
        RSFTConfig(trainer_ranks=2)
    with pytest.raises(ValueError, match="sharded_compute_dtype"):
        RSFTConfig(lora=False, trainer_ranks=2, sharded_compute_dtype="float16")


def test_two_ranks_train_what_the_in_process_trainer_trains_and_the_sampler_gets_it():
    harness = InProcessHarness(ShortReply())
    single = _trainer(load_policy("tiny-random"), **IN_PROCESS)
    record_single = single.step(harness)
    policy = load_policy("tiny-random")
    sharded = _trainer(policy, **SHARDED)
    pids = sharded.ranks.pids
    assert len(pids) == 2 and all(pid_alive(pid) for pid in pids)
    record_sharded = sharded.step(harness)  # the same initial weights and seed: the same batch
    assert (record_sharded.sampled, record_sharded.accepted) == (record_single.sampled, record_single.accepted)
    assert record_sharded.trained_tokens == record_single.trained_tokens > 0
    assert record_sharded.loss == pytest.approx(record_single.loss, rel=1e-5)
    expected, got = single.merged_state_dict(), sharded.merged_state_dict()
    assert set(got) >= {k for k in expected if "rotary" not in k}
    initial = load_policy("tiny-random").sampler.model.state_dict()
    moved = 0
    for name, tensor in got.items():
        assert_same_first_adamw_step(tensor, expected[name], name)
        moved += not torch.equal(tensor, initial[name])
    assert moved, "the step changed no weight"
    sampler_state = policy.sampler.model.state_dict()
    assert all(torch.equal(sampler_state[k], v.to(sampler_state[k].dtype)) for k, v in got.items())
    assert policy.sampler.version == 1
    sharded.ranks.close()
    assert_all_gone(pids)


def test_the_ranks_sync_the_sampler_a_bucket_of_layers_at_a_time_with_the_whole_gathers_weights():
    from whalekit.weights.distributed.sharded_checkpoint import bucket_plan

    reference = load_policy("tiny-random").sampler.model
    layer = sum(v.numel() * 4 for k, v in reference.state_dict().items() if ".layers.0." in k)  # float32 shards
    policy = load_policy("tiny-random")
    sharded = _trainer(policy, **SHARDED, sync_bucket_mb=layer / 2**20)
    sharded.step(InProcessHarness(ShortReply()))  # its sync went bucket by bucket
    whole = sharded.merged_state_dict()
    buckets = list(sharded.ranks.state_dict_buckets(layer))
    assert [list(b) for b in buckets] == bucket_plan(reference, layer) and len(buckets) >= 3
    assert all(torch.equal(bucket[name], whole[name]) for bucket in buckets for name in bucket)
    assert sorted(n for b in buckets for n in b) == sorted(set(whole) - {"lm_head.weight"}), "a tied head once"
    sampler_state = policy.sampler.model.state_dict()
    assert all(torch.equal(sampler_state[k], v.to(sampler_state[k].dtype)) for k, v in whole.items())
    assert policy.sampler.version == 1, "one sync, however many buckets"
    sharded.ranks.close()


def test_a_run_resumes_from_the_ranks_sharded_checkpoint_as_if_never_stopped(tmp_path):
    harness = InProcessHarness(ShortReply())
    straight = _trainer(load_policy("tiny-random"), **SHARDED)
    straight.step(harness)
    straight.step(harness)
    expected = straight.merged_state_dict()
    first = _trainer(load_policy("tiny-random"), **SHARDED)
    first.step(harness)
    first.save_checkpoint(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "sharded" / "COMPLETE.json").is_file()
    resumed = _trainer(load_policy("tiny-random"), **SHARDED)
    resumed.load_checkpoint(tmp_path / "ckpt")
    resumed.step(harness)
    got = resumed.merged_state_dict()
    assert all(torch.allclose(got[k], expected[k], atol=1e-6) for k in expected)
    assert resumed.state.rewards == straight.state.rewards and resumed.state.step == straight.state.step
    pids = [pid for trainer in (straight, first, resumed) for pid in trainer.ranks.pids]
    del straight, first, resumed
    gc.collect()  # a trainer dropped without close(): its ranks stop with it
    assert_all_gone(pids)


def test_a_rank_that_fails_to_start_is_an_error_naming_it_and_no_rank_is_left(tmp_path):
    config = RSFTConfig(**SHARDED)
    before = {p.pid for p in _spawned_children()}
    with pytest.raises(RankFailedError, match=r"trainer rank \d failed during 'ready'"):
        TrainerRanks(tmp_path / "no-model-here", config, pad_id=0)
    assert {p.pid for p in _spawned_children()} <= before


def test_a_whale_run_trains_on_sharded_ranks_end_to_end(tmp_path, monkeypatch):
    """`--set rsft.trainer_ranks=2 --set rsft.lora=false` through the driver: every weight step
    trains on the ranks, the run ends at its budget, and no rank is left after it. The random
    model solves no toy problem (nor gives an answer h0 parses), so the verifier accepts all."""
    from whalekit.domains.base import Verdict
    from whalekit.domains.toy import ToyDomain
    from whalekit.run.driver import resolve_config, run_method

    monkeypatch.setattr(ToyDomain, "verify", lambda self, task, answer: Verdict(True, 1.0, {"format_valid": True}))
    before = {p.pid for p in _spawned_children()}
    config = resolve_config("smoke", domain="toy", method="whale", runs_root=str(tmp_path),
                            rsft={"lora": False, "trainer_ranks": 2, "sharded_compute_dtype": "float32"})
    run = run_method(config, policy=load_policy("tiny-random"))
    batches = run.events("rsft_batch")
    assert batches and any(b["loss"] is not None and b["trained_tokens"] > 0 for b in batches)
    assert run.events("run_end")[-1]["rollouts"] == run.events("run_end")[-1]["budget"]
    assert {p.pid for p in _spawned_children()} <= before  # the driver's close() stopped them, not a collection


DRIVER = """
import sys, time
from whalekit.samplers.model_files import resolve_model_dir
from whalekit.weights.rsft_config import RSFTConfig
from whalekit.weights.distributed.trainer_ranks import TrainerRanks
ranks = TrainerRanks(resolve_model_dir("tiny-random"), RSFTConfig(lora=False, trainer_ranks=2), pad_id=0)
print(*ranks.pids, flush=True)
time.sleep(300)
"""


def test_the_ranks_die_with_a_driver_that_is_sigkilled():
    """No Python cleanup runs on SIGKILL: the kernel's parent-death signal ends the ranks."""
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=Path(__file__).resolve().parents[1],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None
        pids = [int(pid) for pid in driver.stdout.readline().split()]
        assert len(pids) == 2 and all(pid_alive(pid) for pid in pids)
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
        assert_all_gone(wait_gone(pids, 10))
    finally:
        driver.kill()
        driver.wait()


def _spawned_children():
    """This process's live children started by multiprocessing's spawn (trainer ranks; not its
    resource tracker, which multiprocessing keeps for the life of the process)."""
    import psutil

    return [p for p in psutil.Process(os.getpid()).children(recursive=True) if p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE and "multiprocessing.spawn" in " ".join(p.cmdline())]
