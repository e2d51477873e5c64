"""The seams between whalekit's parts, as Protocols: what the search stage needs of a
proposer, what the ledger reads of an archive, what the engine and samplers need of a
tokenizer, and what the trainer needs of a policy and of a sampler that takes LoRA
adapters. Any object with these members fits (a real part, a test double), no subclassing;
mypy checks each caller against them. The sampler itself has its nominal interface,
`whalekit.samplers.base.Sampler`, which every sampler subclasses.

    def run_search_stage(domain, archive, proposer: ProposerLike, sampler: Sampler, ...): ...
    trainer = RSFTTrainer(policy, domain, tasks, config, budget)   # policy: PolicyLike
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from whalekit.archive import Archive, Entry
    from whalekit.budget import RolloutBudget
    from whalekit.proposers.base import Candidate
    from whalekit.samplers.base import Sampler


class TokenizerLike(Protocol):
    """A tokenizer as the engine and samplers use it (transformers', or a test's)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = ...,
                            tokenize: bool = ..., return_dict: bool = ...) -> Any: ...


class ProposerLike(Protocol):
    """What a search stage asks of a proposer (whalekit.proposers.base.Proposer, a wrapper
    such as PromptOnly, a test's scripted one)."""

    name: str

    def propose(self, archive: Archive, n: int, budget: RolloutBudget | None = None) -> list[Candidate]: ...


class ArchiveLike(Protocol):
    """The read side of a harness archive that the proposer ledger's reports use."""

    root: Path

    def entries(self) -> list[Entry]: ...

    def __contains__(self, candidate_id: object) -> bool: ...

    def entry(self, candidate_id: str) -> Entry: ...

    def seed_id(self) -> str: ...

    def leaderboard(self, weights_version: int | None = None) -> list[tuple[str, float, int]]: ...


class PolicyLike(Protocol):
    """What the trainer needs of a policy (whalekit.models.Policy): the weights' folder, the
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
