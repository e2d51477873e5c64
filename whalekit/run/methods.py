"""The one table of methods: a method is one row. Everything the run does differently for a
method is read from its row: which phases it has and in what order (`stages`), whether its
search is capped in weight_steps mode, which weight update trains it, whether its proposer
may only edit prompt text, and whether its run name carries the (E, I) schedule; and how it
is shown (label, colour, row order). The driver, the schedules, the configuration, tables,
figures and the reproduction's run set read it from here; adding a method is adding a row
(README, "Extending").

    from whalekit.run.methods import METHODS, method
    method("stagewise").label          # 'stagewise (W→H)'
    method("fst").prompt_only          # True: the proposer edits the prompt text only
"""

from __future__ import annotations

from dataclasses import dataclass

# How a method orders its stages (whalekit.run.schedules reads it):
#   alternate            weight, harness, weight, ... (E epochs / I iterations each)
#   weight | harness     that phase only
#   weight_then_harness  weight stages until the stagewise split of the budget is spent, then harness stages
#   harness_then_weight  the reverse
#   alternate_adaptive   alternate, weights first, each stage as long as the adaptive rule says
STAGE_ORDERS = ("alternate", "weight", "harness", "weight_then_harness", "harness_then_weight",
                "alternate_adaptive")
STAGEWISE_ORDERS = {"weight_then_harness": ("weight", "harness"), "harness_then_weight": ("harness", "weight")}


@dataclass(frozen=True)
class Method:
    name: str  # as in configs, run folders and the command line
    stages: str  # one of STAGE_ORDERS
    # budget.mode=weight_steps: its search is capped by budget.search_iterations (the others
    # search only between weight stages, as long as weight steps remain)
    search_capped: bool
    label: str  # in tables and legends
    colour: str  # in every figure (Okabe-Ito: distinguishable with colour-vision deficiencies)
    order: int  # row order in tables, legend order in figures
    prompt_only: bool = False  # its proposer may only rewrite the starting harness's prompt text (FST)
    weight_update: str = "rsft"  # its weight phase, a name in whalekit.run.phases.weight_updates.WEIGHT_UPDATES

    def __post_init__(self) -> None:
        if self.stages not in STAGE_ORDERS:
            raise ValueError(f"method {self.name!r}: stages {self.stages!r}, use one of {', '.join(STAGE_ORDERS)}")

    @property
    def trains_weights(self) -> bool:
        """Has weight (RSFT) stages."""
        return self.stages != "harness"

    @property
    def searches(self) -> bool:
        """Has harness-search stages."""
        return self.stages != "weight"

    @property
    def stagewise(self) -> tuple[str, str] | None:
        """(first, second) phase kinds of a stagewise method; None for the others."""
        return STAGEWISE_ORDERS.get(self.stages)

    @property
    def fixed_harness_stages(self) -> bool:
        """Its harness stages run I proposer iterations each (not the adaptive rule's length)."""
        return self.searches and self.stages != "alternate_adaptive"

    @property
    def schedule_in_name(self) -> bool:
        """Its run name carries (E, I): both set its stages' lengths (alternating and stagewise
        methods; a one-phase or adaptive method's name leaves them out)."""
        return self.stages == "alternate" or self.stagewise is not None


METHODS = (
    Method("whale", "alternate", False, "WHALE", "#0072b2", 0),
    Method("weight_only", "weight", False, "weights only", "#e69f00", 2),
    Method("harness_only", "harness", True, "harness only", "#009e73", 3),
    Method("stagewise", "weight_then_harness", True, "stagewise (W→H)", "#d55e00", 4),
    Method("stagewise_reverse", "harness_then_weight", True, "stagewise (H→W)", "#cc79a7", 5),
    Method("fst", "alternate", False, "FST (prompt only)", "#7f7f7f", 6, prompt_only=True),
    Method("adaptive", "alternate_adaptive", False, "WHALE (adaptive)", "#56b4e9", 1),
)
BY_NAME = {m.name: m for m in METHODS}  # what `method` looks up: the run reads a method's row from here

METHOD_NAMES = tuple(m.name for m in METHODS)
WEIGHT_METHODS = tuple(m.name for m in METHODS if m.trains_weights)
SEARCH_METHODS = tuple(m.name for m in METHODS if m.searches)
SEARCH_CAPPED = tuple(m.name for m in METHODS if m.search_capped)
METHOD_ORDER = tuple(m.name for m in sorted(METHODS, key=lambda m: m.order))
METHOD_LABELS = {name: BY_NAME[name].label for name in METHOD_ORDER}
METHOD_COLOURS = {name: BY_NAME[name].colour for name in METHOD_ORDER}


def method(name: str) -> Method:
    """The method called `name`; an unknown name is a ValueError listing every known one."""
    if name not in BY_NAME:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(BY_NAME)}")
    return BY_NAME[name]


__all__ = ["BY_NAME", "METHODS", "METHOD_COLOURS", "METHOD_LABELS", "METHOD_NAMES", "METHOD_ORDER", "Method",
           "SEARCH_CAPPED", "SEARCH_METHODS", "STAGE_ORDERS", "WEIGHT_METHODS", "method"]
