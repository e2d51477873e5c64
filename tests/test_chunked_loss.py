"""The RSFT loss in chunks (`loss_chunk_tokens`): the cross-entropy over a micro-batch's
trained positions runs a chunk at a time, each chunk's float32 logits recomputed in backward,
so no (tokens x vocab) float32 logits exist at once; loss and gradients equal the full-logits
loss's to 1e-5, for every model type: the plain-head path (llama, qwen2, qwen3, Qwen3.5 text
and its conditional-generation layout) and a model with its own logits (soft-capped gemma2).
"""

from __future__ import annotations

import random

import pytest
import torch
from paper_models import TEXT, tiny_model
from torch.utils._python_dispatch import TorchDispatchMode

from whalekit.samplers.model_files import load_tokenizer, resolve_model_dir
from whalekit.weights.rsft_config import RSFTConfig
from whalekit.weights.rsft_loss import IGNORE_INDEX, decoder_and_head, token_normalised_loss

CHUNK = 16


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(resolve_model_dir("tiny-random"))


def model_of(kind: str, tokenizer) -> torch.nn.Module:
    if kind in ("llama", "gemma2"):
        from transformers import AutoConfig, AutoModelForCausalLM

        extra = {"final_logit_softcapping": 30.0} if kind == "gemma2" else {}
        config = AutoConfig.for_model(kind, **TEXT, **extra, pad_token_id=tokenizer.pad_token_id)
        torch.manual_seed(0)
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return tiny_model(kind, tokenizer)


def sequences(count: int = 5, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Two-turn episodes of different lengths, loss on the completions: 40-odd trained tokens."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        ids: list[int] = []
        labels: list[int] = []
        for context, completion in ((rng.randrange(8, 20), rng.randrange(3, 9)), (rng.randrange(4, 8), 4)):
            new = [rng.randrange(100, 49000) for _ in range(context + completion)]
            ids += new
            labels += [IGNORE_INDEX] * context + new[context:]
        out.append((ids, labels))
    return out


def loss_and_gradients(model, batch, **options):
    model.train()
    model.zero_grad(set_to_none=True)
    loss, tokens = token_normalised_loss(model, batch, 3, 0, **options)
    return loss, tokens, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3", "qwen3_5_text", "qwen3_5", "gemma2"])
def test_the_chunked_loss_equals_the_full_logits_loss_and_gradients(kind, dtype, tokenizer):
    """In float64 the two agree to 1e-5 in every gradient (the computation is exact); in
    float32 they differ by summation order, which Gated DeltaNet's recurrence amplifies in a
    few tensors (A_log: 1.6e-5 relative measured), so its gradients are held to 1e-4."""
    model = model_of(kind, tokenizer).to(dtype)
    assert (decoder_and_head(model) is None) == (kind == "gemma2")  # the Qwen3.5 layouts take the plain head
    batch = sequences()
    reference = loss_and_gradients(model, batch, trained_positions_only=False)
    chunked = loss_and_gradients(model, batch, loss_chunk_tokens=CHUNK)
    assert chunked[1] == reference[1] > 2 * CHUNK  # every micro-batch of 3 sequences is cut in chunks
    assert chunked[0] == pytest.approx(reference[0], rel=1e-5)
    assert chunked[2].keys() == reference[2].keys() and reference[2]
    tolerance = 1e-5 if dtype == torch.float64 else 1e-4
    for name, grad in chunked[2].items():
        assert (grad - reference[2][name]).norm() <= tolerance * reference[2][name].norm() + 1e-9, name


class LargestLogits(TorchDispatchMode):
    """The most float32 elements any op returns in a (positions x vocabulary) tensor: last
    dimension the vocabulary, leading ones not the hidden width (the head's weight and its
    gradient are hidden x vocabulary)."""

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.vocab, self.hidden, self.largest = vocab, hidden, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float32 and tensor.dim() \
                    and tensor.shape[-1] == self.vocab and tensor.shape[0] != self.hidden:
                self.largest = max(self.largest, tensor.numel())
        return out


@pytest.mark.parametrize("kind", ["llama", "qwen3_5"])
def test_no_more_than_a_chunk_of_float32_logits_exists_at_once_forward_and_backward(kind, tokenizer):
    model = model_of(kind, tokenizer)
    vocab, hidden = model.get_output_embeddings().weight.shape
    batch = sequences()
    with LargestLogits(vocab, hidden) as whole:
        loss_and_gradients(model, batch)
    with LargestLogits(vocab, hidden) as chunked:
        loss_and_gradients(model, batch, loss_chunk_tokens=CHUNK)
    assert whole.largest > CHUNK * vocab  # a micro-batch's trained positions at once
    assert chunked.largest == CHUNK * vocab


def test_a_chunk_larger_than_the_micro_batch_is_the_unchunked_computation_bit_for_bit(tokenizer):
    model = model_of("llama", tokenizer)
    batch = sequences()
    plain = loss_and_gradients(model, batch)
    roomy = loss_and_gradients(model, batch, loss_chunk_tokens=10_000)
    assert plain[0] == roomy[0]
    assert all(torch.equal(plain[2][name], roomy[2][name]) for name in plain[2])


def test_the_option_is_off_by_default_and_checked():
    assert RSFTConfig().loss_chunk_tokens is None  # the records' computation
    with pytest.raises(ValueError, match="loss_chunk_tokens"):
        RSFTConfig(loss_chunk_tokens=0)
