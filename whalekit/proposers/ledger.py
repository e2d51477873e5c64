"""The proposer ledger: every proposer call, logged as JSONL in the run directory, so a
search session can be read back turn by turn and its token/cost spend reported beside
the rollouts it cost.

Why append-only JSONL: a call is logged while it happens; a kill loses at most the line
being written (a torn last line is skipped on reading, any other bad line is an error
naming the file and line).

    ledger = Ledger(archive.root / "proposer_ledger.jsonl")
    ledger.record("anthropic", call=0, kind="response", tokens_in=900, tokens_out=300); ledger.totals()
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

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
    def for_archive(cls, archive: Any) -> Ledger:
        return cls(Path(archive.root) / "proposer_ledger.jsonl")

    def record(self, proposer: str, call: int, kind: str, **data: Any) -> None:
        """Append one event: kind is "prompt", "response", "tool_call", "tool_result",
        "candidate", "error" or "summary"; tokens_in/tokens_out/cost_usd where known."""
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
        lines = self.path.read_text(encoding="utf-8").split("\n")
        rows = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if number == len(lines):  # the last line, torn by a kill: it never finished
                    break
                raise ValueError(f"{self.path}: line {number}: malformed ledger row ({exc.msg})") from exc
        return rows

    def next_call(self, proposer: str) -> int:
        calls = [e["call"] for e in self.events() if e["proposer"] == proposer]
        return max(calls) + 1 if calls else 0

    def totals(self) -> dict[str, Any]:
        """Tokens in/out and cost per proposer, and the number of calls; for the run report."""
        out: dict[str, Any] = {}
        for event in self.events():
            entry = out.setdefault(event["proposer"], {"calls": set(), "tokens_in": 0, "tokens_out": 0,
                                                       "cost_usd": 0.0, "cost_known": True})
            entry["calls"].add(event["call"])
            if event["kind"] == "response":
                entry["tokens_in"] += int(event.get("tokens_in") or 0)
                entry["tokens_out"] += int(event.get("tokens_out") or 0)
                if event.get("cost_usd") is None:
                    entry["cost_known"] = False
                else:
                    entry["cost_usd"] += float(event["cost_usd"])
        for entry in out.values():
            entry["calls"] = len(entry["calls"])
            if not entry.pop("cost_known"):
                entry["cost_usd"] = None
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
