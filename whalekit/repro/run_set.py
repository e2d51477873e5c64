"""The reproduction's run set as committed records: which planned runs are recorded under
`results/`, which are left, how long the rest will take on this machine, and the
`results/<preset>/STATUS.md` that says so.

Why: the full cpu set (7 methods x 3 domains x 3 seeds, the schedule grid, the zero start)
takes days on 2 cores, so it is made in chunks over many sittings (`--max-hours`). A chunk
must know what earlier chunks recorded (a run whose record matches its configuration and
the code that makes it is skipped), and a reader must see where the set stands.

A record counts for a planned run when its configuration equals the run's (the same rule
that keeps a finished run from passing as another configuration's, `config.config_changes`)
and the code a run executes is the same as the code that made it (`code_identity`: every
module of the run's import closure byte-identical; reporting code does not count): a record
of other code is "other code" and is made again at the set's code, never mixed in silently.

    states = record_states(entries, Path("results"), RunCode.of_package())
    print(plan_summary(entries, states, cpu_kind()))
    write_status(entries, states, Path("results/cpu/STATUS.md"), ...)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whalekit.infra.cpu_info import cpu_kind
from whalekit.infra.progress import format_duration
from whalekit.infra.runs import RunDir, atomic_write
from whalekit.records.code_identity import RunCode, ledger_entries
from whalekit.records.results import record_path
from whalekit.run.config import RunConfig, config_changes
from whalekit.run.provenance import git_commit, git_tag

RECORDED, LEFT, OTHER_CODE, OTHER_CONFIG = "recorded", "left", "other code", "other configuration"
TIER_TITLES = {
    "a": "Table 2's core: whale, weight_only, harness_only, fst",
    "b": "schedules: stagewise, stagewise_reverse, adaptive",
    "c": "the schedule grid (Table 3 / Figure 4)",
    "d": "the zero start: from the authors' faithful h0",
}


@dataclass(frozen=True)
class PlannedRun:
    """One run of the set: its tier (a-d, TIER_TITLES) and its resolved configuration."""

    tier: str
    config: RunConfig
    overrides: dict[str, Any] = field(default_factory=dict)  # beyond the preset: the zero start's harness

    @property
    def key(self) -> str:
        return f"{self.config.domain}/{self.config.run_name}"


@dataclass(frozen=True)
class RecordState:
    """Where a planned run stands: its state, the record folder, the record's wall time and
    the CPU kind and commit it was made on (when recorded), and why it does not count."""

    state: str
    folder: Path
    wall_s: float | None = None
    cpu_kind: str | None = None
    commit: str | None = None
    reason: str = ""


def record_state(run: PlannedRun, results_root: Path, code: RunCode) -> RecordState:
    """The state of one planned run against the records: RECORDED (a finished record of
    this configuration made by code that runs as `code` does), OTHER_CODE, OTHER_CONFIG, or LEFT."""
    folder = record_path(run.config, results_root)
    record = RunDir(folder)
    if not record.config_path.exists() or not record.done:
        return RecordState(LEFT, folder)
    recorded = record.config()
    block = recorded.get("provenance") or {}
    ends = record.events("run_end")
    wall = float(ends[-1]["wall_s"]) if ends and ends[-1].get("wall_s") is not None else None
    cpu, commit = block.get("cpu_kind"), block.get("git_commit")
    changes = config_changes(run.config, folder)
    if changes:
        return RecordState(OTHER_CONFIG, folder, wall, cpu, commit, "; ".join(changes))
    code_changes = code.changes_since(block, ledger_entries(results_root))
    if code_changes:
        return RecordState(OTHER_CODE, folder, wall, cpu, commit, "; ".join(code_changes))
    return RecordState(RECORDED, folder, wall, cpu, commit)


def record_states(runs: Sequence[PlannedRun], results_root: Path, code: RunCode) -> list[RecordState]:
    return [record_state(run, results_root, code) for run in runs]


def estimate_s(run: PlannedRun, runs: Sequence[PlannedRun], states: Sequence[RecordState],
               cpu: str) -> float | None:
    """Seconds one run will take on this CPU kind: the median wall time of the recorded runs
    of the same domain and method made on it, else of the same domain, else of any run made
    on it; None when this CPU kind has recorded nothing (no guess from another machine)."""
    made = [(r, s) for r, s in zip(runs, states) if s.wall_s is not None and s.cpu_kind == cpu]
    for same in (lambda r: (r.config.domain, r.config.method) == (run.config.domain, run.config.method),
                 lambda r: r.config.domain == run.config.domain, lambda r: True):
        walls = [s.wall_s for r, s in made if same(r) and s.wall_s is not None]
        if walls:
            return float(statistics.median(walls))
    return None


def eta_s(runs: Sequence[PlannedRun], states: Sequence[RecordState], cpu: str) -> tuple[float, int]:
    """(estimated seconds for every run left, how many runs left have no estimate yet)."""
    total, unknown = 0.0, 0
    for run, state in zip(runs, states):
        if state.state == RECORDED:
            continue
        estimate = estimate_s(run, runs, states, cpu)
        if estimate is None:
            unknown += 1
        else:
            total += estimate
    return total, unknown


def plan_summary(runs: Sequence[PlannedRun], states: Sequence[RecordState], cpu: str) -> str:
    """The lines printed before a chunk starts: done / left per tier and an ETA."""
    lines = []
    for tier in sorted({r.tier for r in runs}):
        mine = [s for r, s in zip(runs, states) if r.tier == tier]
        done = sum(s.state == RECORDED for s in mine)
        lines.append(f"tier {tier} ({TIER_TITLES.get(tier, tier)}): {done} of {len(mine)} runs recorded")
    left = sum(s.state != RECORDED for s in states)
    lines.append(f"{len(runs) - left} of {len(runs)} runs recorded, {left} left; {eta_text(runs, states, cpu)}")
    return "\n".join(lines)


def eta_text(runs: Sequence[PlannedRun], states: Sequence[RecordState], cpu: str) -> str:
    """'ETA 3:20:00 on <cpu>', with the runs no estimate covers said, or that none exists yet."""
    if all(s.state == RECORDED for s in states):
        return "nothing left to run"  # the same words on every machine: STATUS.md stays as it was
    seconds, unknown = eta_s(runs, states, cpu)
    if unknown and not seconds:
        return f"ETA unknown on this CPU kind ({cpu}): no run of this set has been timed on it{elsewhere(states)}"
    note = f" (+ {unknown} run(s) of a kind not yet timed on this CPU)" if unknown else ""
    return f"ETA {format_duration(seconds) if seconds else '0 s'}{note} on {cpu}"


def elsewhere(states: Sequence[RecordState]) -> str:
    """'; the records took 12 min-31 min a run on other CPU kinds': the measured range a
    reader can plan with when this machine has timed nothing (no estimate is made from it)."""
    walls = [s.wall_s for s in states if s.wall_s is not None]
    if not walls:
        return ""
    return f"; its records took {format_duration(min(walls))} to {format_duration(max(walls))} a run on other CPU kinds"


def unchanged_but_header(path: Path, text: str) -> bool:
    """Whether `path` already says `text`, apart from its 'Written by ... at <time> from commit'
    line: a pass that changed no run's state leaves STATUS.md (tracked) as it was."""
    if not path.exists():
        return False

    def body(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("Written by ")]

    return body(path.read_text(encoding="utf-8")) == body(text)


def write_status(runs: Sequence[PlannedRun], states: Sequence[RecordState], path: Path, cpu: str,
                 commit: str, tag: str | None, running: str | None = None) -> Path:
    """results/<preset>/STATUS.md: every planned run with its state, wall time and the CPU
    kind it was made on; written by `python -m whalekit.repro.reproduce`, never by hand."""
    left = sum(s.state != RECORDED for s in states)
    lines = [f"# Reproduction status: preset {path.parent.name}", "",
             f"Written by `python -m whalekit.repro.reproduce` at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
             f"from commit `{commit[:12]}`" + (f" (tag `{tag}`)" if tag else " (no tag)") + ".",
             f"**{len(runs) - left} of {len(runs)} runs recorded, {left} left.** {eta_text(runs, states, cpu)}.",
             "A run counts when its record under results/ has this configuration and was made by code that runs "
             "as this code does (every module a run executes byte-identical: `whalekit.records.code_identity`, ledger "
             "`results/run_code.json`); `other code` and `other configuration` records are made again.", ""]
    if running:
        lines += [f"Running now: `{running}`.", ""]
    for tier in sorted({r.tier for r in runs}):
        lines += [f"## Tier {tier}: {TIER_TITLES.get(tier, tier)}", "",
                  "| domain | run | state | wall time | CPU kind | commit |", "| --- | --- | --- | --- | --- | --- |"]
        for run, state in zip(runs, states):
            if run.tier != tier:
                continue
            wall = format_duration(state.wall_s) if state.wall_s is not None else ""
            what = state.state + (f" ({state.reason})" if state.reason else "")
            lines.append(f"| {run.config.domain} | {run.config.run_name} | {what} | {wall} | {state.cpu_kind or ''} "
                         f"| {(state.commit or '')[:12]} |")
        lines.append("")
    text = "\n".join(lines)
    if not unchanged_but_header(path, text):
        atomic_write(path, text)
    return path


class Deadline:
    """`--max-hours`: a chunk starts no run after its hours are spent, nor one whose
    estimate says it would end past them (when this machine has timed such a run), so it
    stops cleanly at a run boundary; the next chunk picks up where it stopped."""

    def __init__(self, max_hours: float | None, clock: Any = time.monotonic):
        self.limit_s = None if max_hours is None else max_hours * 3600.0
        self.clock = clock
        self.started = clock()

    def allows(self, estimate_s: float | None) -> bool:
        if self.limit_s is None:
            return True
        elapsed = self.clock() - self.started
        return elapsed < self.limit_s and (estimate_s is None or elapsed + estimate_s <= self.limit_s)


class Records:
    """A chunk's view of the run set while it works: which runs are recorded, the deadline,
    and, after each run, the record exported (`export(run_dir, results_root)`, i.e.
    whalekit.records.results.export_run) and STATUS.md rewritten. `stopped` turns true when the
    deadline keeps a run from starting; the chunk then ends at that run boundary."""

    def __init__(self, runs: Sequence[PlannedRun], results_root: Path, export: Any, deadline: Deadline | None = None,
                 log: Any = print, code: RunCode | None = None, cpu: str | None = None,
                 selected: Sequence[PlannedRun] | None = None):
        # `runs`: the preset's whole planned set (STATUS.md lists every one, whatever a chunk
        # selects); `selected`: the runs this chunk makes (default: all of them)
        # absolute: a notebook kernel's working directory must never move where records go
        self.runs, self.results_root, self.export = list(runs), Path(results_root).resolve(), export
        known = {r.key for r in self.runs}
        self.runs += [r for r in selected or () if r.key not in known]  # a selection beyond the preset's set
        self.selected = {r.key for r in (self.runs if selected is None else selected)}
        # the code and machine this chunk runs on (tests may pin them)
        self.code, self.cpu = code or RunCode.of_package(), cpu or cpu_kind()
        self.commit, self.tag = git_commit(), git_tag()
        self.deadline = deadline or Deadline(None)
        self.log = log
        self.states = record_states(self.runs, self.results_root, self.code)
        self.stopped = False

    def _index(self, run: PlannedRun) -> int:
        return next(i for i, r in enumerate(self.runs) if r.key == run.key)

    def recorded(self, run: PlannedRun) -> bool:
        return self.states[self._index(run)].state == RECORDED

    def may_start(self, run: PlannedRun) -> bool:
        """Whether the deadline lets `run` start (said once, when it does not)."""
        estimate = estimate_s(run, self.runs, self.states, self.cpu)
        if self.deadline.allows(estimate):
            return True
        self.log(f"--max-hours reached before {run.key} (estimate {format_duration(estimate)}): stopping at this "
                 f"run boundary with {self.left()} run(s) left; run the same command again to continue")
        return False

    def started(self, run: PlannedRun) -> None:
        self.write_status(running=run.key)

    def finished(self, run: PlannedRun) -> None:
        """Export the finished run's record and rewrite STATUS.md."""
        if RunDir(run.config.run_dir).done:
            folder = self.export(run.config.run_dir, self.results_root)
            self.log(f"recorded {run.key} in {folder}")
        self.states[self._index(run)] = record_state(run, self.results_root, self.code)
        self.write_status()

    def status_path(self) -> Path:
        return self.results_root / Path(self.runs[0].config.preset).stem / "STATUS.md"

    def write_status(self, running: str | None = None) -> Path | None:
        if not self.runs:
            return None
        return write_status(self.runs, self.states, self.status_path(), self.cpu, self.commit, self.tag, running)

    def left(self) -> int:
        """How many runs this chunk's selection has left to make."""
        return sum(s.state != RECORDED for r, s in zip(self.runs, self.states) if r.key in self.selected)

    def summary(self) -> str:
        """The whole set per tier with its ETA, and this chunk's selection when it is a part."""
        text = plan_summary(self.runs, self.states, self.cpu)
        if len(self.selected) < len(self.runs):
            mine = [s for r, s in zip(self.runs, self.states) if r.key in self.selected]
            done = sum(s.state == RECORDED for s in mine)
            text += f"\nthis chunk's selection: {done} of {len(mine)} runs recorded, {len(mine) - done} left"
        return text
