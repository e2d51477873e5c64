"""The search stage: proposals are validated, evaluated in one batched rollout charged
to the shared budget, recorded in the archive, and a stage resumes after a kill."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from whalekit.domains.toy import ToyDomain
from whalekit.rollouts.budget import RolloutBudget
from whalekit.search.archive import Archive
from whalekit.search.proposers.base import Candidate, Proposer
from whalekit.search.proposers.reflective import ReflectiveProposer
from whalekit.search.proposers.report import render_report
from whalekit.search.stage import SearchConfig, SearchStage, run_search_stage

DOMAIN = ToyDomain()
SPLITS = DOMAIN.load_splits(n_train=4, n_search=2, n_test=2, seed=0)
H0 = DOMAIN.initial_harness_source()
FAST = {"hook_timeout_s": 1.0}


class ScriptedProposer(Proposer):
    """Returns fixed candidates, one list per call: the hostile catalogue's delivery van."""

    name = "scripted"

    def __init__(self, batches: list[list[str]]):
        self.batches = batches

    def propose(self, archive: Archive, n: int, budget: RolloutBudget | None = None) -> list[Candidate]:
        sources = self.batches.pop(0) if self.batches else []
        return [Candidate(s, [archive.seed_id()], f"scripted #{i}") for i, s in enumerate(sources[:n])]


def _archive(tmp_path: Path) -> Archive:
    archive = Archive.open(tmp_path / "archive", "toy")
    archive.ensure_seed(H0)
    return archive


def _hostile(hook: str, body: str) -> str:
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    return H0.rstrip() + f"\n\n    def {hook}(self, task):\n{lines}\n"


HOSTILE = {
    "infinite_loop": _hostile("system_prompt", "while True:\n    pass"),
    "memory_bomb": _hostile("system_prompt", "return 'x' * (10 ** 11)"),
    "os_system": "import os\n" + _hostile("system_prompt", "os.system('true')\nreturn 'x'"),
    "reads_api_key": "import os\n" + _hostile("system_prompt", "return os.environ['ANTHROPIC_API_KEY']"),
    "socket": "import socket\n" + _hostile("system_prompt", "socket.create_connection(('1.1.1.1', 80))"),
    "sys_exit": "import sys\n" + _hostile("system_prompt", "sys.exit(1)"),
    "syntax_error": H0.replace("def parse(self, reply, state):", "def parse(self, reply, state)"),
}
# Passes the dry run (reply "The answer is 42.") but hangs the worker, unkillable by the alarm, on real replies.
LATE_HANG = H0.replace('    def parse(self, reply, state):\n', '''    def parse(self, reply, state):
        while "42" not in reply:
            try:
                while True:
                    pass
            except BaseException:
                pass
''')


def test_reflective_search_records_candidates_charges_each_rollout_once_and_rescores_new_weights(tmp_path: Path,
                                                                               tiny_policy: Any) -> None:
    archive, budget, events = _archive(tmp_path), RolloutBudget(100), []
    config = SearchConfig(iterations=2, candidates_per_iteration=2, **FAST)
    accepted = run_search_stage(DOMAIN, archive, ReflectiveProposer(DOMAIN.mechanisms(), seed=0),
                                tiny_policy.sampler, SPLITS.search, budget, config, weights_version=0, seed=0,
                                on_iteration=events.append)
    evaluated = [e for e in archive.entries() if 0 in e.scores]
    assert len(evaluated) == 1 + 2 * 2  # h0 + 2 iterations x 2 candidates
    assert budget.spent == budget.by_phase["search"] == len(evaluated) * len(SPLITS.search)
    assert [e["iteration"] for e in events] == [0, 1] and events[-1]["rollouts_spent"] == budget.spent
    assert accepted == archive.leaderboard(0)[0][0] == events[-1]["accepted_id"]
    for entry in evaluated[1:]:
        assert entry.change_summary.startswith("mechanisms: ") and entry.hypothesis
        assert archive.source(entry.id) != archive.source(entry.parent_ids[0])
    test_ids = {t.id for t in SPLITS.test}
    assert not test_ids & {o["task_id"] for e in evaluated for o in archive.outcomes(e.id, 0)}

    # New weights: the next stage first re-scores h0, the accepted and the top-1 (charged), then proposes.
    spent = budget.spent
    accepted = run_search_stage(DOMAIN, archive, ScriptedProposer([]), tiny_policy.sampler, SPLITS.search, budget,
                                SearchConfig(iterations=0, rescore_top=1, **FAST), weights_version=1, seed=0, step=1)
    rescored = [e.id for e in archive.entries() if 1 in e.scores]
    assert archive.seed_id() in rescored and accepted in rescored and len(rescored) <= 2
    assert budget.spent - spent == len(rescored) * len(SPLITS.search)
    assert "## Weight update 0 -> 1" in render_report(archive, 1)


def test_a_stage_stepped_one_iteration_at_a_time_is_the_stage_run_whole(tmp_path: Path, tiny_policy: Any) -> None:
    config = SearchConfig(iterations=2, candidates_per_iteration=2, **FAST)
    whole, whole_budget = _archive(tmp_path / "whole"), RolloutBudget(100)
    run_search_stage(DOMAIN, whole, ReflectiveProposer(DOMAIN.mechanisms(), seed=0), tiny_policy.sampler,
                     SPLITS.search, whole_budget, config, weights_version=0, seed=0)
    stepped, budget = _archive(tmp_path / "stepped"), RolloutBudget(100)
    stage = SearchStage(DOMAIN, stepped, ReflectiveProposer(DOMAIN.mechanisms(), seed=0), tiny_policy.sampler,
                        SPLITS.search, budget, config, weights_version=0, seed=0)
    assert stage.step()  # the re-scoring and iteration 0; iteration 1 follows
    assert stage.progress["iterations_done"] == 1 and budget.spent == (1 + 2) * len(SPLITS.search)
    assert not stage.step() and stage.over()  # iteration 1, the last
    assert not stage.step() and budget.spent == whole_budget.spent  # an over stage spends nothing
    def scores(archive: Archive) -> list[tuple[str, dict[int, dict[str, Any]]]]:  # without the wall-clock time
        return [(e.id, {v: {k: x for k, x in s.items() if k != "evaluated"} for v, s in e.scores.items()})
                for e in archive.entries()]

    assert scores(stepped) == scores(whole)
    assert stage.accepted() == whole.accepted(0)
    assert stage.progress == whole.stage_progress("step0-w0") == stepped.stage_progress("step0-w0")


def test_hostile_candidates_end_as_recorded_failures_and_the_search_goes_on(tmp_path: Path,
                                                                           tiny_policy: Any) -> None:
    archive, budget = _archive(tmp_path), RolloutBudget(100)
    benign = H0.replace("number only", "digits only")
    proposer = ScriptedProposer([list(HOSTILE.values()), [LATE_HANG, benign]])
    config = SearchConfig(iterations=2, candidates_per_iteration=len(HOSTILE), **FAST)
    run_search_stage(DOMAIN, archive, proposer, tiny_policy.sampler, SPLITS.search, budget, config, 0, seed=0)
    by_source = {archive.source(e.id): e for e in archive.entries()}
    for name, source in HOSTILE.items():
        entry = by_source[source]
        assert entry.status == "invalid" and entry.failure_reason, name
        assert 0 not in entry.scores, f"{name} was run although validation rejected it"
    assert "hook_timeout" in by_source[HOSTILE["infinite_loop"]].failure_reason
    assert "MemoryError" in by_source[HOSTILE["memory_bomb"]].failure_reason
    late = by_source[LATE_HANG]
    assert late.status == "failed" and "hook_timeout" in late.failure_reason and late.score(0) == 0.0
    assert by_source[benign].status == "evaluated"  # evaluated in the same batch as the hanging one
    assert budget.spent == 3 * len(SPLITS.search)  # h0, LATE_HANG, benign: invalid ones cost nothing


class _KilledSampler:
    """Delegates to a real sampler, then dies on one generate call, like a killed process."""

    def __init__(self, sampler: Any, die_on_call: int):
        self.sampler, self.tokenizer, self.version, self.calls, self.die = sampler, sampler.tokenizer, 0, 0, die_on_call

    def generate(self, requests: Any, params: Any) -> Any:
        self.calls += 1
        if self.calls == self.die:
            raise KeyboardInterrupt("killed")
        return self.sampler.generate(requests, params)


def test_a_stage_killed_mid_evaluation_resumes_without_losing_or_redoing_work(tmp_path: Path,
                                                                            tiny_policy: Any) -> None:
    config = SearchConfig(iterations=2, candidates_per_iteration=2, **FAST)
    archive, budget = _archive(tmp_path), RolloutBudget(100)
    with pytest.raises(KeyboardInterrupt):  # call 1-2: h0 (two turns at most); later: iteration 0
        run_search_stage(DOMAIN, archive, ReflectiveProposer(DOMAIN.mechanisms(), seed=0),
                         _KilledSampler(tiny_policy.sampler, die_on_call=3), SPLITS.search, budget, config, 0, 0)
    reopened = Archive.open(tmp_path / "archive", "toy")
    pending = reopened.unevaluated(0)
    assert len(pending) == 2 and 0 in reopened.entry(reopened.seed_id()).scores  # stored before evaluation
    spent_before = budget.spent
    run_search_stage(DOMAIN, reopened, ReflectiveProposer(DOMAIN.mechanisms(), seed=0), tiny_policy.sampler,
                     SPLITS.search, budget, config, 0, 0)
    assert all(0 in reopened.entry(cid).scores for cid in pending)  # the same proposals, now evaluated
    assert len([e for e in reopened.entries() if 0 in e.scores]) == 5  # h0 not re-scored, no extra proposals
    assert budget.spent - spent_before == 4 * len(SPLITS.search)
    assert reopened.stage_progress("step0-w0")["iterations_done"] == 2


class _KilledBeforeMarkingDone(Archive):
    """Dies after an iteration's evaluations were recorded, before the iteration is marked done."""

    def set_stage_progress(self, key: str, progress: dict[str, Any]) -> None:
        if progress.get("iterations_done") == 1:
            raise KeyboardInterrupt
        super().set_stage_progress(key, progress)


def test_a_stage_killed_after_evaluating_but_before_marking_the_iteration_done_proposes_nothing_new(
        tmp_path: Path, tiny_policy: Any) -> None:
    config = SearchConfig(iterations=1, candidates_per_iteration=1, **FAST)
    candidate = H0 + "\n# candidate of iteration 0\n"
    archive = _KilledBeforeMarkingDone.open(tmp_path / "archive", "toy")
    archive.ensure_seed(H0)
    with pytest.raises(KeyboardInterrupt):
        run_search_stage(DOMAIN, archive, ScriptedProposer([[candidate]]), tiny_policy.sampler, SPLITS.search,
                         RolloutBudget(100), config, 0, 0)
    reopened = Archive.open(tmp_path / "archive", "toy")
    evaluated = [e.id for e in reopened.entries() if 0 in e.scores]
    assert len(evaluated) == 2  # h0 and the candidate, both recorded before the kill
    second_proposal = H0 + "\n# a different candidate that must never be proposed\n"
    proposer = ScriptedProposer([[second_proposal]])
    run_search_stage(DOMAIN, reopened, proposer, tiny_policy.sampler, SPLITS.search, RolloutBudget(100), config, 0, 0)
    assert proposer.batches == [[second_proposal]]  # not asked again: the iteration had finished its work
    assert [e.id for e in reopened.entries() if 0 in e.scores] == evaluated
    assert reopened.stage_progress("step0-w0")["iterations_done"] == 1


def test_the_stage_stops_cleanly_when_the_budget_cannot_cover_a_candidate(tmp_path: Path, tiny_policy: Any) -> None:
    archive, events = _archive(tmp_path), []
    budget = RolloutBudget(len(SPLITS.search) * 2)  # h0 and one candidate
    run_search_stage(DOMAIN, archive, ReflectiveProposer(DOMAIN.mechanisms(), seed=0), tiny_policy.sampler,
                     SPLITS.search, budget, SearchConfig(iterations=3, candidates_per_iteration=2, **FAST), 0, 0,
                     on_iteration=events.append)
    assert budget.remaining == 0 and events == []
    assert archive.stage_progress("step0-w0")["stopped"] == "budget"


# Reads the sum off the question, whatever the model says: a candidate that scores 1.0.
SOLVER = H0.replace("""        numbers = re.findall(r"-?\\d+", reply)""",
                    """        a, b = re.findall(r"-?\\d+", state.task.inputs["question"])[:2]
        numbers = [str(int(a) + int(b))]""")


@pytest.mark.parametrize("threshold, iterations_run", [(1.0, 1), (0.0, 3)])
def test_a_candidate_at_the_early_stop_success_rate_is_accepted_and_ends_the_stage(
        tmp_path: Path, tiny_policy: Any, threshold: float, iterations_run: int) -> None:
    """The authors' chess search: a candidate reaching 1.0 on the search split is accepted at
    once and the stage stops; 0 (the default) runs every iteration."""
    assert SOLVER != H0
    archive, events = _archive(tmp_path), []
    proposer = ScriptedProposer([[SOLVER], [H0 + "\n# second\n"], [H0 + "\n# third\n"]])
    config = SearchConfig(iterations=3, candidates_per_iteration=1, early_stop_success_rate=threshold, **FAST)
    accepted = run_search_stage(DOMAIN, archive, proposer, tiny_policy.sampler, SPLITS.search, RolloutBudget(100),
                                config, 0, 0, on_iteration=events.append)
    assert archive.entry(accepted).score(0) == 1.0 and archive.source(accepted) == SOLVER
    assert len(events) == iterations_run
    assert archive.stage_progress("step0-w0").get("stopped") == ("early_stop" if threshold else None)
    # a resumed stage that had stopped early proposes nothing more
    run_search_stage(DOMAIN, archive, proposer, tiny_policy.sampler, SPLITS.search, RolloutBudget(100), config, 0, 0)
    assert len(proposer.batches) == 3 - iterations_run


@pytest.mark.parametrize("domain_name, prototyping", [("chess", False), ("math", True), ("searchqa", True)])
def test_the_chess_proposer_gets_no_prototype_tool_as_the_authors_has_no_shell(tmp_path: Path, domain_name: str,
                                                                              prototyping: bool) -> None:
    """Their chess proposer may Read/Glob/Grep/Write/Edit only; search QA and math have Bash,
    which whalekit's sandboxed `prototype` tool stands in for."""
    from whalekit.domains.base import get_domain
    from whalekit.search.stage import _give_prototyper

    class WantsPrototyper:
        prototyper = None

    proposer = WantsPrototyper()
    _give_prototyper(proposer, get_domain(domain_name), None, SPLITS.search, RolloutBudget(10), _archive(tmp_path),
                     SearchConfig(), 0, 0)
    assert (proposer.prototyper is not None) == prototyping


def test_the_authors_m_3_candidates_per_iteration_is_the_code_default() -> None:
    assert SearchConfig().candidates_per_iteration == 3 and SearchConfig().early_stop_success_rate == 0.0


def test_search_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        SearchConfig(candidates_per_iteration=0)
    with pytest.raises(ValueError):
        SearchConfig(hook_timeout_s=0)
    with pytest.raises(ValueError, match="early_stop"):
        SearchConfig(early_stop_success_rate=1.5)


@pytest.mark.slow
def test_reflective_search_with_smollm2_beats_h0_on_the_search_split(tmp_path: Path, smollm_policy: Any) -> None:
    splits = DOMAIN.load_splits(n_train=8, n_search=16, n_test=8, seed=0)
    archive, budget = _archive(tmp_path), RolloutBudget(1000)
    accepted = run_search_stage(DOMAIN, archive, ReflectiveProposer(DOMAIN.mechanisms(), seed=0),
                                smollm_policy.sampler, splits.search, budget,
                                SearchConfig(iterations=6, candidates_per_iteration=4), weights_version=0, seed=0)
    h0_score, best_score = archive.entry(archive.seed_id()).score(0), archive.entry(accepted).score(0)
    assert best_score is not None and h0_score is not None and best_score > h0_score
    assert budget.spent == sum(len(splits.search) for e in archive.entries() if 0 in e.scores)


def test_a_proposer_that_repairs_its_candidates_is_given_the_stage_dry_run(tmp_path: Path, tiny_policy: Any) -> None:
    """The stage's own dry run (one canned episode in the sandbox), handed to a proposer with a
    `dry_run` slot, so a harness that fails it goes back to the model instead of being lost."""
    verdicts: dict[str, str | None] = {}

    class Repairing(ScriptedProposer):
        dry_run = None

        def propose(self, archive: Archive, n: int, budget: RolloutBudget | None = None) -> list[Candidate]:
            assert self.dry_run is not None
            verdicts.update({name: self.dry_run(source) for name, source in
                             (("h0", H0), ("sys_exit", HOSTILE["sys_exit"]))})
            return []

    run_search_stage(DOMAIN, _archive(tmp_path), Repairing([]), tiny_policy.sampler, SPLITS.search,
                     RolloutBudget(100), SearchConfig(iterations=1, candidates_per_iteration=1, **FAST),
                     weights_version=0, seed=0)
    assert verdicts["h0"] is None and verdicts["sys_exit"] is not None
