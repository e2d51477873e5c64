"""The README is a guide a newcomer can follow as written: short, its example runs, its shell
line runs, and every page it or the docs link to exists."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_the_readme_is_a_guide_of_at_most_150_lines_that_names_the_paper_and_the_authors_code():
    assert len(README.splitlines()) <= 150
    assert "arxiv.org/abs/2609.00196" in README and "github.com/krafton-ai/WHALE" in README
    assert "figures/fig3_levers.png" in README and "CITATION.cff" in README and "LICENSE" in README


def test_every_relative_link_of_the_readme_and_the_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)]+)\)", text) + re.findall(r'!\[[^]]*\]\(([^)]+)\)', text):
            if re.match(r"[a-z]+://|#|mailto:", target):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_the_readmes_python_example_runs_and_draws_its_figure(tmp_path, monkeypatch):
    (example,) = [b for b in _blocks("python") if "run_method" in b]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WHALEKIT_QUIET", "1")
    exec(compile(example, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    assert (tmp_path / "whale-toy.png").stat().st_size > 10_000
    assert (tmp_path / "runs" / "smoke" / "toy" / "whale-0.5,2-s0" / "events.jsonl").exists()


def test_the_readmes_shell_line_runs_and_ends_in_a_figure(tmp_path):
    line = next(b for b in _blocks("bash") if "--figure" in b).strip()
    env = dict(os.environ, WHALEKIT_QUIET="1")
    for command in line.split("&&"):
        words = shlex.split(command)
        assert words[0] == "whalekit"
        subprocess.run([sys.executable, "-m", "whalekit.cli.main", *words[1:]], cwd=tmp_path, env=env, check=True,
                       capture_output=True, timeout=600)
    assert (tmp_path / "whale-toy.png").stat().st_size > 10_000
