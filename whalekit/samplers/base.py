"""The `Sampler` interface the rollout engine talks to, and helpers every sampler shares.

A sampler receives prompts as token ids and returns the exact ids it sampled: the
engine never re-tokenises decoded text, so training sees exactly what was sampled.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass
class SamplingParams:
    """How tokens are drawn: the one sampling-settings type, with the one default (the
    authors' T 1 / top_p 1 / top_k 20 everywhere) and the one validation. Configurations
    nest it (`RolloutConfig.sampling`, `rsft.sampling`, `search.sampling`, `eval_sampling`);
    there `seed` stays 0, since the rollout engine derives each call's seed from the run's."""

    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0  # nucleus mass
    seed: int = 0  # seeds the call (samplers are seeded per batched call, not per row)
    top_k: int = 20  # keep the k likeliest tokens (the authors' setting everywhere); 0 disables top-k

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError(f"invalid sampling params: temperature={self.temperature}, top_p={self.top_p}, "
                             f"top_k={self.top_k}")

    @classmethod
    def of(cls, value: SamplingParams | Mapping[str, Any]) -> SamplingParams:
        """`value` as SamplingParams: a configuration read from YAML or JSON holds a mapping."""
        return value if isinstance(value, SamplingParams) else cls(**value)


@dataclass
class GenerationRequest:
    prompt_ids: list[int]
    max_new_tokens: int
    stop: list[str] = field(default_factory=list)
    seed: int | None = None  # per-episode seed: same seed, same prompt -> same sample, whatever the batch
    choices: list[str] | None = None  # the completion is exactly one of these, then EOS

    def __post_init__(self) -> None:
        if self.choices is not None and not is_choice_list(self.choices):
            raise ValueError("choices must be a non-empty list of non-empty strings")


def is_choice_list(value: Any) -> bool:
    """A constrained answer format's choices: a non-empty sequence of non-empty strings."""
    return bool(value) and all(isinstance(c, str) and c for c in value)


@dataclass
class Completion:
    token_ids: list[int]  # sampled ids, including a final EOS if one was sampled
    text: str  # token_ids decoded without special tokens
    finish_reason: str  # "eos", "stop" or "length"


class Sampler(ABC):
    tokenizer: Any
    version: int = 0  # bumped by every load_weights: the policy version of new samples
    continuous: bool = False  # True where submit/poll work: the engine then lets each episode advance on its own

    @abstractmethod
    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]: ...

    # Continuous batching, for samplers with an engine loop of their own (vLLM). A request
    # submitted while others decode joins the running batch at the sampler's next step.
    def submit(self, key: str, request: GenerationRequest, params: SamplingParams) -> None:
        """Start sampling `request`; its completion comes back from a later `poll` under `key`."""
        raise NotImplementedError(f"{type(self).__name__} samples in lock-step only")

    def poll(self) -> list[tuple[str, Completion]]:
        """Advance sampling by about one engine step; return the requests that finished, by key."""
        raise NotImplementedError(f"{type(self).__name__} samples in lock-step only")

    @abstractmethod
    def load_weights(self, state_dict: Mapping[str, Any]) -> None: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


def cut_completion(token_ids: list[int], request: GenerationRequest, eos_ids: set[int],
                   tokenizer: TokenizerLike) -> Completion:
    """Cut raw sampled ids at the first EOS, the first completed stop string, or the
    request's token limit, whichever comes first, keeping the ids exactly as sampled."""
    ids = list(token_ids[: request.max_new_tokens])
    reason = "length"
    for i, tok in enumerate(ids):
        if tok in eos_ids:
            ids, reason = ids[: i + 1], "eos"
            break
    if request.stop and any(s in tokenizer.decode(ids, skip_special_tokens=True) for s in request.stop):
        # Find the earliest token whose decoded prefix completes a stop string.
        for i in range(len(ids)):
            text = tokenizer.decode(ids[: i + 1], skip_special_tokens=True)
            if any(s in text for s in request.stop):
                ids, reason = ids[: i + 1], "stop"
                break
    return Completion(ids, tokenizer.decode(ids, skip_special_tokens=True), reason)


class ChoiceTrie:
    """The token-id paths of a request's choices, each ending in EOS: which ids may come
    next after a given generated prefix. Choices are tokenised as the model would write
    them on their own (no special tokens)."""

    END = -1

    def __init__(self, choices: list[str], tokenizer: TokenizerLike, eos_id: int):
        self.eos_id = eos_id
        self.root: dict[int, Any] = {}
        for choice in choices:
            node = self.root
            for tok in tokenizer.encode(choice, add_special_tokens=False):
                node = node.setdefault(tok, {})
            node[self.END] = {}

    def allowed(self, generated: list[int]) -> list[int] | None:
        """Ids allowed next, or None once the prefix has left the trie (the row is done)."""
        node = self.root
        for tok in generated:
            if tok not in node:
                return None
            node = node[tok]
        return [self.eos_id if tok == self.END else tok for tok in node]


class TokenizerLike(Protocol):
    """A tokenizer as the engine and samplers use it (transformers', or a test's)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = ...,
                            tokenize: bool = ..., return_dict: bool = ...) -> Any: ...



class PolicyLike(Protocol):
    """What the trainer needs of a policy (whalekit.samplers.models.Policy): the weights' folder, the
    tokenizer and the sampler that receives the trained weights."""

    @property
    def path(self) -> Path: ...

    @property
    def tokenizer(self) -> Any: ...  # a transformers tokenizer: pad_token_id, chat template

    @property
    def sampler(self) -> Sampler: ...



class AdapterSampler(Protocol):
    """A sampler that applies LoRA adapters at run time (vLLM started with `lora_rank`): the
    trainer hands it the adapter instead of merged weights."""

    lora_rank: int
    base_modified: bool  # the base weights were overwritten: adapters no longer apply to them

    def load_lora_adapter(self, folder: Path) -> None: ...
