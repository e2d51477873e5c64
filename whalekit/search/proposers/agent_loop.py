"""The agent loop the LLM proposers share: the model gets the harness contract, the
domain's rules and the archive report, then works in the run directory through tools
(list, read and grep the read-only run view; prototype a draft on a few search problems;
write a candidate) until it has written its M candidates, each with its hypothesis and
the one mechanism it changes.

Why one session object with thin backends: the Anthropic and OpenAI proposers differ only
in wire format (content blocks vs tool_calls) and Claude Code runs its own loop, so the
tools, the prompt, the ledger, the rule checks and the spend cap live in `Session` once;
a backend only converts messages and reports tokens. `write_candidate` runs the static
validation, the domain's rules and any restriction (e.g. prompt-only) at once and answers
with the reason, so the model can fix a candidate in the same session.

    proposer = AnthropicProposer(domain, AgentConfig(model="claude-sonnet-4-6", candidates_per_session=3))
    proposer.prototyper = Prototyper(domain, sampler, splits.search, budget, archive.root)   # optional
    candidates = proposer.propose(archive, n=3, budget=budget)
"""

from __future__ import annotations

import json
import os
import time
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from whalekit import harness
from whalekit.episode import harness_id
from whalekit.sandbox.isolation import ALLOWED_IMPORTS, validate_source
from whalekit.search.proposers.base import Candidate, Proposer
from whalekit.search.proposers.ledger import Ledger, cost_usd
from whalekit.search.proposers.report import render_report
from whalekit.search.proposers.rules import DomainRules, rules_for
from whalekit.search.proposers.runview import RunView

if TYPE_CHECKING:
    from whalekit.domains.base import Domain
    from whalekit.rollouts.budget import RolloutBudget
    from whalekit.search.archive import Archive
    from whalekit.search.proposers.prototype import Prototyper


@dataclass
class AgentConfig:
    model: str  # model name at the endpoint
    max_turns: int = 30  # model round trips per session
    max_tokens: int = 8192  # output token limit per model response
    effort: str | None = None  # reasoning effort ("low" | "medium" | "high" | "max"), sent only when set
    max_retries: int = 4  # SDK retries with exponential backoff on 429 / 5xx / connection errors
    timeout_s: float = 300.0  # per HTTP request
    candidates_per_session: int | None = None  # M written per session (paper: 3); None: what the search asks
    require_prototype: bool = False  # write_candidate refuses a source not run with the prototype tool first
    prototype_problems: int = 2  # default n of one prototype call (the prototyper caps it)
    max_cost_usd: float | None = None  # stop proposing once the ledger shows this much spent (priced models)
    max_total_tokens: int | None = None  # the same cap in tokens in + out, for unpriced (local) models
    price_per_mtok: tuple[float, float] | None = None  # (input, output) USD per million tokens, overrides the table

    def __post_init__(self) -> None:
        if not self.model or self.max_turns < 1 or self.max_tokens < 1 or self.max_retries < 0 or self.timeout_s <= 0:
            raise ValueError("AgentConfig needs a model, max_turns/max_tokens >= 1, max_retries >= 0, timeout_s > 0")
        if (self.candidates_per_session is not None and self.candidates_per_session < 1) \
                or self.prototype_problems < 1:
            raise ValueError("candidates_per_session and prototype_problems must be >= 1")
        if (self.max_cost_usd is not None and self.max_cost_usd < 0) or \
                (self.max_total_tokens is not None and self.max_total_tokens < 0):
            raise ValueError("spend caps must be non-negative")
        if self.price_per_mtok is not None:
            self.price_per_mtok = (float(self.price_per_mtok[0]), float(self.price_per_mtok[1]))

    def cost(self, tokens_in: int, tokens_out: int) -> float | None:
        if self.price_per_mtok is not None:
            return (tokens_in * self.price_per_mtok[0] + tokens_out * self.price_per_mtok[1]) / 1e6
        return cost_usd(self.model, tokens_in, tokens_out)


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


_STR = {"type": "string"}
TOOLS: list[dict[str, Any]] = [
    {"name": "list_files", "description": "List a directory of the read-only run view (start with the root: "
                                          "README.md, frontier.json, evolution_summary.jsonl, candidates/).",
     "parameters": {"type": "object", "properties": {"path": _STR, "recursive": {"type": "boolean"}}}},
    {"name": "read_file", "description": "Read a file of the run view; long files come in pages (offset).",
     "parameters": {"type": "object", "properties": {"path": _STR, "offset": {"type": "integer"}},
                    "required": ["path"]}},
    {"name": "grep", "description": "Regular-expression search over the run view's files (optionally under a "
                                    "path); returns path:line: text, a bounded number of matches.",
     "parameters": {"type": "object", "properties": {"pattern": _STR, "path": _STR,
                                                     "max_matches": {"type": "integer"}},
                    "required": ["pattern"]}},
    {"name": "prototype", "description": "Run a draft harness module on n search problems (or on the named "
                                         "search task ids) with the current model, in the sandbox. Costs n "
                                         "rollouts of the shared budget; returns the outcomes and traces.",
     "parameters": {"type": "object", "properties": {"source": _STR, "n": {"type": "integer"},
                                                     "task_ids": {"type": "array", "items": _STR}},
                    "required": ["source"]}},
    {"name": "write_candidate", "description": "Submit a complete new harness module. It is validated and checked "
                                               "against the domain's rules at once; the reply says whether it was "
                                               "accepted or why not.",
     "parameters": {"type": "object", "properties": {
         "source": {"type": "string", "description": "the complete Python module"},
         "hypothesis": {"type": "string", "description": "why it should score higher, one or two sentences"},
         "mechanism": {"type": "string", "description": "the one mechanism it changes, a short name"},
         "parent_ids": {"type": "array", "items": _STR},
         "change_summary": _STR},
        "required": ["source", "hypothesis", "mechanism"]}},
]


def tool_specs(prototype: bool) -> list[dict[str, Any]]:
    return [t for t in TOOLS if prototype or t["name"] != "prototype"]


def system_prompt(domain: Domain, n: int, rules: DomainRules | None = None, prototype: bool = False,
                  require_prototype: bool = False) -> str:
    rules = rules or rules_for(domain)
    mechanisms = ", ".join(getattr(m, "name", str(m)) for m in domain.mechanisms()) if \
        hasattr(domain, "mechanisms") else ""
    proto = ("Before you submit, try drafts with the prototype tool: it runs a draft on a few search problems "
             "with the current model and shows the traces (each problem costs one rollout of the shared budget). "
             + ("A candidate that was not prototyped in this session is refused. " if require_prototype else "")
             ) if prototype else ""
    return (
        "You improve the harness of a small language model agent: the Python code that writes its prompts, "
        "parses its replies, calls tools and decides when to stop. The model's weights are fixed while you "
        f"work. Domain: {domain.name}. Tools the harness may call: {domain.tools_description or 'none'}. "
        f"Failure modes reported: {', '.join(domain.failure_modes)}.\n\n"
        "The run directory is yours to read through list_files, read_file and grep: every candidate's source, "
        "summary, per-problem outcomes and every search trajectory, the frontier and an evolution summary. "
        "Read the failures of the best candidates before you choose what to change. " + proto +
        f"Then call write_candidate exactly {n} times, with {n} distinct, complete harness modules; each "
        "changes one mechanism (name it) and states its hypothesis."
        + (f" Mechanisms tried in this domain so far include: {mechanisms}." if mechanisms else "") +
        "\n\nRules of this domain:\n" + rules.prompt() + "\n\nCode rules: exactly one Harness subclass; imports "
        f"only from {', '.join(ALLOWED_IMPORTS)}; no eval/exec/open/getattr or dunder attributes. Scores are "
        "mean verifier reward on the search split, one rollout per problem.\n\n"
        "The harness contract:\n" + (harness.__doc__ or ""))


class Session:
    """One proposer session: the tools the model calls, and its ledger records."""

    def __init__(self, proposer: AgentProposer, archive: Archive, n: int, budget: RolloutBudget | None = None):
        self.proposer, self.archive, self.n, self.budget = proposer, archive, n, budget
        self.config = proposer.config
        self.ledger = proposer.ledger or Ledger.for_archive(archive)
        self.name = proposer.name
        self.call = self.ledger.next_call(self.name)
        self.prototyper = proposer.prototyper
        ids = getattr(self.prototyper, "task_ids", None)
        self.search_task_ids = set(ids) if ids is not None else proposer.search_task_ids
        self.view = RunView(archive, self.search_task_ids)
        self.rules = rules_for(proposer.domain)
        self.written: list[Candidate] = []
        self.prototyped: set[str] = set()
        self.prototype_runs = self.prototype_rollouts = 0
        self.tokens_in = self.tokens_out = 0
        self.cost: float | None = 0.0
        self._mark = (0, 0, 0.0)  # tokens and cost when the last candidate was written
        self.started = time.perf_counter()
        self.stopped: str | None = None
        if self.prototyper is not None:
            self.prototyper.session = {"proposer": self.name, "call": self.call}

    # ---- what the model is told -----------------------------------------------------------
    def system(self) -> str:
        return system_prompt(self.proposer.domain, self.n, self.rules, self.prototyper is not None,
                             self.config.require_prototype)

    def user(self) -> str:
        left = f" The shared rollout budget has {self.budget.remaining} rollouts left." if self.budget else ""
        return (render_report(self.archive) + f"\n\nThe run view's README.md says where everything is. Write {self.n} "
                f"new candidates with write_candidate.{left}")

    def tools(self) -> list[dict[str, Any]]:
        return tool_specs(self.prototyper is not None)

    # ---- ledger and spend ---------------------------------------------------------------------
    def begin(self) -> None:
        self.ledger.record(self.name, self.call, "prompt", model=self.config.model, system=self.system(),
                           user=self.user(), tools=[t["name"] for t in self.tools()], asked=self.n)

    def over_cap(self) -> str | None:
        """Why the proposer may not spend more (the caps count every session in the ledger)."""
        cap_cost, cap_tokens = self.config.max_cost_usd, self.config.max_total_tokens
        if cap_cost is None and cap_tokens is None:
            return None
        totals = self.ledger.totals().get(self.name, {})
        if cap_cost is not None and (totals.get("cost_usd") or 0.0) >= cap_cost:
            return f"cost_cap: ${totals.get('cost_usd') or 0.0:.4f} spent of ${cap_cost:.4f}"
        if cap_tokens is not None and totals.get("tokens_in", 0) + totals.get("tokens_out", 0) >= cap_tokens:
            return f"token_cap: {totals.get('tokens_in', 0) + totals.get('tokens_out', 0)} tokens of {cap_tokens}"
        return None

    def record_response(self, turn: int, reply: AssistantTurn, cost: float | None = None,
                        priced: bool = False) -> None:
        """`priced`: the backend computed `cost` itself (Claude Code); else the price table is used."""
        cost = cost if priced else self.config.cost(reply.tokens_in, reply.tokens_out)
        self.tokens_in += reply.tokens_in
        self.tokens_out += reply.tokens_out
        self.cost = None if cost is None or self.cost is None else self.cost + cost
        self.ledger.record(self.name, self.call, "response", turn=turn, text=reply.text,
                           tool_uses=[u.__dict__ for u in reply.tool_uses], tokens_in=reply.tokens_in,
                           tokens_out=reply.tokens_out, cost_usd=cost)

    def finish(self, stopped: str | None = None) -> list[Candidate]:
        self.stopped = self.stopped or stopped
        if self.stopped and self.stopped.split(":")[0] in ("cost_cap", "token_cap"):
            self.ledger.record(self.name, self.call, "stopped", reason=self.stopped)
        self.ledger.record(self.name, self.call, "session", model=self.config.model, written=len(self.written),
                           asked=self.n, tokens_in=self.tokens_in, tokens_out=self.tokens_out, cost_usd=self.cost,
                           wall_s=time.perf_counter() - self.started, stopped=self.stopped,
                           prototype_runs=self.prototype_runs, prototype_rollouts=self.prototype_rollouts,
                           candidate_ids=[harness_id(c.source) for c in self.written])
        return self.written

    # ---- the tools ------------------------------------------------------------------------------
    def run(self, name: str, arguments: dict[str, Any], turn: int = 0, use_id: str = "") -> str:
        methods: dict[str, Callable[..., str]] = {
            "list_files": self.view.list_files, "read_file": self.view.read_file, "grep": self.view.grep,
            "write_candidate": self.write_candidate}
        if self.prototyper is not None:
            methods["prototype"] = self.prototype
        method = methods.get(name)
        if method is None:
            output = f"error: unknown tool {name!r}; available: {', '.join(methods)}"
        else:
            try:
                output = method(**arguments)
            except (KeyError, TypeError, ValueError) as exc:
                output = f"error: {type(exc).__name__}: {exc}"
        self.ledger.record(self.name, self.call, "tool_result", turn=turn, tool=name, id=use_id,
                           arguments={k: (v if k != "source" else f"<{len(str(v))} chars>")
                                      for k, v in arguments.items()}, output=output)
        return output

    def prototype(self, source: str, n: int | None = None, task_ids: list[str] | None = None) -> str:
        assert self.prototyper is not None
        run = self.prototyper(source, int(n or self.config.prototype_problems), task_ids)
        if run.prototype_id is not None:
            self.prototyped.add(run.harness_id)
            self.prototype_runs += 1
            self.prototype_rollouts += len(run.trajectories)
            self.view.refresh()
        return run.report()

    def write_candidate(self, source: str, hypothesis: str = "", mechanism: str = "",
                        parent_ids: list[str] | None = None, change_summary: str = "") -> str:
        if len(self.written) >= self.n:
            return f"rejected: you already wrote {self.n} candidates; end the session"
        if not str(hypothesis).strip():
            return "rejected: state the hypothesis (why this change should score higher)"
        mechanism = str(mechanism).strip()
        if not mechanism:
            return "rejected: name the one mechanism this candidate changes"
        if any(sep in mechanism for sep in (" + ", ",", ";", " and ")):
            return f"rejected: {mechanism!r} names several mechanisms; change one per candidate"
        parents = list(parent_ids or [self.archive.accepted()])
        unknown = [p for p in parents if p not in self.archive]
        if unknown:
            return f"rejected: unknown parent ids {unknown}"
        candidate = Candidate(source, parents, str(hypothesis).strip(), f"mechanism: {mechanism}"
                              + (f"; {change_summary}" if change_summary else ""), {"mechanism": mechanism})
        problem = validate_source(source)
        if problem is None and self.proposer.check is not None:
            problem = self.proposer.check(candidate, self.archive)
        if problem is None:
            problem = self.rules.check(source, self.archive.source(parents[0]), self.search_task_ids)
        if problem is None and (harness_id(source) in self.archive
                                or any(harness_id(c.source) == harness_id(source) for c in self.written)):
            problem = "this exact source is already in the archive"
        if problem is None and self.config.require_prototype and self.prototyper is not None \
                and harness_id(source) not in self.prototyped:
            problem = "run this exact source with the prototype tool first"
        if problem:
            return f"rejected: {problem}"
        self.written.append(candidate)
        tokens_in, tokens_out, cost = self._mark
        self.ledger.record(self.name, self.call, "candidate", id=harness_id(source), parents=parents,
                           hypothesis=candidate.hypothesis, mechanism=mechanism,
                           tokens_in=self.tokens_in - tokens_in, tokens_out=self.tokens_out - tokens_out,
                           cost_usd=None if self.cost is None else self.cost - cost)
        self._mark = (self.tokens_in, self.tokens_out, self.cost or 0.0)
        return f"accepted as {harness_id(source)} ({len(self.written)} of {self.n} written)"


class AgentProposer(Proposer):
    """The shared loop; subclasses supply `_backend()` for their SDK. The search stage may
    set `prototyper` (a `whalekit.search.proposers.prototype.Prototyper`) before each session; the
    run view then shows only its search tasks' records."""

    def __init__(self, domain: Domain, config: AgentConfig, ledger: Ledger | None = None,
                 prototyper: Prototyper | None = None, search_task_ids: set[str] | None = None):
        self.domain, self.config, self.ledger = domain, config, ledger
        self.prototyper = prototyper
        self.search_task_ids = search_task_ids
        self.check: Callable[[Candidate, Archive], str | None] | None = None  # set by restrictions

    def session_size(self, n: int) -> int:
        return self.config.candidates_per_session or n

    @abstractmethod
    def _backend(self) -> Any:
        """An object with start(system, user, tools), step() -> AssistantTurn, add_tool_results(pairs),
        nudge(text)."""

    def propose(self, archive: Archive, n: int, budget: RolloutBudget | None = None) -> list[Candidate]:
        backend = self._backend()  # raises ProposerError before anything is logged when no key is set
        session = Session(self, archive, self.session_size(n), budget)
        capped = session.over_cap()
        session.begin()
        if capped:
            return session.finish(capped)
        backend.start(session.system(), session.user(), session.tools())
        for turn in range(self.config.max_turns):
            capped = session.over_cap()
            if capped:
                return session.finish(capped)
            reply = backend.step()
            session.record_response(turn, reply)
            if not reply.tool_uses:
                if len(session.written) >= session.n:
                    break
                backend.nudge(f"You have written {len(session.written)} of {session.n} candidates; "
                              "continue with the tools and call write_candidate.")
                continue
            results = [(use.id, session.run(use.name, use.arguments, turn, use.id)) for use in reply.tool_uses]
            backend.add_tool_results(results)
            if len(session.written) >= session.n:
                break
        else:
            return session.finish("max_turns" if len(session.written) < session.n else None)
        return session.finish()


class HostedAgentProposer(AgentProposer):
    """An agent proposer whose model sits behind an API: an API key and an endpoint, each
    given as an argument or else read from the environment (`key_variable`, `url_variable`)."""

    default_model = ""  # the model when no config is given
    key_variable = ""  # the environment variable holding the API key
    url_variable = ""  # the environment variable holding the endpoint (unset: the SDK's default)

    def __init__(self, domain: Domain, config: AgentConfig | None = None, api_key: str | None = None,
                 base_url: str | None = None, ledger: Ledger | None = None):
        super().__init__(domain, config or AgentConfig(model=self.default_model), ledger)
        self.api_key, self.base_url = api_key, base_url

    def key(self) -> str | None:
        return self.api_key or os.environ.get(self.key_variable)

    def endpoint(self) -> str | None:
        return self.base_url or os.environ.get(self.url_variable)


def transcript(ledger: Ledger, proposer: str | None = None, call: int | None = None) -> list[str]:
    """The tool calls of logged sessions, in order: `name(arguments) -> first line of the output`."""
    lines = []
    for event in ledger.events():
        if event["kind"] != "tool_result" or (proposer and event["proposer"] != proposer) \
                or (call is not None and event["call"] != call):
            continue
        args = json.dumps(event.get("arguments", {}), default=str)[:120]
        first = str(event.get("output", "")).splitlines()[0][:100] if event.get("output") else ""
        lines.append(f"{event['tool']}({args}) -> {first}")
    return lines
