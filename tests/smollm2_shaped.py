"""A random decoder with SmolLM2-135M's widths and few layers, LoRA as the trainer puts it
on, long right-padded RSFT sequences, and what autograd keeps for backward: the measuring
kit of tests/test_rsft_memory.py and bench/rsft_memory.py (one setup for both).

    model = with_lora(smollm2_shaped(layers=2))
    kept = saved_activations(model, long_sequences(4, 480, 520))   # bytes a token a layer, (., L, L) tensors
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch

from whalekit.weights.rsft import enable_gradient_checkpointing
from whalekit.weights.rsft_loss import IGNORE_INDEX, token_normalised_loss

# SmolLM2-135M-Instruct's config.json, but for the layer count (it has 30).
SMOLLM2_135M = {"vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
                "num_key_value_heads": 3, "head_dim": 64, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
                "rope_theta": 100000.0, "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
                "pad_token_id": 2}
PAD_ID = 2


def smollm2_shaped(layers: int = 2, seed: int = 0, checkpointing: bool = False) -> Any:
    """A randomly initialised Llama with SmolLM2-135M's widths and `layers` layers, with the
    trainer's gradient checkpointing when asked (before LoRA, as the trainer does)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=layers, **SMOLLM2_135M))
    if checkpointing:
        enable_gradient_checkpointing(model)
    return model


def with_lora(model: Any, seed: int = 0) -> Any:
    """The trainer's adapter (r 16, alpha 32, every linear layer), with B drawn at random
    instead of zero so that every LoRA matrix gets a gradient (as after a first update)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                                             task_type="CAUSAL_LM"))
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.02)
    return model


def long_sequences(count: int, shortest_prompt: int, longest_prompt: int, vocab_size: int = 49152,
                   seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Packed two-turn episodes as RSFT trains them (chess's shape, cut to size): a prompt,
    a short completion, tool text, another short completion; loss on the completions only.
    Their lengths differ, so a micro-batch of them is right-padded."""
    rng = random.Random(seed)
    sequences = []
    for _ in range(count):
        ids: list[int] = []
        labels: list[int] = []
        for context, completion in ((rng.randrange(shortest_prompt, longest_prompt + 1), rng.randrange(6, 16)),
                                    (rng.randrange(20, 60), rng.randrange(6, 16))):
            new = [rng.randrange(100, vocab_size) for _ in range(context + completion)]
            ids += new
            labels += [IGNORE_INDEX] * context + new[context:]
        sequences.append((ids, labels))
    return sequences


def loss_and_gradients(model: Any, sequences: list[tuple[list[int], list[int]]], micro_batch: int = 8,
                       autocast: bool = False, **options: Any) -> tuple[float, dict[str, torch.Tensor]]:
    """`token_normalised_loss` forward and backward in training mode: the loss and every
    trained parameter's gradient."""
    model.train()
    model.zero_grad(set_to_none=True)
    loss, _tokens = token_normalised_loss(model, sequences, micro_batch, PAD_ID, autocast, **options)
    return loss, {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


@dataclass
class Kept:
    bytes_per_token_per_layer: float  # saved activations spanning the sequence / (padded tokens x layers)
    square: list[tuple[tuple[int, ...], torch.dtype]]  # saved (., L, L) tensors: attention masks, scores


def saved_activations(model: Any, sequences: list[tuple[list[int], list[int]]], autocast: bool = False,
                      **options: Any) -> Kept:
    """What autograd keeps for backward in one forward of `sequences` as one micro-batch:
    every distinct storage packed by `saved_tensors_hooks` that spans the padded length L
    (parameters and the trained positions' logits do not), per padded token and layer.
    Non-reentrant checkpointing saves each layer's inputs through the same hooks."""
    width = max(len(ids) for ids, _ in sequences)
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}
    square: list[tuple[tuple[int, ...], torch.dtype]] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters and width in tensor.shape:
            storages[storage.data_ptr()] = storage.nbytes()
            if tensor.dim() >= 2 and tensor.shape[-1] == tensor.shape[-2] == width:
                square.append((tuple(tensor.shape), tensor.dtype))
        return tensor

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        token_normalised_loss(model, sequences, len(sequences), PAD_ID, autocast, backward=False, **options)
    layers = model.get_base_model().config.num_hidden_layers
    return Kept(sum(storages.values()) / (len(sequences) * width * layers), square)
