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


def test_the_gpu_extra_brings_vllm_and_unsloth_only_where_unsloth_runs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    gpu = {_name(r): r for r in project["optional-dependencies"]["gpu"]}
    assert set(gpu) == {"vllm", "unsloth"}
    assert "sys_platform == 'linux'" in gpu["unsloth"]  # CUDA-only: no wheel to try on macOS or Windows
    # the conda environment is the CPU one; it says how GPU machines add the extra
    env_text = (ROOT / "environment.yml").read_text()
    pip_section = next(d["pip"] for d in yaml.safe_load(env_text)["dependencies"] if isinstance(d, dict))
    assert not {"vllm", "unsloth"} & {_name(r) for r in pip_section} and ".[gpu]" in env_text


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make reproduce" in readme
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")
