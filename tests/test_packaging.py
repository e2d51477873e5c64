"""Install metadata: pyproject.toml and environment.yml describe the same environment."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_and_pyproject_name_the_same_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {r for r in project["dependencies"]} | set(project["optional-dependencies"]["dev"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    listed = {r for r in pip_section if not r.startswith("-e")}
    assert {_name(r): r for r in listed} == {_name(r): r for r in wanted}


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make reproduce" in readme
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")
