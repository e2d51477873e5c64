"""Every preset file loads and resolves for every domain it names (torchtune's habit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from whalekit.presets import PRESETS, data_files, load_preset
from whalekit.run.driver import resolve_config
from whalekit.run.methods import METHOD_NAMES as METHODS_ALL


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_resolves_for_every_domain_and_method(preset, tmp_path, monkeypatch):
    monkeypatch.setenv("WHALEKIT_DATA", str(tmp_path))
    data = load_preset(preset)
    for domain, section in data["domains"].items():
        for name in data_files(section.get("split_options", {})):  # the paper preset names user files: fake them
            assert name.startswith(str(tmp_path)), name
            Path(name).parent.mkdir(parents=True, exist_ok=True)
            Path(name).write_text("")
        for method in METHODS_ALL:
            config = resolve_config(preset, domain, method)
            assert config.eval_k > 0 and (config.budget.rollouts > 0 or config.budget.weight_steps > 0)
            if config.method in ("whale", "weight_only") and config.budget.mode == "rollouts":
                assert config.budget.rollouts % config.rsft.samples_per_problem == 0


def test_missing_paper_data_is_listed(monkeypatch, tmp_path):
    monkeypatch.setenv("WHALEKIT_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="missing data files"):
        resolve_config("paper", "chess", "whale")


def test_unknown_preset_and_domain_are_clear_errors():
    with pytest.raises(ValueError, match="unknown preset"):
        load_preset("nope")
    with pytest.raises(ValueError, match="no section for domain"):
        resolve_config("smoke", "nope", "whale")
