"""The harness archive: every candidate the search ever proposed, with its source, its
lineage, the proposer's hypothesis, and its scores per weights version, on disk.

Why on disk, one folder per candidate: a search stage may be killed at any instant and
must resume without losing finished evaluations, and a person (or an LLM proposer) must
be able to read the whole history back. Every file is written whole to a temporary name
and renamed into place, so a reader sees either the old file or the new one, never half.
The folders are the truth; `index.json` is a cache rebuilt on open.

Scores belong to a (harness, weights) pair: each evaluation is stored under the weights
version that produced it, and `accepted()` ranks candidates at the newest version only.
The archive only ever receives search-split tasks (the search loop's contract).

    archive = Archive.open(run_dir / "archive", "toy"); seed = archive.ensure_seed(h0_source)

A run keeps one archive (`search.archive_scope: run`) or a fresh one per harness phase
(`round`, the authors': the incoming harness as its seed plus that phase's candidates);
`archive_folders(run_dir / "archive")` lists them either way.
    print(render_report(archive)); best = archive.accepted()
"""

from __future__ import annotations

import ast
import difflib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whalekit.episode import harness_id
from whalekit.infra.errors import DataError
from whalekit.infra.runs import atomic_write, read_jsonl_records
from whalekit.types import Trajectory

SCHEMA_VERSION = 1
STATUSES = ("proposed", "invalid", "evaluated", "failed")  # failed: evaluated, but the candidate crashed/hung


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError.at(path, exc.lineno, f"invalid JSON ({exc.msg})") from exc


def _dumps(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True, default=str)


@dataclass
class Entry:
    """One candidate's metadata (meta.json) and its score per weights version (scores.json)."""

    id: str
    seq: int  # order of arrival in the archive
    parent_ids: list[str]
    hypothesis: str
    change_summary: str
    proposer: str
    iteration: int
    status: str = "proposed"
    failure_reason: str | None = None
    scores: dict[int, dict[str, Any]] = field(default_factory=dict)  # version -> {score, n, correct, mean_turns}
    created: float = 0.0

    def score(self, weights_version: int) -> float | None:
        record = self.scores.get(weights_version)
        return None if record is None else float(record["score"])


class Archive:
    def __init__(self, root: Path, domain: str):
        self.root = Path(root)
        self.domain = domain
        self._entries: dict[str, Entry] = {}

    # ---- opening and writing -------------------------------------------------------
    @classmethod
    def open(cls, root: str | Path, domain: str) -> Archive:
        """Open (or create) the archive under `root`; reopening continues the same run."""
        archive = cls(Path(root), domain)
        (archive.root / "candidates").mkdir(parents=True, exist_ok=True)
        index = archive.root / "index.json"
        if index.exists():
            recorded = _read_json(index).get("domain")
            if recorded not in (None, domain):
                raise ValueError(f"{index}: archive belongs to domain {recorded!r}, not {domain!r}")
        for folder in sorted((archive.root / "candidates").iterdir()):
            if (folder / "meta.json").exists() and (folder / "harness.py").exists():
                archive._entries[folder.name] = archive._load_entry(folder)
        archive._write_index()
        return archive

    def _load_entry(self, folder: Path) -> Entry:
        meta = _read_json(folder / "meta.json")
        scores_path = folder / "scores.json"
        scores = {int(k): v for k, v in _read_json(scores_path).items()} if scores_path.exists() else {}
        fields = {k: meta[k] for k in ("id", "seq", "parent_ids", "hypothesis", "change_summary", "proposer",
                                       "iteration", "status", "failure_reason", "created")}
        return Entry(scores=scores, **fields)

    def _dir(self, candidate_id: str) -> Path:
        return self.root / "candidates" / candidate_id

    def _write_meta(self, entry: Entry) -> None:
        meta = {k: v for k, v in entry.__dict__.items() if k != "scores"}
        atomic_write(self._dir(entry.id) / "meta.json", _dumps({"schema_version": SCHEMA_VERSION, **meta}))

    def _write_index(self) -> None:
        rows = [{"id": e.id, "seq": e.seq, "status": e.status, "parents": e.parent_ids,
                 "scores": {str(k): v["score"] for k, v in e.scores.items()}} for e in self.entries()]
        text = _dumps({"schema_version": SCHEMA_VERSION, "domain": self.domain, "candidates": rows})
        path = self.root / "index.json"
        if not path.exists() or path.read_text(encoding="utf-8") != text:  # reading a record leaves it untouched
            atomic_write(path, text)

    def add(self, source: str, parent_ids: list[str] | tuple[str, ...] = (), hypothesis: str = "",
            change_summary: str = "", proposer: str = "", iteration: int = 0) -> str:
        """Store a proposed candidate (before it is evaluated) and return its id. The id is
        a content address, so proposing an existing source again returns the old id."""
        candidate_id = harness_id(source)
        if candidate_id in self._entries:
            return candidate_id
        folder = self._dir(candidate_id)
        # harness.py first, meta.json last: a folder without meta.json is ignored on open.
        atomic_write(folder / "harness.py", source)
        entry = Entry(candidate_id, len(self._entries), list(parent_ids), hypothesis, change_summary, proposer,
                      iteration, created=time.time())
        self._write_meta(entry)
        self._entries[candidate_id] = entry
        self._write_index()
        return candidate_id

    def ensure_seed(self, source: str, hypothesis: str = "the domain's initial harness h0") -> str:
        return self.add(source, hypothesis=hypothesis, change_summary="seed", proposer="seed")

    def mark_invalid(self, candidate_id: str, reason: str) -> None:
        """Validation rejected the candidate: it is kept (the proposer learns from it), never run."""
        self._set_status(candidate_id, "invalid", reason)

    def _set_status(self, candidate_id: str, status: str, reason: str | None) -> None:
        entry = self.entry(candidate_id)
        entry.status, entry.failure_reason = status, reason
        self._write_meta(entry)
        self._write_index()

    def record_evaluation(self, candidate_id: str, weights_version: int, trajectories: list[Trajectory],
                          failure_modes: list[str | None], failure_reason: str | None = None) -> float:
        """Store one evaluation (one trajectory per search task) and return its score, the
        mean reward. `failure_reason` marks a candidate whose worker crashed or hung."""
        if len(failure_modes) != len(trajectories):
            raise ValueError("record_evaluation needs one failure mode per trajectory")
        entry = self.entry(candidate_id)
        folder = self._dir(candidate_id)
        outcomes = [{"task_id": t.task_id, "subset": t.subset, "correct": t.correct, "reward": t.reward,
                     "failure_mode": mode, "flags": t.flags, "error": (t.error or None) and t.error[:400],
                     "final_answer": t.final_answer} for t, mode in zip(trajectories, failure_modes)]
        atomic_write(folder / f"trajectories_w{weights_version}.jsonl",
                     "".join(json.dumps(t.to_json(), default=str) + "\n" for t in trajectories))
        atomic_write(folder / f"outcomes_w{weights_version}.jsonl",
                     "".join(json.dumps(o, default=str) + "\n" for o in outcomes))
        n = len(trajectories)
        score = sum(t.reward for t in trajectories) / n if n else 0.0
        entry.scores[weights_version] = {"score": score, "n": n, "correct": sum(t.correct for t in trajectories),
                                         "mean_turns": sum(len(t.turns) for t in trajectories) / n if n else 0.0,
                                         "evaluated": time.time()}
        atomic_write(folder / "scores.json", _dumps({str(k): v for k, v in entry.scores.items()}))
        entry.status = "failed" if failure_reason else "evaluated"
        entry.failure_reason = failure_reason
        self._write_meta(entry)
        self._write_index()
        return score

    # ---- reading ---------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        return sorted(self._entries.values(), key=lambda e: e.seq)

    def entry(self, candidate_id: str) -> Entry:
        if candidate_id not in self._entries:
            raise KeyError(f"no candidate {candidate_id!r} in archive {self.root}")
        return self._entries[candidate_id]

    def __contains__(self, candidate_id: object) -> bool:
        return candidate_id in self._entries

    def ids(self) -> set[str]:
        return set(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def source(self, candidate_id: str) -> str:
        self.entry(candidate_id)
        return (self._dir(candidate_id) / "harness.py").read_text(encoding="utf-8")

    def seed_id(self) -> str:
        seeds = [e for e in self.entries() if e.proposer == "seed"]
        if not seeds:
            raise ValueError(f"archive {self.root} has no seed harness: call ensure_seed(h0_source) first")
        return seeds[0].id

    def latest_weights_version(self) -> int | None:
        versions = [v for e in self._entries.values() for v in e.scores]
        return max(versions) if versions else None

    def outcomes(self, candidate_id: str, weights_version: int) -> list[dict[str, Any]]:
        path = self._dir(candidate_id) / f"outcomes_w{weights_version}.jsonl"
        return read_jsonl_records(path) if path.exists() else []

    def trajectories(self, candidate_id: str, weights_version: int) -> list[Trajectory]:
        path = self._dir(candidate_id) / f"trajectories_w{weights_version}.jsonl"
        return [Trajectory.from_json(row) for row in read_jsonl_records(path)] if path.exists() else []

    def leaderboard(self, weights_version: int | None = None) -> list[tuple[str, float, int]]:
        """(id, score, n) at one weights version, best first. Ties go to the candidate with
        fewer mean model turns per episode (the authors' tie-break), then to the earlier one."""
        version = self.latest_weights_version() if weights_version is None else weights_version
        if version is None:
            return []
        rows = [(e, e.score(version)) for e in self.entries()]
        ranked = sorted(((e, s) for e, s in rows if s is not None),
                        key=lambda pair: (-pair[1], _mean_turns(pair[0].scores[version]), pair[0].seq))
        return [(e.id, s, int(e.scores[version]["n"])) for e, s in ranked]

    def accepted(self, weights_version: int | None = None) -> str:
        """The best candidate by search-split score at `weights_version` (default: the
        newest version scored; that one too if nothing is scored at `weights_version`
        yet); the seed when nothing is scored at all."""
        board = self.leaderboard(weights_version) or self.leaderboard(None)
        return board[0][0] if board else self.seed_id()

    def unevaluated(self, weights_version: int) -> list[str]:
        """Proposed candidates with no score at this weights version (resume after a kill)."""
        return [e.id for e in self.entries() if e.status == "proposed" and weights_version not in e.scores]

    # ---- state of a search stage (for resuming) --------------------------------------
    def stage_progress(self, key: str) -> dict[str, Any]:
        path = self.root / "stages.json"
        return dict((_read_json(path) if path.exists() else {}).get(key, {}))

    def set_stage_progress(self, key: str, progress: dict[str, Any]) -> None:
        path = self.root / "stages.json"
        stages = _read_json(path) if path.exists() else {}
        stages[key] = progress
        atomic_write(path, _dumps(stages))

    # ---- the proposer's view -----------------------------------------------------------
    def diff(self, candidate_id: str, parent_id: str | None = None, context: int = 2) -> str:
        entry = self.entry(candidate_id)
        parent = parent_id or (entry.parent_ids[0] if entry.parent_ids else None)
        if parent is None:
            return ""
        # Normalise both through ast.unparse so the diff shows edits, not formatting.
        before, after = normalise_source(self.source(parent)), normalise_source(self.source(candidate_id))
        lines = difflib.unified_diff(before.splitlines(), after.splitlines(), parent, candidate_id, n=context,
                                     lineterm="")
        return "\n".join(lines)


ARCHIVE_SCOPES = ("round", "run")


def round_folder(root: Path, round_index: int) -> Path:
    """Where a run with `search.archive_scope: round` keeps the archive of one harness phase."""
    return Path(root) / f"round-{round_index:03d}"


def archive_folders(root: str | Path) -> list[Path]:
    """Every archive under a run's `archive/` folder, oldest first: the folder itself
    (`archive_scope: run`) or one `round-NNN` folder per harness phase (`round`)."""
    root = Path(root)
    rounds = sorted(p for p in root.glob("round-*") if p.is_dir())
    return rounds or ([root] if (root / "candidates").exists() else [])


def archive_holding(root: str | Path, domain: str, candidate_id: str | None = None,
                    proposed: bool = False) -> Archive | None:
    """The newest archive of a run that holds `candidate_id` (any archive when None); with
    `proposed`, only one where it was proposed rather than seeded as the incoming harness."""
    for folder in reversed(archive_folders(root)):
        archive = Archive.open(folder, domain)
        if candidate_id is None or (candidate_id in archive and not (proposed and candidate_id == archive.seed_id())):
            return archive
    return None


def _mean_turns(record: dict[str, Any]) -> float:
    """An evaluation's mean model turns; records written before whalekit kept it rank last among ties."""
    return float(record.get("mean_turns", float("inf")))


def normalise_source(source: str) -> str:
    """Python source through ast.unparse: quote style, blank lines, comments and line
    breaks inside brackets vanish, so a diff of two normalised sources shows only edits
    (the source itself when it does not parse)."""
    try:
        return ast.unparse(ast.parse(source))
    except SyntaxError:
        return source
