"""What a domain provides to the driver: data splits, a toolbox, a verifier, behaviour
metrics and its initial harness h0. Domains know the contract, never the driver.

    domain = wk.get_domain("chess")
    splits = domain.load_splits(n_train=64, n_search=32, n_test=64, seed=0)
"""

from __future__ import annotations

import importlib
import inspect
import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from whalekit.types import Task, TaskView, ToolCall, ToolResult, Trajectory


@dataclass
class Verdict:
    correct: bool
    reward: float
    details: dict[str, Any] = field(default_factory=dict)  # e.g. {"format_valid": True, "f1": 0.5}


@dataclass
class Splits:
    """Three disjoint task lists. Only `test` is ever used for test evaluation, and it
    never reaches training, search or a proposer."""

    train: list[Task]
    search: list[Task]
    test: list[Task]

    def __post_init__(self) -> None:
        ids = [set(t.id for t in s) for s in (self.train, self.search, self.test)]
        if ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2]:
            raise ValueError("splits overlap: a task id appears in two splits")


class Toolbox:
    """Named tools, each a function (task view, arguments) -> ToolResult. Tools run in
    the driver's process (or spawn their own sandbox), never inside a harness.

    `environment` names tools that are the task's environment rather than a view of it
    (chess: play the solver's move against the puzzle's line). They receive the full
    Task, reference included, because they must check a move against it; what they
    return is all a harness ever learns. The engine passes the Task; a caller holding
    only a TaskView can run the other tools."""

    def __init__(self, tools: dict[str, Callable[[Any, dict[str, Any]], ToolResult]],
                 environment: tuple[str, ...] = ()):
        self.tools = tools
        self.environment = tuple(environment)

    def run(self, call: ToolCall, task: Task | TaskView) -> ToolResult:
        tool = self.tools.get(call.name)
        if call.name in self.environment:
            if not isinstance(task, Task):
                return ToolResult(call.name, f"Tool '{call.name}' needs the driver's task record.", ok=False,
                                  error="needs_task")
        elif isinstance(task, Task):
            task = task.view()
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            return ToolResult(call.name, f"Unknown tool '{call.name}'. Available tools: {known}.", ok=False,
                              error="unknown_tool")
        if not isinstance(call.arguments, dict):
            return ToolResult(call.name, "Tool arguments must be a mapping.", ok=False, error="bad_arguments")
        try:
            return tool(task, call.arguments)
        except Exception as exc:  # a tool bug or bad arguments is an outcome, not a crash
            return ToolResult(call.name, f"Tool error: {type(exc).__name__}: {exc}", ok=False, error="tool_exception")


HARNESS_ALIASES = {"h0_faithful": "h0"}  # the authors' h0, by the name the cpu preset's docs use


class Domain(ABC):
    name: str = "domain"
    tools_description: str = ""  # what a proposer needs to know about the toolbox
    # An LLM proposer may run drafts (the `prototype` tool, whalekit's stand-in for the Bash the
    # authors' search QA and math proposers have); their chess proposer has no shell: False there.
    proposer_prototyping: bool = True

    @abstractmethod
    def load_splits(self, **config: Any) -> Splits: ...

    @abstractmethod
    def toolbox(self) -> Toolbox: ...

    @abstractmethod
    def verify(self, task: Task, answer: str | None) -> Verdict: ...

    def verify_trajectory(self, task: Task, trajectory: Trajectory) -> Verdict:
        """The verdict on a finished episode. By default its final answer is graded; a
        domain whose environment is played step by step (chess) grades what its
        environment tool recorded instead, so no harness can probe it and then answer."""
        return self.verify(task, trajectory.final_answer)

    def behaviour(self, trajectory: Trajectory, task: Task, verdict: Verdict) -> dict[str, Any]:
        """Per-trajectory behaviour flags for the bottleneck analysis."""
        return {
            "answered": trajectory.final_answer is not None,
            "turns": len(trajectory.turns),
            "generated_tokens": trajectory.generated_tokens,
            "truncated": any(t.finish_reason == "length" for t in trajectory.turns),
        }

    failure_modes: tuple[str, ...] = ("no_answer", "wrong_answer")  # names `failure_mode` can return

    def failure_mode(self, trajectory: Trajectory) -> str | None:
        """The one main reason a finished trajectory failed (None when correct), named
        from `failure_modes`; proposers group failures by it."""
        if trajectory.correct:
            return None
        return "no_answer" if trajectory.final_answer is None else "wrong_answer"

    def mechanisms(self) -> list[Any]:
        """The domain's catalogue of harness mechanisms (whalekit.domains.mechanisms.Mechanism)."""
        return self._catalogue("CATALOGUE")

    def prompt_wordings(self) -> list[Any]:
        """Text-only rewordings of the prompt hooks: what a prompt-only (FST) search can try
        beyond the catalogue's own text-only mechanisms."""
        return self._catalogue("PROMPT_WORDINGS")

    def compositions(self) -> list[Any]:
        """Shipped harnesses that are another plus catalogue mechanisms
        (whalekit.domains.mechanisms.Composition; e.g. the cpu preset's h0_cpu, chess h1)."""
        return self._catalogue("COMPOSITIONS")

    def _catalogue(self, name: str) -> list[Any]:
        try:
            package = type(self).__module__
            if package.startswith("whalekit.domains."):  # the domain's package, wherever the class is defined
                package = ".".join(package.split(".")[:3])
            module = importlib.import_module(package + ".mechanisms")
        except ModuleNotFoundError:
            return []
        return list(getattr(module, name, []))

    def harness_dir(self) -> Path:
        return Path(inspect.getfile(type(self))).parent / "harnesses"

    def initial_harness_source(self, name: str = "h0") -> str:
        """The source of a starting harness: `h0` (the authors', also `h0_faithful`) by
        default, or another shipped one such as `h0_cpu`."""
        return self.harness_source(name)

    def harness_source(self, name: str) -> str:
        """A shipped harness by name (`h0_faithful` is `h0`); a clear error names the ones there are."""
        path = self.harness_dir() / f"{HARNESS_ALIASES.get(name, name)}.py"
        if not path.exists():
            shipped = sorted(p.stem for p in self.harness_dir().glob("*.py")) if self.harness_dir().is_dir() else []
            raise ValueError(f"domain {self.name!r} ships no harness {name!r}; it has {', '.join(shipped) or 'none'} "
                             f"(and h0_faithful, the authors' h0)")
        return path.read_text()


def split_disjoint(items: list[Any], key: Callable[[Any], str], sizes: tuple[int, int, int], seed: int,
                   source: str = "data") -> tuple[list[Any], list[Any], list[Any]]:
    """Shuffle, drop duplicates by `key` (e.g. a position or question text), and cut
    three disjoint slices; a clear error when there is not enough data."""
    seen: set[str] = set()
    unique = []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            unique.append(item)
    random.Random(seed).shuffle(unique)
    need = sum(sizes)
    if len(unique) < need:
        raise ValueError(f"{source}: need {need} distinct items for splits {sizes}, have {len(unique)}")
    a, b, c = sizes
    return unique[:a], unique[a:a + b], unique[a + b:a + b + c]


ANALYSIS_SEED_OFFSET = 1_000_003  # the analysis split's draw: another seed than the run's three splits


def analysis_split(domain: Domain, held: Splits, n: int, seed: int, **load_options: Any) -> list[Task]:
    """`n` tasks apart from `held`'s train, search and test (by task id), for analyses that must
    not read the test split the verdicts use (the θ×h compatibility matrix). Drawn as a test
    split of another seed, so any domain has one and the run's own three splits stay as they
    are; a clear error when the domain cannot give `n` more tasks."""
    if n <= 0:
        raise ValueError(f"the analysis split needs a positive size, got {n}")
    taken = {t.id for part in (held.train, held.search, held.test) for t in part}
    for draw in (2 * n, 4 * n, 8 * n):
        try:
            pool = domain.load_splits(n_train=0, n_search=0, n_test=draw, seed=seed + ANALYSIS_SEED_OFFSET,
                                      **load_options).test
        except ValueError:
            break  # the domain has fewer tasks than this draw asks for
        chosen = [t for t in pool if t.id not in taken][:n]
        if len(chosen) == n:
            return chosen
    raise ValueError(f"domain {domain.name!r}: cannot draw {n} analysis tasks apart from the run's "
                     f"{len(taken)} train, search and test tasks; lower the analysis split's size")


# Built-in domains, as "module:attribute" so that importing whalekit imports none of them.
_REGISTRY: dict[str, str | Callable[..., Domain]] = {
    "chess": "whalekit.domains.chess:ChessDomain",
    "math": "whalekit.domains.math:MathDomain",
    "searchqa": "whalekit.domains.searchqa:SearchQADomain",
    "toy": "whalekit.domains.toy:ToyDomain",
}
BUILT_IN = frozenset(_REGISTRY)
# Packages outside whalekit declare domains under this entry-point group, e.g. in pyproject.toml:
#   [project.entry-points."whalekit.domains"]
#   cooking = "cooking_domain:CookingDomain"
ENTRY_POINT_GROUP = "whalekit.domains"


def register_domain(name: str, factory: Callable[..., Domain] | str, replace: bool = False) -> None:
    """Make `get_domain(name)` (and so `--domain name`) build a domain defined outside
    whalekit. `factory` is a Domain subclass, any callable returning a Domain (it gets the
    domain options as keywords), or "module:attribute". Built-in names cannot be replaced;
    another registered name only with replace=True.

        wk.register_domain("cooking", CookingDomain)
        domain = wk.get_domain("cooking")
    """
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise ValueError(f"a domain name is a non-empty string without surrounding spaces, got {name!r}")
    if not (callable(factory) or (isinstance(factory, str) and factory.count(":") == 1)):
        raise TypeError(f"register_domain({name!r}, ...): factory must be callable or 'module:attribute', "
                        f"got {factory!r}")
    if name in BUILT_IN:
        raise ValueError(f"{name!r} is a built-in domain; register yours under another name")
    if name in _REGISTRY and not replace and _REGISTRY[name] is not factory:
        raise ValueError(f"domain {name!r} is already registered ({_REGISTRY[name]!r}); pass replace=True")
    _REGISTRY[name] = factory


def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_domains() -> list[str]:
    """Built-in, registered and entry-point domain names."""
    return sorted(set(_REGISTRY) | set(_entry_points()))


def get_domain(name: str, **options: Any) -> Domain:
    """Build a domain by name: a built-in one, one given to `register_domain`, or one an
    installed package declares under the `whalekit.domains` entry-point group."""
    factory: Any = _REGISTRY.get(name)
    if factory is None:
        entry = _entry_points().get(name)
        if entry is None:
            raise ValueError(f"unknown domain {name!r}; known: {', '.join(known_domains())}")
        try:
            factory = entry.load()
        except Exception as exc:  # a broken plugin names itself, not a bare ImportError deep inside it
            raise ValueError(f"domain {name!r} from entry point {entry.value!r} ({ENTRY_POINT_GROUP}) failed to "
                             f"load: {type(exc).__name__}: {exc}") from exc
    if isinstance(factory, str):
        module, attribute = factory.split(":")
        factory = getattr(importlib.import_module(module), attribute)
    domain = factory(**options)
    if not isinstance(domain, Domain):
        raise TypeError(f"the factory of domain {name!r} returned a {type(domain).__name__}, not a whalekit Domain")
    return domain
