"""The offline default proposer: reads the archive's failure analysis and writes new
harness source by applying mechanisms from the domain's catalogue.

Why: a search must run with no network and no API key, reproducibly. The proposer does
what a careful person would with the report in hand: take a strong parent, count its
failures by failure mode, pick an edit that targets the most frequent mode and has not
been tried on that parent, and now and then graft onto the best candidate the
mechanisms that a runner-up carries. Every candidate is a real new source file
(`apply_mechanism` rewrites the module), with a hypothesis naming the failures it
targets. Choices are drawn from a generator seeded by (seed, call), so the same archive
and seed give the same proposals.

    proposer = ReflectiveProposer(domain.mechanisms(), seed=0)
    candidates = proposer.propose(archive, n=4)
"""

from __future__ import annotations

import ast
import random
from collections import Counter
from typing import TYPE_CHECKING

from whalekit.domains.mechanisms import Mechanism, apply_mechanism
from whalekit.episode import harness_id
from whalekit.search.proposers.base import Candidate, Proposer
from whalekit.search.proposers.report import failure_counts

if TYPE_CHECKING:
    from whalekit.rollouts.budget import RolloutBudget
    from whalekit.search.archive import Archive


def _normal(source: str) -> str:
    return ast.unparse(ast.parse(source))


class ReflectiveProposer(Proposer):
    name = "reflective"

    def __init__(self, catalogue: list[Mechanism], seed: int = 0, parents_considered: int = 3,
                 crossover_rate: float = 0.25, weigh_alters: bool = False):
        if not catalogue:
            raise ValueError("the reflective proposer needs a non-empty mechanism catalogue for the domain")
        if not 0 <= crossover_rate <= 1 or parents_considered < 1:
            raise ValueError("crossover_rate must be in [0, 1] and parents_considered >= 1")
        self.catalogue = list(catalogue)
        self.seed = seed
        self.parents_considered = parents_considered  # top-k candidates that may serve as parents
        self.crossover_rate = crossover_rate  # share of proposals that combine two good candidates
        # weigh every failure mode a mechanism changes (Mechanism.audited_targets, the v3 preset)
        # rather than its declared targets alone (what the v2 records' proposer did)
        self.weigh_alters = weigh_alters
        self.calls = 0

    def carried(self, source: str) -> list[Mechanism]:
        """Mechanisms already present in `source`: applying them changes nothing."""
        base = _normal(source)
        present = []
        for mechanism in self.catalogue:
            try:
                if _normal(apply_mechanism(source, mechanism)) == base:
                    present.append(mechanism)
            except (ValueError, SyntaxError):
                continue
        return present

    def _helpful(self, archive: Archive, version: int) -> Counter[str]:
        """Mechanisms whose past application raised the score over the parent's."""
        credit: Counter[str] = Counter()
        for entry in archive.entries():
            score = entry.score(version)
            names = entry.change_summary.removeprefix("mechanisms: ").split(" + ")
            if score is None or not entry.parent_ids or not entry.change_summary.startswith("mechanisms: "):
                continue
            parent_score = archive.entry(entry.parent_ids[0]).score(version) if entry.parent_ids[0] in archive \
                else None
            if parent_score is not None and score > parent_score:
                credit.update(names)
        return credit

    def propose(self, archive: Archive, n: int, budget: RolloutBudget | None = None) -> list[Candidate]:
        rng = random.Random(f"{self.seed}:{self.calls}:{len(archive)}")
        self.calls += 1
        version = archive.latest_weights_version()
        board = archive.leaderboard(version) if version is not None else []
        ranked = [cid for cid, _, _ in board if archive.entry(cid).status == "evaluated"] or [archive.accepted()]
        parents = ranked[:self.parents_considered]
        helpful = self._helpful(archive, version) if version is not None else Counter()
        taken = archive.ids()  # ids already in the archive: never propose them again
        out: list[Candidate] = []
        for slot in range(8 * n):
            if len(out) >= n:
                break
            if len(parents) > 1 and rng.random() < self.crossover_rate:
                candidate = self._crossover(archive, parents[0], parents[rng.randrange(1, len(parents))])
            else:
                # mostly the best; later slots explore the runners-up
                parent = parents[0] if slot % 2 == 0 or len(parents) == 1 else parents[rng.randrange(len(parents))]
                candidate = self._mutate(archive, parent, version, helpful, rng, taken)
            if candidate is None:
                continue
            cid = harness_id(candidate.source)
            if cid in taken:
                continue
            taken.add(cid)
            out.append(candidate)
        # The top parents' single edits are all tried: walk down the ranking rather than stall.
        for parent in ranked[self.parents_considered:]:
            if len(out) >= n:
                break
            candidate = self._mutate(archive, parent, version, helpful, rng, taken)
            if candidate is not None:
                taken.add(harness_id(candidate.source))
                out.append(candidate)
        return out

    def _mutate(self, archive: Archive, parent: str, version: int | None, helpful: Counter[str],
                rng: random.Random, taken: set[str]) -> Candidate | None:
        source = archive.source(parent)
        present = {m.name for m in self.carried(source)}
        counts = failure_counts(archive, parent, version) if version is not None else Counter()
        total = sum(counts.values())
        options, weights = [], []
        for mechanism in self.catalogue:
            if mechanism.name in present:
                continue
            try:
                new_source = apply_mechanism(source, mechanism)
            except (ValueError, SyntaxError):
                continue
            if harness_id(new_source) in taken:
                continue
            # weight: the failures it targets, plus credit for having helped before, plus a floor to explore
            weight = sum(counts[t] for t in self.weighed_targets(mechanism)) + 2 * helpful[mechanism.name] + 0.5
            options.append((mechanism, new_source))
            weights.append(weight)
        if not options:
            return None
        mechanism, new_source = rng.choices(options, weights=weights, k=1)[0]
        targeted = ", ".join(f"{t} ({counts[t]} of {total} failures)" for t in self.weighed_targets(mechanism)
                             if counts[t]) or "no observed failure mode yet (exploration)"
        return Candidate(new_source, [parent], f"{mechanism.hypothesis} Targets: {targeted}.",
                         f"mechanisms: {mechanism.name}", {"mechanisms": [mechanism.name]})

    def weighed_targets(self, mechanism: Mechanism) -> tuple[str, ...]:
        """The failure modes a mechanism's weight counts: its declared targets, or (weigh_alters)
        every mode the audit found it changes."""
        return mechanism.audited_targets() if self.weigh_alters else mechanism.targets

    def _crossover(self, archive: Archive, best: str, other: str) -> Candidate | None:
        source = archive.source(best)
        present = {m.name for m in self.carried(source)}
        graft = [m for m in self.carried(archive.source(other)) if m.name not in present]
        if not graft:
            return None
        for mechanism in graft:
            source = apply_mechanism(source, mechanism)
        names = [m.name for m in graft]
        return Candidate(source, [best, other],
                         f"Combine the best harness {best} with the mechanisms of runner-up {other} "
                         f"({', '.join(names)}): their gains may add up.",
                         "mechanisms: " + " + ".join(names), {"mechanisms": names, "crossover": True})
