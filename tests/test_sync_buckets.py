"""The sharded trainer's weight sync in buckets (`sharded_checkpoint.bucket_plan`): every
tensor once, in state-dict order (a tied head once, as the embeddings), a decoder layer never
split (vLLM reloads a fused q/k/v or gate/up layer only whole), buckets no larger than asked
unless one layer is; and the vLLM sampler lays out its shared buffer from the checkpoint's own
shapes exactly as a first whole sync would."""

from __future__ import annotations

import re

import pytest

from whalekit.samplers.models import load_model, resolve_model_dir
from whalekit.weights.distributed.sharded_checkpoint import bucket_plan


@pytest.fixture(scope="module")
def model():
    return load_model(resolve_model_dir("tiny-random"))


def _bytes(model, names):
    state = model.state_dict()
    return sum(state[n].numel() * state[n].element_size() for n in names)


def _sent(model) -> list[str]:
    """The tiny model ties its head to its embeddings: one tensor, sent once (as the embeddings)."""
    assert model.config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    return [n for n in model.state_dict() if n != "lm_head.weight"]


def _layer(name: str) -> str | None:
    found = re.match(r"^(.*?\.layers\.\d+)\.", name)
    return found.group(1) if found else None


@pytest.mark.parametrize("layers_per_bucket", [1, 2])
def test_every_tensor_arrives_once_in_order_and_no_layer_is_split(model, layers_per_bucket):
    layer = _bytes(model, [n for n in model.state_dict() if ".layers.0." in n])
    plan = bucket_plan(model, layers_per_bucket * layer)
    assert [n for names in plan for n in names] == _sent(model), "each once, in order"
    homes: dict[str, int] = {}
    for index, names in enumerate(plan):
        for name in names:
            if _layer(name) is not None:
                assert homes.setdefault(_layer(name), index) == index, f"{_layer(name)} split across buckets"
    layered = [names for names in plan if all(_layer(n) for n in names)]
    assert layered and all(_bytes(model, names) <= layers_per_bucket * layer for names in layered)
    assert max(len({_layer(n) for n in names}) for names in layered) == layers_per_bucket


def test_a_layer_larger_than_the_bucket_is_a_bucket_of_its_own(model):
    plan = bucket_plan(model, 1)
    layers = [{_layer(n) for n in names} for names in plan]
    assert all(len(found) == 1 for found in layers)
    sent = _sent(model)
    assert len(plan) == sum(_layer(n) is None for n in sent) + len({_layer(n) for n in sent} - {None})
    with pytest.raises(ValueError, match="positive"):
        bucket_plan(model, 0)


def test_the_vllm_buffer_laid_out_from_the_checkpoint_is_the_first_whole_syncs(model):
    """`load_weight_buckets` may be the engine's first sync: it cannot see every tensor at once,
    so it reads the shapes from the checkpoint's headers; the layout must be the one
    `load_weights` makes from a whole state dict (vLLM's sampler module imports no vllm)."""
    import torch

    from whalekit.samplers.vllm import _checkpoint_shapes, _checkpoint_tensor_names, checkpoint_names
    from whalekit.samplers.vllm_sync import SharedWeights

    path = resolve_model_dir("tiny-random")
    names = _checkpoint_tensor_names(path)
    whole = {n: t for n, t in checkpoint_names(model.state_dict(), names).items() if n in names}
    from_shapes = SharedWeights.for_tensors(_checkpoint_shapes(path, names), torch.float32)
    from_whole = SharedWeights.for_tensors(whole, torch.float32)
    try:
        assert from_shapes.layout == from_whole.layout and from_shapes.size == from_whole.size
    finally:
        from_shapes.close()
        from_whole.close()
