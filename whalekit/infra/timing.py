"""Where a run's time goes: a phase clock that splits wall time exactly between the
phases of a run (sampling, training, weight sync, test evaluation, proposing, ...),
the events that carry it, and the table `whalekit report --timing` prints.

    with timing.recording(clock := timing.PhaseClock()):
        with timing.phase("sample"):
            rollout(...)
    clock.take()   # -> {"sample": 1.9, "other": 0.1}: seconds since the previous take

Phases nest and the innermost one owns the time: a weight sync inside a training step
counts as sync, not train, so the phases of an event always add up to the wall time
between it and the previous event. Components mark their phases with `phase(...)`, which
does nothing when no clock is recording (library use, tests of one component). The clock
is per process and per thread of the driver: tool threads and worker processes never
mark phases, only the code that waits for them does.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whalekit.infra.runs import RunDir

if TYPE_CHECKING:
    from whalekit.samplers.base import Sampler

# The phases a run reports, in table order; time outside every marked phase is "other"
# (checkpoints, commits, archive bookkeeping, candidate validation, start-up).
PHASES = ("sample", "train", "sync", "test_eval", "propose", "checkpoint", "other")
EVENT_KEY = "timing"  # the field of every run event that holds its phase seconds
# The field of a run event that holds the prompt tokens sent to the sampler since the
# previous event and how many of them its prefix cache served (vLLM samplers only):
# where sampling time goes is mostly a question of how much prompt is computed again.
CACHE_KEY = "prompt_cache"


class PhaseClock:
    """Exclusive phase accounting: elapsed time always goes to the innermost open phase."""

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._mark = time.perf_counter()
        self._pending: dict[str, float] = {}
        self.totals: dict[str, float] = {}  # every second charged since the clock was made

    def _charge(self) -> None:
        now = time.perf_counter()
        name = self._stack[-1] if self._stack else "other"
        seconds = now - self._mark
        self._pending[name] = self._pending.get(name, 0.0) + seconds
        self.totals[name] = self.totals.get(name, 0.0) + seconds
        self._mark = now

    def enter(self, name: str) -> None:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; phases are {', '.join(PHASES)}")
        self._charge()
        self._stack.append(name)

    def exit(self, name: str) -> None:
        self._charge()
        if not self._stack or self._stack[-1] != name:
            raise RuntimeError(f"phase {name!r} closed while {self._stack[-1:] or 'none'} is open")
        self._stack.pop()

    def take(self) -> dict[str, float]:
        """Seconds per phase since the previous take (rounded to 0.1 ms; phases
        that took no time left out)."""
        self._charge()
        out = {k: round(v, 4) for k, v in sorted(self._pending.items()) if round(v, 4) > 0}
        self._pending = {}
        return out


_local = threading.local()


def current() -> PhaseClock | None:
    return getattr(_local, "clock", None)


@contextlib.contextmanager
def recording(clock: PhaseClock) -> Iterator[PhaseClock]:
    """Make `clock` the one that `phase` charges on this thread, for the block."""
    previous = current()
    _local.clock = clock
    try:
        yield clock
    finally:
        _local.clock = previous


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Charge the block's time to `name` on the recording clock (none: no effect)."""
    clock = current()
    if clock is None:
        yield
        return
    clock.enter(name)
    try:
        yield
    finally:
        clock.exit(name)


def timed_log(run: RunDir, clock: PhaseClock, sampler: Sampler | None = None) -> Callable[..., dict[str, Any]]:
    """`run.log` with every event carrying the phase seconds since the previous event
    (the driver's one hook: its events then add up to the run's wall time) and, for a
    sampler that counts them (`prompt_tokens`, `cached_prompt_tokens`), the prompt tokens
    it was sent since then and how many its prefix cache served."""
    log = run.log

    def counts() -> tuple[int, int] | None:
        sent = getattr(sampler, "prompt_tokens", None)
        cached = getattr(sampler, "cached_prompt_tokens", None)
        return (sent, cached) if isinstance(sent, int) and isinstance(cached, int) else None

    seen = list(counts() or (0, 0))  # a sampler reused across runs: only this run's tokens count

    def prompt_cache() -> dict[str, dict[str, int]]:
        now = counts()
        if now is None or now[0] == seen[0]:
            return {}
        sent, cached = now
        delta = {"sent": sent - seen[0], "cached": cached - seen[1]}
        seen[:] = [sent, cached]
        return {CACHE_KEY: delta}

    def log_with_timing(event: str, **fields: Any) -> dict[str, Any]:
        return log(event, **fields, **{EVENT_KEY: clock.take()}, **prompt_cache())

    return log_with_timing


# -- reading it back --------------------------------------------------------------------
def run_timing(events: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds per phase over a run's events (its committed work: the time of a killed
    attempt whose events were rolled back is not in them). Runs recorded before events
    carried timing give {}."""
    totals: dict[str, float] = {}
    for event in events:
        for name, seconds in (event.get(EVENT_KEY) or {}).items():
            totals[name] = totals.get(name, 0.0) + float(seconds)
    return totals


def run_prompt_cache(events: list[dict[str, Any]]) -> dict[str, int]:
    """Prompt tokens sent over a run's events and how many the prefix cache served
    ({} for runs whose sampler does not count them: transformers, Ray workers)."""
    totals: dict[str, int] = {}
    for event in events:
        for name, count in (event.get(CACHE_KEY) or {}).items():
            totals[name] = totals.get(name, 0) + int(count)
    return totals


def timing_table(runs: list[tuple[str, dict[str, float]]],
                 caches: list[dict[str, int]] | None = None) -> str:
    """One row per run: total seconds, then each phase's seconds and share of the total,
    and, where any run has them, its prompt tokens and the share its prefix cache served."""
    phases = [p for p in PHASES if any(p in t for _, t in runs)] or list(PHASES[:5])
    caches = caches or [{} for _ in runs]
    show_cache = any(caches)
    width = max([len("run")] + [len(name) for name, _ in runs])
    header = f"{'run':<{width}} {'total s':>9}" + "".join(f" {p:>16}" for p in phases)
    header += f" {'prompt tok (cached)':>20}" if show_cache else ""
    lines = [header]
    for (name, totals), cache in zip(runs, caches):
        total = sum(totals.values())
        if not totals:
            lines.append(f"{name:<{width}} {'-':>9}  (no timing in its events: recorded before whalekit timed runs)")
            continue
        cells = "".join(f" {_cell(totals.get(p, 0.0), total):>16}" for p in phases)
        if show_cache:
            sent = cache.get("sent", 0)
            served = f"{sent} ({100 * cache.get('cached', 0) / sent:.0f}%)" if sent else "-"
            cells += f" {served:>20}"
        lines.append(f"{name:<{width}} {total:>9.1f}{cells}")
    return "\n".join(lines)


def _cell(seconds: float, total: float) -> str:
    return f"{seconds:.1f} ({100 * seconds / total:.0f}%)" if total else f"{seconds:.1f}"


def report_timing(paths: list[Path]) -> str:
    events = [RunDir(path).events() for path in paths]
    return timing_table([(str(path), run_timing(e)) for path, e in zip(paths, events)],
                        [run_prompt_cache(e) for e in events])
