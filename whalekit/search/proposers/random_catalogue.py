"""The `random-catalogue` control: each candidate is the run's starting harness plus a
uniformly random set of the domain's catalogue mechanisms.

Why a control: a search that only recombines a fixed catalogue is worth its proposer's cost
only if it beats drawing combinations at random and keeping the best on the search split,
the simple baseline arXiv 2602.16805 finds competitive with code evolution. Each mechanism
is in a candidate with probability 1/2, independently, applied in catalogue order; the draws
are seeded by the run's seed, the call and the slot, so a resumed run draws the same sets.

    proposer = RandomCatalogueProposer(domain.mechanisms(), seed=0)   # draws on the archive's seed harness
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from whalekit.domains.mechanisms import Mechanism, apply_mechanism
from whalekit.episode import harness_id
from whalekit.search.proposers.base import Candidate, Proposer

if TYPE_CHECKING:
    from whalekit.rollouts.budget import RolloutBudget
    from whalekit.search.archive import Archive

DRAWS_PER_CANDIDATE = 20  # redraws when a set is empty, fails to apply or repeats a harness


class RandomCatalogueProposer(Proposer):
    name = "random-catalogue"

    def __init__(self, catalogue: Sequence[Mechanism], seed: int = 0):
        self.catalogue, self.seed = list(catalogue), seed
        self.calls = 0

    def propose(self, archive: Archive, n: int, budget: RolloutBudget | None = None) -> list[Candidate]:
        rng = random.Random(f"random-catalogue:{self.seed}:{self.calls}:{len(archive)}")
        self.calls += 1
        taken = set(archive.ids())
        start = archive.seed_id()  # the run's starting harness, as the driver stored it
        out: list[Candidate] = []
        for _ in range(n * DRAWS_PER_CANDIDATE):
            if len(out) >= n:
                break
            chosen = [m for m in self.catalogue if rng.random() < 0.5]
            source = archive.source(start)
            try:
                for mechanism in chosen:
                    source = apply_mechanism(source, mechanism)
            except (ValueError, SyntaxError):
                continue
            if not chosen or harness_id(source) in taken:
                continue
            taken.add(harness_id(source))
            names = [m.name for m in chosen]
            out.append(Candidate(source, [start], "A uniformly random set of catalogue mechanisms (the control).",
                                 "mechanisms: " + " + ".join(names), {"mechanisms": names}))
        return out
