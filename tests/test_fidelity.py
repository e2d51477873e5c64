"""docs/fidelity.md stays equal to the preset files and the code's defaults: every row with
a config key is resolved in the `paper` and `cpu` presets (every domain, or the one named)
and the first `literal` of each preset cell must equal the resolved value."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from whalekit.presets import data_files, load_preset
from whalekit.run.driver import resolve_config

DOC = Path(__file__).resolve().parents[1] / "docs" / "fidelity.md"
COLUMNS = ["setting", "key", "authors (file in their repo)", "whalekit `paper`", "whalekit `cpu`",
           "why any difference"]
PRESET_COLUMNS = {"paper": 3, "cpu": 4}
# Settings issue 15 names: the table must keep a checked row for each.
REQUIRED_KEYS = {
    "rsft.sampling.temperature", "rsft.sampling.top_p", "rsft.sampling.top_k", "search.sampling.temperature",
    "search.sampling.top_p", "search.sampling.top_k", "eval_sampling.temperature", "eval_sampling.top_p",
    "eval_sampling.top_k", "code:whalekit.samplers.base.SamplingParams.top_k",
    "rsft.samples_per_problem", "rsft.batch_problems", "rsft.minibatch_trajectories", "rsft.lora",
    "rsft.warmup_steps", "rsft.learning_rate@searchqa", "rsft.learning_rate@math", "rsft.learning_rate@chess",
    "search.archive_scope", "search.count_incoming", "search.candidates_per_iteration", "schedule",
    "adaptive.min_weight_epochs", "adaptive.weight_window_epochs", "adaptive.weight_patience_epochs",
    "adaptive.min_search_iterations", "adaptive.search_patience", "adaptive.max_search_iterations",
    "budget.mode", "n_search", "eval_k", "proposer",
}


def table_rows() -> list[list[str]]:
    lines = DOC.read_text(encoding="utf-8").splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| setting | key |"))
    assert [c.strip() for c in lines[header].strip().strip("|").split("|")] == COLUMNS
    rows = []
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == len(COLUMNS), f"a row needs {len(COLUMNS)} cells (no '|' inside one): {line}"
        rows.append(cells)
    return rows


def _literal(cell: str) -> Any:
    match = re.search(r"`([^`]*)`", cell)
    assert match, f"a checked cell starts with the `value`: {cell!r}"
    return yaml.safe_load(match.group(1))


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, (int, float)) and not isinstance(expected, bool) and isinstance(actual, (int, float)):
        return math.isclose(float(expected), float(actual), rel_tol=1e-12)
    return expected == actual


def _code_default(path: str) -> Any:
    module_name, class_name, field_name = path.rsplit(".", 2)
    cls = getattr(importlib.import_module(module_name), class_name)
    return {f.name: f.default for f in dataclasses.fields(cls)}[field_name]


def _config_value(config: Any, dotted: str) -> Any:
    value: Any = json.loads(json.dumps(config.to_json(), default=str))
    for part in dotted.split("."):
        value = value[part]
    return value


@pytest.fixture
def fake_data(tmp_path, monkeypatch):
    """The paper preset names user data files: empty stand-ins let it resolve."""
    monkeypatch.setenv("WHALEKIT_DATA", str(tmp_path))
    for section in load_preset("paper")["domains"].values():
        for name in data_files(section.get("split_options", {})):
            Path(name).parent.mkdir(parents=True, exist_ok=True)
            Path(name).write_text("")


def test_the_table_has_a_row_for_every_setting_the_issue_names_and_one_h0_row_per_domain():
    rows = table_rows()
    keys = {row[1].strip("`") for row in rows}
    assert REQUIRED_KEYS <= keys, sorted(REQUIRED_KEYS - keys)
    for domain in ("search QA", "math", "chess"):
        h0 = [row for row in rows if row[0] == f"h0, {domain}"]
        assert len(h0) == 1, domain
        assert h0[0][2] and all(h0[0][c] for c in PRESET_COLUMNS.values())  # described, or marked to fill


def test_every_keyed_row_equals_the_presets_and_the_code_defaults(fake_data):
    checked = 0
    for row in table_rows():
        key = row[1].strip("`")
        if key in ("—", "-", ""):
            continue
        for preset, column in PRESET_COLUMNS.items():
            expected = _literal(row[column])
            if key.startswith("code:"):
                actual = _code_default(key[len("code:"):])
                assert _same(expected, actual), f"{key}: table {expected!r}, code {actual!r}"
                checked += 1
                continue
            dotted, _, only = key.partition("@")
            domains = [only] if only else sorted(load_preset(preset)["domains"])
            for domain in domains:
                actual = _config_value(resolve_config(preset, domain, "whale"), dotted)
                assert _same(expected, actual), f"{preset}/{domain} {dotted}: table {expected!r}, preset {actual!r}"
                checked += 1
    assert checked > 100


def test_the_check_fails_when_a_preset_value_changes_without_the_table(fake_data, monkeypatch):
    import whalekit.run.config as config_module

    original = config_module.load_preset

    def changed(name: str) -> dict[str, Any]:
        data = original(name)
        data["rsft"] = {**data["rsft"], "sampling": {"top_k": 0}}
        return data

    monkeypatch.setattr(config_module, "load_preset", changed)
    with pytest.raises(AssertionError, match="rsft.sampling.top_k"):
        test_every_keyed_row_equals_the_presets_and_the_code_defaults(None)


def _derived_phrases() -> dict[str, list[str]]:
    """Phrases of the table's rationale that quote numbers derived from the presets, each
    rebuilt here from the resolved presets: resizing a preset without the text fails."""
    from whalekit.run.schedules import AdaptiveConfig

    cpu, paper = resolve_config("cpu", "math", "whale"), resolve_config("paper", "math", "whale")
    n, g, b = cpu.n_train, cpu.rsft.samples_per_problem, cpu.rsft.batch_problems
    search, m = cpu.n_search, cpu.search.candidates_per_iteration
    (e, i), (paper_e, paper_i) = cpu.schedule, paper.schedule
    per_phase = lambda iterations: search * (1 + (iterations - 1) * m)  # noqa: E731  incoming + proposals
    batches = AdaptiveConfig().weight_batches(cpu.adaptive.min_weight_epochs, n, b)
    window = AdaptiveConfig().weight_batches(cpu.adaptive.weight_window_epochs, n, b)
    global_steps = " / ".join(str(resolve_config("paper", d, "whale").rsft.minibatch_trajectories
                                  * resolve_config("paper", d, "whale").rsft.data_parallel)
                              for d in ("searchqa", "math", "chess"))
    theirs = paper.rsft.batch_problems * paper.rsft.samples_per_problem
    return {
        "fixed schedule (E, I)": [
            f"at cpu size ({paper_e:g}, {paper_i}) would invert that ({round(paper_e * n) * g} RSFT rollouts against "
            f"{search} x {1 + (paper_i - 1) * m} = {per_phase(paper_i)} search rollouts)",
            f"One epoch of {n} problems at G = {g} ({round(e * n) * g} rollouts) against I = {i} on {search} search "
            f"problems ({per_phase(i)} rollouts)"],
        "adaptive: weight phase minimum": [f"0.2 epoch of {n} problems is {batches} batches of {b}"],
        "adaptive: reward window": [f"cpu: {window} batches."],
        "adaptive: weight patience": [
            f"cpu: {AdaptiveConfig().weight_batches(cpu.adaptive.weight_patience_epochs, n, b)} batches."],
        "adaptive: harness minimum": [f"({m} candidates x {search} problems)"],
        "candidates per iteration, M": [f"each candidate costs {search} rollouts of a {cpu.budget.rollouts:,} budget"],
        "prompts per sampled batch": [f"cpu: {b} x {g} = {b * g} rollouts per batch, 1/{theirs // (b * g)} of theirs"],
        "RSFT optimiser steps": [f"paper {global_steps} per step"],
    }


def test_the_numbers_the_rationale_derives_from_the_presets_are_current(fake_data):
    rows = {row[0]: " ".join(row) for row in table_rows()}
    for setting, phrases in _derived_phrases().items():
        assert setting in rows, setting
        for phrase in phrases:
            assert phrase in rows[setting], f"{setting}: the text lacks {phrase!r} (stale after a preset change?)"


def test_the_derived_number_check_fails_when_a_preset_is_resized_without_the_text(fake_data, monkeypatch):
    import whalekit.run.config as config_module

    original = config_module.load_preset

    def resized(name: str) -> dict[str, Any]:
        data = original(name)
        if name == "cpu":
            data["domains"]["math"] = {**data["domains"]["math"], "n_train": 40}
        return data

    monkeypatch.setattr(config_module, "load_preset", resized)
    with pytest.raises(AssertionError, match="stale"):
        test_the_numbers_the_rationale_derives_from_the_presets_are_current(None)
