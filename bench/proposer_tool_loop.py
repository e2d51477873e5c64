"""Can the local coder model drive the `openai` proposer's tool loop? One agent session
(whalekit.search.proposers.openai_agent: list/read/grep the run view, write_candidate) against
llama.cpp's OpenAI-compatible server on the local proposer model, from a domain's h0_cpu;
prints each turn (tool calls made, whether they came as text, tokens) and the outcome.

Why a benchmark and not a test: a session takes minutes on two cores and its outcome is the
model's, not whalekit's. The mechanics (text tool calls, ids answered, the server ending with
its driver) are tested in tests/test_openai_text_tool_calls.py and tests/test_local_coder_server.py.
The compact single-call mode (`proposer: local`) exists because small models fail this loop.

    flock /tmp/whalekit-cpu.lock .venv/bin/python bench/proposer_tool_loop.py --domain math
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from whalekit.domains.base import get_domain
from whalekit.infra.cpu_info import cpu_kind
from whalekit.search.archive import Archive
from whalekit.search.proposers.agent_loop import AgentConfig
from whalekit.search.proposers.ledger import Ledger
from whalekit.search.proposers.local_models import proposer_model_path
from whalekit.search.proposers.local_server import ServerOptions, start_llama_server
from whalekit.search.proposers.openai_agent import OpenAIProposer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", default="math")
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=2000, help="output tokens per reply")
    parser.add_argument("--n-ctx", type=int, default=16384, help="the tool loop's context grows with each turn")
    args = parser.parse_args(argv)
    domain = get_domain(args.domain)
    with tempfile.TemporaryDirectory(prefix="whalekit-tool-loop-") as tmp:
        run_dir = Path(tmp) / "run"
        archive = Archive.open(run_dir / "archive", domain.name)
        archive.ensure_seed(domain.initial_harness_source("h0_cpu"))
        ledger = Ledger.for_archive(archive)
        server = start_llama_server(proposer_model_path(args.model), run_dir, ServerOptions(n_ctx=args.n_ctx))
        started = time.perf_counter()
        try:
            proposer = OpenAIProposer(domain, AgentConfig(model="local", max_turns=args.max_turns,
                                                          max_tokens=args.max_tokens, timeout_s=1800, max_retries=0),
                                      api_key="local", base_url=server.base_url, ledger=ledger)
            candidates = proposer.propose(archive, n=1)
        finally:
            server.close()
        wall = time.perf_counter() - started
        events = ledger.events()
    for event in events:
        if event["kind"] == "response":
            uses = event.get("tool_uses") or []
            print(f"turn {event['turn']}: {len(uses)} tool call(s) {[u['name'] for u in uses]}, "
                  f"tokens in/out {event.get('tokens_in')}/{event.get('tokens_out')}; "
                  f"reply starts {event.get('text', '')[:60]!r}")
    session = [e for e in events if e["kind"] == "session"][-1]
    calls = sum(len(e.get("tool_uses") or []) for e in events if e["kind"] == "response")
    print(f"{args.model} on the openai tool loop, {args.domain}: {len(candidates)} candidate(s) written, "
          f"{calls} tool call(s) in {sum(e['kind'] == 'response' for e in events)} turn(s), stopped: "
          f"{session.get('stopped')}, tokens in/out {session['tokens_in']}/{session['tokens_out']}, "
          f"{wall:.0f} s ({cpu_kind()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
