"""Which lever moved the score: a run's test change split over its weight stages and its
harness stages, from the test evaluations the driver makes after every stage that changed
the agent.

Why: a method that alternates two levers ends at one number; whether that number came from
RSFT or from the harness search is the question the paper asks of each domain. A stage's
effect is the test mean after it minus the test mean before it (the previous evaluation);
a stage after which nothing was evaluated changed nothing (the driver evaluates whenever
the agent changed), so its effect is 0. Intermediate evaluations are mean@2 and the first
and last mean@8: both estimate the same per-sample accuracy, the mean@2 ones with more noise.

    effects = stage_effects(run)              # [StageEffect(kind="weight", change=+0.07, ...), ...]
    lever_totals(run)                         # {"weight": +0.13, "harness": -0.01}
"""

from __future__ import annotations

from dataclasses import dataclass

from whalekit.report.run_summaries import RunSummary

KINDS = ("weight", "harness")


@dataclass(frozen=True)
class StageEffect:
    """One stage of a run: its kind, its index, and the test change across it (fraction)."""

    kind: str
    stage: int
    change: float
    evaluated: bool  # False: nothing was evaluated after it (the agent did not change): change 0


def stage_effects(run: RunSummary) -> list[StageEffect]:
    """Every finished stage of `run` with the test change across it, in order."""
    evals = sorted(run.evals, key=lambda e: int(e.get("stages_done", 0)))
    effects = []
    for end in run.of("stage_end"):
        stage = int(end["stage"])
        after = [e for e in evals if int(e.get("stages_done", 0)) == stage + 1]
        before = [e for e in evals if int(e.get("stages_done", 0)) <= stage]
        if after and before:
            change = float(after[-1]["mean_at_k"]) - float(before[-1]["mean_at_k"])
            effects.append(StageEffect(str(end["kind"]), stage, change, True))
        else:
            effects.append(StageEffect(str(end["kind"]), stage, 0.0, False))
    return effects


def lever_totals(run: RunSummary) -> dict[str, float]:
    """kind -> the summed test change over the run's stages of that kind (kinds it has)."""
    totals: dict[str, float] = {}
    for effect in stage_effects(run):
        totals[effect.kind] = totals.get(effect.kind, 0.0) + effect.change
    return totals


def stage_counts(run: RunSummary) -> dict[str, int]:
    """kind -> how many stages of that kind the run finished."""
    counts: dict[str, int] = {}
    for effect in stage_effects(run):
        counts[effect.kind] = counts.get(effect.kind, 0) + 1
    return counts
