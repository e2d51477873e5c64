"""The proposer ledger: every proposer call, logged as JSONL in the run directory, so a
search session can be read back turn by turn and its token/cost spend reported beside
the rollouts it cost.

Why append-only JSONL: a call is logged while it happens; a kill loses at most the line
being written (a torn last line is skipped on reading, any other bad line is an error
naming the file and line).

    ledger = Ledger(archive.root / "proposer_ledger.jsonl")
    ledger.record("anthropic", call=0, kind="response", tokens_in=900, tokens_out=300); ledger.totals()
    print(cost_report(archive))   # cost per accepted harness and per point of search-split gain
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from whalekit.infra.runs import read_jsonl_records
from whalekit.search.archive import Archive, archive_folders
from whalekit.search.proposers.base import ArchiveLike

SCHEMA_VERSION = 1

# USD per million tokens (input, output), for the models whose prices are published;
# unknown models (local vLLM servers) have no cost, only tokens.
PRICES_PER_MTOK: dict[str, tuple[float, float]] = {
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "gpt-4o": (2.5, 10.0),
    "gpt-4o-mini": (0.15, 0.6),
}


def cost_usd(model: str, tokens_in: int, tokens_out: int) -> float | None:
    """Price of one call, or None when the model's price is unknown (e.g. a local model)."""
    match = max((name for name in PRICES_PER_MTOK if model.startswith(name)), key=len, default=None)
    if match is None:
        return None
    price_in, price_out = PRICES_PER_MTOK[match]
    return (tokens_in * price_in + tokens_out * price_out) / 1e6


class Ledger:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    @classmethod
    def for_archive(cls, archive: ArchiveLike) -> Ledger:
        return cls(Path(archive.root) / "proposer_ledger.jsonl")

    def record(self, proposer: str, call: int, kind: str, **data: Any) -> None:
        """Append one event: kind is "prompt", "response", "tool_result", "candidate" (with
        the tokens and cost spent since the session's previous candidate), "stopped" (a
        spend cap), "error" or "session" (tokens, cost, wall time, candidates written);
        tokens_in/tokens_out/cost_usd where known."""
        row = {"schema_version": SCHEMA_VERSION, "time": time.time(), "proposer": proposer, "call": call,
               "kind": kind, **data}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row, default=str) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def events(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return read_jsonl_records(self.path)  # a last line torn by a kill is left out

    def next_call(self, proposer: str) -> int:
        calls = [e["call"] for e in self.events() if e["proposer"] == proposer]
        return max(calls) + 1 if calls else 0

    def totals(self) -> dict[str, Any]:
        """Tokens in/out and cost per proposer, and the number of calls; for the run report.
        A call whose CLI reported its own total (Claude Code's `cli_result`) costs that total."""
        out: dict[str, Any] = {}
        call_cost: dict[tuple[str, int], float | None] = {}
        cli_cost: dict[tuple[str, int], float] = {}
        for event in self.events():
            entry = out.setdefault(event["proposer"], {"calls": set(), "tokens_in": 0, "tokens_out": 0})
            entry["calls"].add(event["call"])
            key = (event["proposer"], event["call"])
            if event["kind"] == "response":
                entry["tokens_in"] += int(event.get("tokens_in") or 0)
                entry["tokens_out"] += int(event.get("tokens_out") or 0)
                known = call_cost.get(key, 0.0)
                call_cost[key] = None if known is None or event.get("cost_usd") is None \
                    else known + float(event["cost_usd"])
            elif event["kind"] == "cli_result" and event.get("total_cost_usd") is not None:
                cli_cost[key] = float(event["total_cost_usd"])
        call_cost.update(cli_cost)
        for name, entry in out.items():
            entry["calls"] = len(entry["calls"])
            costs = [c for (p, _), c in call_cost.items() if p == name]
            entry["cost_usd"] = None if any(c is None for c in costs) else sum(c for c in costs if c is not None)
        return out

    def replay(self, proposer: str | None = None, call: int | None = None) -> str:
        """A readable transcript of the logged calls."""
        lines = []
        for e in self.events():
            if (proposer and e["proposer"] != proposer) or (call is not None and e["call"] != call):
                continue
            body = {k: v for k, v in e.items() if k not in ("schema_version", "time", "proposer", "call", "kind")}
            lines.append(f"[{e['proposer']} #{e['call']} {e['kind']}] {json.dumps(body, default=str)[:2000]}")
        return "\n".join(lines)


def accepted_harnesses(archive: ArchiveLike) -> dict[int, list[str]]:
    """Per weights version, the candidates that became the accepted harness when they were
    scored: in arrival order, each one that beat every score before it (ties go to the
    earlier, as in the archive's leaderboard). The seed is the starting point, not counted."""
    out: dict[int, list[str]] = {}
    versions = sorted({v for e in archive.entries() for v in e.scores})
    seed = archive.seed_id()
    for version in versions:
        best = archive.entry(seed).score(version)
        adopted = []
        for entry in archive.entries():
            score = entry.score(version)
            if score is None or entry.id == seed:
                continue
            if best is None or score > best:
                best = score
                adopted.append(entry.id)
        out[version] = adopted
    return out


def search_gain(archive: ArchiveLike) -> tuple[int, float, float] | None:
    """(weights version, seed score, best score) at the newest version where the seed was scored."""
    seed = archive.entry(archive.seed_id())
    for version in sorted(seed.scores, reverse=True):
        board = archive.leaderboard(version)
        if board:
            return version, float(seed.score(version) or 0.0), float(board[0][1])
    return None


def cost_summary(archive: ArchiveLike, ledger: Ledger | None = None) -> dict[str, dict[str, Any]]:
    """Per LLM proposer: sessions, tokens, cost, wall time, candidates written / evaluated /
    accepted, prototype rollouts, stops, cost per accepted harness and per point of gain."""
    ledger = ledger or Ledger.for_archive(archive)
    accepted = {cid for ids in accepted_harnesses(archive).values() for cid in ids}
    gain = search_gain(archive)
    out: dict[str, dict[str, Any]] = {}
    for event in ledger.events():
        if event["kind"] != "session":
            continue
        row = out.setdefault(event["proposer"], {"sessions": 0, "tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0,
                                                 "wall_s": 0.0, "written": [], "prototype_rollouts": 0, "stops": []})
        row["sessions"] += 1
        row["tokens_in"] += int(event.get("tokens_in") or 0)
        row["tokens_out"] += int(event.get("tokens_out") or 0)
        row["cost_usd"] = None if row["cost_usd"] is None or event.get("cost_usd") is None \
            else row["cost_usd"] + float(event["cost_usd"])
        row["wall_s"] += float(event.get("wall_s") or 0.0)
        row["written"] += list(event.get("candidate_ids") or [])
        row["prototype_rollouts"] += int(event.get("prototype_rollouts") or 0)
        if event.get("stopped"):
            row["stops"].append(f"session {event['call']}: {event['stopped']}")
    for row in out.values():
        written = [cid for cid in row.pop("written") if cid in archive]
        row["written"] = len(written)
        row["evaluated"] = sum(1 for cid in written if archive.entry(cid).scores)
        mine = [cid for cid in written if cid in accepted]
        row["accepted"] = len(mine)
        row["accepted_ids"] = mine
        cost, tokens = row["cost_usd"], row["tokens_in"] + row["tokens_out"]
        row["cost_per_accepted_usd"] = cost / len(mine) if mine and cost is not None else None
        row["tokens_per_accepted"] = tokens / len(mine) if mine else None
        points = 100.0 * (gain[2] - gain[1]) if gain else 0.0
        row["gain_points"] = points
        row["cost_per_point_usd"] = cost / points if points > 0 and cost is not None else None
        row["tokens_per_point"] = tokens / points if points > 0 else None
    return out


def cost_report(archive: ArchiveLike, ledger: Ledger | None = None) -> str:
    """The proposer's cost beside what it bought, as `whalekit report` prints it."""
    summary = cost_summary(archive, ledger)
    if not summary:
        return "Proposer cost: no LLM proposer sessions in this run (the reflective proposer costs nothing)."
    gain = search_gain(archive)
    lines = ["Proposer cost (search split; cost in USD where the model's price is known)",
             f"{'proposer':<12}{'sessions':>9}{'tokens in':>11}{'tokens out':>11}{'cost':>10}{'wall s':>9}"
             f"{'written':>8}{'evaluated':>10}{'accepted':>9}"]
    for name, row in summary.items():
        cost = "-" if row["cost_usd"] is None else f"${row['cost_usd']:.4f}"
        lines.append(f"{name:<12}{row['sessions']:>9}{row['tokens_in']:>11}{row['tokens_out']:>11}{cost:>10}"
                     f"{row['wall_s']:>9.1f}{row['written']:>8}{row['evaluated']:>10}{row['accepted']:>9}")
    if gain:
        version, seed, best = gain
        lines.append(f"search-split gain at weights v{version}: h0 {seed:.3f} -> best {best:.3f} "
                     f"({100 * (best - seed):+.1f} points)")
    for name, row in summary.items():
        per = "-" if row["cost_per_accepted_usd"] is None else f"${row['cost_per_accepted_usd']:.4f}"
        per_point = "-" if row["cost_per_point_usd"] is None else f"${row['cost_per_point_usd']:.4f}"
        tok = "-" if row["tokens_per_accepted"] is None else f"{row['tokens_per_accepted']:.0f}"
        tok_point = "-" if row["tokens_per_point"] is None else f"{row['tokens_per_point']:.0f}"
        lines.append(f"{name}: cost per accepted harness {per} ({tok} tokens); per point of search-split gain "
                     f"{per_point} ({tok_point} tokens); prototype rollouts {row['prototype_rollouts']}")
        lines.extend(f"{name}: stopped in {stop}" for stop in row["stops"])
    return "\n".join(lines)


def run_cost_report(archive_root: str | Path, domain: str) -> str:
    """`cost_report` for every archive of a run (one per harness phase with
    `archive_scope: round`, each with its own ledger), as `whalekit report` prints it."""
    folders = archive_folders(archive_root)
    if not folders:
        return "Proposer cost: no archive in this run."
    parts = []
    for folder in folders:
        text = cost_report(Archive.open(folder, domain))
        parts.append(text if len(folders) == 1 else f"[{Path(folder).name}] {text}")
    return "\n".join(parts)
