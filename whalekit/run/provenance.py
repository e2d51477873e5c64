"""Where a run's numbers came from: the whalekit version, the git commit of the code and
the sampler `sampler: auto` resolved to, recorded in config.json under "provenance"; and
the check that a finished run made by other code or another sampler is reported and
reused only when asked for explicitly.

Why: a finished run is reused instead of recomputed, so without this a figure can mix runs
of old code with new ones, or runs sampled by vLLM with runs sampled by transformers.

    block = provenance("auto", policy.sampler)       # {"whalekit_version": ..., "git_commit": ..., ...}
    check_reuse(run_dir, block)                      # ForeignRunError unless allowed
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import warnings
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whalekit.infra.cpu_info import cpu_kind
from whalekit.samplers.vllm import vllm_available

if TYPE_CHECKING:
    from whalekit.samplers.base import Sampler

SCHEMA_VERSION = 1
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # whalekit/, this module sitting in whalekit/run/
REUSE_ENV = "WHALEKIT_REUSE_FOREIGN_RUNS"  # "1": reuse runs made by other code or samplers (reported)
# What must match for reuse: the package's own source (its hash: a commit that changes only
# docs or tests is not other code; uncommitted edits are), its version and the sampler.
COMPARED = ("whalekit_version", "source_sha256", "sampler")
SAMPLER_NAMES = {"HFSampler": "hf", "VLLMSampler": "vllm"}


class ForeignRunError(ValueError):
    """A run directory holds a run made by other code or with another sampler."""


def whalekit_version() -> str:
    try:
        return version("whalekit")
    except PackageNotFoundError:
        return "unknown"


def _git(*args: str, cwd: Path = PACKAGE_DIR) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit(path: Path = PACKAGE_DIR) -> str:
    """The commit whalekit's own files are checked out at; "unknown" outside a checkout
    (an installed wheel) or without git."""
    return _git("rev-parse", "HEAD", cwd=path) or "unknown"


def git_tag(path: Path = PACKAGE_DIR) -> str | None:
    """The tag the checkout is exactly at (a reproduction's pinned version), else None."""
    return _git("describe", "--tags", "--exact-match", "HEAD", cwd=path) or None


def git_dirty(path: Path = PACKAGE_DIR) -> bool | None:
    """True when tracked files of the package differ from the commit; None when unknown."""
    status = _git("status", "--porcelain", "--untracked-files=no", "--", str(path), cwd=path)
    return None if status is None else bool(status)


def source_sha256(path: Path = PACKAGE_DIR) -> str:
    """A hash of every .py file of the package (names and contents), checkout or wheel alike."""
    digest = hashlib.sha256()
    for file in sorted(path.rglob("*.py")):
        digest.update(file.relative_to(path).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def resolved_sampler(requested: str, sampler: Sampler | None = None) -> str:
    """The sampler that serves (or would serve) a run: from the sampler object when there
    is one, else what `load_policy` picks for `requested` ("auto": vllm when available)."""
    if sampler is not None:
        name = type(sampler).__name__
        return SAMPLER_NAMES.get(name, name)
    if requested != "auto":
        return requested

    return "vllm" if vllm_available() else "hf"


def provenance(requested_sampler: str, sampler: Sampler | None = None) -> dict[str, Any]:
    """The block config.json records under "provenance"."""
    return {"schema_version": SCHEMA_VERSION, "whalekit_version": whalekit_version(), "git_commit": git_commit(),
            "git_dirty": git_dirty(), "source_sha256": source_sha256(), "sampler_requested": requested_sampler,
            "sampler": resolved_sampler(requested_sampler, sampler), "git_tag": git_tag(), "cpu_kind": cpu_kind()}


def recorded_provenance(run_dir: str | Path) -> dict[str, Any] | None:
    """The provenance block of a run directory's config.json (None: not recorded)."""
    path = Path(run_dir) / "config.json"
    if not path.exists():
        return None
    block = json.loads(path.read_text()).get("provenance")
    return block if isinstance(block, dict) else None


def provenance_changes(recorded: dict[str, Any] | None, current: dict[str, Any]) -> list[str]:
    """How the code and sampler that made a run differ from the current ones."""
    if recorded is None:
        return ["provenance: not recorded (the run predates it)"]
    changes = [f"{key}: {recorded.get(key)!r} -> {current.get(key)!r}" for key in COMPARED
               if recorded.get(key) != current.get(key)]
    if changes and recorded.get("git_commit") != current.get("git_commit"):
        changes.append(f"git_commit: {recorded.get('git_commit')!r} -> {current.get('git_commit')!r}")
    return changes


def check_reuse(run_dir: str | Path, current: dict[str, Any], allow_foreign: bool | None = None) -> list[str]:
    """Before reusing or resuming the run in `run_dir`: the differences between the code
    and sampler that made it and `current` (empty: same, or no run there yet). Different
    ones raise ForeignRunError unless `allow_foreign` (default: the WHALEKIT_REUSE_FOREIGN_RUNS
    environment variable is "1"), in which case they are reported as a warning and returned."""
    if not (Path(run_dir) / "config.json").exists():
        return []
    changes = provenance_changes(recorded_provenance(run_dir), current)
    if not changes:
        return []
    if allow_foreign is None:
        allow_foreign = os.environ.get(REUSE_ENV, "") == "1"
    message = f"{run_dir}: made by other code or another sampler ({'; '.join(changes)})"
    if not allow_foreign:
        raise ForeignRunError(f"{message}; delete the folder to recompute it, set another runs_root, or reuse it "
                              f"anyway with {REUSE_ENV}=1")
    warnings.warn(f"{message}; reused because {REUSE_ENV}=1 / allow_foreign", stacklevel=2)
    return changes
