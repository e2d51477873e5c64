"""Experiment tracking: a run's driver events mirrored into TensorBoard event files, a W&B
offline run and an MLflow file store, each optional and all kept inside the run directory.
Every sink gets the same numbers on one global step, the rollouts used, so the weight and
harness phases share one x-axis (as the figures' does).

    tracking: {tensorboard: true, mlflow: true}       # in a preset, or --set tracking.tensorboard=true
    export_run("runs/cpu/chess/whale-0.6,6-s0", TrackingConfig(tensorboard=True))  # a finished run, after the fact

Where it hooks in: `RunDir.commit` calls the run's listeners, and `Tracker` is one. It sends
only committed events, each once: a killed step's events are rolled back and rewritten on
resume, and the tracker sees them only when they are committed (a kill between a sink
writing and the tracker recording how far it got can repeat that one step's events).
Metric keys are `<event>/<field>` with nested fields joined by "/", e.g.
`test_eval/mean_at_k`, `test_eval/behaviour/turns`, `rsft_batch/loss`,
`search_iteration/best_score` (README, "Logged metrics").

Layout under the run: tracking/tensorboard (tensorboard --logdir), tracking/wandb (wandb sync
tracking/wandb/wandb/offline-run-*), tracking/mlflow (mlflow ui --backend-store-uri it).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from whalekit.infra.runs import RunDir, atomic_write
from whalekit.presets import flatten

SINKS = ("tensorboard", "wandb", "mlflow")
PROJECT = "whalekit"  # the W&B project and the MLflow experiment name
SKIPPED_FIELDS = frozenset({"schema_version", "event", "rollouts"})
INSTALL_HINT = "pip install 'whalekit[tracking]'"


@dataclass
class TrackingConfig:
    tensorboard: bool = False  # TensorBoard event files in <run>/tracking/tensorboard
    wandb: bool = False  # a W&B run in offline mode in <run>/tracking/wandb (upload later with `wandb sync`)
    mlflow: bool = False  # an MLflow file store in <run>/tracking/mlflow

    def __post_init__(self) -> None:
        for name in SINKS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"tracking.{name} is true or false, got {getattr(self, name)!r}")

    @property
    def enabled(self) -> list[str]:
        return [name for name in SINKS if getattr(self, name)]


def event_metrics(event: dict[str, Any]) -> dict[str, float]:
    """The numeric fields of one event as flat `<event>/<field>` metrics (booleans as 0/1;
    text, lists and missing values left out)."""
    out: dict[str, float] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}/{key}", item)
        elif isinstance(value, (bool, int, float)):
            out[prefix] = float(value)

    for key, value in event.items():
        if key not in SKIPPED_FIELDS:
            walk(f"{event['event']}/{key}", value)
    return out


def flat_config(config: dict[str, Any]) -> dict[str, str]:
    """A nested configuration as `a.b.c` -> text: what W&B's config and MLflow's params hold."""
    return {key: value if isinstance(value, str) else json.dumps(value, default=str)
            for key, value in flatten(config).items()}


class Sink(Protocol):
    """Where the tracker sends a run's numbers; one implementation per tracking library."""

    def log_config(self, config: dict[str, Any]) -> None: ...

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def _import(module: str, sink: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"tracking.{sink} is on but {module.split('.')[0]} is not installed ({INSTALL_HINT})") \
            from exc


class TensorBoardSink:
    def __init__(self, folder: Path, name: str, state: dict[str, Any]):
        tensorboard = _import("torch.utils.tensorboard", "tensorboard")
        _import("tensorboard", "tensorboard")
        self.writer = tensorboard.SummaryWriter(log_dir=str(folder))

    def log_config(self, config: dict[str, Any]) -> None:
        self.writer.add_text("config", "```\n" + json.dumps(config, indent=1, sort_keys=True, default=str) + "\n```")

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


class WandbSink:
    def __init__(self, folder: Path, name: str, state: dict[str, Any]):
        wandb = _import("wandb", "wandb")
        folder.mkdir(parents=True, exist_ok=True)
        # One W&B id per run directory, so a resumed run continues the same W&B run.
        run_id = state.setdefault("run_id", hashlib.sha1(str(folder.resolve()).encode()).hexdigest()[:16])
        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, disable_git=True,
                                  save_code=False, x_save_requirements=False)
        self.run = wandb.init(dir=str(folder), mode="offline", project=PROJECT, name=name, id=run_id,
                              resume="allow", reinit="create_new", settings=settings)
        self.run.define_metric("rollouts")
        self.run.define_metric("*", step_metric="rollouts")

    def log_config(self, config: dict[str, Any]) -> None:
        self.run.config.update(flat_config(config), allow_val_change=True)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log({"rollouts": step, **metrics})

    def close(self) -> None:
        self.run.finish()


class MLflowSink:
    def __init__(self, folder: Path, name: str, state: dict[str, Any]):
        # MLflow 3 keeps the file store in maintenance mode behind this switch; a plain folder
        # under the run (no database, no server) is what a run directory wants.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        tracking = _import("mlflow.tracking", "mlflow")
        self.entities = _import("mlflow.entities", "mlflow")
        folder.mkdir(parents=True, exist_ok=True)
        self.client = tracking.MlflowClient(tracking_uri=folder.resolve().as_uri())
        if "run_id" not in state:
            experiment = self.client.get_experiment_by_name(PROJECT)
            experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(PROJECT)
            state["run_id"] = self.client.create_run(experiment_id, run_name=name).info.run_id
        self.run_id = state["run_id"]

    def log_config(self, config: dict[str, Any]) -> None:
        params = [self.entities.Param(key[:250], value[:6000]) for key, value in flat_config(config).items()]
        for start in range(0, len(params), 100):  # log_batch takes at most 100 params a call
            self.client.log_batch(self.run_id, params=params[start:start + 100])

    def log(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        rows = [self.entities.Metric(key, value, now, step) for key, value in metrics.items()]
        for start in range(0, len(rows), 1000):
            self.client.log_batch(self.run_id, metrics=rows[start:start + 1000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


SINK_CLASSES: dict[str, type] = {"tensorboard": TensorBoardSink, "wandb": WandbSink, "mlflow": MLflowSink}


class Tracker:
    """A RunDir listener: after every commit, the committed events not yet sent go to each
    enabled sink. Progress per sink is kept in tracking/exported.json, so a resumed run (or a
    sink switched on later) continues where it stopped."""

    def __init__(self, config: TrackingConfig, run: RunDir):
        self.folder = run.root / "tracking"
        self.progress_path = self.folder / "exported.json"
        self.progress: dict[str, dict[str, Any]] = \
            json.loads(self.progress_path.read_text()) if self.progress_path.exists() else {}
        name = "/".join(run.root.parts[-3:])  # preset/domain/run, as under runs/
        self.sinks: dict[str, Sink] = {}
        for sink in config.enabled:
            state = self.progress.setdefault(sink, {"exported": 0})
            self.sinks[sink] = SINK_CLASSES[sink](self.folder / sink, name, state)

    def __call__(self, run: RunDir, committed: int) -> None:
        events = run.events()[:committed]
        for name, sink in self.sinks.items():
            state = self.progress[name]
            if state["exported"] == 0 and run.config_path.exists():
                sink.log_config(run.config())
            for event in events[state["exported"]:]:
                metrics = event_metrics(event)
                if metrics and isinstance(event.get("rollouts"), int):
                    sink.log(metrics, event["rollouts"])
            state["exported"] = max(state["exported"], len(events))
        atomic_write(self.progress_path, json.dumps(self.progress, indent=1, sort_keys=True))

    def close(self) -> None:
        for sink in self.sinks.values():
            sink.close()


def attach(run: RunDir, config: TrackingConfig) -> Tracker | None:
    """Listen to `run`'s commits with the enabled sinks (None when tracking is off); events
    already committed and not yet sent go out first."""
    if not config.enabled:
        return None
    tracker = Tracker(config, run)
    run.listeners.append(tracker)
    state = run.state()
    if state:
        tracker(run, int(state.get("events_committed", 0)))
    return tracker


def export_run(path: str | Path, config: TrackingConfig) -> None:
    """Send a run directory's committed events to the enabled sinks (a finished run made
    without tracking, or with other sinks)."""
    run = RunDir(path)
    if not run.config_path.exists():
        raise ValueError(f"{run.root}: not a run directory (no config.json)")
    tracker = attach(run, config)
    if tracker is not None:
        run.listeners.remove(tracker)
        tracker.close()
