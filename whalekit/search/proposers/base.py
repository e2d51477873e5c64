"""The one interface every harness proposer implements, and the record it returns.

Why one small interface: the search loop must not care whether candidates come from
Claude, an OpenAI-compatible coder model or the offline reflective editor; each reads
the archive and returns new harness sources with their lineage and hypothesis. The
search loop validates, stores and evaluates them; a proposer never runs harness code.

    candidates = proposer.propose(archive, n=4, budget=budget)
    archive.add(candidates[0].source, candidates[0].parent_ids, candidates[0].hypothesis)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from whalekit.search.proposers.report import render_report

if TYPE_CHECKING:
    from whalekit.rollouts.budget import RolloutBudget
    from whalekit.search.archive import Archive, Entry


@dataclass
class Candidate:
    source: str  # the complete harness module
    parent_ids: list[str] = field(default_factory=list)  # archive ids it was derived from (empty: from scratch)
    hypothesis: str = ""  # why it should score higher, one or two sentences
    change_summary: str = ""  # what changed against the parent(s)
    meta: dict[str, Any] = field(default_factory=dict)  # proposer-specific (mechanism names, tokens...)

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError("a candidate needs non-empty harness source")


class ProposerError(RuntimeError):
    """A proposer could not run at all (no API key, endpoint down after retries)."""


class Proposer(ABC):
    name: str = "proposer"

    @abstractmethod
    def propose(self, archive: Archive, n: int, budget: RolloutBudget | None = None) -> list[Candidate]:
        """Return up to `n` new candidates after reading `archive`. `budget` is the shared
        rollout budget, for information only (what is left); proposers never charge it."""

    def context(self, archive: Archive) -> str:
        """What the proposer is told about the archive (the report), for logging."""
        return render_report(archive)


class ProposerLike(Protocol):
    """What a search stage asks of a proposer (whalekit.search.proposers.base.Proposer, a wrapper
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
