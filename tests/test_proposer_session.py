"""The Meta-Harness proposer as the paper ran it: the run view (read-only, bounded, never
the test split), the prototyping tool (isolated, charged, recorded), M candidates per
session with a hypothesis and one mechanism, the domain's rules, the spend cap and the
cost report; and one scripted multi-step session through each real backend (the
`anthropic` SDK, the `openai` SDK, Claude Code through `claude-agent-sdk`) against a
local 127.0.0.1 server speaking that wire format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fakes.scripted_server import ScriptedServer

from whalekit.domains.mechanisms import apply_mechanism
from whalekit.domains.toy import ToyDomain
from whalekit.rollouts.budget import RolloutBudget
from whalekit.sandbox.isolation import ALLOWED_IMPORTS
from whalekit.search.archive import Archive
from whalekit.search.proposers.agent_loop import AgentConfig, transcript
from whalekit.search.proposers.anthropic_agent import AnthropicProposer
from whalekit.search.proposers.ledger import Ledger, cost_report, cost_summary, run_cost_report
from whalekit.search.proposers.openai_agent import OpenAIProposer
from whalekit.search.proposers.prototype import Prototyper, prototype_rollouts
from whalekit.search.proposers.rules import rules_for
from whalekit.search.proposers.runview import RunView, ViewLimits, _safe_name
from whalekit.search.stage import SearchConfig, run_search_stage
from whalekit.types import Message, Trajectory

DOMAIN = ToyDomain()
H0 = DOMAIN.initial_harness_source()
CATALOGUE = {m.name: m for m in DOMAIN.mechanisms()}
SPLITS = DOMAIN.load_splits(n_train=2, n_search=3, n_test=3, seed=0)
SEARCH_IDS = {t.id for t in SPLITS.search}
DRAFTS = {name: apply_mechanism(H0, CATALOGUE[name])
          for name in ("prefill_answer", "terse_system_prompt", "few_shot_examples")}


def _trajectory(task_id: str, cid: str, correct: bool, subset: str = "default") -> Trajectory:
    return Trajectory(task_id=task_id, domain="toy", harness_id=cid, sample_index=0, correct=correct,
                      reward=float(correct), final_answer="7" if correct else None, subset=subset,
                      flags={"format_valid": correct, "turns": 1},
                      messages=[Message("user", f"question of {task_id}"), Message("assistant", "I think so")])


def _archive(tmp_path: Path, leak_test_task: bool = False) -> Archive:
    archive = Archive.open(tmp_path / "run" / "archive", "toy")
    seed = archive.ensure_seed(H0)
    trajs = [_trajectory(t.id, seed, i == 0) for i, t in enumerate(SPLITS.search)]
    if leak_test_task:  # a record the archive should never hold: the view must not show it either
        trajs.append(_trajectory(SPLITS.test[0].id, seed, False, subset="test"))
    archive.record_evaluation(seed, 0, trajs, [DOMAIN.failure_mode(t) for t in trajs])
    return archive


# ---- 1. the run view ----------------------------------------------------------------------------
def test_the_run_view_serves_sources_outcomes_trajectories_frontier_and_evolution(tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    seed = archive.seed_id()
    child = archive.add(DRAFTS["prefill_answer"], [seed], "prefill helps", "mechanism: prefill_answer", "anthropic", 1)
    trajs = [_trajectory(t.id, child, True) for t in SPLITS.search]
    archive.record_evaluation(child, 0, trajs, [None] * len(trajs))
    view = RunView(archive, SEARCH_IDS)
    root = view.list_files()
    assert {"README.md", "frontier.json", "evolution_summary.jsonl", "candidates/  (2 entries)"} <= set(
        root.splitlines())
    assert view.read_file(f"candidates/{child}/harness.py") == DRAFTS["prefill_answer"]
    frontier = json.loads(view.read_file("frontier.json"))
    assert frontier["accepted"] == child and [r["id"] for r in frontier["ranking"]] == [child, seed]
    rows = [json.loads(line) for line in view.read_file("evolution_summary.jsonl").splitlines()]
    assert rows[1]["mechanism"] == "prefill_answer" and rows[1]["hypothesis"] == "prefill helps"
    assert rows[0]["w0"] == {"score": pytest.approx(1 / 3), "n": 3, "format_rate": pytest.approx(1 / 3),
                             "mean_turns": 1.0}
    listing = view.list_files(f"candidates/{seed}/w0/trajectories")
    assert len(listing.splitlines()) == len(SPLITS.search)
    first = f"candidates/{seed}/w0/trajectories/000_{_safe_name(SPLITS.search[0].id)}.txt"
    assert f"question of {SPLITS.search[0].id}" in view.read_file(first)
    assert "no_answer" in view.read_file(f"candidates/{seed}/w0/outcomes.jsonl")
    assert "+" in view.read_file(f"candidates/{child}/diff.txt")
    with pytest.raises(KeyError):
        view.read_file("../../../etc/passwd")


def test_every_view_tool_is_bounded_per_call(tmp_path: Path) -> None:
    view = RunView(_archive(tmp_path), SEARCH_IDS, ViewLimits(read_bytes=100, grep_matches=2, list_entries=2))
    page = view.read_file("README.md")
    assert page.startswith(view.content("README.md")[:100]) and "call again with offset=100" in page
    assert view.read_file("README.md", offset=100, max_bytes=10_000).startswith(view.content("README.md")[100:200])
    grep = view.grep("question of")
    assert len([line for line in grep.splitlines() if "question of" in line]) == 2 and "stopped at 2" in grep
    assert "more entries not shown" in view.list_files(recursive=True)
    assert view.grep("(unclosed").startswith("error: bad regular expression")


def test_no_test_task_or_test_file_appears_through_any_view_tool(tmp_path: Path) -> None:
    archive = _archive(tmp_path, leak_test_task=True)
    run_dir = archive.root.parent
    (run_dir / "test_eval.jsonl").write_text(json.dumps({"task_id": SPLITS.test[1].id, "secret": "TESTSPLIT"}))
    (run_dir / "events.jsonl").write_text("TESTSPLIT events\n")
    view = RunView(archive, SEARCH_IDS)
    test_ids = [t.id for t in SPLITS.test]
    everything = "\n".join([view.list_files(recursive=True)] + [view.read_file(p, max_bytes=10**9)
                                                                  for p in view.paths()])
    for needle in test_ids + ["TESTSPLIT", "test_eval", '"subset": "test"']:
        assert needle not in everything
        assert view.grep(needle.replace("+", r"\+")) == "no matches"
    assert all(not p.startswith(("..", "/")) and "test" not in p for p in view.paths())


# ---- 2. the prototyping tool ----------------------------------------------------------------------
def test_prototype_runs_a_draft_in_the_sandbox_charges_the_budget_and_records_it(tmp_path: Path,
                                                                                 tiny_policy: Any) -> None:
    archive = _archive(tmp_path)
    budget = RolloutBudget(10)
    prototype = Prototyper(DOMAIN, tiny_policy.sampler, SPLITS.search, budget, archive.root, max_problems=2)
    run = prototype(DRAFTS["prefill_answer"], n=5)  # capped at max_problems
    assert run.prototype_id == "p0000" and len(run.trajectories) == 2 and run.worker_failure is None
    assert all(t.subset == "default" and t.task_id in SEARCH_IDS for t in run.trajectories)
    assert budget.spent == 2 and budget.by_phase == {"prototype": 2} and prototype_rollouts(archive.root) == 2
    assert all(t.turns and t.turns[0].prefill == "The answer is " for t in run.trajectories)  # the draft ran
    assert "prototype p0000" in run.report() and SPLITS.search[0].id in run.report()
    view = RunView(archive, SEARCH_IDS)
    assert view.read_file("prototypes/p0000/harness.py") == DRAFTS["prefill_answer"]
    assert len(view.list_files("prototypes/p0000/trajectories").splitlines()) == 2

    refused = prototype("import os\n" + H0, n=1)
    assert refused.refused and "import of os" in refused.refused and budget.spent == 2
    named = prototype(H0, task_ids=[SPLITS.search[2].id])
    assert [t.task_id for t in named.trajectories] == [SPLITS.search[2].id] and budget.spent == 3
    assert "unknown search task ids" in (prototype(H0, task_ids=[SPLITS.test[0].id]).refused or "")
    broke = RolloutBudget(1)
    assert "1 rollouts left" in (Prototyper(DOMAIN, tiny_policy.sampler, SPLITS.search, broke, archive.root)(
        H0, n=2).refused or "") and broke.spent == 0


# ---- 3. domain rules ------------------------------------------------------------------------------
CHESS_H0 = '''
import re
from whalekit.harness import FinalAnswer, FormatError, GenerationSettings, Harness

class ChessH0(Harness):
    """The starting harness."""
    name = "chess-h0"

    def system_prompt(self, task):
        return "Play the best move."

    def generation_settings(self, state):
        return GenerationSettings(max_new_tokens=16, stop=["\\n"])

    def parse(self, reply, state):
        moves = re.findall("[a-h][1-8][a-h][1-8]", reply)
        return FinalAnswer(moves[-1]) if moves else FormatError("no move")
'''


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda s: "import chess\n" + s, "importing 'chess' is banned"),
    (lambda s: s.replace("moves[-1]", "sorted(moves, key=lambda m: 'x' in m)[-1]"), "move ordering"),
    (lambda s: s.replace("moves[-1]", "max(moves, key=lambda m: gives_check(m))"), "move ordering"),
    (lambda s: s.replace("Play the best move.", "Solve this Lichess puzzle."), "'lichess'"),
    (lambda s: s + "\ndef minimax(board):\n    return 0\n", "search or evaluation"),
    (lambda s: s.replace('"Play the best move."', '"Play the best move. e.g. puzzle-00042"'), "puzzle-00042"),
    (lambda s: s.replace("max_new_tokens=16", "max_new_tokens=64"), "parameter tuning"),
    (lambda s: s.replace("[-1]", "[0]"), "parameter tuning"),
    (lambda s: s.replace('"""The starting harness."""', '"""Tuned."""').replace('"chess-h0"', '"chess-better"')
     .replace("max_new_tokens=16", "max_new_tokens=64"), "parameter tuning"),  # a new name is no mechanism
    (lambda s: s.replace("Play the best move.", "Reply with one move in UCI, nothing else."), None),
    (lambda s: s.replace("moves[-1]", "sorted(moves, key=lambda x: len(x))[-1]"), None),
])
def test_chess_rules_are_checked_where_a_static_check_can_tell(edit: Any, reason: str | None) -> None:
    from whalekit.domains.base import get_domain

    rules = rules_for(get_domain("chess"))
    problem = rules.check(edit(CHESS_H0), CHESS_H0, {"puzzle-00042"})
    assert (problem is None) if reason is None else (reason in (problem or ""))
    assert "chess" not in ALLOWED_IMPORTS and "must not play chess" in rules.prompt()


# ---- 4. one scripted session through each real backend ----------------------------------------------
def _script(seed: str) -> list[dict[str, Any]]:
    task0 = SPLITS.search[0].id
    write = [{"name": "write_candidate", "input": {"source": DRAFTS[name], "parent_ids": [seed],
                                                   "mechanism": name, "hypothesis": CATALOGUE[name].hypothesis}}
             for name in DRAFTS]
    return [
        {"text": "Reading the run directory first.", "tool_uses": [{"name": "list_files", "input": {}}]},
        {"tool_uses": [{"name": "read_file", "input": {"path": "frontier.json"}},
                       {"name": "read_file", "input": {"path": "evolution_summary.jsonl"}}]},
        {"tool_uses": [{"name": "list_files", "input": {"path": f"candidates/{seed}/w0/trajectories"}},
                       {"name": "grep", "input": {"pattern": "correct=False", "path": f"candidates/{seed}"}}]},
        {"tool_uses": [{"name": "read_file", "input": {
            "path": f"candidates/{seed}/w0/trajectories/000_{_safe_name(task0)}.txt"}}]},
        {"text": "No number in most replies: try a prefill on two problems.",
         "tool_uses": [{"name": "prototype", "input": {"source": DRAFTS["prefill_answer"], "n": 2}}]},
        {"text": "Three candidates, one mechanism each.", "tool_uses": write[:1]},
        {"tool_uses": write[1:]},
        {"text": "Done: three candidates written.", "tokens_out": 10},
    ]


def _proposer(backend: str, server: ScriptedServer, tmp_path: Path, **config: Any) -> Any:
    options = AgentConfig(model="claude-sonnet-4-6" if backend != "openai" else "local-coder",
                          candidates_per_session=3, max_retries=1, **config)
    if backend == "anthropic":
        return AnthropicProposer(DOMAIN, options, api_key="test-key", base_url=server.url)
    if backend == "openai":
        return OpenAIProposer(DOMAIN, options, api_key="EMPTY", base_url=server.url + "/v1")
    from whalekit.search.proposers.claude_code import ClaudeCodeProposer

    home = tmp_path / "claude-home"
    home.mkdir(exist_ok=True)
    return ClaudeCodeProposer(DOMAIN, options, api_key="test-key", base_url=server.url,
                              env={"HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude")})


SESSION_TOOLS = ["list_files", "read_file", "read_file", "list_files", "grep", "read_file", "prototype",
                 "write_candidate", "write_candidate", "write_candidate"]


@pytest.mark.parametrize("backend", ["anthropic", "openai", "claude-code"])
def test_a_scripted_session_reads_trajectories_prototypes_and_writes_three_candidates(
        backend: str, tmp_path: Path, tiny_policy: Any) -> None:
    if backend == "claude-code":
        pytest.importorskip("claude_agent_sdk", reason="claude-agent-sdk (which ships the Claude Code CLI)")
    archive = _archive(tmp_path)
    seed = archive.seed_id()
    budget = RolloutBudget(40)
    with ScriptedServer("anthropic" if backend != "openai" else "openai", _script(seed),
                        tool_prefix="mcp__whalekit__" if backend == "claude-code" else "") as server:
        proposer = _proposer(backend, server, tmp_path, require_prototype=False)
        proposer.prototyper = Prototyper(DOMAIN, tiny_policy.sampler, SPLITS.search, budget, archive.root,
                                         max_problems=2)  # what search.py passes (see the report)
        run_search_stage(DOMAIN, archive, proposer, tiny_policy.sampler, SPLITS.search, budget,
                         SearchConfig(iterations=1, candidates_per_iteration=3, hook_timeout_s=2.0), 0, seed=0)
    # the API loops stop once the third candidate is in; Claude Code asks for its closing turn
    assert server.served == len(_script(seed)) - (backend != "claude-code")
    written = [e for e in archive.entries() if e.proposer == proposer.name]
    assert len(written) == 3 and all(e.status == "evaluated" and 0 in e.scores for e in written)
    assert sorted(e.change_summary for e in written) == sorted(f"mechanism: {m}" for m in DRAFTS)
    assert all(e.hypothesis == CATALOGUE[e.change_summary.removeprefix("mechanism: ")].hypothesis for e in written)
    # prototype (2) + three candidates on the search split; the seed was scored before
    assert budget.by_phase == {"prototype": 2, "search": 3 * len(SPLITS.search)}
    seen = "\n".join(server.tool_results())
    assert "prototype p0000 of draft" in seen and "question of" in seen and '"accepted":' in seen.replace("\\", "")
    everything = json.dumps(server.requests)
    assert not any(t.id in everything for t in SPLITS.test)  # nothing of the test split went over the wire
    ledger = Ledger.for_archive(archive)
    calls = transcript(ledger, proposer.name)
    print(f"\n[{backend}] session transcript:\n" + "\n".join(calls) + "\n" + cost_report(archive))
    assert [line.split("(")[0] for line in calls] == SESSION_TOOLS
    [session] = [e for e in ledger.events() if e["kind"] == "session"]
    assert session["written"] == 3 and session["prototype_rollouts"] == 2 and session["wall_s"] > 0
    assert session["tokens_in"] == 1500 * server.served
    assert (session["cost_usd"] is None) == (backend == "openai")  # a local model has no price
    candidates = [e for e in ledger.events() if e["kind"] == "candidate"]
    assert len(candidates) == 3 and sum(c["tokens_out"] for c in candidates) <= session["tokens_out"]
    assert "cost per accepted harness" in cost_report(archive)


def test_the_spend_cap_stops_a_session_cleanly_and_is_recorded(tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    with ScriptedServer("anthropic", _script(archive.seed_id())) as server:
        # one response of the script costs 1500 * 3e-6 + 300 * 15e-6 = $0.009
        proposer = _proposer("anthropic", server, tmp_path, max_cost_usd=0.015)
        assert proposer.propose(archive, 3) == []
        assert server.served == 2  # the third call would pass the cap
        assert proposer.propose(archive, 3) == [] and server.served == 2  # later sessions do not call at all
    ledger = Ledger.for_archive(archive)
    stops = [e["reason"] for e in ledger.events() if e["kind"] == "stopped"]
    assert len(stops) == 2 and all(s.startswith("cost_cap") for s in stops)
    assert "stopped in session 0: cost_cap" in cost_report(archive)


def test_cost_report_prices_each_accepted_harness_and_each_point_of_search_gain(tmp_path: Path) -> None:
    archive = _archive(tmp_path)  # seed scores 1/3
    seed = archive.seed_id()
    ids = []
    for name, correct in (("prefill_answer", 2), ("terse_system_prompt", 1), ("few_shot_examples", 3)):
        cid = archive.add(DRAFTS[name], [seed], name, f"mechanism: {name}", "anthropic", 1)
        trajs = [_trajectory(t.id, cid, i < correct) for i, t in enumerate(SPLITS.search)]
        archive.record_evaluation(cid, 0, trajs, [DOMAIN.failure_mode(t) for t in trajs])
        ids.append(cid)
    ledger = Ledger.for_archive(archive)
    for call in (0, 1):
        ledger.record("anthropic", call, "response", tokens_in=10_000, tokens_out=2_000, cost_usd=0.06)
        ledger.record("anthropic", call, "session", tokens_in=10_000, tokens_out=2_000, cost_usd=0.06, wall_s=30.0,
                      candidate_ids=ids[:2] if call == 0 else ids[2:], prototype_rollouts=4, stopped=None)
    row = cost_summary(archive)["anthropic"]
    assert row["accepted_ids"] == [ids[0], ids[2]]  # the 1/3 one never beat the frontier
    assert row["cost_per_accepted_usd"] == pytest.approx(0.06)
    assert row["gain_points"] == pytest.approx(100 * (1 - 1 / 3))
    assert row["cost_per_point_usd"] == pytest.approx(0.12 / (100 * 2 / 3))
    report = cost_report(archive)
    print(report)
    assert run_cost_report(archive.root, "toy") == report
    assert "cost per accepted harness $0.0600" in report and "+66.7 points" in report
