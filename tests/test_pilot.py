"""The v3 pilot as pre-registered (docs/reproduction-v3.md, "The pilot"): its ten runs, the order
that lets a failed calibration change the design before the other runs, and its checks read
from records alone."""

from __future__ import annotations

import json

import pytest

from whalekit.repro import pilot


def test_the_pilot_is_seed_0_of_five_methods_on_math_and_search_qa():
    configs = pilot.pilot_configs()
    assert len({c.run_dir for c in configs}) == 10
    assert {(c.preset, c.seed) for c in configs} == {("cpu-v3", 0)}
    for domain in ("math", "searchqa"):
        runs = {(c.method, c.schedule) for c in configs if c.domain == domain}
        assert runs == {("whale", (0.6, 6)), ("whale", (0.2, 6)), ("weight_only", (0.6, 6)),
                        ("harness_only", (0.6, 6)), ("stagewise_reverse", (0.6, 6))}
    first = configs[0]
    assert (first.domain, first.method) == ("math", "weight_only")  # the math mix is checked on it first
    assert all(c.keep_stage_weights for c in configs)  # the θ×h matrix needs every stage's weights


def _record(folder, rounds):
    folder.mkdir(parents=True)
    events = [{"event": "test_eval", "mean_at_k": 0.1}, {"event": "test_eval", "mean_at_k": 0.4},
              {"event": "run_end", "wall_s": 1800.0}]
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (folder / "config.json").write_text(json.dumps({"provenance": {"cpu_kind": "a CPU"}}))
    for i, candidates in enumerate(rounds, start=1):
        index = folder / "archive" / f"round-{i:03d}" / "index.json"
        index.parent.mkdir(parents=True)
        index.write_text(json.dumps({"candidates": candidates}))


def test_the_checks_read_the_search_noise_and_the_candidates_per_stage_from_the_records(tmp_path):
    whale = next(c for c in pilot.pilot_configs() if c.method == "whale" and c.domain == "math")
    parent = {"id": "p", "parents": [], "scores": {"0": 0.2, "10": 0.50}, "status": "evaluated"}
    rounds = [[{**parent, "scores": {"0": 0.2}}, {"id": "a", "parents": ["p"], "scores": {"0": 0.9},
                                                  "status": "evaluated"}],  # at θ0: not trained weights
              [parent, {"id": "b", "parents": ["p"], "scores": {"10": 0.52}, "status": "evaluated"},
               {"id": "c", "parents": ["p"], "scores": {"10": 0.46}, "status": "evaluated"},
               {"id": "d", "parents": ["p"], "scores": {}, "status": "failed"}]]
    _record(tmp_path / "cpu-v3" / "math" / whale.run_name, rounds)
    (tmp_path / "calibration" / "cpu-v3").mkdir(parents=True)
    (tmp_path / "calibration" / "cpu-v3" / "math.json").write_text(
        json.dumps({"split": "search", "harnesses": {"h0": {"mean_at_k": 0.133}}}))
    found = pilot.checks(tmp_path)
    noise = found["search_noise"]
    assert noise["pairs"] == 2 and noise["sd_points"] == pytest.approx(100 * 0.0424264, rel=1e-4)
    assert noise["passes"]  # a 10-point gain against SD 4.2 points is found 99 % of the time
    run = found["runs"][f"math/{whale.run_name}"]
    assert run["stage_candidates"] == [{"proposed": 1, "evaluated": 1}, {"proposed": 3, "evaluated": 2}]
    assert (run["initial"], run["final"], run["wall_s"]) == (0.1, 0.4, 1800.0)
    assert found["calibration"] == {"math h0 (search split)": {"value": 0.133, "passes": True}}


def test_the_weight_lever_s_room_is_the_first_weight_stage_s_share_of_batches_that_accepted_one():
    events = [{"event": "stage_start", "kind": "harness"}, {"event": "rsft_batch", "accepted": 0},
              {"event": "stage_end"}, {"event": "stage_start", "kind": "weight"},
              {"event": "rsft_batch", "accepted": 0}, {"event": "rsft_batch", "accepted": 3},
              {"event": "rsft_batch", "accepted": 1}, {"event": "rsft_batch", "accepted": 0},
              {"event": "stage_end"}, {"event": "rsft_batch", "accepted": 5}]
    assert pilot.training_signal(events) == 0.5
    assert pilot.training_signal([{"event": "test_eval"}]) is None
