"""The command line's view of the run configuration: `--set KEY=VALUE` overrides checked
against the `RunConfig` field tree before anything runs, so a typo or a bad value is one
line naming the valid keys (exit status 2), never a traceback from a dataclass.

    overrides = parse_overrides(["rsft.learning_rate=1e-4", "budget=512"])
    check_overrides(overrides)      # raises CLIError("unknown key rsft.lr; valid: ...")
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from typing import Any

import yaml

from whalekit.run.config import RunConfig, resolve_config


class CLIError(Exception):
    """A usage or input error: the command prints it as one line and exits with status 2."""


# fields with their own flag: a --set for them would be ambiguous
FLAG_FIELDS = {"domain": "--domain", "method": "--method", "seed": "--seed", "preset": "--preset",
               "runs_root": "--runs-root"}


_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """--set rsft.learning_rate=1e-4 --set budget=512 -> nested dict (values parsed as YAML)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise CLIError(f"--set takes KEY=VALUE (e.g. --set rsft.learning_rate=1e-4), got {pair!r}")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise CLIError(f"--set {key}: value {value!r} is not YAML ({one_line(str(exc))})") from None
        if isinstance(parsed, str) and _EXPONENT_FLOAT.fullmatch(value.strip()):
            parsed = float(value)  # YAML 1.1 reads 1e-4 (no dot) as a string
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise CLIError(f"--set {key}: {part} was already set to a value, not a section")
            node = child
        node[parts[-1]] = parsed
    return out


def check_overrides(overrides: dict[str, Any], cls: type | None = None, prefix: str = "") -> None:
    """Every key names a field of `cls` (default RunConfig), recursively into the nested
    config dataclasses; every value has the field's type where that type is a plain one.
    Free-form option mappings (split_options, vllm_options, ...) take any keys."""
    if cls is None:
        cls = RunConfig
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key, value in overrides.items():
        name = prefix + key
        if not prefix and key in FLAG_FIELDS:
            raise CLIError(f"--set {name}: use {FLAG_FIELDS[key]} instead")
        if key not in fields:
            valid = ", ".join(prefix + k for k in fields if prefix or k not in FLAG_FIELDS)
            raise CLIError(f"--set {name}: unknown key; valid keys: {valid}")
        hint = hints[key]
        if not prefix and key == "budget" and not isinstance(value, dict):  # shorthand for budget.rollouts
            if isinstance(value, bool) or not isinstance(value, int):
                raise CLIError(f"--set budget={value!r}: expected int (the rollouts budget) or set budget.<key>")
            continue
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise CLIError(f"--set {name}: a section; set one of its keys, e.g. --set {name}."
                               f"{dataclasses.fields(hint)[0].name}=...")
            check_overrides(value, typing.cast(type, hint), name + ".")
        elif not _has_type(value, hint):
            raise CLIError(f"--set {name}={value!r}: expected {_type_name(hint)}")


def _has_type(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint is type(None):
        return value is None
    if hint is dict or origin is dict:
        return isinstance(value, dict)
    if origin in (typing.Union, types.UnionType):
        return any(_has_type(value, arg) for arg in typing.get_args(hint))
    return True  # tuples, lists and the rest: the config's own __post_init__ checks decide


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arg) for arg in typing.get_args(hint))
    if hint is dict or typing.get_origin(hint) is dict:
        return "a mapping"
    return getattr(hint, "__name__", str(hint))


def one_line(text: str) -> str:
    """An exception message as one line: its lines joined."""
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


def resolve(preset: str, domain: str, method: str = "whale", schedule: str | None = None, seed: int = 0,
            runs_root: str = "runs", set_pairs: list[str] | None = None, **extra: Any) -> Any:
    """resolve_config with checked overrides; any configuration error becomes a CLIError."""
    overrides = parse_overrides(set_pairs or [])
    check_overrides(overrides)
    overrides.update(extra)
    try:
        return resolve_config(preset, domain, method, schedule, seed, runs_root=runs_root, **overrides)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        raise CLIError(one_line(str(exc))) from None


def config_yaml(config: Any) -> str:
    """The resolved configuration as YAML: what `config.json` of the run will hold."""
    data = json.loads(json.dumps(config.to_json(), default=str))
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
