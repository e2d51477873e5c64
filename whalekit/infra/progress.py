"""Progress a person can follow: one line per finished stage of a run and one line per
finished job of `make reproduce`, each with elapsed time and an ETA from measured rates.

Why from measured rates: a run's cost is its rollouts, and a machine's speed is only
known once it has spent some; an ETA is remaining work × (seconds per unit of work seen
so far in this process), and "?" before anything was measured. Reused runs take no time
and count neither in the rate nor in the remaining work.

    print(stage_line("weight", 2, rollouts=384, budget=1024, signal=0.42, elapsed_s=130))
    with RunWatcher(run_dir, print):   # a stage line for each stage_end the driver logs
        execute(job)
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from whalekit.infra.errors import DataError
from whalekit.infra.runs import read_jsonl_records

SIGNAL_NAMES = {"weight": "training reward", "harness": "best search score"}
QUIET_ENV = "WHALEKIT_QUIET"  # "1": no progress bars and no stage lines (the test suite sets it)


def quiet() -> bool:
    """True when progress output is switched off (WHALEKIT_QUIET=1)."""
    return os.environ.get(QUIET_ENV, "") not in ("", "0")


def report(line: str) -> None:
    """Print a progress line now (flushed), unless quiet."""
    if not quiet():
        print(line, flush=True)


def format_duration(seconds: float | None) -> str:
    """'0:42', '12:05', '2:03:00'; '?' when unknown."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def eta_seconds(done: float, total: float, elapsed_s: float) -> float | None:
    """Seconds left at the measured rate (elapsed per unit done); None before any unit is done."""
    if done <= 0 or elapsed_s < 0:
        return None
    return max(0.0, total - done) * elapsed_s / done


def stage_line(kind: str, stage: int, rollouts: int, budget: int, signal: float | None, elapsed_s: float,
               rollouts_at_start: int = 0, unit: str = "rollouts") -> str:
    """One finished stage: kind, rollouts used / budget, its signal (training reward for a
    weight stage, best search score for a harness stage), elapsed and ETA. The rate counts
    only the rollouts spent since `rollouts_at_start` (where this process resumed). `unit`
    names the work when it is not rollouts (budget.mode weight_steps: weight steps)."""
    share = 100.0 * rollouts / budget if budget else 0.0
    value = "?" if signal is None else f"{signal:.3f}"
    eta = eta_seconds(rollouts - rollouts_at_start, budget - rollouts_at_start, elapsed_s)
    return (f"{kind} stage {stage} · {unit} {rollouts}/{budget} ({share:.0f} %) · "
            f"{SIGNAL_NAMES.get(kind, 'signal')} {value} · elapsed {format_duration(elapsed_s)} · "
            f"ETA {format_duration(eta)}")


def stage_lines_from_events(events: Sequence[dict[str, Any]], elapsed_s: float, rollouts_at_start: int = 0,
                            after: int = 0) -> list[str]:
    """A `stage_line` for every stage_end event from the `after`-th stage_end on, with the
    signal logged last before it (rsft_batch reward window mean / search_iteration best score)."""
    budget, lines, ends = 0, [], 0
    signal: dict[str, float | None] = {"weight": None, "harness": None}
    for e in events:
        kind = e.get("event")
        if kind == "run_start":
            budget = int(e.get("budget", 0))
        elif kind == "rsft_batch":
            signal["weight"] = e.get("reward_window_mean", e.get("reward"))
        elif kind == "search_iteration":
            signal["harness"] = e.get("best_score")
        elif kind == "stage_end":
            ends += 1
            if ends > after:
                lines.append(stage_line(e["kind"], int(e["stage"]), int(e["rollouts"]), budget,
                                        signal.get(e["kind"]), elapsed_s, rollouts_at_start))
    return lines


class RunWatcher:
    """Print a stage line for each stage a run finishes while the block runs, by polling
    its events.jsonl from a background thread (the run itself may be in another process,
    e.g. a papermill kernel whose output is not shown)."""

    def __init__(self, run_dir: str | Path | None, log: Callable[[str], None] = print, interval_s: float = 5.0):
        self.events_path = Path(run_dir) / "events.jsonl" if run_dir else None
        self.log, self.interval_s = log, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen = 0
        self._rollouts_at_start = 0
        self._started = time.monotonic()

    def _events(self) -> list[dict[str, Any]]:
        if self.events_path is None or not self.events_path.exists():
            return []
        try:
            return read_jsonl_records(self.events_path)  # a line being written right now is left out
        except DataError:  # progress lines are a courtesy: a damaged log is the driver's to report
            return []

    def poll(self) -> None:
        events = self._events()
        lines = stage_lines_from_events(events, time.monotonic() - self._started, self._rollouts_at_start,
                                        after=self._seen)
        self._seen += len(lines)
        for line in lines:
            self.log(line)

    def __enter__(self) -> RunWatcher:
        events = self._events()
        self._seen = sum(1 for e in events if e.get("event") == "stage_end")  # a resumed run: already done
        self._rollouts_at_start = max((int(e.get("rollouts", 0)) for e in events), default=0)
        self._started = time.monotonic()
        if self.events_path is not None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self.poll()  # the last stages


class OverallProgress:
    """`make reproduce` across jobs: after each job, a line with jobs done / total, the
    share of the work done, elapsed time and an ETA at the seconds per unit of work measured
    on the jobs actually executed (divided by the jobs that run at once). `costs` gives each
    job's work (e.g. its rollout budget; 0 for cheap analysis notebooks)."""

    def __init__(self, costs: Sequence[float], clock: Callable[[], float] = time.monotonic, parallel: int = 1):
        self.costs = [float(c) for c in costs]
        self.clock = clock
        self.parallel = max(1, parallel)  # jobs running at once: each job's wall time overlaps the others'
        self.started = clock()
        self.finished: set[int] = set()
        self.measured_cost = 0.0
        self.measured_s = 0.0

    def finish(self, index: int, label: str, wall_s: float, reused: bool) -> str:
        """Record job `index` (0-based) as done and return its progress line."""
        self.finished.add(index)
        if not reused and self.costs[index] > 0:
            self.measured_cost += self.costs[index]
            self.measured_s += wall_s
        left = sum(c for i, c in enumerate(self.costs) if i not in self.finished)
        total = sum(self.costs)
        done = total - left
        rate = self.measured_s / self.measured_cost if self.measured_cost else None
        eta = None if rate is None else left * rate / self.parallel
        if not left:
            eta = 0.0
        what = "reused (run finished)" if reused else f"{wall_s:.1f} s"
        share = 100.0 * done / total if total else 100.0
        return (f"[{len(self.finished)}/{len(self.costs)}] {label}: {what} · {share:.0f} % of the work · "
                f"elapsed {format_duration(self.clock() - self.started)} · ETA {format_duration(eta)}")

