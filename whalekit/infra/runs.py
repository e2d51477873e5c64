"""Run directories: the resolved config, the events log, the committed state that makes a
killed run resume, test trajectories, and reading all of it back for figures.

Layout of one run (domain, method, schedule, seed):

    config.json         the resolved configuration
    events.jsonl        one JSON object per event (schema_version, event, rollouts, ...)
    state.json          the last committed phase step (written atomically)
    archive/            the harness archive (whalekit.search.archive)
    checkpoints/        RSFT checkpoints, one folder per committed batch
    test/eval-NNN.jsonl test trajectories of each evaluation

    run = RunDir(Path("runs/cpu/chess/whale-0.6,6-s0")); run.events()
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from whalekit.infra.errors import DataError
from whalekit.types import Trajectory

SCHEMA_VERSION = 1
# differ between identical runs (a resumed run starts with a cold prefix cache, too)
TIMING_KEYS = ("wall_s", "sample_seconds", "train_seconds", "time", "timing", "prompt_cache")


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` so that a kill at any instant leaves the old or the new file:
    the one atomic writer for every record (config, state, archive entries, test trajectories)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_jsonl(path: str | Path, error: type[DataError] = DataError,
               records: bool = True) -> Iterator[tuple[int, Any]]:
    """(1-based line number, record) for each non-blank line of a JSONL file: the one JSONL
    reader. One rule for a half-written file: in whalekit's own records (`records=True`) a
    last line without its newline that does not parse is a write cut off by a kill (or
    still in progress), and is left out; any other line that does not parse raises `error`
    (a DataError) naming `path:line`. A user's data file (`records=False`) was not written
    by a run that can be killed, so a cut-off last line is an error there too, never a
    silently dropped row."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                if records and not line.endswith("\n"):  # only the last line can lack its newline
                    return
                raise error.at(path, number, f"invalid JSON ({exc.msg})") from exc
            yield number, record


def read_jsonl_records(path: str | Path) -> list[Any]:
    """Every record of a JSONL file (see `read_jsonl`)."""
    return [record for _, record in read_jsonl(path)]


class NoRunsError(LookupError):
    """No runs where an analysis notebook or the viewer looks; the message says what to
    run. In IPython it shows as that message alone, without a traceback."""

    def __init__(self, where: str, preset: str = "cpu"):
        name = Path(preset).stem
        super().__init__(f"{where}. Make them first, from the repository root: `make reproduce PRESET={name}`"
                         + (" (hours on CPU)" if name == "cpu" else "")
                         + ", or `make reproduce PRESET=smoke` (about 5 minutes, tiny random model) and set "
                         "preset = \"smoke\" here; notebook 02 makes a single run.")

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class RunDir:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        # called after every commit with (run, committed event lines): experiment tracking (whalekit.infra.tracking)
        self.listeners: list[Callable[[RunDir, int], None]] = []

    # -- config & state ---------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    def write_config(self, config: dict[str, Any]) -> None:
        atomic_write(self.config_path, json.dumps(config, indent=1, sort_keys=True, default=str))

    def config(self) -> dict[str, Any]:
        return json.loads(self.config_path.read_text())

    def state(self) -> dict[str, Any] | None:
        path = self.root / "state.json"
        return json.loads(path.read_text()) if path.exists() else None

    def commit(self, state: dict[str, Any]) -> None:
        """Make a finished phase step durable: the state names how many event lines and
        which checkpoint belong to it; anything written after it is redone on resume."""
        state = dict(state, events_committed=self._event_lines())
        atomic_write(self.root / "state.json", json.dumps(state, indent=1, sort_keys=True))
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
            atomic_write(self.events_path, "".join(line + "\n" for line in lines))

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        return [e for e in read_jsonl_records(self.events_path) if kind is None or e.get("event") == kind]

    # -- trajectories -----------------------------------------------------------------
    def write_trajectories(self, name: str, trajectories: list[Trajectory]) -> Path:
        path = self.root / "test" / f"{name}.jsonl"
        atomic_write(path, "".join(json.dumps(t.to_json()) + "\n" for t in trajectories))
        return path

    def trajectories(self, name: str) -> list[Trajectory]:
        path = self.root / "test" / f"{name}.jsonl"
        return [Trajectory.from_json(record) for record in read_jsonl_records(path)]


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
