"""Proposers: the LLM agents run through the real `anthropic` and `openai` SDKs against
local recorded servers; the reflective proposer is seeded and targets observed failures;
the prompt-only restriction is enforced on code; every call lands in the ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.anthropic_server import FakeAnthropicServer
from fakes.openai_server import FakeOpenAIServer
from fakes.recorded import load_recording

from whalekit.domains.mechanisms import apply_mechanism
from whalekit.domains.toy import ToyDomain
from whalekit.rollouts.budget import RolloutBudget
from whalekit.sandbox.isolation import validate_source
from whalekit.search.archive import Archive
from whalekit.search.proposers.agent_loop import AgentConfig
from whalekit.search.proposers.anthropic_agent import AnthropicProposer
from whalekit.search.proposers.base import Candidate, Proposer, ProposerError
from whalekit.search.proposers.ledger import Ledger
from whalekit.search.proposers.openai_agent import OpenAIProposer
from whalekit.search.proposers.prompt_only import PromptOnly, prompt_only_violation
from whalekit.search.proposers.reflective import ReflectiveProposer
from whalekit.search.stage import SearchConfig, run_search_stage
from whalekit.types import Trajectory

DOMAIN = ToyDomain()
H0 = DOMAIN.initial_harness_source()
CATALOGUE = {m.name: m for m in DOMAIN.mechanisms()}
SPLITS = DOMAIN.load_splits(n_train=4, n_search=2, n_test=2, seed=0)
RECORDED_TOKENS_IN = sum(t["tokens_in"] for t in load_recording("proposer_session")[:4])


def _archive(tmp_path: Path) -> Archive:
    archive = Archive.open(tmp_path / "archive", "toy")
    archive.ensure_seed(H0)
    return archive


def _score(archive: Archive, cid: str, modes: list[str | None], version: int = 0) -> None:
    trajs = [Trajectory(task_id=f"t{i}", domain="toy", harness_id=cid, sample_index=i, correct=m is None,
                        reward=float(m is None)) for i, m in enumerate(modes)]
    archive.record_evaluation(cid, version, trajs, modes)


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_llm_proposer_completes_a_search_iteration_through_the_real_sdk(api: str, tmp_path: Path,
                                                                        tiny_policy: Any) -> None:
    archive = _archive(tmp_path)
    _score(archive, archive.seed_id(), ["no_answer", "wrong_answer"])  # h0 scored already: one rollout call below
    recording = load_recording("proposer_session")
    server_class = FakeAnthropicServer if api == "anthropic" else FakeOpenAIServer
    with server_class(recording, {"seed_id": archive.seed_id()}, fail_first=(429, 500)) as server:
        config = AgentConfig(model="claude-sonnet-4-6" if api == "anthropic" else "local-coder", max_retries=3)
        proposer: Proposer = (AnthropicProposer(DOMAIN, config, api_key="test-key", base_url=server.url)
                              if api == "anthropic" else
                              OpenAIProposer(DOMAIN, config, api_key="EMPTY", base_url=server.url + "/v1"))
        budget = RolloutBudget(100)
        run_search_stage(DOMAIN, archive, proposer, tiny_policy.sampler, SPLITS.search, budget,
                         SearchConfig(iterations=1, candidates_per_iteration=2, hook_timeout_s=1.0), 0, seed=0)
    assert server.served == 4 and len(server.requests) == 6  # two transient failures retried by the SDK
    written = [e for e in archive.entries() if e.proposer == api]
    assert len(written) == 2 and all(e.status == "evaluated" and 0 in e.scores for e in written)
    assert all(e.parent_ids == [archive.seed_id()] and e.hypothesis for e in written)
    assert budget.spent == 2 * len(SPLITS.search)
    first = server.requests[0]
    assert "write_candidate" in str(first["tools"]) and "Leaderboard" in str(first["messages"])
    assert "rejected: line 1: import of os is not allowed" in str(server.requests[-1]["messages"])

    ledger = Ledger.for_archive(archive)
    totals = ledger.totals()[api]
    assert totals["calls"] == 1 and totals["tokens_in"] == RECORDED_TOKENS_IN
    assert (totals["cost_usd"] is None) == (api == "openai")  # a local model has no price
    assert [e["kind"] for e in ledger.events()].count("tool_result") == 6
    assert "write_candidate" in ledger.replay(api)


def test_anthropic_proposer_without_a_key_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ProposerError, match="ANTHROPIC_API_KEY"):
        AnthropicProposer(DOMAIN).propose(_archive(tmp_path), 2)


def test_openai_proposer_without_a_key_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ProposerError, match="OPENAI_API_KEY"):
        OpenAIProposer(DOMAIN).propose(_archive(tmp_path), 2)


def test_persistent_server_errors_end_in_a_proposer_error_after_the_retries(tmp_path: Path) -> None:
    with FakeAnthropicServer(load_recording("proposer_session"), fail_first=(529,) * 3) as server:
        proposer = AnthropicProposer(DOMAIN, AgentConfig(model="claude-sonnet-4-6", max_retries=2),
                                     api_key="test-key", base_url=server.url)
        with pytest.raises(ProposerError, match="after 2 retries"):
            proposer.propose(_archive(tmp_path), 2)
    assert len(server.requests) == 3


def test_reflective_proposer_is_reproducible_and_targets_the_most_frequent_failure(tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    _score(archive, archive.seed_id(), ["no_answer"] * 6)
    first = ReflectiveProposer(list(CATALOGUE.values()), seed=7).propose(archive, 3)
    again = ReflectiveProposer(list(CATALOGUE.values()), seed=7).propose(archive, 3)
    assert [c.source for c in first] == [c.source for c in again]
    assert len({c.source for c in first}) == 3
    for candidate in first:
        (name,) = candidate.meta["mechanisms"]
        assert "no_answer" in CATALOGUE[name].targets and "no_answer (6 of 6 failures)" in candidate.hypothesis
        assert validate_source(candidate.source) is None and candidate.source != H0


def test_reflective_proposer_combines_the_mechanisms_of_good_candidates(tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    _score(archive, archive.seed_id(), ["no_answer"] * 4)
    best = archive.add(apply_mechanism(H0, CATALOGUE["prefill_answer"]), [archive.seed_id()],
                       change_summary="mechanisms: prefill_answer")
    runner_up = archive.add(apply_mechanism(H0, CATALOGUE["calculator_first"]), [archive.seed_id()],
                            change_summary="mechanisms: calculator_first")
    _score(archive, best, [None, None, None, "wrong_answer"])
    _score(archive, runner_up, [None, None, "wrong_answer", "wrong_answer"])
    [child] = ReflectiveProposer(list(CATALOGUE.values()), seed=0, crossover_rate=1.0).propose(archive, 1)
    assert child.parent_ids == [best, runner_up] and child.meta["crossover"]
    names = {m.name for m in ReflectiveProposer(list(CATALOGUE.values())).carried(child.source)}
    assert {"prefill_answer", "calculator_first"} <= names


def test_reflective_proposer_walks_down_the_ranking_when_the_best_parents_are_exhausted(tmp_path: Path) -> None:
    catalogue = [CATALOGUE["prefill_answer"], CATALOGUE["terse_system_prompt"]]
    archive = _archive(tmp_path)
    seed = archive.seed_id()
    a = archive.add(apply_mechanism(H0, catalogue[0]), [seed])
    ab = archive.add(apply_mechanism(archive.source(a), catalogue[1]), [a])
    for cid, modes in ((seed, ["no_answer"] * 2), (a, [None, "no_answer"]), (ab, [None, None])):
        _score(archive, cid, modes)
    [candidate] = ReflectiveProposer(catalogue, parents_considered=1).propose(archive, 1)
    assert candidate.parent_ids == [seed] and candidate.meta["mechanisms"] == ["terse_system_prompt"]


class _Fixed(Proposer):
    name = "fixed"

    def __init__(self, sources: list[str]):
        self.sources = sources

    def propose(self, archive: Archive, n: int, budget: RolloutBudget | None = None) -> list[Candidate]:
        return [Candidate(s, [archive.seed_id()], "fixed") for s in self.sources]


def test_prompt_only_keeps_text_edits_and_archives_code_edits_as_invalid(tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    text_edit = H0.replace('return task.inputs["question"]', "return 'Question: ' + task.inputs['question']")
    code_edit = apply_mechanism(H0, CATALOGUE["lenient_first_number"])
    smuggled = H0.replace('return task.inputs["question"]',
                          "return task.inputs['question'] + ' = ' + str(sum(map(int, "
                          "re.findall('[0-9]+', task.inputs['question']))))")
    kept = PromptOnly(_Fixed([text_edit, code_edit, smuggled])).propose(archive, 3)
    assert [c.source for c in kept] == [text_edit]
    reasons = {archive.source(e.id): e.failure_reason for e in archive.entries() if e.status == "invalid"}
    assert "code outside system_prompt and first_user_message changed" in reasons[code_edit]
    assert "may only return text" in reasons[smuggled]


@pytest.mark.parametrize(("edit", "allowed"), [
    (lambda s: s.replace("number only", "digits only"), True),
    (lambda s: s.replace("careful calculator", "calculator") + "\n# a trailing comment\n", True),
    (lambda s: s.replace("max_new_tokens=16", "max_new_tokens=64"), False),
    (lambda s: s.replace("    max_turns = 1\n", "    max_turns = 3\n"), False),
    (lambda s: apply_mechanism(s, CATALOGUE["few_shot_examples"]), False),
])
def test_prompt_only_violation_compares_code_not_formatting(edit: Any, allowed: bool) -> None:
    assert (prompt_only_violation(H0, edit(H0)) is None) == allowed


@pytest.mark.parametrize("domain_name", ["chess", "math", "searchqa"])
def test_the_offline_fst_search_has_prompt_wordings_to_try_in_every_paper_domain(tmp_path: Path,
                                                                                 domain_name: str) -> None:
    """Every code mechanism fails the restriction, so without wordings an FST search runs
    dry and its whole budget falls through to training."""
    from whalekit.domains.base import get_domain
    from whalekit.search.proposers.registry import make_proposer

    domain = get_domain(domain_name)
    archive = Archive.open(tmp_path / "archive", domain.name)
    archive.ensure_seed(domain.initial_harness_source())
    proposer = make_proposer("reflective", domain, archive, seed=0, options={}, prompt_only=True)
    proposed = proposer.propose(archive, 3)
    assert len(proposed) == 3
    for candidate in proposed:
        assert prompt_only_violation(archive.source(candidate.parent_ids[0]), candidate.source) is None
        assert validate_source(candidate.source) is None
    assert not [e for e in archive.entries() if e.status == "invalid"]  # nothing proposed only to be rejected


def test_ledger_skips_a_torn_last_line_and_names_a_bad_middle_line(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.record("anthropic", 0, "response", tokens_in=10, tokens_out=5, cost_usd=0.001)
    ledger.record("anthropic", 0, "response", tokens_in=20, tokens_out=5, cost_usd=0.002)
    with open(ledger.path, "a") as handle:
        handle.write('{"schema_version": 1, "propo')  # killed mid-write
    assert ledger.totals()["anthropic"] == {"calls": 1, "tokens_in": 30, "tokens_out": 10,
                                            "cost_usd": pytest.approx(0.003)}
    ledger.path.write_text('{"bad\n' + ledger.path.read_text())
    with pytest.raises(ValueError, match=r"ledger.jsonl:1: invalid JSON"):
        ledger.events()


def test_make_proposer_builds_each_name_of_its_table_and_an_unknown_name_lists_them_all(tmp_path: Path) -> None:
    from whalekit.search.proposers.registry import PROPOSERS, make_proposer

    assert sorted(PROPOSERS) == ["anthropic", "claude-code", "local", "openai", "random-catalogue", "reflective"]
    archive = Archive.open(tmp_path / "archive", "toy")
    proposer = make_proposer("reflective", ToyDomain(), archive, seed=0, options={})
    assert isinstance(proposer, ReflectiveProposer)
    known = "known: reflective, anthropic, openai, local, random-catalogue, claude-code"
    with pytest.raises(ValueError, match=f"unknown proposer 'claude'; {known}"):
        make_proposer("claude", ToyDomain(), archive, seed=0, options={})
