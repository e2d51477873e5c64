"""Preset files: the sizes of a run as data, overridable field by field.

`smoke` (seconds, tiny random model: tests and CI), `cpu` (the default: the paper's
reproduction on a 2-core CPU with SmolLM2-135M), `paper` (the paper's settings; GPUs).

    data = load_preset("cpu")        # dict, straight from whalekit/presets/cpu.yaml
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

PRESET_DIR = Path(__file__).parent
PRESETS = ("smoke", "cpu", "paper")


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested configuration as `a.b.c` -> value (an empty section stays one key): the form
    config comparisons, W&B's config and MLflow's params all read."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def load_preset(name: str) -> dict[str, Any]:
    """A preset by name, or any YAML file path with the same layout."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else PRESET_DIR / f"{name}.yaml"
    if not path.exists():
        raise ValueError(f"unknown preset {name!r}: no file {path}; known presets: {', '.join(PRESETS)}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"{where}: malformed YAML ({reason})") from exc
    if not isinstance(data, dict) or "domains" not in data:
        raise ValueError(f"{path}: a preset is a mapping with a 'domains' section")
    return _expand(data)


def _expand(value: Any) -> Any:
    """${WHALEKIT_DATA} (default ./data) and other environment variables in strings."""
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    if isinstance(value, str) and "$" in value:
        return os.path.expandvars(value.replace("${WHALEKIT_DATA}", os.environ.get("WHALEKIT_DATA", "data")))
    return value


DATA_KEYS = ("path", "corpus", "test_paths")  # split options that name files; each a path or a list of paths


def data_files(split_options: dict[str, Any]) -> list[str]:
    """Every data file a configuration names, in order."""
    files = []
    for key in DATA_KEYS:
        value = split_options.get(key)
        files += [str(v) for v in (value if isinstance(value, (list, tuple)) else [value]) if v]
    return files


def missing_data_files(split_options: dict[str, Any]) -> list[str]:
    """Data files a configuration names that do not exist on this machine: all of them, not the first."""
    return [f for f in data_files(split_options) if not Path(f).exists()]
