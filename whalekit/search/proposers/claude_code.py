"""The `claude-code` proposer: Claude Code itself, the paper's proposer, driven through
`claude-agent-sdk`, working in the run view with the same tools as the other agents.

Why Claude Code runs its own loop: the CLI plans, calls tools and keeps its context; we
give it only the session's tools (list, read, grep, prototype, write_candidate) as an
in-process MCP server, with every built-in tool switched off (no Bash, no file access to
the host: the run view is the only filesystem it sees), no setting sources, and an empty
working directory. Tokens and cost come from the CLI's messages; the spend cap goes to the
CLI as `max_budget_usd` and is checked at every tool call. The SDK wheel ships the CLI; a
local server (`base_url`, e.g. a proxy in front of an open model speaking the Messages
API) works as well as the Anthropic API.

    proposer = ClaudeCodeProposer(domain, AgentConfig(model="claude-opus-4-7", effort="max",
                                                      candidates_per_session=3))
    candidates = proposer.propose(archive, n=3)      # needs ANTHROPIC_API_KEY or a Claude Code login
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from typing import TYPE_CHECKING, Any

from whalekit.search.proposers.agent_loop import AgentConfig, AssistantTurn, HostedAgentProposer, Session, ToolUse
from whalekit.search.proposers.base import Candidate, ProposerError
from whalekit.search.proposers.ledger import Ledger

if TYPE_CHECKING:
    from whalekit.domains.base import Domain
    from whalekit.rollouts.budget import RolloutBudget
    from whalekit.search.archive import Archive

DEFAULT_MODEL = "claude-opus-4-7"
SERVER = "whalekit"


class ClaudeCodeProposer(HostedAgentProposer):
    name = "claude-code"

    default_model, key_variable, url_variable = DEFAULT_MODEL, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"

    def __init__(self, domain: Domain, config: AgentConfig | None = None, api_key: str | None = None,
                 base_url: str | None = None, ledger: Ledger | None = None, cli_path: str | None = None,
                 env: dict[str, str] | None = None):
        super().__init__(domain, config, api_key, base_url, ledger)
        self.cli_path = cli_path
        self.env = dict(env or {})  # extra environment for the CLI (e.g. HOME or CLAUDE_CONFIG_DIR in tests)

    def _backend(self) -> Any:  # the CLI runs its own loop; see propose()
        raise NotImplementedError

    def propose(self, archive: Archive, n: int, budget: RolloutBudget | None = None) -> list[Candidate]:
        try:
            import claude_agent_sdk  # noqa: F401
        except ImportError as exc:
            raise ProposerError("the claude-code proposer needs claude-agent-sdk: pip install claude-agent-sdk "
                                "(its wheel ships the Claude Code CLI)") from exc
        session = Session(self, archive, self.session_size(n), budget)
        capped = session.over_cap()
        session.begin()
        if capped:
            return session.finish(capped)
        result: dict[str, Any] = {}

        def work() -> None:
            try:
                result["stopped"] = asyncio.run(self._session(session))
            except BaseException as exc:  # re-raised in the caller's thread
                result["error"] = exc

        # asyncio.run needs a thread without a running loop (a notebook has one)
        thread = threading.Thread(target=work, name="claude-code-session")
        thread.start()
        thread.join()
        if "error" in result:
            error = result["error"]
            if isinstance(error, ProposerError):
                raise error
            raise ProposerError(f"claude-code session failed: {type(error).__name__}: {error}") from error
        return session.finish(result.get("stopped"))

    async def _session(self, session: Session) -> str | None:
        from claude_agent_sdk import (
            AssistantMessage,
            ClaudeAgentOptions,
            ResultMessage,
            TextBlock,
            ToolUseBlock,
            create_sdk_mcp_server,
            query,
            tool,
        )

        turn = {"n": 0}

        def make(spec: dict[str, Any]) -> Any:
            name = spec["name"]

            @tool(name, spec["description"], spec["parameters"])
            async def handler(arguments: dict[str, Any]) -> dict[str, Any]:
                capped = session.over_cap()
                if capped:
                    session.stopped = capped
                    return {"content": [{"type": "text", "text": f"stopped: {capped}; end the session now"}],
                            "is_error": True}
                output = await asyncio.to_thread(session.run, name, dict(arguments), turn["n"], "")
                return {"content": [{"type": "text", "text": output}]}

            return handler

        specs = session.tools()
        server = create_sdk_mcp_server(SERVER, tools=[make(spec) for spec in specs])
        allowed = [f"mcp__{SERVER}__{spec['name']}" for spec in specs]
        env = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
               "DISABLE_AUTOUPDATER": "1", **self.env}
        key = self.key()
        if key:
            env["ANTHROPIC_API_KEY"] = key
        base_url = self.endpoint()
        if base_url:
            env["ANTHROPIC_BASE_URL"] = base_url
        spent = session.ledger.totals().get(self.name, {}).get("cost_usd") or 0.0
        stderr: list[str] = []
        with tempfile.TemporaryDirectory(prefix="whalekit-claude-code-") as cwd:
            options = ClaudeAgentOptions(
                tools=[], allowed_tools=allowed, mcp_servers={SERVER: server}, strict_mcp_config=True,
                setting_sources=[], system_prompt=session.system(), model=self.config.model,
                max_turns=self.config.max_turns, cwd=cwd, env=env, cli_path=self.cli_path,
                effort=self.config.effort,  # type: ignore[arg-type]
                max_budget_usd=None if self.config.max_cost_usd is None else max(0.0, self.config.max_cost_usd - spent),
                stderr=stderr.append)
            seen: set[str] = set()
            stopped: str | None = None
            async for message in query(prompt=session.user(), options=options):
                if isinstance(message, AssistantMessage):
                    text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
                    uses = [ToolUse(b.id, b.name.removeprefix(f"mcp__{SERVER}__"), dict(b.input))
                            for b in message.content if isinstance(b, ToolUseBlock)]
                    usage = message.usage or {}
                    # the CLI sends one message per content block of a response, each with the response's usage
                    first = getattr(message, "message_id", None) not in seen
                    seen.add(getattr(message, "message_id", None) or f"turn{turn['n']}")
                    tokens_in = int(usage.get("input_tokens", 0)) + int(usage.get("cache_read_input_tokens", 0)) \
                        + int(usage.get("cache_creation_input_tokens", 0)) if first else 0
                    tokens_out = int(usage.get("output_tokens", 0)) if first else 0
                    session.record_response(turn["n"], AssistantTurn(text, uses, tokens_in, tokens_out))
                    turn["n"] += 1
                elif isinstance(message, ResultMessage):
                    session.ledger.record(self.name, session.call, "cli_result", subtype=message.subtype,
                                          total_cost_usd=message.total_cost_usd, usage=message.usage,
                                          num_turns=message.num_turns, stderr_tail="".join(stderr)[-500:])
                    usage = message.usage or {}
                    total_in = sum(int(usage.get(k) or 0) for k in ("input_tokens", "cache_read_input_tokens",
                                                                      "cache_creation_input_tokens"))
                    total_out = int(usage.get("output_tokens") or 0)
                    if usage and (total_in, total_out) != (session.tokens_in, session.tokens_out):
                        # streamed messages carry the usage of the stream's start; the result has the totals
                        session.record_response(-1, AssistantTurn("(token totals from the CLI's result)", [],
                                                                  max(0, total_in - session.tokens_in),
                                                                  max(0, total_out - session.tokens_out)),
                                                cost=None, priced=True)
                    if message.total_cost_usd is not None:
                        session.cost = float(message.total_cost_usd)  # the CLI's own price of the session
                    if message.subtype == "error_max_budget_usd":
                        stopped = "cost_cap: the CLI's max_budget_usd was reached"
                    elif message.subtype == "error_max_turns" and len(session.written) < session.n:
                        stopped = "max_turns"
                    elif message.is_error and not session.written:
                        raise ProposerError(f"claude-code ended with {message.subtype}: "
                                            f"{(message.result or '')[:300]} {''.join(stderr)[-300:]}")
        return session.stopped or stopped
