"""The proposer's view of the run: a read-only virtual filesystem built from the archive's
search-split records, served through three bounded tools (list, read, grep).

Why virtual: the authors' proposer (Claude Code) works inside the run directory and reads
every candidate's source and every search trajectory, the frontier and an evolution
summary. Giving a model the real directory would also give it whatever else lies there
(test evaluations, checkpoints, events); here every path is generated from the archive's
candidate records and the recorded prototype runs, never resolved on disk, so a test-split
file or a path outside the view cannot be named. When the search split's task ids are
given, any record of another task is dropped too (the archive should hold none; this is
the second lock). Each tool call is bounded (bytes per read, entries per listing, matches
per grep) so one call cannot flood the model's context.

    view = RunView(archive, search_task_ids={t.id for t in splits.search})
    print(view.list_files("candidates")); print(view.read_file("frontier.json"))
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whalekit.infra.runs import read_jsonl_records
from whalekit.types import Trajectory

if TYPE_CHECKING:
    from whalekit.search.archive import Archive

SCHEMA_VERSION = 1
PROTOTYPES_DIR = "prototypes"  # under the archive root, written by whalekit.search.proposers.prototype


@dataclass
class ViewLimits:
    read_bytes: int = 16_000  # characters returned by one read_file call
    list_entries: int = 400  # entries returned by one list_files call
    grep_matches: int = 60  # matching lines returned by one grep call
    grep_line_chars: int = 240  # characters shown of one matching line

    def __post_init__(self) -> None:
        if min(self.read_bytes, self.list_entries, self.grep_matches, self.grep_line_chars) < 1:
            raise ValueError("view limits must be positive")


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", text)[:80] or "_"


def mechanism_of(change_summary: str) -> str:
    """The mechanism a candidate changes, from its change summary ("mechanism: X; ..." as the
    LLM proposers write it, "mechanisms: a + b" as the reflective proposer does)."""
    for prefix in ("mechanism: ", "mechanisms: "):
        if change_summary.startswith(prefix):
            return change_summary[len(prefix):].split(";")[0].strip()
    return ""


def render_trajectory(trajectory: Trajectory) -> str:
    """A trajectory as text: outcome first, then every message, tool call and parse error."""
    head = (f"task {trajectory.task_id} harness {trajectory.harness_id} weights v{trajectory.policy_version}\n"
            f"correct={trajectory.correct} reward={trajectory.reward} final_answer={trajectory.final_answer!r}\n"
            f"turns={len(trajectory.turns)} generated_tokens={trajectory.generated_tokens} flags="
            f"{json.dumps(trajectory.flags, default=str, sort_keys=True)}\n")
    if trajectory.error:
        head += f"error: {trajectory.error}\n"
    lines = [head]
    for message in trajectory.messages:
        kind = "" if message.kind == "text" else "/" + message.kind
        lines.append(f"--- [{message.role}{kind}]\n{message.content}")
    for number, turn in enumerate(trajectory.turns):
        extras = []
        if turn.prefill:
            extras.append(f"prefill={turn.prefill!r}")
        extras.append(f"finish={turn.finish_reason}")
        if turn.tool_calls:
            extras.append("tool_calls=" + json.dumps([c.__dict__ for c in turn.tool_calls], default=str))
        if turn.parse_error:
            extras.append(f"parse_error={turn.parse_error!r}")
        lines.append(f"--- turn {number}: " + " ".join(extras))
    return "\n".join(lines) + "\n"


class RunView:
    """The files, generated on demand from the archive; `refresh()` picks up new prototypes."""

    def __init__(self, archive: Archive, search_task_ids: set[str] | None = None,
                 limits: ViewLimits | None = None):
        self.archive = archive
        self.search_task_ids = None if search_task_ids is None else set(search_task_ids)
        self.limits = limits or ViewLimits()
        self._files: dict[str, Callable[[], str]] = {}
        self._cache: dict[str, str] = {}
        self.refresh()

    # ---- building the tree ----------------------------------------------------------------
    def _allowed(self, task_id: str) -> bool:
        return self.search_task_ids is None or task_id in self.search_task_ids

    def refresh(self) -> None:
        files: dict[str, Callable[[], str]] = {"README.md": self._readme, "frontier.json": self._frontier,
                                               "evolution_summary.jsonl": self._evolution}
        for entry in self.archive.entries():
            base = f"candidates/{entry.id}"
            files[f"{base}/harness.py"] = lambda cid=entry.id: self.archive.source(cid)  # type: ignore[misc]
            files[f"{base}/summary.json"] = lambda cid=entry.id: self._summary(cid)  # type: ignore[misc]
            if entry.parent_ids:
                files[f"{base}/diff.txt"] = lambda cid=entry.id: self.archive.diff(cid) or "(no change)\n"  # type: ignore[misc]
            for version in sorted(entry.scores):
                files[f"{base}/w{version}/outcomes.jsonl"] = lambda cid=entry.id, v=version: self._outcomes(cid, v)  # type: ignore[misc]
                for k, traj in enumerate(self._trajectories(entry.id, version)):
                    path = f"{base}/w{version}/trajectories/{k:03d}_{_safe_name(traj.task_id)}.txt"
                    files[path] = lambda t=traj: render_trajectory(t)  # type: ignore[misc]
        root = Path(self.archive.root) / PROTOTYPES_DIR
        for folder in sorted(root.iterdir()) if root.is_dir() else []:
            summary_path = folder / "summary.json"
            if not summary_path.exists():  # killed before it finished: not a prototype run
                continue
            base = f"{PROTOTYPES_DIR}/{folder.name}"
            files[f"{base}/harness.py"] = lambda f=folder: (f / "harness.py").read_text(encoding="utf-8")  # type: ignore[misc]
            files[f"{base}/summary.json"] = lambda f=folder: self._prototype_summary(f)  # type: ignore[misc]
            for k, traj in enumerate(self._prototype_trajectories(folder)):
                name = f"{base}/trajectories/{k:03d}_{_safe_name(traj.task_id)}.txt"
                files[name] = lambda t=traj: render_trajectory(t)  # type: ignore[misc]
        self._files, self._cache = files, {}

    def paths(self) -> list[str]:
        return sorted(self._files)

    def content(self, path: str) -> str:
        path = path.strip().strip("/")
        if path not in self._files:
            raise KeyError(f"no file {path!r} in the run view; list_files shows what there is")
        if path not in self._cache:
            self._cache[path] = self._files[path]()
        return self._cache[path]

    def _trajectories(self, candidate_id: str, version: int) -> list[Trajectory]:
        return [t for t in self.archive.trajectories(candidate_id, version) if self._allowed(t.task_id)]

    def _outcomes(self, candidate_id: str, version: int) -> str:
        rows = [o for o in self.archive.outcomes(candidate_id, version) if self._allowed(o["task_id"])]
        return "".join(json.dumps(o, default=str, sort_keys=True) + "\n" for o in rows)

    def _prototype_trajectories(self, folder: Path) -> list[Trajectory]:
        path = folder / "trajectories.jsonl"
        if not path.exists():
            return []
        rows = read_jsonl_records(path)
        return [t for t in (Trajectory.from_json(r) for r in rows) if self._allowed(t.task_id)]

    def _prototype_summary(self, folder: Path) -> str:
        data = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        data["task_ids"] = [t for t in data.get("task_ids", []) if self._allowed(t)]
        data["outcomes"] = [o for o in data.get("outcomes", []) if self._allowed(o.get("task_id", ""))]
        return json.dumps(data, indent=1, default=str, sort_keys=True) + "\n"

    # ---- the generated files ----------------------------------------------------------------
    def stats(self, candidate_id: str, version: int) -> dict[str, Any]:
        """Score, format rate and mean turns of one evaluation (search-split records only)."""
        outcomes = [o for o in self.archive.outcomes(candidate_id, version) if self._allowed(o["task_id"])]
        n = len(outcomes)
        formats = [bool(o["flags"]["format_valid"]) for o in outcomes if "format_valid" in (o.get("flags") or {})]
        turns = [float(o["flags"]["turns"]) for o in outcomes if "turns" in (o.get("flags") or {})]
        failures: dict[str, int] = {}
        for o in outcomes:
            if not o["correct"]:
                mode = o["failure_mode"] or "unknown"
                failures[mode] = failures.get(mode, 0) + 1
        return {"score": sum(float(o["reward"]) for o in outcomes) / n if n else None, "n": n,
                "correct": sum(bool(o["correct"]) for o in outcomes),
                "format_rate": sum(formats) / len(formats) if formats else None,
                "mean_turns": sum(turns) / len(turns) if turns else None, "failure_counts": failures}

    def _summary(self, candidate_id: str) -> str:
        e = self.archive.entry(candidate_id)
        data = {"id": e.id, "seq": e.seq, "iteration": e.iteration, "proposer": e.proposer, "parents": e.parent_ids,
                "status": e.status, "failure_reason": e.failure_reason, "hypothesis": e.hypothesis,
                "mechanism": mechanism_of(e.change_summary), "change_summary": e.change_summary,
                "by_weights_version": {str(v): self.stats(e.id, v) for v in sorted(e.scores)}}
        return json.dumps(data, indent=1, default=str) + "\n"

    def _frontier(self) -> str:
        version = self.archive.latest_weights_version()
        board = self.archive.leaderboard(version) if version is not None else []
        rows = []
        for cid, _, _ in board:
            stats = self.stats(cid, version)  # type: ignore[arg-type]
            rows.append({"id": cid, **{k: stats[k] for k in ("score", "n", "correct", "format_rate", "mean_turns")}})
        accepted = self.archive.accepted() if len(self.archive) else None
        return json.dumps({"schema_version": SCHEMA_VERSION, "weights_version": version, "accepted": accepted,
                           "ranking": rows, "note": "search split, mean reward, one rollout per problem; ties go "
                           "to the earlier candidate"}, indent=1, default=str) + "\n"

    def _evolution(self) -> str:
        lines = []
        for e in self.archive.entries():
            row: dict[str, Any] = {"id": e.id, "seq": e.seq, "iteration": e.iteration, "proposer": e.proposer,
                                   "parents": e.parent_ids, "status": e.status,
                                   "mechanism": mechanism_of(e.change_summary), "hypothesis": e.hypothesis}
            if e.failure_reason:
                row["failure_reason"] = e.failure_reason[:300]
            for v in sorted(e.scores):
                stats = self.stats(e.id, v)
                row[f"w{v}"] = {k: stats[k] for k in ("score", "n", "format_rate", "mean_turns")}
            lines.append(json.dumps(row, default=str))
        return "\n".join(lines) + "\n"

    def _readme(self) -> str:
        return ("# The run, as the proposer sees it (read-only)\n"
                "frontier.json                 candidates ranked by search-split score at the newest weights\n"
                "evolution_summary.jsonl       one row per candidate: score, format rate, turns, mechanism, "
                "hypothesis\n"
                "candidates/<id>/harness.py    its complete source\n"
                "candidates/<id>/summary.json  lineage, status, hypothesis, failure counts per weights version\n"
                "candidates/<id>/diff.txt      its diff against its first parent\n"
                "candidates/<id>/w<v>/outcomes.jsonl          per-problem outcome under weights version v\n"
                "candidates/<id>/w<v>/trajectories/<k>_<task>.txt  every search trajectory, rendered\n"
                f"{PROTOTYPES_DIR}/<p>/...          drafts run with the prototype tool, with their trajectories\n"
                "Only search-split problems appear here; the test split never does.\n")

    # ---- the tools ------------------------------------------------------------------------------
    def list_files(self, path: str = "", recursive: bool = False) -> str:
        prefix = path.strip().strip("/")
        prefix = prefix + "/" if prefix else ""
        entries: dict[str, set[str]] = {}
        for p in self.paths():
            if not p.startswith(prefix):
                continue
            rest = p[len(prefix):]
            if recursive or "/" not in rest:
                entries[rest] = set()
            else:
                head, tail = rest.split("/", 1)
                entries.setdefault(head + "/", set()).add(tail.split("/")[0])
        if not entries:
            if prefix.rstrip("/") in self._files:
                return f"{prefix.rstrip('/')} is a file; use read_file"
            return f"error: no directory {path!r} in the run view"
        names = sorted(entries)
        shown = names[:self.limits.list_entries]
        lines = [f"{n}  ({len(entries[n])} entries)" if n.endswith("/") else n for n in shown]
        if len(names) > len(shown):
            lines.append(f"[{len(names) - len(shown)} more entries not shown; list a subdirectory]")
        return "\n".join(lines)

    def read_file(self, path: str, offset: int = 0, max_bytes: int | None = None) -> str:
        text = self.content(path)
        limit = min(int(max_bytes or self.limits.read_bytes), self.limits.read_bytes)
        start = max(0, int(offset))
        part = text[start:start + limit]
        end = start + len(part)
        if start == 0 and end >= len(text):
            return part
        more = f"; call again with offset={end}" if end < len(text) else ""
        return part + f"\n[characters {start}-{end} of {len(text)}{more}]"

    def grep(self, pattern: str, path: str = "", max_matches: int | None = None) -> str:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            return f"error: bad regular expression: {exc}"
        prefix = path.strip().strip("/")
        limit = min(int(max_matches or self.limits.grep_matches), self.limits.grep_matches)
        out: list[str] = []
        for p in self.paths():
            if prefix and not (p == prefix or p.startswith(prefix + "/")):
                continue
            for number, line in enumerate(self.content(p).splitlines(), start=1):
                if regex.search(line):
                    if len(out) >= limit:
                        return "\n".join(out) + f"\n[stopped at {limit} matches; narrow the pattern or the path]"
                    out.append(f"{p}:{number}: {line[:self.limits.grep_line_chars]}")
        return "\n".join(out) if out else "no matches"
