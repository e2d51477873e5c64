"""Experiment tracking: the driver's committed events reach TensorBoard, W&B (offline) and
MLflow (file store) on one global step, the rollouts used; each test reads back what the
library wrote, with that library's own reader (W&B: its offline run file), and skips with
the reason when the library is not installed."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from run_fixtures import write_run

import whalekit.search.stage as search
from whalekit.cli.config import CLIError, check_overrides, parse_overrides
from whalekit.infra import tracking
from whalekit.infra.runs import RunDir
from whalekit.infra.tracking import TrackingConfig, event_metrics, export_run
from whalekit.run.driver import config_changes, resolve_config, run_method
from whalekit.samplers.models import load_policy

LIBRARIES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


def _installed(sink: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(LIBRARIES[sink]) is not None


def _need(sink: str) -> None:
    if not _installed(sink):
        pytest.skip(f"{LIBRARIES[sink]} is not installed (pip install 'whalekit[tracking]')")


# -- reading back, each library its own way ------------------------------------------------
def tensorboard_scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing import event_accumulator

    accumulator = event_accumulator.EventAccumulator(str(run / "tracking" / "tensorboard"),
                                                     size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    return {tag: [(s.step, s.value) for s in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def mlflow_history(run: Path, key: str) -> list[tuple[int, float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run / "tracking" / "mlflow").resolve().as_uri())
    (only,) = client.search_runs([client.get_experiment_by_name(tracking.PROJECT).experiment_id])
    return [(m.step, m.value) for m in client.get_metric_history(only.info.run_id, key)]


def mlflow_params(run: Path) -> dict[str, str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run / "tracking" / "mlflow").resolve().as_uri())
    (only,) = client.search_runs([client.get_experiment_by_name(tracking.PROJECT).experiment_id])
    return dict(only.data.params)


def wandb_records(path: Path) -> list[bytes]:
    """The records of a W&B offline run file: a 7-byte header (":W&B", magic, version), then
    32 KiB blocks of chunks, each with a 7-byte header (crc32, length, type: 1 full, 2 first,
    3 middle, 4 last), as wandb's own (since removed) datastore reader read them."""
    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    records, pending, position = [], b"", 7
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        length, kind = struct.unpack_from("<HB", data, position + 4)
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            records.append(pending)
            pending = b""
    return records


def _wandb_run_records(path: Path) -> list[Any]:
    """The parsed records of one offline run once W&B's writer process has written its
    final `exit` record (`finish()` can return before the file is complete)."""
    from wandb.proto import wandb_internal_pb2

    deadline = time.monotonic() + 60
    while True:
        records = []
        for raw in wandb_records(path):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(raw)
            records.append(record)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def wandb_history(run: Path) -> tuple[list[dict[str, float]], dict[str, str]]:
    """(rows logged, config) of every offline W&B run under the run directory."""
    rows: list[dict[str, float]] = []
    config: dict[str, str] = {}
    for path in sorted((run / "tracking" / "wandb").glob("wandb/offline-run-*/run-*.wandb")):
        for record in _wandb_run_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "history":
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in record.history.item if not (item.key or "").startswith("_")})
            elif kind == "config":
                config.update({item.key: json.loads(item.value_json) for item in record.config.update})
    return rows, config


# -- the events, flattened -----------------------------------------------------------------
def test_events_become_flat_metrics_named_by_event_and_field():
    event = {"schema_version": 1, "event": "test_eval", "rollouts": 64, "index": 2, "mean_at_k": 0.25,
             "accepted_id": "abc", "behaviour": {"turns": 2.0, "answered": True}, "by_subset": {"default": 0.25},
             "loss": None}
    assert event_metrics(event) == {"test_eval/index": 2.0, "test_eval/mean_at_k": 0.25,
                                    "test_eval/behaviour/turns": 2.0, "test_eval/behaviour/answered": 1.0,
                                    "test_eval/by_subset/default": 0.25}


def test_tracking_is_one_config_section_off_by_default():
    config = resolve_config("smoke", domain="toy", method="whale")
    assert config.tracking == TrackingConfig() and config.tracking.enabled == []
    assert resolve_config("smoke", domain="toy", method="whale",
                          tracking={"mlflow": True}).tracking.enabled == ["mlflow"]
    check_overrides(parse_overrides(["tracking.tensorboard=true", "tracking.wandb=false"]))
    with pytest.raises(CLIError, match="tracking.tensorboard=3: expected bool"):
        check_overrides(parse_overrides(["tracking.tensorboard=3"]))
    with pytest.raises(CLIError, match="unknown key; valid keys: tracking.tensorboard, tracking.wandb"):
        check_overrides(parse_overrides(["tracking.neptune=true"]))
    with pytest.raises(ValueError, match="true or false"):
        TrackingConfig(tensorboard="yes")  # type: ignore[arg-type]


def test_switching_tracking_on_does_not_make_a_finished_run_stale(tmp_path):
    run = write_run(tmp_path, "whale", [0.25, 0.5])
    config = resolve_config("smoke", domain="toy", method="whale", runs_root=str(tmp_path),
                            tracking={"tensorboard": True})
    assert config.run_dir == run.root and config_changes(config) == []


def test_a_sink_whose_library_is_missing_says_how_to_install_it(tmp_path, monkeypatch):
    import sys

    run = write_run(tmp_path, "whale", [0.25, 0.5])
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb now fails
    with pytest.raises(ImportError, match=r"tracking.wandb is on but wandb is not installed.*whalekit\[tracking\]"):
        export_run(run.root, TrackingConfig(wandb=True))


# -- a finished run exported after the fact (no model) ---------------------------------------
@pytest.fixture
def fixture_run(tmp_path) -> RunDir:
    return write_run(tmp_path, "whale", [0.25, 0.75, 0.5])


def _expected(run: RunDir, kind: str, key: str) -> list[tuple[int, float]]:
    return [(e["rollouts"], float(e[key])) for e in run.events(kind)]


def test_tensorboard_export_reads_back_every_event_on_the_rollout_step(fixture_run):
    _need("tensorboard")
    export_run(fixture_run.root, TrackingConfig(tensorboard=True))
    scalars = tensorboard_scalars(fixture_run.root)
    assert scalars["test_eval/mean_at_k"] == _expected(fixture_run, "test_eval", "mean_at_k") \
        == [(0, 0.25), (32, 0.75), (64, 0.5)]
    assert scalars["rsft_batch/reward"] == [(32, 0.5)]  # the weight phase ...
    assert scalars["search_iteration/best_score"] == [(64, 1.0)]  # ... and the harness phase, one x-axis
    assert scalars["test_eval/behaviour/turns"] == [(0, 1.0), (32, 2.0), (64, 3.0)]
    export_run(fixture_run.root, TrackingConfig(tensorboard=True))  # again: nothing new to send
    assert tensorboard_scalars(fixture_run.root) == scalars


def test_mlflow_export_reads_back_metrics_and_the_config_as_params(fixture_run):
    _need("mlflow")
    export_run(fixture_run.root, TrackingConfig(mlflow=True))
    assert mlflow_history(fixture_run.root, "test_eval/mean_at_k") == [(0, 0.25), (32, 0.75), (64, 0.5)]
    assert mlflow_history(fixture_run.root, "search_iteration/best_score") == [(64, 1.0)]
    params = mlflow_params(fixture_run.root)
    assert params["method"] == "whale" and params["rsft.batch_problems"] == "4"


def test_wandb_export_is_an_offline_run_under_the_run_directory(fixture_run):
    _need("wandb")
    export_run(fixture_run.root, TrackingConfig(wandb=True))
    rows, config = wandb_history(fixture_run.root)
    evals = [(row["rollouts"], row["test_eval/mean_at_k"]) for row in rows if "test_eval/mean_at_k" in row]
    assert evals == [(0, 0.25), (32, 0.75), (64, 0.5)]
    assert [(row["rollouts"], row["rsft_batch/reward"]) for row in rows if "rsft_batch/reward" in row] == [(32, 0.5)]
    assert config["method"] == "whale"


# -- the driver's hook, end to end ------------------------------------------------------------
def _driver_config(runs_root: Path, sinks: list[str]):
    return resolve_config("smoke", domain="toy", method="whale", runs_root=str(runs_root), budget=48,
                          tracking={sink: True for sink in sinks})


@pytest.fixture(scope="module")
def driven_run(tmp_path_factory) -> RunDir:
    """A WHALE run on the tiny model with every installed sink on (a fresh model: RSFT trains it)."""
    sinks = [sink for sink in tracking.SINKS if _installed(sink)]
    if not sinks:
        pytest.skip("none of tensorboard, wandb, mlflow is installed (pip install 'whalekit[tracking]')")
    return run_method(_driver_config(tmp_path_factory.mktemp("driven"), sinks), policy=load_policy("tiny-random"))


@pytest.mark.parametrize("sink", tracking.SINKS)
def test_a_run_with_tracking_on_logs_both_phases_on_the_rollout_step(driven_run, sink):
    _need(sink)
    evals = _expected(driven_run, "test_eval", "mean_at_k")
    batches = _expected(driven_run, "rsft_batch", "reward")
    searches = _expected(driven_run, "search_iteration", "best_score")
    assert len(evals) >= 3 and batches and searches
    if sink == "tensorboard":
        scalars = tensorboard_scalars(driven_run.root)
        logged = [scalars[key] for key in ("test_eval/mean_at_k", "rsft_batch/reward", "search_iteration/best_score")]
        logged = [[(step, round(value, 5)) for step, value in series] for series in logged]  # float32 on disk
        expected = [[(step, round(value, 5)) for step, value in series] for series in (evals, batches, searches)]
        assert logged == expected
    elif sink == "mlflow":
        assert mlflow_history(driven_run.root, "test_eval/mean_at_k") == evals
        assert mlflow_history(driven_run.root, "rsft_batch/reward") == batches
        assert mlflow_history(driven_run.root, "search_iteration/best_score") == searches
        assert mlflow_params(driven_run.root)["tracking.mlflow"] == "true"
    else:
        rows, config = wandb_history(driven_run.root)
        assert [(r["rollouts"], r["test_eval/mean_at_k"]) for r in rows if "test_eval/mean_at_k" in r] == evals
        assert [(r["rollouts"], r["search_iteration/best_score"]) for r in rows
                if "search_iteration/best_score" in r] == searches
        assert config["domain"] == "toy"


def test_a_killed_and_resumed_run_logs_each_committed_event_once(driven_run, tmp_path, monkeypatch):
    _need("mlflow")
    original, calls = search.evaluate_candidates, []

    def dies_on_the_second_search_evaluation(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(search, "evaluate_candidates", dies_on_the_second_search_evaluation)
    with pytest.raises(KeyboardInterrupt):
        run_method(_driver_config(tmp_path, ["mlflow"]), policy=load_policy("tiny-random"))
    monkeypatch.setattr(search, "evaluate_candidates", original)
    resumed = run_method(_driver_config(tmp_path, ["mlflow"]), policy=load_policy("tiny-random"))
    for key in ("test_eval/mean_at_k", "rsft_batch/reward", "search_iteration/best_score"):
        assert mlflow_history(resumed.root, key) == mlflow_history(driven_run.root, key), key
