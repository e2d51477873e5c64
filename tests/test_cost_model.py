"""whalekit.report.cost_model: its rollout counts are what the driver spends (checked against every
committed cpu record), the paper preset's arithmetic spelled out, and docs/scaling.md's cost
table is the one the preset files give today."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from whalekit.report.cost_model import cost_table, count_rollouts, generated_span, replace_table
from whalekit.run.config import RunConfig, resolve_config

ROOT = Path(__file__).resolve().parents[1]
SCALING = ROOT / "docs" / "scaling.md"
FIELDS = {f.name for f in dataclasses.fields(RunConfig)}


def _record_events(folder: Path, names: tuple[str, ...]) -> list[dict[str, Any]]:
    lines = (folder / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [e for e in map(json.loads, lines) if e["event"] in names]


def _records() -> list[Path]:
    return sorted(p.parent for p in (ROOT / "results" / "cpu").glob("*/*/config.json"))


def test_counted_rollouts_equal_what_every_committed_cpu_run_spent():
    """Each non-adaptive record, its configuration counted: the RSFT and search rollouts of its
    run_end and the test rollouts of its evaluations, exactly, wherever every proposed
    candidate was valid (an invalid one costs nothing, which the count does not know)."""
    compared = 0
    for folder in _records():
        data = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        config = RunConfig(**{k: v for k, v in data.items() if k in FIELDS})
        if config.method == "adaptive":
            continue
        events = _record_events(folder, ("run_end", "search_iteration", "test_eval"))
        if any(e["candidates_evaluated"] != config.search.candidates_per_iteration
               for e in events if e["event"] == "search_iteration"):
            continue
        spent = [e for e in events if e["event"] == "run_end"][-1]["by_phase"]
        test = sum(e["n_tasks"] * e["k"] for e in events if e["event"] == "test_eval")
        counted = count_rollouts(config)
        assert (counted.rsft, counted.search, counted.test) == (spent.get("rsft", 0), spent.get("search", 0), test), \
            folder.name
        compared += 1
    if not compared:
        pytest.skip("no committed cpu records in this checkout")
    assert compared >= 50


def test_the_paper_math_whale_run_in_numbers():
    """0.6 epoch of 8,192 problems is 4,915: 19 batches of 256 and one of 51, so 20 weight steps
    a stage; 192 steps are 9 whole stages and 12 batches of a tenth, with the 9 harness stages
    between of 256 search problems x (the incoming harness + 5 iterations x 3 candidates)."""
    counted = count_rollouts(resolve_config("paper", "math", "whale", check_data=False))
    assert counted.weight_steps == 192
    assert counted.rsft == (9 * 4915 + 12 * 256) * 8 == 378_456
    assert counted.search == 9 * 256 * (1 + 5 * 3)
    assert counted.stages == 19
    assert counted.test == 60 * 8 * (1 + 19)  # AIME's 60 at mean@8: initially and after every stage


def test_a_weight_steps_budget_that_divides_into_whole_batches_samples_every_batch_whole():
    counted = count_rollouts(resolve_config("paper", "math", "weight_only", schedule=(1.0, 10), check_data=False))
    assert counted.rsft == 192 * 256 * 8  # one epoch is 32 whole batches


def test_the_docs_table_is_the_one_the_presets_give():
    documented = generated_span(SCALING.read_text(encoding="utf-8"))
    assert documented == cost_table(), "docs/scaling.md's cost table is stale: python -m whalekit.report.cost_model " \
                                       "--write docs/scaling.md"


def test_the_table_check_fails_when_a_preset_is_resized(monkeypatch):
    import whalekit.run.config as config_module

    original = config_module.load_preset

    def resized(name: str) -> dict[str, Any]:
        data = original(name)
        data["domains"]["math"]["budget"] = {**data["domains"]["math"]["budget"], "weight_steps": 96}
        return data

    monkeypatch.setattr(config_module, "load_preset", resized)
    with pytest.raises(AssertionError, match="stale"):
        test_the_docs_table_is_the_one_the_presets_give()


def test_writing_the_table_replaces_only_the_marked_span():
    text = "before\n<!-- cost-model:begin -->\nold\n<!-- cost-model:end -->\nafter\n"
    assert replace_table(text, "new") == "before\n<!-- cost-model:begin -->\nnew\n<!-- cost-model:end -->\nafter\n"


def test_the_adaptive_method_is_refused_not_guessed():
    with pytest.raises(ValueError, match="adaptive"):
        count_rollouts(resolve_config("paper", "math", "adaptive", check_data=False))
