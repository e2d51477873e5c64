"""Weight updates by name: a method row's `weight_update` -> the factory of the weight phase
the driver steps. One table, like the proposers' (whalekit.search.proposers.registry): a new
weight update (GRPO, DPO, ...) is one module with a class that fits `run.phases.base.WeightPhase`
(kind "weight") plus one line here, and a method row that names it (README, "Extending").

    phase = make_weight_update("rsft", parts)      # parts: whalekit.run.parts.RunParts
    sorted(WEIGHT_UPDATES)                         # ['rsft']
"""

from __future__ import annotations

from collections.abc import Callable

from whalekit.run.parts import RunParts
from whalekit.run.phases.base import WeightPhase
from whalekit.run.phases.rsft import RSFTPhase

WEIGHT_UPDATES: dict[str, Callable[[RunParts], WeightPhase]] = {
    "rsft": RSFTPhase,  # online rejection-sampling fine-tuning: the paper's weight phase
}


def make_weight_update(name: str, parts: RunParts) -> WeightPhase:
    """The weight phase called `name` (see WEIGHT_UPDATES), built from the run's parts."""
    if name not in WEIGHT_UPDATES:
        raise ValueError(f"unknown weight update {name!r}; known: {', '.join(WEIGHT_UPDATES)}")
    return WEIGHT_UPDATES[name](parts)


__all__ = ["WEIGHT_UPDATES", "make_weight_update"]
