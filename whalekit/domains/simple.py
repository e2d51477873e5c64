"""A domain from plain parts, for a new task family defined outside whalekit (a notebook, a
script, a package of one's own): the tasks, a verifier function, the tools, h0's source and
the mechanisms a reflective proposer may apply. Subclass `Domain` instead when the domain
needs its own data loaders, behaviour flags or step-by-step environment.

    domain = wk.SimpleDomain("units", tasks, verify=lambda task, answer: answer == task.reference, h0=H0)
    wk.register_domain("units", lambda **options: domain)      # now --domain units, resolve_config(...)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from whalekit.domains.base import Domain, Splits, Toolbox, Verdict, split_disjoint
from whalekit.types import Task, ToolResult

Tool = Callable[[Any, dict[str, Any]], ToolResult]


class SimpleDomain(Domain):
    """`verify(task, answer)` returns a Verdict or a bool (correct, reward 1 or 0); `tools`
    maps a name to `tool(task_view, arguments) -> ToolResult`; `h0` is the source of a
    harness module (one Harness subclass, see whalekit.harness); `mechanisms` are the
    whalekit.domains.mechanisms.Mechanism edits the offline proposer may try."""

    def __init__(self, name: str, tasks: Sequence[Task], verify: Callable[[Task, str | None], Verdict | bool],
                 h0: str, tools: dict[str, Tool] | None = None, tools_description: str = "",
                 mechanisms: Sequence[Any] = (), failure_modes: tuple[str, ...] = ("no_answer", "wrong_answer")):
        if not tasks:
            raise ValueError(f"domain {name!r}: no tasks")
        if any(task.domain != name for task in tasks):
            raise ValueError(f"domain {name!r}: every task's `domain` must be {name!r}")
        self.name = name
        self.tasks = list(tasks)
        self._verify = verify
        self.h0 = h0
        self.tools = dict(tools or {})
        self.tools_description = tools_description
        self._mechanisms = list(mechanisms)
        self.failure_modes = failure_modes

    def load_splits(self, n_train: int = 32, n_search: int = 16, n_test: int = 16, seed: int = 0,
                    **_: Any) -> Splits:
        """Three disjoint random slices of the tasks (duplicate ids dropped)."""
        return Splits(*split_disjoint(self.tasks, lambda t: t.id, (n_train, n_search, n_test), seed,
                                      f"domain {self.name!r}"))

    def toolbox(self) -> Toolbox:
        return Toolbox(dict(self.tools))

    def verify(self, task: Task, answer: str | None) -> Verdict:
        verdict = self._verify(task, answer)
        if isinstance(verdict, Verdict):
            return verdict
        return Verdict(bool(verdict), float(bool(verdict)))

    def initial_harness_source(self, name: str = "h0") -> str:
        if name not in ("h0", "h0_faithful"):
            raise ValueError(f"domain {self.name!r} is a SimpleDomain: its only starting harness is its h0, "
                             f"not {name!r}")
        return self.h0

    def mechanisms(self) -> list[Any]:
        return list(self._mechanisms)

    def prompt_wordings(self) -> list[Any]:
        return []
