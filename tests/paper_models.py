"""Tiny random models of the paper's architectures, built locally from `AutoConfig.for_model`
(nothing downloaded) with SmolLM2's tokenizer: qwen2 (Qwen2.5), qwen3, qwen3_5_text
(Qwen3.5's text-only causal LM: hybrid Gated DeltaNet / full attention layers) and qwen3_5
(Qwen3.5's released checkpoint layout: `Qwen3_5ForConditionalGeneration` with a vision tower,
the language model under `model.language_model.`). Shared by tests/test_paper_models.py and
tests/test_chunked_loss.py.

    path = tiny_model_dir("qwen3_5", tmp_path)     # config.json, model.safetensors, tokenizer
    policy = load_policy(str(path))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

KINDS = ("qwen2", "qwen3", "qwen3_5_text", "qwen3_5")
VOCAB = 49152  # SmolLM2's tokenizer
# head_dim 64 = hidden / heads (vLLM's qwen2 derives it so; its CPU attention supports 64); a wide
# init so that greedy decoding does not collapse to one token
TEXT = {"vocab_size": VOCAB, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "max_position_embeddings": 4096,
        "initializer_range": 0.3, "tie_word_embeddings": True}
# Qwen3.5's hybrid stack in small: a Gated DeltaNet (linear attention) layer, then a full one
LINEAR = {"layer_types": ["linear_attention", "full_attention"], "linear_num_key_heads": 2,
          "linear_num_value_heads": 2, "linear_key_head_dim": 32, "linear_value_head_dim": 32,
          "linear_conv_kernel_dim": 4}
VISION = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 128,
          "patch_size": 16, "num_position_embeddings": 64}


def tiny_config(kind: str, tokenizer: Any) -> Any:
    """The config of a tiny random `kind` (one of KINDS)."""
    from transformers import AutoConfig

    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
           "pad_token_id": tokenizer.pad_token_id}
    if kind in ("qwen2", "qwen3"):
        return AutoConfig.for_model(kind, **TEXT, **ids)
    if kind == "qwen3_5_text":
        return AutoConfig.for_model(kind, **TEXT, **LINEAR, **ids)
    if kind == "qwen3_5":  # special image/video ids inside the small vocabulary; unused by text
        return AutoConfig.for_model(kind, text_config={**TEXT, **LINEAR, **ids}, vision_config=VISION,
                                    tie_word_embeddings=True, image_token_id=VOCAB - 4, video_token_id=VOCAB - 3,
                                    vision_start_token_id=VOCAB - 2, vision_end_token_id=VOCAB - 1)
    raise ValueError(f"unknown kind {kind!r}: one of {KINDS}")


def tiny_model(kind: str, tokenizer: Any, seed: int = 0) -> Any:
    """A randomly initialised float32 model of `kind`, in its checkpoint class."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    config = tiny_config(kind, tokenizer)
    torch.manual_seed(seed)
    auto = AutoModelForImageTextToText if kind == "qwen3_5" else AutoModelForCausalLM
    return auto.from_config(config, dtype=torch.float32)


def tiny_model_dir(kind: str, root: Path, seed: int = 0) -> Path:
    """`tiny_model(kind)` saved as a Hugging Face directory (safetensors + the tokenizer) under root."""
    from whalekit.samplers.model_files import load_tokenizer, resolve_model_dir

    tokenizer = load_tokenizer(resolve_model_dir("tiny-random"))
    out = Path(root) / f"tiny-{kind}"
    if not (out / "config.json").exists():
        tiny_model(kind, tokenizer, seed).save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
    return out
