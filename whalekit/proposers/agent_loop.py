"""The agent loop both LLM proposers share: the model gets the harness contract and the
archive report, then works with tools over the archive (list and read candidates, read
failures and traces, write a candidate) until it has written M candidates.

Why one loop with thin backends: the Anthropic and OpenAI proposers differ only in wire
format (content blocks vs tool_calls), so the tools, the prompt, the ledger and the
stopping rule live here once; a backend only converts messages and reports tokens.
`write_candidate` runs the static validation (and any restriction, e.g. prompt-only) at
once and answers with the reason, so the model can fix a candidate in the same session.

    proposer = AnthropicProposer(domain, AgentConfig(model="claude-sonnet-4-6"))
    candidates = proposer.propose(archive, n=4)
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from whalekit.episode import harness_id
from whalekit.isolation import ALLOWED_IMPORTS, validate_source
from whalekit.proposers.base import Candidate, Proposer
from whalekit.proposers.ledger import Ledger, cost_usd
from whalekit.proposers.report import failure_counts

if TYPE_CHECKING:
    from whalekit.archive import Archive
    from whalekit.budget import RolloutBudget


@dataclass
class AgentConfig:
    model: str  # model name at the endpoint
    max_turns: int = 30  # model round trips per propose() call
    max_tokens: int = 8192  # output token limit per model response
    effort: str | None = None  # reasoning effort ("low" | "medium" | "high"), sent only when set
    max_retries: int = 4  # SDK retries with exponential backoff on 429 / 5xx / connection errors
    timeout_s: float = 300.0  # per HTTP request

    def __post_init__(self) -> None:
        if not self.model or self.max_turns < 1 or self.max_tokens < 1 or self.max_retries < 0 or self.timeout_s <= 0:
            raise ValueError("AgentConfig needs a model, max_turns/max_tokens >= 1, max_retries >= 0, timeout_s > 0")


@dataclass
class ToolUse:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class AssistantTurn:
    text: str
    tool_uses: list[ToolUse] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0


TOOLS: list[dict[str, Any]] = [
    {"name": "list_candidates", "description": "Leaderboard of all candidates: id, score, status, hypothesis.",
     "parameters": {"type": "object", "properties": {}}},
    {"name": "read_candidate", "description": "Full source, lineage, hypothesis and failure counts of a candidate.",
     "parameters": {"type": "object", "properties": {"candidate_id": {"type": "string"}},
                    "required": ["candidate_id"]}},
    {"name": "read_failures", "description": "Failed search tasks of a candidate with answers, errors and traces; "
                                             "optionally only one failure mode.",
     "parameters": {"type": "object", "properties": {"candidate_id": {"type": "string"},
                                                     "failure_mode": {"type": "string"},
                                                     "limit": {"type": "integer"}},
                    "required": ["candidate_id"]}},
    {"name": "write_candidate", "description": "Submit a complete new harness module. It is validated at once; "
                                               "the reply says whether it was accepted or why not.",
     "parameters": {"type": "object", "properties": {
         "source": {"type": "string", "description": "the complete Python module"},
         "parent_ids": {"type": "array", "items": {"type": "string"}},
         "hypothesis": {"type": "string", "description": "why it should score higher"},
         "change_summary": {"type": "string"}},
        "required": ["source", "hypothesis"]}},
]


def system_prompt(domain: Any, n: int) -> str:
    from whalekit import harness

    return (
        "You improve the harness of a small language model agent: the Python code that writes its prompts, "
        "parses its replies, calls tools and decides when to stop. The model's weights are fixed while you "
        f"work. Domain: {domain.name}. Tools the harness may call: {domain.tools_description or 'none'}. "
        f"Failure modes reported: {', '.join(domain.failure_modes)}.\n\n"
        f"Use the tools to study the archive, then call write_candidate exactly {n} times with distinct, "
        "complete harness modules, each with a one-sentence hypothesis. Rules: exactly one Harness subclass; "
        f"imports only from {', '.join(ALLOWED_IMPORTS)}; no eval/exec/open/getattr or dunder attributes. "
        "Scores are mean verifier reward on a held-out search split, one rollout per problem.\n\n"
        "The harness contract:\n" + (harness.__doc__ or ""))


class ArchiveTools:
    """The tools the agent calls; `check` adds a restriction beyond validation."""

    def __init__(self, archive: Archive, n: int, check: Callable[[Candidate, Archive], str | None] | None = None):
        self.archive, self.n, self.check = archive, n, check
        self.version = archive.latest_weights_version()
        self.written: list[Candidate] = []

    def run(self, name: str, arguments: dict[str, Any]) -> str:
        try:
            tools: dict[str, Callable[..., str]] = {
                "list_candidates": self.list_candidates, "read_candidate": self.read_candidate,
                "read_failures": self.read_failures, "write_candidate": self.write_candidate}
            method = tools[name]
        except KeyError:
            return f"error: unknown tool {name!r}"
        try:
            return method(**arguments)
        except (KeyError, TypeError, ValueError) as exc:
            return f"error: {type(exc).__name__}: {exc}"

    def list_candidates(self) -> str:
        rows = []
        for e in self.archive.entries():
            score = e.score(self.version) if self.version is not None else None
            rows.append(f"{e.id} score={'-' if score is None else f'{score:.3f}'} status={e.status} "
                        f"parents={e.parent_ids} hypothesis={e.hypothesis[:120]!r}"
                        + (f" reason={e.failure_reason[:160]!r}" if e.failure_reason else ""))
        return "\n".join(rows)

    def read_candidate(self, candidate_id: str) -> str:
        e = self.archive.entry(candidate_id)
        counts = dict(failure_counts(self.archive, candidate_id, self.version)) if self.version is not None else {}
        return json.dumps({"id": e.id, "parents": e.parent_ids, "hypothesis": e.hypothesis, "status": e.status,
                           "failure_reason": e.failure_reason, "scores": e.scores, "failure_counts": counts,
                           "source": self.archive.source(candidate_id)}, indent=1, default=str)

    def read_failures(self, candidate_id: str, failure_mode: str | None = None, limit: int = 5) -> str:
        if self.version is None:
            return "nothing evaluated yet"
        trajectories = {t.task_id: t for t in self.archive.trajectories(candidate_id, self.version)}
        out = []
        for o in self.archive.outcomes(candidate_id, self.version):
            if o["correct"] or (failure_mode and o["failure_mode"] != failure_mode):
                continue
            traj = trajectories.get(o["task_id"])
            trace = [f"[{m.role}] {m.content[:400]}" for m in traj.messages] if traj else []
            out.append({"task_id": o["task_id"], "failure_mode": o["failure_mode"], "answer": o["final_answer"],
                        "error": o["error"], "trace": trace})
            if len(out) >= int(limit):
                break
        return json.dumps(out, indent=1) if out else "no failures of that kind"

    def write_candidate(self, source: str, hypothesis: str, parent_ids: list[str] | None = None,
                        change_summary: str = "") -> str:
        if len(self.written) >= self.n:
            return f"rejected: you already wrote {self.n} candidates"
        parents = list(parent_ids or [self.archive.accepted()])
        unknown = [p for p in parents if p not in self.archive]
        if unknown:
            return f"rejected: unknown parent ids {unknown}"
        problem = validate_source(source)
        candidate = Candidate(source, parents, hypothesis, change_summary)
        if problem is None and self.check is not None:
            problem = self.check(candidate, self.archive)
        if problem is None and (harness_id(source) in self.archive
                                or any(harness_id(c.source) == harness_id(source) for c in self.written)):
            problem = "this exact source is already in the archive"
        if problem:
            return f"rejected: {problem}"
        self.written.append(candidate)
        return f"accepted as {harness_id(source)} ({len(self.written)} of {self.n} written)"


class AgentProposer(Proposer):
    """The shared loop; subclasses supply `_backend()` for their SDK."""

    def __init__(self, domain: Any, config: AgentConfig, ledger: Ledger | None = None):
        self.domain, self.config, self.ledger = domain, config, ledger
        self.check: Callable[[Candidate, Archive], str | None] | None = None  # set by restrictions

    @abstractmethod
    def _backend(self) -> Any:
        """An object with start(system, user), step() -> AssistantTurn, add_tool_results(pairs), nudge(text)."""

    def propose(self, archive: Archive, n: int, budget: RolloutBudget | None = None) -> list[Candidate]:
        backend = self._backend()  # raises ProposerError before anything is logged when no key is set
        ledger = self.ledger or Ledger.for_archive(archive)
        call = ledger.next_call(self.name)
        tools = ArchiveTools(archive, n, self.check)
        system = system_prompt(self.domain, n)
        left = f" The shared rollout budget has {budget.remaining} rollouts left." if budget is not None else ""
        user = archive.report() + f"\n\nWrite {n} new candidates with write_candidate.{left}"
        ledger.record(self.name, call, "prompt", model=self.config.model, system=system, user=user)
        backend.start(system, user)
        for turn in range(self.config.max_turns):
            reply = backend.step()
            ledger.record(self.name, call, "response", turn=turn, text=reply.text,
                          tool_uses=[u.__dict__ for u in reply.tool_uses], tokens_in=reply.tokens_in,
                          tokens_out=reply.tokens_out,
                          cost_usd=cost_usd(self.config.model, reply.tokens_in, reply.tokens_out))
            if not reply.tool_uses:
                if len(tools.written) >= n:
                    break
                backend.nudge(f"You have written {len(tools.written)} of {n} candidates; "
                              "continue with the tools and call write_candidate.")
                continue
            results = []
            for use in reply.tool_uses:
                output = tools.run(use.name, use.arguments)
                ledger.record(self.name, call, "tool_result", turn=turn, tool=use.name, id=use.id, output=output)
                results.append((use.id, output))
            backend.add_tool_results(results)
            if len(tools.written) >= n:
                break
        for candidate in tools.written:
            ledger.record(self.name, call, "candidate", id=harness_id(candidate.source),
                          parents=candidate.parent_ids, hypothesis=candidate.hypothesis)
        ledger.record(self.name, call, "summary", written=len(tools.written), asked=n)
        return tools.written
