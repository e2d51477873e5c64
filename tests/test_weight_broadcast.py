"""Weights travel from the driver to rollout workers over a gloo group, a bucket of whole
decoder layers at a time (`whalekit.rollouts.backends.weight_broadcast`): every dtype arrives bit for bit,
a tied head is sent once, a source that fails mid-sync stops the receivers instead of leaving
them waiting, and the spill replays the last complete sync for a replaced worker. The receivers
here are real processes; the Ray backend's own tests run the same path through Ray actors."""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from whalekit.rollouts.backends.weight_broadcast import (
    BroadcastSource,
    WeightSpill,
    pack,
    pack_buckets,
    state_dict_buckets,
    unpack,
)


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "model.embed_tokens.weight": torch.randn(7, 4, generator=g),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(4, 4, generator=g).to(torch.bfloat16),
        "model.layers.0.self_attn.k_proj.weight": torch.randn(4, 4, generator=g).t(),  # not contiguous
        "model.layers.0.input_layernorm.weight": torch.randn(3, generator=g).to(torch.float16),
        "model.layers.1.mlp.up_proj.weight": torch.randn(5, 4, generator=g),
        "model.layers.1.step": torch.tensor(12, dtype=torch.int64),  # 0-dim
        "model.layers.1.mask": torch.tensor([True, False, True]),
        "model.layers.1.empty": torch.empty(0, 3),
        "model.norm.weight": torch.randn(4, generator=g),
    }


def test_a_bucket_packs_and_unpacks_to_the_same_tensors_bit_for_bit_whatever_the_dtype():
    tensors = _tensors()
    packed = pack(tensors)
    assert packed.payload.dtype == torch.uint8 and packed.payload.dim() == 1
    back = unpack(packed)
    assert list(back) == list(tensors)
    for name, tensor in tensors.items():
        assert back[name].dtype == tensor.dtype and back[name].shape == tensor.shape, name
        assert torch.equal(back[name], tensor), name


def test_a_state_dict_goes_in_buckets_of_whole_layers_and_a_tied_head_once():
    state = _tensors()
    state["lm_head.weight"] = state["model.embed_tokens.weight"].view(7, 4)  # tied: the same storage
    buckets = list(state_dict_buckets(state, bucket_bytes=80))
    assert len(buckets) > 1
    names = [name for bucket in buckets for name in bucket]
    assert "lm_head.weight" not in names and sorted(names) == sorted(set(state) - {"lm_head.weight"})
    for bucket in buckets:  # a layer is never split between buckets
        layers = {name.split(".")[2] for name in bucket if ".layers." in name}
        for layer in layers:
            assert {n for n in state if f".layers.{layer}." in n} <= set(bucket)


def _receivers(source: BroadcastSource, count: int):
    from fakes.broadcast_receiver import receive

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    meeting = source.meeting(world=1 + count)
    processes = [context.Process(target=receive, args=(meeting, rank, queue)) for rank in range(1, count + 1)]
    for process in processes:
        process.start()
    return meeting, queue, processes


def _collect(queue, processes):
    results = sorted(queue.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    return results


def _as_sent(buckets):
    return [{name: (str(t.dtype), tuple(t.shape), t.float().reshape(-1).tolist()) for name, t in b.items()}
            for b in buckets]


def test_two_receivers_get_every_bucket_exactly_over_a_gloo_group():
    source = BroadcastSource("127.0.0.1", timeout_s=120)
    buckets = list(state_dict_buckets(_tensors(), bucket_bytes=80))
    meeting, queue, processes = _receivers(source, 2)
    sent = source.send(meeting, pack_buckets(buckets))
    results = _collect(queue, processes)
    assert sent == sum(pack(b).payload.numel() for b in buckets)
    assert [rank for rank, _, _ in results] == [1, 2]
    for _, got, error in results:
        assert error is None
        assert got == _as_sent(buckets)


def test_a_source_that_fails_mid_sync_stops_the_receivers_instead_of_leaving_them_waiting():
    source = BroadcastSource("127.0.0.1", timeout_s=120)
    buckets = list(state_dict_buckets(_tensors(), bucket_bytes=80))

    def failing():
        yield pack(buckets[0])
        raise RuntimeError("trainer rank 1 died")

    meeting, queue, processes = _receivers(source, 1)
    with pytest.raises(RuntimeError, match="trainer rank 1 died"):
        source.send(meeting, failing())
    [(_, got, error)] = _collect(queue, processes)
    assert got == _as_sent(buckets[:1])
    assert error is not None and error.startswith("WeightSyncAborted") and "marked stale" in error


def test_the_spill_replays_the_last_complete_sync_and_an_unfinished_one_replaces_nothing(tmp_path):
    spill = WeightSpill(tmp_path / "spill")
    assert not spill.holds_weights
    first = list(state_dict_buckets(_tensors(), bucket_bytes=80))
    assert len(list(spill.recording(pack_buckets(first)))) == len(first)
    spill.commit()
    second = [{name: t + 1 for name, t in b.items() if t.dtype.is_floating_point} for b in first]
    recording = spill.recording(pack_buckets(second))
    next(recording)  # the driver stopped after one bucket: never committed
    recording.close()  # (as when its broadcast raises: the bucket's write is waited for)
    assert sorted(p.name for p in (tmp_path / "spill" / "next").iterdir()) == ["bucket-00000.bin"]
    replayed = [unpack(p) for p in spill.replay()]
    assert _as_sent(replayed) == _as_sent(first)
    spill.close()
    assert not (tmp_path / "spill").exists()


def test_a_spill_without_a_folder_is_one_the_sweep_knows():
    import os

    from whalekit.infra.lifetime import owner_pid

    spill = WeightSpill()
    try:
        assert owner_pid(spill.folder.name) == os.getpid()
    finally:
        spill.close()
