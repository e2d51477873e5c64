"""The `local` proposer: a small coder model on this machine writes whole harness modules,
one request per candidate, validated and repaired in the same conversation.

Why a mode of its own beside the `openai` tool loop: a 1.5B model running on two CPU cores
(Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, through llama.cpp's OpenAI-compatible server:
`whalekit.search.proposers.local_server`) reads about 70 prompt tokens and writes about 20 tokens a second,
and loses the thread of a long multi-tool session. So it gets everything at once: the
harness contract, the parent's complete source, the search-split failure report, a few failing
search traces and, as ideas only, the catalogue's mechanism names with one line each (never
their code); it answers with one complete module and a `Hypothesis:` line. The validator's
or the domain rules' objection goes back to it as the next user turn, up to `max_repairs`
times. Every request and reply is stored by content hash in the run (`ResponseCache`), so a
resumed or re-made run replays the same candidates, and no server starts when every reply is
stored. Tokens, wall and CPU seconds of each call go to the run's proposer ledger.

The proposer sees the archive only: search-split outcomes and traces, never the test split.

    proposer = LocalCoderProposer(domain, LocalCoderConfig(), seed=0, run_dir=Path("runs/x"))
    candidates = proposer.propose(archive, n=2)      # starts the server on the first uncached request
    proposer.close()
"""

from __future__ import annotations

import ast
import atexit
import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whalekit import harness
from whalekit.domains.mechanisms import Mechanism, apply_mechanism
from whalekit.episode import harness_id
from whalekit.sandbox.isolation import ALLOWED_IMPORTS, validate_source
from whalekit.search.proposers.base import Candidate, Proposer, ProposerError
from whalekit.search.proposers.ledger import Ledger
from whalekit.search.proposers.local_models import proposer_model_path
from whalekit.search.proposers.local_server import ServerOptions, ServerProcess, start_llama_server
from whalekit.search.proposers.novelty import added_statements, novel_statements
from whalekit.search.proposers.report import CUT_MARKER, episode_text, render_report
from whalekit.search.proposers.response_cache import ResponseCache
from whalekit.search.proposers.rules import rules_for

if TYPE_CHECKING:
    from whalekit.domains.base import Domain
    from whalekit.rollouts.budget import RolloutBudget
    from whalekit.search.archive import Archive

# a fence closes only on a line of its own: a harness's own strings may hold ``` (math's parser does)
CODE_BLOCK = re.compile(r"^[ \t]*```(?:python|py)?[ \t]*\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)
HYPOTHESIS = re.compile(r"^[\s*_#>-]*hypothesis[\s*_]*:[\s*_]*(.+)$", re.I | re.M)
# a hypothesis line the model put inside its code block (at the left margin): prose, not code
# (`hypothesis: '...'` parses as an annotation and would count as an added statement)
HYPOTHESIS_IN_CODE = re.compile(r"^(?:#[ \t]*)?hypothesis[ \t]*:[ \t]*(.+)\n?", re.I | re.M)
LINE_NUMBER = re.compile(r"\bline (\d+)\b")
OPEN_FENCE = re.compile(r"^[ \t]*```(?:python|py)?[ \t]*\n", re.M)
EDIT_MODES = ("hooks", "module")
ASK = {"module": "Reply with the complete module in one ```python block, then one line "
                 "`Hypothesis: <why it should score higher>`.",
       "hooks": "Reply with only the methods you change or add, each a complete `def` of the Harness class "
                "(with `self`), in one ```python block; imports or module-level helpers they need may come first. "
                "Every other part of the harness stays as it is. Then one line "
                "`Hypothesis: <why it should score higher>`."}
# complete(messages, request settings) -> {"text", "tokens_in", "tokens_out", "wall_s", "cpu_s"}
Complete = Callable[[list[dict[str, str]], dict[str, Any]], dict[str, Any]]


@dataclass
class LocalCoderConfig:
    model: str = "qwen2.5-coder-1.5b"  # a search.proposers.local_models spec (or any name a base_url server serves)
    base_url: str | None = None  # a running OpenAI-compatible server; None: start llama.cpp on `model`
    max_repairs: int = 2  # repair turns after a rejected module (validator or domain rules)
    max_tokens: int = 2048  # per reply: a complete module of the largest h0 is about 1,700 tokens
    temperature: float = 0.7
    top_p: float = 0.95
    report_chars: int = 2500  # the failure report, cut to this (a small model's context and patience)
    traces: int = 2  # failing search traces of the parent shown
    trace_chars: int = 700
    ideas: bool = True  # the catalogue's mechanisms as names and one line each (never their code)
    edit: str = "hooks"  # "hooks": the model writes only the methods it changes, spliced into the parent;
    # "module": it writes the whole module (a 1.5B model copying a 4k-character module garbles it: the benchmark)
    n_ctx: int = 8192  # the server's context
    n_threads: int | None = None  # the server's threads (None: every usable core)
    timeout_s: float = 1800.0  # per request

    def __post_init__(self) -> None:
        if self.max_repairs < 0 or self.max_tokens < 1 or not 0 <= self.temperature <= 2:
            raise ValueError("max_repairs >= 0, max_tokens >= 1 and temperature in [0, 2]")
        if self.edit not in EDIT_MODES:
            raise ValueError(f"edit must be one of {', '.join(EDIT_MODES)}, not {self.edit!r}")


def split_reply(text: str) -> tuple[str | None, str]:
    """(the last fenced code block, the hypothesis line) of a reply; None when no block. A
    `Hypothesis:` line written inside the block is taken out of the code (it is prose)."""
    blocks = CODE_BLOCK.findall(text)
    prose = CODE_BLOCK.sub("", text)
    found = HYPOTHESIS.search(prose)
    hypothesis = found.group(1).strip() if found else ""
    if blocks:
        code = blocks[-1]
        inside = HYPOTHESIS_IN_CODE.search(code)
        if inside is not None:
            hypothesis = hypothesis or inside.group(1).strip().strip("'\"")
            code = code[:inside.start()] + code[inside.end():]
        return code.strip() + "\n", hypothesis
    opened = list(OPEN_FENCE.finditer(text))
    if not opened:
        return None, hypothesis
    # a block the model never closed (the 1.5B model does so often: it goes straight on to
    # the Hypothesis line): the code runs to that line, or to the end of the reply
    code = text[opened[-1].end():]
    inside = HYPOTHESIS_IN_CODE.search(code)
    if inside is not None:
        hypothesis = hypothesis or inside.group(1).strip().strip("'\"")
        code = code[:inside.start()]
    return (code.strip() + "\n" if code.strip() else None), hypothesis


def quote_lines(problem: str, code: str, context: int = 2) -> str:
    """The lines a problem names ("line 32 ..."), numbered, with a marker on that line: a
    small model given only "syntax error at line 32" rewrites the same line again."""
    found = LINE_NUMBER.search(problem)
    lines = code.splitlines()
    if found is None or not 1 <= int(found.group(1)) <= len(lines):
        return ""
    at = int(found.group(1))
    shown = range(max(1, at - context), min(len(lines), at + context) + 1)
    return "\n".join(f"{'>>' if n == at else '  '} {n:3d} | {lines[n - 1]}" for n in shown)


def splice(code: str, parent_source: str) -> tuple[str | None, str | None]:
    """The parent with the model's edit applied: its `def`s taking `self` (or those of a
    Harness class it wrote out) replace or join the parent's methods, its assignments to a
    name the class has replace that attribute, and its imports, other functions and constants
    join the module (the AST edit catalogue mechanisms use). (source, None), or (None, why)."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return None, f"syntax error at line {exc.lineno} of your code: {exc.msg}"
    body = list(tree.body)
    classes = [n for n in body if isinstance(n, ast.ClassDef)]
    if classes:  # the model wrote (part of) the class out: take its members
        body = [n for n in body if not isinstance(n, ast.ClassDef)] + list(classes[0].body)
    parent_class = next((n for n in ast.parse(parent_source).body if isinstance(n, ast.ClassDef)), None)
    attributes_known = {t.id for n in (parent_class.body if parent_class else []) if isinstance(n, ast.Assign)
                        for t in n.targets if isinstance(t, ast.Name)}
    hooks = {n.name for n in (parent_class.body if parent_class else []) if isinstance(n, ast.FunctionDef)} | \
        {name for name in dir(harness.Harness) if not name.startswith("_")}
    methods, attributes, imports, module = {}, {}, [], []
    for node in body:
        if isinstance(node, ast.FunctionDef) and node.name in hooks and not (
                node.args.args and node.args.args[0].arg == "self"):
            return None, (f"`def {node.name}(...)` is named like the Harness method `{node.name}` but does not take "
                          f"`self`, so it would be a module function nobody calls: write it as `def {node.name}(self, "
                          "...)` to replace that method")
        if isinstance(node, ast.FunctionDef) and node.args.args and node.args.args[0].arg == "self":
            methods[node.name] = ast.unparse(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(ast.unparse(node))
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in attributes_known:
            attributes[node.targets[0].id] = ast.unparse(node.value)
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            module.append(ast.unparse(node))
    if not methods and not attributes:
        return None, "no method of the Harness class (a `def` taking `self`) or class attribute to change"
    edit = Mechanism("local-edit", "", (), methods, attributes, tuple(imports), "\n\n".join(module))
    try:
        return apply_mechanism(parent_source, edit), None
    except (ValueError, SyntaxError) as exc:
        return None, f"could not apply the edit to the harness: {exc}"


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def spliced_error(problem: str | None) -> bool:
    """Whether a problem's line number counts lines of the model's reply (a splice error), not
    of the assembled module."""
    return bool(problem) and "of your code" in str(problem)


def copied_cut(source: str, parent_source: str) -> str | None:
    """A problem when the module holds a trace's cut marker its parent does not: a small model
    copies a shortened message from a trace into a prompt string (a 1.5B coder did, in chess),
    which would send the policy the marker instead of the text."""
    new = set(CUT_MARKER.findall(source)) - set(CUT_MARKER.findall(parent_source))
    if not new:
        return None
    return (f"your code holds {sorted(new)[0]!r}, a mark where a trace was shortened for you: write the full text "
            "(the parent's source has every prompt in full)")


def _first_sentence(text: str, limit: int = 140) -> str:
    sentence = re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0]
    return sentence if len(sentence) <= limit else sentence[:limit - 1] + "…"


class LocalCoderProposer(Proposer):
    name = "local"

    def __init__(self, domain: Domain, config: LocalCoderConfig | None = None, seed: int = 0,
                 ledger: Ledger | None = None, run_dir: str | Path | None = None, complete: Complete | None = None):
        self.domain, self.config, self.seed = domain, config or LocalCoderConfig(), seed
        self.ledger, self.run_dir = ledger, Path(run_dir) if run_dir is not None else None
        self.rules = rules_for(domain)
        self._complete = complete  # tests inject a model; None: the server
        self._server: ServerProcess | None = None
        self._client: Any = None
        self.check: Callable[[Candidate, Archive], str | None] | None = None  # set by restrictions (prompt-only)
        # set by the search stage: one canned episode of a module in the sandbox (the stage's own
        # validation), so its error goes back to the model instead of failing the candidate later
        self.dry_run: Callable[[str], str | None] | None = None
        self._call = 0  # this session's number in the ledger

    # -- the prompt ----------------------------------------------------------------------
    def system_prompt(self) -> str:
        return (
            "You improve the harness of a small language model agent: the Python module that writes its prompts, "
            "parses its replies, calls tools and decides when to stop. The model's weights are fixed while you "
            f"work. Domain: {self.domain.name}. Tools: {self.domain.tools_description or 'none'}\n\n"
            "Rules of this domain:\n" + self.rules.prompt() + "\n\nCode rules: exactly one Harness subclass; "
            f"imports only from {', '.join(ALLOWED_IMPORTS)}; no eval, exec, open or dunder attributes.\n\n"
            "The harness contract:\n" + (harness.__doc__ or ""))

    def user_prompt(self, archive: Archive, parent: str, version: int | None) -> str:
        report = render_report(archive, version)
        if len(report) > self.config.report_chars:
            report = report[:self.config.report_chars] + "\n[report cut]"
        parts = [f"The current best harness ({parent}), complete:\n```python\n{archive.source(parent).rstrip()}\n```",
                 f"What happened on the search problems:\n{report}"]
        traces = self._failing_traces(archive, parent, version)
        if traces:
            parts.append("Failing search episodes of this harness (messages in order; the system prompt and few-shot "
                         "examples left out, the harness has them; long messages are cut in the middle, marked "
                         "[… N chars cut …]):\n" + "\n\n".join(traces))
        if self.config.ideas and self.domain.mechanisms():
            ideas = "\n".join(f"- {m.name}: {_first_sentence(m.hypothesis)}" for m in self.domain.mechanisms())
            parts.append("Ideas others tried in this domain (names only; write your own code):\n" + ideas)
        parts.append("Write an improved harness: change what you expect to fix the most failures, keep the rest. "
                     + ASK[self.config.edit])
        return "\n\n".join(parts)

    def _failing_traces(self, archive: Archive, parent: str, version: int | None) -> list[str]:
        if version is None or self.config.traces <= 0:
            return []
        out = []
        for trajectory in archive.trajectories(parent, version):
            if trajectory.correct:
                continue
            out.append(episode_text(trajectory, self.config.trace_chars))
            if len(out) >= self.config.traces:
                break
        return out

    # -- the model -----------------------------------------------------------------------
    def _request(self, messages: list[dict[str, str]], seed: int) -> dict[str, Any]:
        return {"model": self.config.model, "messages": messages, "max_tokens": self.config.max_tokens,
                "temperature": self.config.temperature, "top_p": self.config.top_p, "seed": seed}

    def _ask(self, messages: list[dict[str, str]], seed: int, cache: ResponseCache) -> dict[str, Any]:
        """The model's reply to `messages`: from the run's cache when stored, else computed and stored."""
        request = self._request(messages, seed)
        stored = cache.get(request)
        if stored is not None:
            return {**stored, "cached": True}
        reply = (self._complete or self._server_complete)(messages, request)
        return {**cache.put(request, reply), "cached": False}

    def _server_complete(self, messages: list[dict[str, str]], request: dict[str, Any]) -> dict[str, Any]:
        client, server = self._connect()
        cpu_before = _cpu_seconds(server.pid) if server else None
        started = time.perf_counter()
        try:
            response = client.chat.completions.create(**{**request, "model": "local" if server else request["model"]})
        except Exception as exc:  # the SDK's errors: connection, timeout, HTTP
            raise ProposerError(f"local proposer: the model server failed: {exc}") from exc
        usage = response.usage
        cpu_after = _cpu_seconds(server.pid) if server else None
        return {"text": response.choices[0].message.content or "", "finish_reason": response.choices[0].finish_reason,
                "tokens_in": usage.prompt_tokens if usage else 0, "tokens_out": usage.completion_tokens if usage else 0,
                "wall_s": round(time.perf_counter() - started, 3),
                "cpu_s": None if cpu_before is None or cpu_after is None else round(cpu_after - cpu_before, 3)}

    def _connect(self) -> tuple[Any, ServerProcess | None]:
        if self._client is not None:
            return self._client, self._server
        import openai

        if self.config.base_url:
            self._client = openai.OpenAI(base_url=self.config.base_url, api_key="local", timeout=self.config.timeout_s)
            return self._client, None
        self._server = shared_server(self.config, self.run_dir or Path.cwd())
        self._client = openai.OpenAI(base_url=self._server.base_url, api_key="local", timeout=self.config.timeout_s,
                                     max_retries=0)
        return self._client, self._server

    def close(self) -> None:
        """Stop the server this proposer uses (idempotent; it also dies with this process).
        The driver makes a proposer per harness step: they share one server (`shared_server`)."""
        if self._server is not None:
            close_shared_server(self._server)
            self._server, self._client = None, None

    # -- one candidate ---------------------------------------------------------------------
    def _problem(self, source: str | None, parent_source: str, archive: Archive, taken: set[str]) -> str | None:
        if source is None:
            return "no ```python block with the code"
        problem = (validate_source(source) or self.rules.check(source, parent_source)
                   or copied_cut(source, parent_source))
        if problem is None and self.check is not None:
            problem = self.check(Candidate(source, [archive.accepted()]), archive)
        if problem is None and harness_id(source) in taken:
            problem = "this exact module is already in the archive: change something"
        if problem is None and added_statements(source, parent_source) == 0:
            problem = ("the module adds or changes no code (a copy, a reformatting or deletions only): rewrite the "
                       "hook behind the most frequent failure")
        if problem is None and self.dry_run is not None:
            problem = self.dry_run(source)
        return problem

    def _one(self, archive: Archive, parent: str, version: int | None, slot: int, cache: ResponseCache,
             taken: set[str]) -> Candidate | None:
        parent_source = archive.source(parent)
        first = [{"role": "system", "content": self.system_prompt()},
                 {"role": "user", "content": self.user_prompt(archive, parent, version)}]
        messages = first
        rng = random.Random(f"{self.seed}:{len(archive)}:{slot}")
        spent = {"tokens_in": 0, "tokens_out": 0, "wall_s": 0.0, "cpu_s": 0.0, "cached": 0}
        problem: str | None = None
        for turn in range(self.config.max_repairs + 1):
            reply = self._ask(messages, rng.randrange(2**31), cache)
            for key in ("tokens_in", "tokens_out", "wall_s"):
                spent[key] += reply.get(key) or 0
            spent["cpu_s"] += reply.get("cpu_s") or 0.0
            spent["cached"] += bool(reply["cached"])
            written, hypothesis = split_reply(reply["text"])
            cut: str | None = None
            if reply.get("finish_reason") == "length" and (written is None or not _parses(written)):
                cut = (f"your reply was cut at the {self.config.max_tokens}-token limit before the code was "
                       "complete: write less (only what you change, no explanation before the code)")
                written = None
            source, spliced = written, None
            if written is not None and self.config.edit == "hooks":
                source, spliced = splice(written, parent_source)
            problem = cut or spliced or self._problem(source, parent_source, archive, taken)
            self._log("response", turn=turn, parent=parent, problem=problem, **{k: reply.get(k) for k in (
                "tokens_in", "tokens_out", "wall_s", "cpu_s", "cached")})
            if problem is None and source is not None:
                novel = novel_statements(source, parent_source, self.domain.mechanisms())
                candidate = Candidate(source, [parent], hypothesis or "(the model gave no hypothesis)",
                                      f"written by {self.config.model}" + (f" after {turn} repair(s)" if turn else ""),
                                      {"repairs": turn, "novel": novel > 0, "novel_statements": novel, **spent})
                self._log("candidate", id=harness_id(source), parents=[parent], hypothesis=candidate.hypothesis,
                          repairs=turn, novel=novel > 0, **spent)
                return candidate
            # the first request and only the latest attempt: a small model shown a chain of its own
            # failed attempts copies them (math seed 0: three identical syntax errors in a row)
            messages = first + [{"role": "assistant", "content": reply["text"]},
                                {"role": "user", "content": self._rejection(problem, written, source)}]
        self._log("rejected", parent=parent, problem=problem, repairs=self.config.max_repairs, **spent)
        return None

    def _rejection(self, problem: str | None, written: str | None, source: str | None) -> str:
        """The repair turn: the reason, the lines it names (in the model's own code for a splice
        error, else in the assembled module) and the request to write the answer again."""
        where = written if spliced_error(problem) or source is None else source
        quoted = quote_lines(problem or "", where or "")
        shown = f"\n{'Your code' if where is written else 'The harness with your edit'}, there:\n{quoted}\n" \
            if quoted else " "
        return (f"Rejected: {problem}.{shown}Fix exactly this; do not repeat the same line. "
                + ASK[self.config.edit])

    def _log(self, kind: str, **data: Any) -> None:
        if self.ledger is not None:
            self.ledger.record(self.name, self._call, kind, model=self.config.model, **data)

    def propose(self, archive: Archive, n: int, budget: RolloutBudget | None = None) -> list[Candidate]:
        """Up to `n` candidates, each a child of the best harness at the latest weights (the
        search split's leaderboard), or of the accepted one before any is scored."""
        self._call = self.ledger.next_call(self.name) if self.ledger is not None else 0
        version = archive.latest_weights_version()
        board = archive.leaderboard(version) if version is not None else []
        ranked = [cid for cid, _, _ in board if archive.entry(cid).status == "evaluated"] or [archive.accepted()]
        cache = ResponseCache(Path(archive.root) / "proposer_cache")
        taken = set(archive.ids())
        self._log("session", n=n, parent=ranked[0], config=asdict(self.config))
        out: list[Candidate] = []
        for slot in range(n):
            candidate = self._one(archive, ranked[0], version, slot, cache, taken)
            if candidate is not None:
                taken.add(harness_id(candidate.source))
                out.append(candidate)
        return out


_SERVERS: dict[tuple[str, int, int | None], ServerProcess] = {}


def shared_server(config: LocalCoderConfig, run_dir: Path) -> ServerProcess:
    """One llama.cpp server per (model, context, threads) in this process, started on first
    use and reused by every later proposer (the driver builds one per harness step), so a run
    holds one model in memory; stopped at exit, and killed with this process in any case."""
    key = (config.model, config.n_ctx, config.n_threads)
    server = _SERVERS.get(key)
    if server is not None and server.process.poll() is None:
        return server
    run_dir.mkdir(parents=True, exist_ok=True)
    server = start_llama_server(proposer_model_path(config.model), run_dir,
                                ServerOptions(n_ctx=config.n_ctx, n_threads=config.n_threads))
    if not _SERVERS:
        atexit.register(close_all_servers)
    _SERVERS[key] = server
    return server


def close_all_servers() -> None:
    for server in list(_SERVERS.values()):
        close_shared_server(server)


def close_shared_server(server: ServerProcess) -> None:
    for key, known in list(_SERVERS.items()):
        if known is server:
            del _SERVERS[key]
    server.close()


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` (Linux /proc), None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
