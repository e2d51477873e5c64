"""The initial test evaluation, made once per (domain, seed) and shared by every method.

Why: every method of a (domain, seed) starts from the same weights θ0 and the same harness
h0 and is tested on the same test split with the same sampling seed, so its first test
evaluation is the same computation seven times over: on the cpu preset a 64 × 8
evaluation, about a seventh of a run's wall time. It is made by the first run that needs
it and stored under `<runs_root>/.shared/initial-eval/<key>/`; later runs copy it.

The key hashes everything the evaluation depends on: the domain and its options, the test
split (seed, size, split options), the starting harness's source, the model, the sampler
kind, the test sampling settings, the token limits, the package's own source (a code change
makes a new key) and the CPU kind (bf16 and float32 machines sample differently). A
pre-registered set (`RunConfig.initial_eval_store`, cpu-v3) instead commits one evaluation per
(domain, seed) under its own folder, keyed without the code and CPU kind, which `inputs.json`
records as `made_by`: every run of the set, on any machine, reads that one. A run that
was handed a policy object (tests, notebooks) neither reads nor writes the store: its
model is not known by name.

    store = InitialEvalStore(runs_root, key)
    shared = store.load()                       # (trajectories file text, metrics) or None
    store.save(path_of_eval_000, metrics)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whalekit.infra.runs import atomic_write

STORE = Path(".shared") / "initial-eval"
CHECKOUT = Path(__file__).resolve().parents[2]  # the repository holding this package, when it is a checkout


def store_folder(path: str | Path) -> Path:
    """Where a set's committed store (`RunConfig.initial_eval_store`) lies: a relative path is
    the repository's, so a run made from a notebook kernel (working directory notebooks/) and one
    made at the repository root read the same folder; outside a checkout, the working directory's."""
    folder = Path(path)
    if folder.is_absolute() or not (CHECKOUT / "pyproject.toml").exists():
        return folder
    return CHECKOUT / folder


def initial_eval_key(fields: dict[str, Any]) -> str:
    """A short hash of the evaluation's inputs (JSON, sorted keys): equal inputs, equal key."""
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class InitialEvalStore:
    """One shared initial evaluation: `test.jsonl` (the trajectories, as a run's
    test/eval-000.jsonl holds them), `metrics.json` (what its test_eval event reports) and
    `inputs.json` (what the key hashes, for a reader who wants to know)."""

    runs_root: Path
    key: str
    shared: bool = True  # under runs_root/.shared/initial-eval; False: `runs_root` is the store's own folder

    @property
    def folder(self) -> Path:
        return Path(self.runs_root) / STORE / self.key if self.shared else Path(self.runs_root) / self.key

    def load(self) -> tuple[Path, dict[str, Any]] | None:
        """(trajectories file, metrics) when this evaluation was made before, else None.
        A store half-written by a killed run has no metrics.json (written last) and counts
        as absent."""
        metrics, trajectories = self.folder / "metrics.json", self.folder / "test.jsonl"
        if not (metrics.exists() and trajectories.exists()):
            return None
        return trajectories, json.loads(metrics.read_text(encoding="utf-8"))

    def save(self, trajectories: Path, metrics: dict[str, Any], inputs: dict[str, Any]) -> None:
        """Store a run's initial evaluation (its test/eval-000.jsonl and the metrics it
        logged); the metrics file is written last, so a kill leaves no usable half."""
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write(self.folder / "inputs.json", json.dumps(inputs, sort_keys=True, indent=1, default=str))
        atomic_write(self.folder / "test.jsonl", trajectories.read_text(encoding="utf-8"))
        atomic_write(self.folder / "metrics.json", json.dumps(metrics, sort_keys=True))

    def copy_to(self, target: Path) -> dict[str, Any]:
        """Copy the stored trajectories to `target` (a run's test/eval-000.jsonl); the metrics."""
        found = self.load()
        if found is None:
            raise FileNotFoundError(f"{self.folder}: no stored initial evaluation")
        trajectories, metrics = found
        atomic_write(target, trajectories.read_text(encoding="utf-8"))  # a kill leaves no half-copied file
        return metrics
