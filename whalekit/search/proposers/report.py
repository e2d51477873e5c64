"""The text a proposer reads about the archive: leaderboard, failures grouped by failure
mode, rejected candidates with their reasons, diffs against parents, sample traces and,
after a weight update, which problems the new weights now solve or lose.

Why one renderer: the reflective proposer, the LLM agents' first message and a person
debugging a search all read the same report, so what one sees the others see.

    text = render_report(archive, weights_version=1)
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from whalekit.search.archive import Archive
    from whalekit.types import Trajectory


def failure_counts(archive: Archive, candidate_id: str, weights_version: int) -> Counter[str]:
    """How often each failure mode occurred in one candidate's evaluation."""
    return Counter(o["failure_mode"] or "unknown" for o in archive.outcomes(candidate_id, weights_version)
                   if not o["correct"])


def weight_change(archive: Archive, candidate_id: str, old: int, new: int) -> dict[str, list[str]]:
    """Task ids the new weights solve that the old did not, and the reverse, for one harness."""
    before = {o["task_id"]: bool(o["correct"]) for o in archive.outcomes(candidate_id, old)}
    after = {o["task_id"]: bool(o["correct"]) for o in archive.outcomes(candidate_id, new)}
    shared = before.keys() & after.keys()
    return {"now_solved": sorted(t for t in shared if after[t] and not before[t]),
            "now_lost": sorted(t for t in shared if before[t] and not after[t])}


def flag_summary(outcomes: list[dict[str, Any]]) -> dict[str, str]:
    """Behaviour flags over some outcomes: how many had each true flag, the mean of each number."""
    summary: dict[str, str] = {}
    keys = sorted({k for o in outcomes for k in (o.get("flags") or {})})
    for key in keys:
        values = [o["flags"][key] for o in outcomes if key in (o.get("flags") or {})]
        if all(isinstance(v, bool) for v in values):
            summary[key] = f"{sum(values)}/{len(values)}"
        elif all(isinstance(v, (int, float)) for v in values):
            summary[key] = f"mean {sum(values) / len(values):.2f}"
    return summary


CUT_MARKER = re.compile(r"\[… \d+ chars cut …\]")  # what `cut_middle` writes where it cut


def cut_middle(text: str, limit: int) -> str:
    """`text` in about `limit` characters: its head and its tail, the cut marked with how much
    it left out. Why the tail: a failing reply ends with what failed (the unclosed tag, the
    wrong answer, the illegal move), which a head-only cut never shows."""
    if len(text) <= limit:
        return text
    keep = max(limit - len(f" [… {len(text)} chars cut …] "), 0)
    tail = keep // 2
    marker = f" [… {len(text) - keep} chars cut …] "
    return text[:keep - tail] + marker + (text[len(text) - tail:] if tail else "")


def episode_text(trajectory: Trajectory, limit: int, indent: str = "", min_share: int = 120) -> str:
    """One episode as a proposer reads it, in about `limit` characters: every message but the
    system prompt and the few-shot examples (the harness source holds both), each cut in its
    middle to an equal share; when
    the shares would fall below `min_share`, the first user message and the last messages are
    kept and the middle ones counted; then how the episode ended (the harness's final answer,
    its error). Why: the failure shows in the model's last replies and the ending, which a cut
    of the whole episode's head left out whenever the prompt was long (a chess position's legal
    moves fill 700 characters)."""
    messages = [m for m in trajectory.messages if m.role != "system" and m.kind != "few_shot"]
    ending = f"{indent}[end] final answer: {trajectory.final_answer!r}" + (
        f"; error: {cut_middle(trajectory.error, 200)}" if trajectory.error else "")
    budget = max(limit - len(ending), min_share)
    fits = max(budget // min_share, 2)
    left_out = 0
    if len(messages) > fits:  # the question, then the end of the episode
        left_out = len(messages) - fits
        messages = messages[:1] + messages[1 + left_out:]
    share = budget // max(len(messages), 1)
    lines = []
    for index, m in enumerate(messages):
        label = f"{m.role}{'/' + m.kind if m.kind != 'text' else ''}"
        lines.append(f"{indent}[{label}] {cut_middle(m.content, max(share - len(label) - 3, 40))}")
        if index == 0 and left_out:
            lines.append(f"{indent}[… {left_out} message{'s' if left_out > 1 else ''} left out …]")
    return "\n".join([*lines, ending])


def _trace(archive: Archive, candidate_id: str, version: int, task_id: str, limit: int = 600) -> str:
    for traj in archive.trajectories(candidate_id, version):
        if traj.task_id == task_id:
            return episode_text(traj, limit, indent="    ")
    return "    (trace not stored)"


def render_report(archive: Archive, weights_version: int | None = None, top: int = 5, failures_per_mode: int = 3,
                  max_diff_lines: int = 40) -> str:
    version = archive.latest_weights_version() if weights_version is None else weights_version
    out: list[str] = [f"# Harness archive ({archive.domain}): {len(archive)} candidates, weights version {version}"]
    board = archive.leaderboard(version) if version is not None else []
    out.append("\n## Leaderboard (search split, mean reward)")
    if not board:
        out.append("(nothing evaluated yet)")
    for rank, (cid, score, n) in enumerate(board[:top], start=1):
        entry = archive.entry(cid)
        counts = failure_counts(archive, cid, version) if version is not None else Counter()
        modes = ", ".join(f"{m}={c}" for m, c in counts.most_common()) or "none"
        status = f" [{entry.status}: {entry.failure_reason[:80]}]" if entry.failure_reason else ""
        out.append(f"{rank}. {cid} score={score:.3f} (n={n}) parents={entry.parent_ids or '-'}{status}\n"
                   f"   hypothesis: {entry.hypothesis}\n   failures: {modes}")
    invalid = [e for e in archive.entries() if e.status == "invalid"]
    if invalid:
        out.append("\n## Rejected by validation (never run)")
        out.extend(f"- {e.id}: {e.failure_reason}" for e in invalid[-5:])
    if board and version is not None:
        best = board[0][0]
        out.append(f"\n## Failures of the best candidate {best}, grouped by failure mode")
        grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for o in archive.outcomes(best, version):
            if not o["correct"]:
                grouped[o["failure_mode"] or "unknown"].append(o)
        flags = flag_summary([o for rows in grouped.values() for o in rows])
        if flags:
            out.append("behaviour flags over these failures: " + ", ".join(f"{k}={v}" for k, v in flags.items()))
        for mode, rows in sorted(grouped.items(), key=lambda kv: -len(kv[1])):
            out.append(f"### {mode}: {len(rows)} tasks")
            for o in rows[:failures_per_mode]:
                out.append(f"- task {o['task_id']}: answer={o['final_answer']!r} error={o['error']!r}")
                out.append(_trace(archive, best, version, o["task_id"]))
        older = sorted(v for v in archive.entry(best).scores if v < version)
        if older:
            change = weight_change(archive, best, older[-1], version)
            out.append(f"\n## Weight update {older[-1]} -> {version} under {best}")
            out.append(f"now solved: {change['now_solved'] or 'none'}\nnow lost: {change['now_lost'] or 'none'}")
        for cid, _, _ in board[:top]:
            diff = archive.diff(cid)
            if diff:
                lines = diff.splitlines()
                cut = "\n…" if len(lines) > max_diff_lines else ""
                out.append(f"\n## Diff of {cid} against its parent\n" + "\n".join(lines[:max_diff_lines]) + cut)
    return "\n".join(out)
