"""Run directories: the resolved config, the events log, the committed state that makes a
killed run resume, test trajectories, and reading all of it back for figures.

Layout of one run (domain, method, schedule, seed):

    config.json         the resolved configuration
    events.jsonl        one JSON object per event (schema_version, event, rollouts, ...)
    state.json          the last committed phase step (written atomically)
    archive/            the harness archive (whalekit.archive)
    checkpoints/        RSFT checkpoints, one folder per committed batch
    test/eval-NNN.jsonl test trajectories of each evaluation

    run = RunDir(Path("runs/cpu/chess/whale-0.6,6-s0")); run.events()
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whalekit.archive import atomic_write as atomic_write_text  # one atomic writer for every record
from whalekit.types import Trajectory

SCHEMA_VERSION = 1
# differ between identical runs (a resumed run starts with a cold prefix cache, too)
TIMING_KEYS = ("wall_s", "sample_seconds", "train_seconds", "time", "timing", "prompt_cache")


class RunDir:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        # called after every commit with (run, committed event lines): experiment tracking (whalekit.tracking)
        self.listeners: list[Callable[[RunDir, int], None]] = []

    # -- config & state ---------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    def write_config(self, config: dict[str, Any]) -> None:
        atomic_write_text(self.config_path, json.dumps(config, indent=1, sort_keys=True, default=str))

    def config(self) -> dict[str, Any]:
        return json.loads(self.config_path.read_text())

    def state(self) -> dict[str, Any] | None:
        path = self.root / "state.json"
        return json.loads(path.read_text()) if path.exists() else None

    def commit(self, state: dict[str, Any]) -> None:
        """Make a finished phase step durable: the state names how many event lines and
        which checkpoint belong to it; anything written after it is redone on resume."""
        state = dict(state, events_committed=self._event_lines())
        atomic_write_text(self.root / "state.json", json.dumps(state, indent=1, sort_keys=True))
        for listener in self.listeners:
            listener(self, state["events_committed"])

    @property
    def done(self) -> bool:
        state = self.state()
        return bool(state and state.get("finished"))

    # -- events -----------------------------------------------------------------------
    @property
    def events_path(self) -> Path:
        return self.root / "events.jsonl"

    def log(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"schema_version": SCHEMA_VERSION, "event": event, **fields}
        self.root.mkdir(parents=True, exist_ok=True)
        with self.events_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True, default=str) + "\n")
        return record

    def _event_lines(self) -> int:
        if not self.events_path.exists():
            return 0
        return sum(1 for line in self.events_path.read_text().splitlines() if line.strip())

    def roll_back_uncommitted_events(self) -> None:
        """Drop events written after the last commit (a step that was killed midway)."""
        state = self.state()
        keep = state["events_committed"] if state else 0
        if self.events_path.exists():
            lines = [line for line in self.events_path.read_text().splitlines() if line.strip()][:keep]
            atomic_write_text(self.events_path, "".join(line + "\n" for line in lines))

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        out = []
        for number, line in enumerate(self.events_path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{self.events_path}: line {number}: malformed event ({exc.msg})") from exc
            if kind is None or record.get("event") == kind:
                out.append(record)
        return out

    # -- trajectories -----------------------------------------------------------------
    def write_trajectories(self, name: str, trajectories: list[Trajectory]) -> Path:
        path = self.root / "test" / f"{name}.jsonl"
        atomic_write_text(path, "".join(json.dumps(t.to_json()) + "\n" for t in trajectories))
        return path

    def trajectories(self, name: str) -> list[Trajectory]:
        path = self.root / "test" / f"{name}.jsonl"
        return [Trajectory.from_json(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def without_timings(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events with wall-clock fields removed: what must match between a killed-and-resumed
    run and an uninterrupted one."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in TIMING_KEYS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return [strip(e) for e in events]
