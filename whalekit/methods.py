"""The one table of methods: what each of the seven methods does (trains weights, searches
harnesses, has its search capped in weight_steps mode) and how it is shown (label, colour,
row order). Tables, figures, the reproduction's run set and the driver read it from here.

    from whalekit.methods import METHODS, method
    method("stagewise").label          # 'stagewise (W→H)'
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str  # as in configs, run folders and the command line
    trains_weights: bool  # has weight (RSFT) stages
    searches: bool  # has harness-search stages
    # budget.mode=weight_steps: its search is capped by budget.search_iterations (the others
    # search only between weight stages, as long as weight steps remain)
    search_capped: bool
    label: str  # in tables and legends
    colour: str  # in every figure (Okabe-Ito: distinguishable with colour-vision deficiencies)
    order: int  # row order in tables, legend order in figures


METHODS = (
    Method("whale", True, True, False, "WHALE", "#0072b2", 0),
    Method("weight_only", True, False, False, "weights only", "#e69f00", 2),
    Method("harness_only", False, True, True, "harness only", "#009e73", 3),
    Method("stagewise", True, True, True, "stagewise (W→H)", "#d55e00", 4),
    Method("stagewise_reverse", True, True, True, "stagewise (H→W)", "#cc79a7", 5),
    Method("fst", True, True, False, "FST (prompt only)", "#7f7f7f", 6),
    Method("adaptive", True, True, False, "WHALE (adaptive)", "#56b4e9", 1),
)
BY_NAME = {m.name: m for m in METHODS}

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
        raise ValueError(f"unknown method {name!r}; known: {', '.join(METHOD_NAMES)}")
    return BY_NAME[name]


__all__ = ["BY_NAME", "METHODS", "METHOD_COLOURS", "METHOD_LABELS", "METHOD_NAMES", "METHOD_ORDER", "Method",
           "SEARCH_CAPPED", "SEARCH_METHODS", "WEIGHT_METHODS", "method"]
