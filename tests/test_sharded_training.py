"""Sharded RSFT (`weights.distributed.sharded_training`, `.sharded_checkpoint`) on gloo ranks, with the
tiny random model: 2 FSDP2 ranks give the gradients, weights and loss 1 rank gets from the whole
mini-batch (float32 compute: to float32 summation order; bf16 compute: to bf16 rounding); a
sharded checkpoint written by 2 ranks resumes onto 2 ranks and onto 1 and continues as the run
that was never stopped; a checkpoint whose writer died is never loaded; the gathered full state
dict is the unsharded model's. The ranks run in spawned processes, two launches for the module
(`ranks_outputs`, about 20 s on 2 cores, so those tests are marked slow), each killed at its
timeout so a failing rank cannot hang the suite."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from training_sequences import sequences

from whalekit.weights.rsft_loss import IGNORE_INDEX

LR = 1e-3
MICRO_BATCH = 2
LAUNCH_TIMEOUT_S = 300


# 5 sequences: rank 0 trains on 3 (2 micro-batches of 2), rank 1 on 2 (1): rank 1 makes an idle pass.
FIRST_BATCH, SECOND_BATCH = sequences(5, seed=0), sequences(7, seed=1)


def plain_model(seed: int):
    from whalekit.samplers.model_files import resolve_model_dir
    from whalekit.samplers.models import load_model

    torch.manual_seed(seed)
    model = load_model(resolve_model_dir("tiny-random"))
    model.train()
    return model


def sharded(seed: int, compute_dtype: str = "float32", gradient_checkpointing: bool = False):
    from whalekit.weights.distributed.sharded_training import ShardingConfig, shard_policy

    model = shard_policy(plain_model(seed), ShardingConfig(compute_dtype, gradient_checkpointing))
    return model, torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)


def step_record(model, optimizer, batch) -> dict:
    """One sharded step and what it did, gathered whole (collectives: every rank calls it)."""
    from whalekit.weights.distributed.sharded_checkpoint import full_state_dict
    from whalekit.weights.distributed.sharded_training import sharded_step

    loss, tokens = sharded_step(model, optimizer, batch, MICRO_BATCH, pad_id=0)
    grads = {name: p.grad.full_tensor() for name, p in model.named_parameters()}
    return {"loss": loss, "tokens": tokens, "grads": grads, "weights": full_state_dict(model),
            "gradient_checkpointing": model.is_gradient_checkpointing}


def two_ranks_job(rank: int, out: Path) -> None:
    from whalekit.weights.distributed.sharded_checkpoint import load_sharded_checkpoint, save_sharded_checkpoint

    records = {}
    model, optimizer = sharded(seed=0)
    records["float32"] = step_record(model, optimizer, FIRST_BATCH)
    save_sharded_checkpoint(model, optimizer, out / "checkpoint", extra={"step": 1})
    records["uninterrupted"] = step_record(model, optimizer, SECOND_BATCH)
    model, optimizer = sharded(seed=1)  # other initial weights: only the checkpoint can make them right
    records["resume_extra"] = load_sharded_checkpoint(model, optimizer, out / "checkpoint")
    records["resumed"] = step_record(model, optimizer, SECOND_BATCH)
    records["bfloat16"] = step_record(*sharded(seed=0, compute_dtype="bfloat16"), FIRST_BATCH)
    records["checkpointed"] = step_record(*sharded(seed=0, gradient_checkpointing=True), FIRST_BATCH)
    if rank == 0:  # a file, not a queue: tensors sent through one die with their process
        torch.save(records, out / "two_ranks.pt")


def one_rank_job(rank: int, out: Path) -> None:
    import torch.distributed.checkpoint as dcp

    from whalekit.weights.distributed.sharded_checkpoint import load_sharded_checkpoint, save_sharded_checkpoint

    records = {}
    model, optimizer = sharded(seed=1)
    records["resume_extra"] = load_sharded_checkpoint(model, optimizer, out / "two_ranks_checkpoint")
    records["resumed"] = step_record(model, optimizer, SECOND_BATCH)
    records["bfloat16"] = step_record(*sharded(seed=0, compute_dtype="bfloat16"), FIRST_BATCH)

    real_save = dcp.save

    def killed_after_writing(*args, **kwargs):  # every shard is on disk, then the process dies
        real_save(*args, **kwargs)
        raise KeyboardInterrupt("killed mid-checkpoint")

    dcp.save = killed_after_writing  # this rank process only
    try:
        save_sharded_checkpoint(model, optimizer, out / "killed")
    except KeyboardInterrupt:
        records["killed"] = True
    torch.save(records, out / "one_rank.pt")


JOBS = {"two_ranks": two_ranks_job, "one_rank": one_rank_job}


def rank_main(rank: int, world: int, init_file: str, job: str, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=LAUNCH_TIMEOUT_S))
    try:
        JOBS[job](rank, Path(out))
    finally:
        dist.destroy_process_group()


def launch(world: int, job: str, out: Path) -> None:
    """Run `job` on `world` gloo ranks; every rank is killed at the timeout, whatever happened."""
    context = mp.get_context("spawn")
    processes = [context.Process(target=rank_main, args=(rank, world, str(out / f"init-{job}"), job, str(out)))
                 for rank in range(world)]
    for process in processes:
        process.start()
    try:
        for process in processes:
            process.join(timeout=LAUNCH_TIMEOUT_S)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
    assert [process.exitcode for process in processes] == [0] * world, job


@pytest.fixture(scope="module")
def ranks_outputs(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("sharded")
    launch(2, "two_ranks", out)
    (out / "checkpoint").rename(out / "two_ranks_checkpoint")
    launch(1, "one_rank", out)
    return {"dir": out, "two": torch.load(out / "two_ranks.pt"), "one": torch.load(out / "one_rank.pt")}


def one_device_step(batch, model=None, optimizer=None):
    """The trainer's one-device step (`token_normalised_loss`, clip, AdamW) on an unsharded model."""
    from whalekit.weights.rsft_loss import token_normalised_loss

    if model is None:
        model = plain_model(0)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    optimizer.zero_grad(set_to_none=True)
    loss, tokens = token_normalised_loss(model, batch, MICRO_BATCH, 0)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    weights = {name: t.detach().clone() for name, t in model.state_dict().items()}
    return {"loss": loss, "tokens": tokens, "grads": grads, "weights": weights}, model, optimizer


def relative_gap(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).norm() / (b[k].norm() + 1e-12)) for k in b)


def max_gap(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in b)


@pytest.mark.slow  # the module's two launches: about 20 s on 2 shared cores
def test_two_sharded_float32_ranks_step_as_one_device(ranks_outputs):
    """Gradients to float32 summation order; weights to 1e-6 wherever the gradient is above 1e-6.
    Below, AdamW's first step (lr x g / (|g| + eps)) turns a rounding of g into up to 2 x lr."""
    reference, _, _ = one_device_step(FIRST_BATCH)
    record = ranks_outputs["two"]["float32"]
    assert record["tokens"] == reference["tokens"] and record["loss"] == pytest.approx(reference["loss"], rel=1e-6)
    assert relative_gap(record["grads"], reference["grads"]) <= 1e-5
    before = plain_model(0).state_dict()
    for name, gradient in reference["grads"].items():
        gap = (record["weights"][name] - reference["weights"][name]).abs()
        assert gap[gradient.abs() > 1e-6].max() <= 1e-6 and gap.max() <= 2.0001 * LR, name
        assert not torch.equal(record["weights"][name], before[name]), name  # every tensor moved
    assert torch.equal(record["weights"]["lm_head.weight"], record["weights"]["model.embed_tokens.weight"])  # tied


@pytest.mark.slow  # the module's two launches: about 20 s on 2 shared cores
def test_the_gathered_state_dict_is_the_unsharded_models(ranks_outputs):
    weights = ranks_outputs["two"]["float32"]["weights"]
    reference = plain_model(0).state_dict()
    assert weights.keys() == reference.keys()
    assert all(weights[name].dtype == torch.float32 and weights[name].device.type == "cpu" for name in weights)
    assert all(weights[name].shape == reference[name].shape for name in weights)


@pytest.mark.slow  # the module's two launches: about 20 s on 2 shared cores
def test_bfloat16_compute_matches_across_world_sizes(ranks_outputs):
    """bf16 compute keeps 8 bits of mantissa (relative rounding 2^-8 = 3.9e-3): each rank's forward
    runs other micro-batches (other padded widths, other summation orders), so its bf16 activations
    round differently; 2 ranks give 1 rank's gradients to 1e-2 of each tensor's norm. Against float32
    compute the loss moves by bf16 rounding of this random model's large logits (loss ~16.7)."""
    two, one = ranks_outputs["two"]["bfloat16"], ranks_outputs["one"]["bfloat16"]
    float32, _, _ = one_device_step(FIRST_BATCH)
    flat = lambda grads: torch.cat([g.reshape(-1) for g in grads.values()])  # noqa: E731
    assert two["tokens"] == one["tokens"] and two["loss"] == pytest.approx(one["loss"], rel=1e-4)
    assert relative_gap(two["grads"], one["grads"]) <= 1e-2  # measured 2.7e-3
    assert two["loss"] == pytest.approx(float32["loss"], rel=1e-2)  # measured 4.7e-3
    # near-one-hot softmax of large logits: their bf16 rounding turns the gradient (measured cosine 0.89)
    assert torch.nn.functional.cosine_similarity(flat(two["grads"]), flat(float32["grads"]), dim=0) >= 0.8
    assert all(w.dtype == torch.float32 for w in two["weights"].values())  # master weights stay float32


@pytest.mark.slow  # the module's two launches: about 20 s on 2 shared cores
def test_gradient_checkpointing_changes_no_gradient(ranks_outputs):
    records = ranks_outputs["two"]
    assert records["checkpointed"]["gradient_checkpointing"] and not records["float32"]["gradient_checkpointing"]
    assert relative_gap(records["checkpointed"]["grads"], records["float32"]["grads"]) <= 1e-6


@pytest.mark.slow  # the module's two launches: about 20 s on 2 shared cores
def test_a_two_rank_checkpoint_resumes_on_two_ranks_and_on_one(ranks_outputs):
    two, one = ranks_outputs["two"], ranks_outputs["one"]
    assert two["resume_extra"] == one["resume_extra"] == {"step": 1}
    assert max_gap(two["resumed"]["weights"], two["uninterrupted"]["weights"]) == 0.0
    # 1 rank sums the second step's gradients in another order: 1% of lr (measured 2.7e-6)
    assert max_gap(one["resumed"]["weights"], two["uninterrupted"]["weights"]) <= 1e-5
    assert relative_gap(one["resumed"]["grads"], two["uninterrupted"]["grads"]) <= 1e-5


@pytest.mark.slow  # the module's two launches: about 20 s on 2 shared cores
def test_a_checkpoint_whose_writer_died_is_never_loaded(ranks_outputs):
    from whalekit.weights.distributed.sharded_checkpoint import (
        IncompleteCheckpointError,
        is_complete,
        load_sharded_checkpoint,
    )

    out = ranks_outputs["dir"]
    assert ranks_outputs["one"]["killed"]
    assert not (out / "killed").exists() and (out / "killed.partial" / ".metadata").exists()
    assert is_complete(out / "two_ranks_checkpoint") and not is_complete(out / "killed.partial")
    with pytest.raises(IncompleteCheckpointError):
        load_sharded_checkpoint(None, None, out / "killed.partial")


def test_every_rank_makes_as_many_passes_as_the_busiest():
    from whalekit.weights.distributed.data_parallel import rank_share
    from whalekit.weights.distributed.sharded_training import forward_passes

    assert [forward_passes(rank_share(FIRST_BATCH, r, 2), MICRO_BATCH) for r in range(2)] == [2, 1]
    assert forward_passes([([1, 2, 3], [IGNORE_INDEX] * 3)], MICRO_BATCH) == 0  # nothing trained: no pass


def test_sharding_config_accepts_the_two_compute_dtypes_only():
    from whalekit.weights.distributed.sharded_training import ShardingConfig

    assert ShardingConfig().compute_dtype == "bfloat16"
    with pytest.raises(ValueError):
        ShardingConfig(compute_dtype="float16")
