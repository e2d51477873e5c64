"""The GPU trainer's options, specified on CPU: weight dtype, bf16 updates that do not
vanish, and the optional unsloth backend with its fallback to peft."""

from __future__ import annotations

import importlib.machinery
import logging
import sys
import types

import pytest
import torch

from whalekit.weights.optim import BF16AdamW, stochastic_round_bf16
from whalekit.weights.rsft import resolve_backend, resolve_train_dtype
from whalekit.weights.rsft_config import RSFTConfig

# --- weight dtype -------------------------------------------------------------------------


def test_auto_train_dtype_is_bf16_on_cuda_and_float32_on_cpu():
    assert resolve_train_dtype("auto", "cuda") == "bfloat16"
    assert resolve_train_dtype("auto", "cuda", bf16_ok=False) == "float32"  # pre-Ampere GPUs
    assert resolve_train_dtype("auto", "cpu") == "float32"
    assert resolve_train_dtype("bfloat16", "cpu") == "bfloat16"  # an explicit choice is kept
    assert resolve_train_dtype("float32", "cuda") == "float32"
    assert RSFTConfig().train_dtype == "auto"


def test_unknown_dtype_and_backend_are_config_errors():
    with pytest.raises(ValueError, match="train_dtype 'fp8'"):
        RSFTConfig(train_dtype="fp8")
    with pytest.raises(ValueError, match="backend 'deepspeed'"):
        RSFTConfig(backend="deepspeed")
    with pytest.raises(ValueError, match="LoRA"):
        RSFTConfig(backend="unsloth", lora=False)


def test_stochastic_rounding_is_unbiased_where_round_to_nearest_loses_the_update():
    base = torch.tensor(0.02).bfloat16().float().item()  # a bf16 value; the next one up is base + 2**-13
    value = torch.full((20_000,), base + 1e-5)  # far below half a bf16 step above it
    assert torch.equal(value.to(torch.bfloat16).float(), torch.full_like(value, base))
    rounded = stochastic_round_bf16(value, torch.Generator().manual_seed(0)).float()
    assert set(rounded.unique().tolist()) == {base, base + 2 ** -13}  # only the two neighbours
    assert rounded.mean().item() == pytest.approx(base + 1e-5, abs=2e-6)
    negative = stochastic_round_bf16(-value, torch.Generator().manual_seed(1)).float()
    assert negative.mean().item() == pytest.approx(-(base + 1e-5), abs=2e-6)


def test_bf16_adamw_learns_at_a_small_learning_rate_where_plain_adamw_on_bf16_does_not():
    def run(optimizer_cls, **kwargs):
        weight = torch.nn.Parameter(torch.full((4096,), 0.02, dtype=torch.bfloat16))
        optimizer = optimizer_cls([weight], lr=1e-5, **kwargs)
        for _ in range(20):
            optimizer.zero_grad()
            weight.grad = torch.ones_like(weight)  # a steady push downwards: Adam steps of ~lr each
            optimizer.step()
        return weight.float().mean().item()

    start = torch.tensor(0.02).bfloat16().item()
    assert run(torch.optim.AdamW) == start  # every update rounded away
    assert run(BF16AdamW, seed=0) == pytest.approx(start - 20 * 1e-5, rel=0.05)


def test_bf16_adamw_matches_adamw_on_float32_parameters_and_repeats_its_noise():
    torch.manual_seed(0)
    grads = [torch.randn(64) for _ in range(5)]

    def run(optimizer_cls, dtype, **kwargs):
        weight = torch.nn.Parameter(torch.linspace(-1, 1, 64).to(dtype))
        optimizer = optimizer_cls([weight], lr=1e-2, weight_decay=0.1, **kwargs)
        for g in grads:
            weight.grad = g.to(dtype)
            optimizer.step()
        return weight.detach().clone()

    assert torch.allclose(run(BF16AdamW, torch.float32), run(torch.optim.AdamW, torch.float32), atol=1e-6)
    assert torch.equal(run(BF16AdamW, torch.bfloat16, seed=3), run(BF16AdamW, torch.bfloat16, seed=3))


def test_a_bf16_full_fine_tuning_step_trains_and_syncs(tiny_policy):
    from whalekit.domains.toy import ToyDomain
    from whalekit.rollouts.budget import RolloutBudget
    from whalekit.types import Trajectory, Turn
    from whalekit.weights.rsft import RSFTTrainer

    domain = ToyDomain()
    tasks = domain.load_splits(4, 0, 0, seed=0).train
    config = RSFTConfig(lora=False, train_dtype="bfloat16", learning_rate=1e-5, bf16_autocast=False)
    trainer = RSFTTrainer(tiny_policy, domain, tasks, config, RolloutBudget(64))
    assert trainer.train_dtype == "bfloat16" and isinstance(trainer.optimizer, BF16AdamW)
    assert all(p.dtype == torch.bfloat16 for p in trainer.model.parameters())
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    accepted = Trajectory("t", "toy", "h", 0, correct=True, turns=[
        Turn(prompt_ids=[1, 2, 3, 4], completion_ids=[5, 6, 7], text="x", finish_reason="eos")])
    loss, tokens, _, _ = trainer.update([accepted])
    assert tokens == 3 and loss == loss  # finite
    changed = [k for k, v in trainer.model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed, "a bf16 step at lr 1e-5 must move the weights"
    default = RSFTTrainer(tiny_policy, domain, tasks, RSFTConfig(lora=False), RolloutBudget(64))
    assert default.train_dtype == "float32" and isinstance(default.optimizer, torch.optim.AdamW)  # CPU


# --- unsloth backend ----------------------------------------------------------------------


@pytest.fixture
def no_unsloth(monkeypatch):
    monkeypatch.setitem(sys.modules, "unsloth", None)  # `import unsloth` raises ImportError


@pytest.fixture
def fake_unsloth(monkeypatch):
    module = types.ModuleType("unsloth")
    module.__spec__ = importlib.machinery.ModuleSpec("unsloth", None)
    monkeypatch.setitem(sys.modules, "unsloth", module)
    return module


def _warnings(caplog):
    return [r for r in caplog.records if r.name == "whalekit.weights.rsft" and r.levelno == logging.WARNING]


def test_peft_is_the_default_and_never_looks_for_unsloth(no_unsloth, caplog):
    assert RSFTConfig().backend == "peft"
    assert resolve_backend("peft", lora=True, cuda=True) == "peft"
    assert not _warnings(caplog)


def test_auto_without_unsloth_falls_back_to_peft_with_one_warning(no_unsloth, caplog):
    assert resolve_backend("auto", lora=True, cuda=True) == "peft"
    [warning] = _warnings(caplog)
    assert "'unsloth' is not installed" in warning.getMessage()
    assert "pip install 'whalekit[gpu]'" in warning.getMessage()


def test_auto_without_cuda_falls_back_to_peft_even_where_unsloth_is_installed(fake_unsloth, caplog):
    assert resolve_backend("auto", lora=True, cuda=False) == "peft"
    [warning] = _warnings(caplog)
    assert "no CUDA device" in warning.getMessage()


def test_auto_uses_unsloth_where_it_imports_on_cuda_and_only_for_lora(fake_unsloth, caplog):
    assert resolve_backend("auto", lora=True, cuda=True) == "unsloth"
    assert resolve_backend("auto", lora=False, cuda=True) == "peft"  # full fine-tuning: plain transformers
    assert not _warnings(caplog)


def test_explicit_unsloth_that_cannot_run_is_an_import_error_saying_how_to_install(no_unsloth):
    with pytest.raises(ImportError, match=r"'unsloth' is not installed.*pip install 'whalekit\[gpu\]'"):
        resolve_backend("unsloth", lora=True, cuda=True)


def test_explicit_unsloth_without_cuda_is_an_import_error(fake_unsloth):
    with pytest.raises(ImportError, match="no CUDA device"):
        resolve_backend("unsloth", lora=True, cuda=False)


def test_a_trainer_asked_for_auto_on_cpu_trains_with_peft(tiny_policy, no_unsloth, caplog):
    from whalekit.domains.toy import ToyDomain
    from whalekit.rollouts.budget import RolloutBudget
    from whalekit.weights.rsft import RSFTTrainer

    domain = ToyDomain()
    trainer = RSFTTrainer(tiny_policy, domain, domain.load_splits(4, 0, 0, seed=0).train,
                          RSFTConfig(backend="auto"), RolloutBudget(64))
    assert trainer.backend == "peft" and hasattr(trainer.model, "peft_config")
    assert len(_warnings(caplog)) == 1


# --- sharded ranks: where they run and how the sync arrives ----------------------------------


def test_trainer_ranks_take_cuda_r_unless_trainer_devices_keeps_the_samplers_gpu_apart():
    from whalekit.weights.distributed.trainer_ranks import rank_device

    colocated = RSFTConfig(lora=False, trainer_ranks=2)
    assert [rank_device(r, colocated) for r in range(2)] == [0, 1]
    apart = RSFTConfig(lora=False, trainer_ranks=3, trainer_devices=[1, 2, 3])
    assert [rank_device(r, apart) for r in range(3)] == [1, 2, 3]
    for devices in ([1, 2], [1, 1, 2], [-1, 1, 2]):
        with pytest.raises(ValueError, match="3 distinct GPU indices"):
            RSFTConfig(lora=False, trainer_ranks=3, trainer_devices=devices)


def test_the_sync_bucket_size_is_non_negative_and_zero_means_the_whole_state_dict():
    assert RSFTConfig().sync_bucket_mb == 512.0
    assert RSFTConfig(sync_bucket_mb=0).sync_bucket_mb == 0
    with pytest.raises(ValueError, match="sync_bucket_mb"):
        RSFTConfig(sync_bucket_mb=-1)
