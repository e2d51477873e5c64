"""`make reproduce` as the README tells a user to type it: from the repository root, with its
default arguments, in a checkout of its own. Each test works in a copy of this working tree
made into a git repository, so `git status` there says whether the command left the tracked
tree as it found it (the environment is this one's .venv; nothing is installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv" if (REPO / ".venv" / "bin" / "python").exists() else None


def checkout(where: Path) -> Path:
    """A copy of this working tree (tracked and untracked files git does not ignore), committed
    in a repository of its own."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    root = where / "whalekit-checkout"
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "checkout"]):
        subprocess.run(git + command, cwd=root, check=True)
    return root


def make(root: Path, *arguments: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """`make <arguments>` in `root` with this environment as its .venv (`-o` keeps make from
    reinstalling it: the copy's files are newer than the install stamp) and the copy's
    package first on the path of the command and of every notebook kernel."""
    assert VENV is not None
    venv = str(VENV)
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("WHALEKIT_QUIET", None)
    return subprocess.run(["make", f"VENV={venv}", "-o", f"{venv}/.installed", *arguments], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def untracked_changes(root: Path) -> list[str]:
    return subprocess.run(["git", "status", "--porcelain"], cwd=root, check=True, capture_output=True,
                          text=True).stdout.splitlines()


pytestmark = pytest.mark.skipif(VENV is None or shutil.which("make") is None or shutil.which("git") is None,
                                reason="needs the repository's .venv (`make install`), make and git")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkout(tmp_path_factory.mktemp("repo"))


def test_with_runs_left_it_prints_the_plan_and_exits_2_without_yes(root):
    # an edit to code a run executes: every committed cpu record is of other code now
    loss = root / "whalekit" / "weights" / "rsft_loss.py"
    original = loss.read_text()
    loss.write_text(original + "\n# an edit\n")
    try:
        result = make(root, "reproduce", timeout=600)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "0 of 102 runs recorded, 102 left" in result.stdout and "ETA" in result.stdout
        assert "YES=1" in result.stderr and "DRY_RUN=1" in result.stderr
        assert untracked_changes(root) == [" M whalekit/weights/rsft_loss.py"]  # nothing started, STATUS.md untouched
        planned = make(root, "reproduce", "DRY_RUN=1", timeout=600)
        assert planned.returncode == 0 and "102 left" in planned.stderr
        assert "02_domain_run math/whale-" in planned.stdout
    finally:
        loss.write_text(original)
    assert untracked_changes(root) == []


@pytest.mark.slow
@pytest.mark.timeout(3000)  # about 3 min the first pass on 2 cores, a minute the second
def test_make_reproduce_preset_smoke_passes_at_its_default_parallelism_and_leaves_the_tree_clean(root):
    first = make(root, "reproduce", "PRESET=smoke", timeout=2400)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert untracked_changes(root) == [], "the smoke pass wrote into the tracked tree"
    assert not (root / "results" / "smoke").exists()
    assert (root / "runs" / "records" / "smoke" / "STATUS.md").exists()  # its records stay under runs/

    from whalekit.repro import reproduce_plan

    jobs = reproduce_plan.plan("smoke", root / "runs", root / "figures" / "smoke", results=root / "runs" / "records")
    assert {j.notebook for j in jobs} == set(reproduce_plan.NOTEBOOKS)
    for job in jobs:
        for path in job.expected:
            assert path.exists() and path.stat().st_size > 0, f"{job.label}: {path}"
        executed = nbformat.read(job.output, as_version=4)
        errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        assert not errors, job.label
    archive_notebook = nbformat.read(jobs[-1].output, as_version=4)
    html = [o["data"]["text/html"] for c in archive_notebook.cells if c.cell_type == "code" for o in c.outputs
            if "text/html" in o.get("data", {})]
    assert any("wk-trace" in page for page in html), "the trace viewer must fall back to static HTML headless"
    table = (root / "figures" / "smoke" / "table2_main.md").read_text()
    assert all(label in table for label in ("WHALE", "weights only", "harness only", "FST (prompt only)"))

    # a second pass finds every run recorded and only remakes the figures
    again = make(root, "reproduce", "PRESET=smoke", timeout=1200)
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    assert "making the figures and tables from the records" in again.stdout
    assert "(figures from the records only)" in again.stdout
    assert untracked_changes(root) == []


@pytest.mark.slow
@pytest.mark.timeout(1200)  # under a minute on 2 cores: the analysis notebooks over the committed records
def test_make_reproduce_with_every_record_valid_only_remakes_the_figures_and_leaves_the_tree_clean(root):
    result = make(root, "reproduce", timeout=1200)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "102 of 102 runs recorded, 0 left" in result.stdout
    assert "(figures from the records only)" in result.stdout
    assert "02_domain_run" not in result.stdout and "01_quickstart" not in result.stdout
    assert untracked_changes(root) == [], "figures, tables or STATUS.md differ from the committed ones"
