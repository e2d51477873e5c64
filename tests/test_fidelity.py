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
from whalekit.whale import resolve_config

DOC = Path(__file__).resolve().parents[1] / "docs" / "fidelity.md"
COLUMNS = ["setting", "key", "authors (file in their repo)", "whalekit `paper`", "whalekit `cpu`",
           "why any difference"]
PRESET_COLUMNS = {"paper": 3, "cpu": 4}
# Settings issue 15 names: the table must keep a checked row for each.
REQUIRED_KEYS = {
    "rsft.temperature", "rsft.top_p", "rsft.top_k", "search.temperature", "search.top_p", "search.top_k",
    "eval_temperature", "eval_top_p", "eval_top_k", "code:whalekit.samplers.base.SamplingParams.top_k",
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
    import whalekit.whale as whale

    original = whale.load_preset

    def changed(name: str) -> dict[str, Any]:
        data = original(name)
        data["rsft"] = {**data["rsft"], "top_k": 0}
        return data

    monkeypatch.setattr(whale, "load_preset", changed)
    with pytest.raises(AssertionError, match="rsft.top_k"):
        test_every_keyed_row_equals_the_presets_and_the_code_defaults(None)
