"""The WHALE driver: every method within one budget, test data sealed off, resumable runs."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import whalekit.run.driver as whale
import whalekit.run.evaluation as evaluation
import whalekit.run.phases.search as search_phase
from whalekit.infra.runs import RunDir, without_timings
from whalekit.run.driver import resolve_config, run_method
from whalekit.samplers.models import load_policy

METHODS = ["whale", "weight_only", "harness_only", "stagewise", "stagewise_reverse", "fst", "adaptive"]


def _config(tmp_path: Path, method: str, **overrides):
    return resolve_config("smoke", domain="toy", method=method, runs_root=str(tmp_path), **overrides)


@pytest.mark.timeout(2400)
def test_every_method_runs_end_to_end_and_ends_exactly_at_the_same_budget(tmp_path):
    spent = {}
    for method in METHODS:
        run = run_method(_config(tmp_path, method), policy=load_policy("tiny-random"))
        end = run.events("run_end")[-1]
        assert end["budget"] == 96
        assert end["rollouts"] <= end["budget"]
        spent[method] = end["rollouts"]
        evals = run.events("test_eval")
        assert len(evals) >= 2 and all(0.0 <= e["mean_at_k"] <= 1.0 for e in evals)
        assert all(e["k"] == 2 and e["n_tasks"] == 4 for e in evals)
        phases = {e["event"] for e in run.events()}
        if method == "weight_only":
            assert "search_iteration" not in phases and "rsft_batch" in phases
        if method == "harness_only":
            assert "rsft_batch" not in phases and "search_iteration" in phases
    assert set(spent.values()) == {96}, spent


class LedgerError(AssertionError):
    """The budget's ledger and the trajectories actually sampled disagree."""


@pytest.fixture
def ledger(monkeypatch):
    """Record, in order, every charge to a RolloutBudget, every batch of trajectories the
    RSFT, search and test-evaluation rollouts returned, and every event the driver logged."""
    import whalekit.rollouts.budget as budget_module
    import whalekit.search.stage as search
    import whalekit.weights.rsft as rsft

    entries: list[tuple[str, str, object]] = []
    charge = budget_module.RolloutBudget.charge

    def recorded_charge(self, n, phase):
        charge(self, n, phase)
        entries.append(("charge", phase, n))

    monkeypatch.setattr(budget_module.RolloutBudget, "charge", recorded_charge)
    for module, caller in ((rsft, "rsft"), (search, "search"), (evaluation, "test")):
        def recorded_rollout(*args, _original=module.rollout, _caller=caller, **kwargs):
            trajectories = _original(*args, **kwargs)
            entries.append(("sampled", _caller, len(trajectories)))
            return trajectories

        monkeypatch.setattr(module, "rollout", recorded_rollout)
    log = RunDir.log

    def recorded_log(self, event, **fields):
        record = log(self, event, **fields)
        entries.append(("event", event, record))
        return record

    monkeypatch.setattr(RunDir, "log", recorded_log)
    return entries


def check_ledger(entries) -> dict[str, int]:
    """The exact ledger: every RSFT or search rollout was charged, before it was sampled,
    exactly as many rollouts as it returned trajectories; a test evaluation was charged
    nothing; every event's `rollouts` is the number of training and search trajectories
    sampled so far; run_end's per-phase totals are the trajectories each phase sampled.
    Returns the trajectories sampled per caller; raises LedgerError at the first mismatch."""
    pending = charged = sampled = 0
    by_caller = {"rsft": 0, "search": 0, "test": 0}
    charged_by_phase: dict[str, int] = {}
    for kind, name, value in entries:
        if kind == "charge":
            pending += value
            charged += value
            charged_by_phase[name] = charged_by_phase.get(name, 0) + value
        elif kind == "sampled":
            by_caller[name] += value
            if name == "test":
                if pending:
                    raise LedgerError(f"a test evaluation of {value} trajectories was charged {pending} rollouts")
                continue
            if pending != value:
                raise LedgerError(f"{name} sampled {value} trajectories but was charged {pending} for them")
            pending = 0
            sampled += value
        elif "rollouts" in value:
            if not value["rollouts"] == charged == sampled:
                raise LedgerError(f"{name}: the event says {value['rollouts']} rollouts spent, the budget was "
                                  f"charged {charged}, {sampled} training and search trajectories were sampled")
            if name == "run_end" and {k: v for k, v in value["by_phase"].items() if v} != charged_by_phase:
                raise LedgerError(f"run_end by_phase {value['by_phase']} != charges {charged_by_phase}")
    if pending:
        raise LedgerError(f"{pending} rollouts charged for trajectories never sampled")
    return by_caller


@pytest.mark.parametrize("method", ["whale", "adaptive"])
def test_every_phase_step_charges_exactly_the_trajectories_it_sampled_and_test_evaluation_nothing(tmp_path, ledger,
                                                                                                  method):
    run = run_method(_config(tmp_path, method), policy=load_policy("tiny-random"))
    sampled = check_ledger(ledger)
    evals = run.events("test_eval")
    assert sampled["rsft"] and sampled["search"]
    assert sampled["test"] == sum(e["k"] * e["n_tasks"] for e in evals) == len(evals) * 2 * 4
    assert run.events("run_end")[-1]["rollouts"] == sampled["rsft"] + sampled["search"] == 96
    assert sum(e["sampled"] for e in run.events("rsft_batch")) == sampled["rsft"]


def _charges_search_twice(charge):
    """A broken budget: a search evaluation is charged twice where the budget can pay for it."""

    def broken_charge(budget, n, phase):
        charge(budget, n, phase)
        if phase == "search" and budget.can_afford(n):
            charge(budget, n, phase)

    return broken_charge


class _ChargesTestEvaluation(whale._Driver):
    """A broken driver: test evaluations are charged to the training budget."""

    def evaluate(self, state, reason):
        cost = self.config.eval_k * len(self.splits.test)
        if self.budget.can_afford(cost):
            self.budget.charge(cost, "test")
        super().evaluate(state, reason)


@pytest.mark.parametrize("broken", ["charges_twice", "charges_test_evaluation"])
def test_the_ledger_check_fails_when_charging_is_broken(tmp_path, ledger, monkeypatch, broken):
    import whalekit.rollouts.budget as budget_module

    if broken == "charges_twice":
        monkeypatch.setattr(budget_module.RolloutBudget, "charge",
                            _charges_search_twice(budget_module.RolloutBudget.charge))
    else:
        monkeypatch.setattr(whale, "_Driver", _ChargesTestEvaluation)
    run = run_method(_config(tmp_path, "whale"), policy=load_policy("tiny-random"))
    assert run.done  # the run itself ends normally: only the ledger shows the bug
    match = "charged" if broken == "charges_twice" else "test evaluation .* was charged"
    with pytest.raises(LedgerError, match=match):
        check_ledger(ledger)


def test_a_finished_run_is_reused_not_recomputed(tmp_path, monkeypatch):
    config = _config(tmp_path, "weight_only", budget=32)
    run_method(config, policy=load_policy("tiny-random"))
    monkeypatch.setattr(whale, "_Driver", None)  # any recomputation would now fail
    assert run_method(config).done


def test_a_finished_run_is_not_passed_off_as_the_result_of_a_changed_configuration(tmp_path):
    run_method(_config(tmp_path, "weight_only", budget=32), policy=load_policy("tiny-random"))
    with pytest.raises(whale.StaleRunError, match=r"budget.rollouts: 32 -> 48"):
        run_method(_config(tmp_path, "weight_only", budget=48))
    with pytest.raises(whale.StaleRunError, match=r"rsft\.lora_r: 16 -> 4"):
        run_method(_config(tmp_path, "weight_only", budget=32, rsft={"lora_r": 4}))


def test_a_run_recorded_before_a_config_field_existed_is_reused_when_the_field_is_at_its_default(tmp_path):
    config = _config(tmp_path, "weight_only", budget=32)
    run = run_method(config, policy=load_policy("tiny-random"))
    recorded = run.config()
    del recorded["vllm_options"], recorded["rsft"]["train_dtype"]  # as written by an older whalekit
    run.write_config(recorded)
    assert whale.config_changes(config) == [] and run_method(config).done


def test_test_tasks_never_reach_training_search_or_the_proposer(tmp_path, monkeypatch):
    import whalekit.search.stage as search
    import whalekit.weights.rsft as rsft

    seen: dict[str, set[str]] = {"rsft": set(), "search": set()}

    def spy(module, name):
        original = module.rollout

        def wrapped(domain, episodes, *args, **kwargs):
            seen[name].update(e.task.id for e in episodes)
            return original(domain, episodes, *args, **kwargs)

        monkeypatch.setattr(module, "rollout", wrapped)

    spy(rsft, "rsft")
    spy(search, "search")
    config = _config(tmp_path, "whale")
    run = run_method(config, policy=load_policy("tiny-random"))
    from whalekit.domains.base import get_domain

    splits = get_domain("toy").load_splits(config.n_train, config.n_search, config.n_test, seed=config.seed)
    test_ids = {t.id for t in splits.test}
    assert seen["rsft"] and seen["search"]
    assert not (seen["rsft"] | seen["search"]) & test_ids
    assert seen["rsft"] <= {t.id for t in splits.train} and seen["search"] <= {t.id for t in splits.search}
    archive_text = "".join(p.read_text() for p in (run.root / "archive").rglob("*") if p.is_file())
    assert not any(f'"{tid}"' in archive_text for tid in test_ids)


def test_adaptive_switching_never_depends_on_test_scores(tmp_path, monkeypatch):
    first = run_method(_config(tmp_path / "a", "adaptive"), policy=load_policy("tiny-random"))
    original = evaluation.evaluate_test

    def flipped(*args, **kwargs):
        trajectories = original(*args, **kwargs)
        for t in trajectories:
            t.correct, t.reward = not t.correct, 1.0 - t.reward
        return trajectories

    monkeypatch.setattr(evaluation, "evaluate_test", flipped)
    second = run_method(_config(tmp_path / "b", "adaptive"), policy=load_policy("tiny-random"))
    training = lambda run: [e for e in without_timings(run.events()) if e["event"] not in ("test_eval", "run_end")]
    assert training(first) == training(second)
    assert [e["mean_at_k"] for e in first.events("test_eval")] != [e["mean_at_k"] for e in second.events("test_eval")]


@pytest.mark.slow
@pytest.mark.parametrize("dies_at", [1, 2, 3])  # h0's rescoring, then the first iterations' evaluations
def test_a_run_killed_right_after_a_search_evaluation_was_recorded_resumes_to_the_same_events(tmp_path, monkeypatch,
                                                                                             dies_at):
    """The window between the archive recording an evaluation and the driver committing the
    step: the resumed run must neither redo nor re-propose, nor spend a rollout more."""
    import whalekit.search.stage as search

    straight = run_method(_config(tmp_path / "straight", "whale"), policy=load_policy("tiny-random"))
    original, calls = search.evaluate_candidates, []

    def dies_after_recording(*args, **kwargs):
        scores = original(*args, **kwargs)
        calls.append(1)
        if len(calls) == dies_at:
            raise KeyboardInterrupt
        return scores

    monkeypatch.setattr(search, "evaluate_candidates", dies_after_recording)
    with pytest.raises(KeyboardInterrupt):
        run_method(_config(tmp_path / "killed", "whale"), policy=load_policy("tiny-random"))
    monkeypatch.setattr(search, "evaluate_candidates", original)
    resumed = run_method(_config(tmp_path / "killed", "whale"), policy=load_policy("tiny-random"))
    assert without_timings(resumed.events()) == without_timings(straight.events())


def test_the_driver_commits_a_typed_state_and_resumes_a_schema_1_one_to_the_same_events(tmp_path, monkeypatch):
    """state.json is a RunState (schema 2); a run killed under the former dict (schema 1)
    resumes from it to the events of a run never killed."""
    from whalekit.run.state import SCHEMA_VERSION, RunState

    straight = run_method(_config(tmp_path / "straight", "whale"), policy=load_policy("tiny-random"))
    assert straight.state()["schema_version"] == SCHEMA_VERSION == 2
    assert RunState.from_json(straight.state()).finished
    original, commits = whale._Driver.commit, []

    def dies_after_the_fourth_commit(self, state):
        assert isinstance(state, RunState)
        original(self, state)
        commits.append(state.step)
        if len(commits) == 4:
            raise KeyboardInterrupt

    monkeypatch.setattr(whale._Driver, "commit", dies_after_the_fourth_commit)
    killed = _config(tmp_path / "killed", "whale")
    with pytest.raises(KeyboardInterrupt):
        run_method(killed, policy=load_policy("tiny-random"))
    monkeypatch.setattr(whale._Driver, "commit", original)
    state_path = killed.run_dir / "state.json"
    old = {**json.loads(state_path.read_text()), "schema_version": 1}  # as the former driver wrote it
    state_path.write_text(json.dumps(old))
    assert not RunDir(killed.run_dir).done and commits[-1] > 0
    resumed = run_method(killed, policy=load_policy("tiny-random"))
    assert without_timings(resumed.events()) == without_timings(straight.events())
    assert resumed.state()["schema_version"] == 2


_RUN_SCRIPT = """
import sys
from whalekit.run.driver import resolve_config, run_method
run_method(resolve_config("smoke", domain="toy", method="whale", runs_root=sys.argv[1]))
"""


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_a_run_killed_at_random_points_resumes_to_the_same_events(tmp_path):
    env = dict(os.environ, PYTHONHASHSEED="0")
    straight = tmp_path / "straight"
    subprocess.run([sys.executable, "-c", _RUN_SCRIPT, str(straight)], check=True, env=env, capture_output=True)
    killed = tmp_path / "killed"
    rng = random.Random(1)
    kills = 0
    events = RunDir(killed / "smoke" / "toy" / "whale-0.5,2-s0").events_path
    for _ in range(4):
        process = subprocess.Popen([sys.executable, "-c", _RUN_SCRIPT, str(killed)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        target = (events.read_text().count("\n") if events.exists() else 0) + rng.randint(1, 4)
        deadline = time.time() + 300
        while process.poll() is None and time.time() < deadline:
            if events.exists() and events.read_text().count("\n") >= target:
                time.sleep(rng.uniform(0.0, 1.5))
                process.send_signal(signal.SIGKILL)
                kills += 1
                break
            time.sleep(0.05)
        process.wait()
    subprocess.run([sys.executable, "-c", _RUN_SCRIPT, str(killed)], check=True, env=env, capture_output=True)
    assert kills >= 2
    a = RunDir(straight / "smoke" / "toy" / "whale-0.5,2-s0")
    b = RunDir(killed / "smoke" / "toy" / "whale-0.5,2-s0")
    assert without_timings(b.events()) == without_timings(a.events())
    assert json.loads((b.root / "state.json").read_text())["finished"]


def _stages(run) -> list[tuple[str, int]]:
    """(kind, steps) of every finished stage."""
    return [(e["kind"], e["steps"]) for e in run.events("stage_end")]


@pytest.mark.parametrize("count_incoming, proposer_iterations", [(True, 2), (False, 3)])
def test_i_counts_the_incoming_harness_as_iteration_1(tmp_path, count_incoming, proposer_iterations):
    """The authors' (E, I): I = 3 is the incoming harness's evaluation and 2 proposer iterations."""
    run = run_method(_config(tmp_path, "whale", schedule="0.5,3", budget=400,
                             search={"count_incoming": count_incoming}), policy=load_policy("tiny-random"))
    harness_stages = [e for e in run.events("stage_start") if e["kind"] == "harness"]
    assert harness_stages and {e["iterations"] for e in harness_stages} == {proposer_iterations}
    assert ("harness", proposer_iterations) in _stages(run)


def test_each_harness_phase_gets_a_fresh_archive_seeded_with_the_incoming_harness(tmp_path):
    from whalekit.search.archive import Archive, archive_folders

    run = run_method(_config(tmp_path, "whale", budget=200), policy=load_policy("tiny-random"))
    folders = archive_folders(run.root / "archive")
    assert [f.name for f in folders] == [f"round-{i:03d}" for i in range(1, len(folders) + 1)] and len(folders) >= 2
    accepted = [e["accepted_id"] for e in run.events("search_iteration")]
    for folder in folders:
        archive = Archive.open(folder, "toy")
        seeds = [e for e in archive.entries() if e.proposer == "seed"]
        assert len(seeds) == 1 and seeds[0].hypothesis == "the incoming harness"
        # The incoming harness and this round's candidates, all scored at one weights version.
        assert len({v for e in archive.entries() for v in e.scores}) == 1
        assert archive.accepted() in accepted
    # run scope: whalekit's former single archive across weight versions.
    single = run_method(_config(tmp_path / "run", "whale", budget=200, search={"archive_scope": "run"}),
                        policy=load_policy("tiny-random"))
    assert archive_folders(single.root / "archive") == [single.root / "archive"]


def test_weight_steps_budget_gives_equal_weight_steps_and_puts_search_on_top(tmp_path):
    budget = {"mode": "weight_steps", "weight_steps": 3, "search_iterations": 2}
    policy = load_policy("tiny-random")
    whale_run = run_method(_config(tmp_path, "whale", budget=budget), policy=policy)
    weight_run = run_method(_config(tmp_path, "weight_only", budget=budget), policy=load_policy("tiny-random"))
    for run in (whale_run, weight_run):
        assert len(run.events("rsft_batch")) == 3
        assert _stages(run)[-1][0] == "weight"  # the run ends after its last weight stage
        assert run.events("run_end")[-1]["budget"] is None
    assert whale_run.events("search_iteration")  # on top: whale samples more rollouts than weight_only
    assert whale_run.events("run_end")[-1]["rollouts"] > weight_run.events("run_end")[-1]["rollouts"]
    harness_run = run_method(_config(tmp_path, "harness_only", budget=budget), policy=load_policy("tiny-random"))
    assert len(harness_run.events("search_iteration")) == 2
    with pytest.raises(ValueError, match="search_iterations"):
        _config(tmp_path, "harness_only", budget={"mode": "weight_steps", "weight_steps": 3})


def test_adaptive_harness_stages_run_the_minimum_of_proposer_iterations(tmp_path):
    run = run_method(_config(tmp_path, "adaptive", budget=400, adaptive={"min_search_iterations": 2,
                                                                          "max_search_iterations": 3}),
                     policy=load_policy("tiny-random"))
    harness = [steps for kind, steps in _stages(run) if kind == "harness"]
    assert harness and all(2 <= steps <= 3 for steps in harness[:-1])  # the last may stop for the budget


class _PrototypingProposer:
    """The reflective proposer, plus one prototype run of the seed harness before each
    proposal: what an LLM proposer does with its prototyping tool."""

    def __init__(self, inner):
        self.reflective, self.prototyper, self.prototyped = inner, None, 0
        self.name = inner.name

    def propose(self, archive, n, budget=None):
        run = self.prototyper(archive.source(archive.seed_id()), n=2)
        self.prototyped += len(run.trajectories)
        return self.reflective.propose(archive, n, budget)

    def context(self, archive):
        return self.reflective.context(archive)


def test_a_proposers_prototype_runs_stay_charged_to_the_budget_across_harness_steps(tmp_path, monkeypatch):
    from whalekit.search.proposers.prototype import prototype_rollouts

    made = []

    def prototyping(*args, **kwargs):
        made.append(_PrototypingProposer(original(*args, **kwargs)))
        return made[-1]

    original = search_phase.make_proposer
    monkeypatch.setattr(search_phase, "make_proposer", prototyping)
    run = run_method(_config(tmp_path, "harness_only"), policy=load_policy("tiny-random"))
    prototyped = sum(p.prototyped for p in made)
    assert prototyped >= 4 and prototype_rollouts(run.root / "archive") == prototyped  # two steps or more
    end = run.events("run_end")[-1]
    assert end["by_phase"]["prototype"] == prototyped
    assert end["rollouts"] == sum(end["by_phase"].values()) <= end["budget"]


class _EmptyProposer:
    """Proposes nothing: every harness iteration is empty."""

    name = "empty"

    def propose(self, archive, n, budget=None):
        return []

    def context(self, archive):
        return ""


def test_an_iteration_without_a_new_candidate_counts_and_the_harness_phase_goes_on(tmp_path, monkeypatch):
    """As in the authors' search QA and math searches, an iteration that yields no candidate
    still counts: the phase runs its I - 1 proposer iterations; a phase of only empty
    iterations says so, changes nothing, and is not evaluated."""
    monkeypatch.setattr(search_phase, "make_proposer", lambda *args, **kwargs: _EmptyProposer())
    run = run_method(_config(tmp_path, "whale", schedule="0.5,3", budget=96), policy=load_policy("tiny-random"))
    harness_ends = [e for e in run.events("stage_end") if e["kind"] == "harness"]
    assert harness_ends and all(e["empty"] and e["empty_steps"] == e["steps"] for e in harness_ends)
    assert all(e["steps"] == 2 for e in harness_ends if not e.get("budget_exhausted"))
    assert all(e["empty"] and e["candidates_evaluated"] == 0 for e in run.events("search_iteration"))
    kinds = [e["event"] for e in run.events()]
    for i, event in enumerate(run.events()):
        if event["event"] == "stage_end" and event["kind"] == "harness":
            assert kinds[i + 1] != "test_eval"  # nothing changed: no evaluation
    # harness_only with a proposer that never proposes stops after two empty phases
    idle = run_method(_config(tmp_path / "idle", "harness_only"), policy=load_policy("tiny-random"))
    assert [(e["kind"], e["steps"], e["empty"]) for e in idle.events("stage_end")] == [("harness", 1, True)] * 2


def test_a_search_budget_of_rounds_gives_every_round_even_after_empty_ones(tmp_path, monkeypatch):
    """In weight_steps mode harness_only has its proposer iterations, as WHALE's harness
    phases have theirs: a proposer whose candidates all failed in two rounds in a row (an LLM
    proposer's bad luck) still gets the rest, and the run ends at the cap."""
    monkeypatch.setattr(search_phase, "make_proposer", lambda *args, **kwargs: _EmptyProposer())
    budget = {"mode": "weight_steps", "weight_steps": 1, "search_iterations": 5}
    run = run_method(_config(tmp_path, "harness_only", budget=budget), policy=load_policy("tiny-random"))
    iterations = run.events("search_iteration")
    assert len(iterations) == 5 and all(e["empty"] for e in iterations)
    assert run.events("run_end")[-1]["rollouts"] == run.events("run_end")[-1]["by_phase"].get("search", 0)


@pytest.mark.parametrize("method", ["weight_only", "whale"])
def test_the_final_evaluation_comes_after_the_last_rollout_and_a_stage_cut_by_the_budget_is_closed(tmp_path,
                                                                                                   method):
    """88 rollouts end the smoke run inside a stage: the stage ends (stage_end), the weights or
    harness it changed are evaluated, and run_end's final figure is that evaluation."""
    run = run_method(_config(tmp_path, method, budget=88), policy=load_policy("tiny-random"))
    events = run.events()
    assert len(run.events("stage_start")) == len(run.events("stage_end"))
    last_eval = max(i for i, e in enumerate(events) if e["event"] == "test_eval")
    changes = [e for e in events[last_eval:] if e["event"] == "rsft_batch"
               or (e["event"] == "search_iteration" and not e["empty"])]
    assert not changes, f"rollouts changed the agent after the final evaluation: {changes}"
    end = run.events("run_end")[-1]
    assert end["rollouts"] == 88 and end["final_mean_at_k"] == events[last_eval]["mean_at_k"]
    assert events[-1]["event"] == "run_end" and events[-2]["event"] == "test_eval"
    assert run.events("stage_end")[-1].get("budget_exhausted") is True


def _agents(run) -> list[tuple[int, str, int]]:
    return [(e["weights_version"], e["accepted_id"], e["k"]) for e in run.events("test_eval")]


def test_with_eval_between_changed_agent_a_harness_only_run_never_evaluates_an_unchanged_agent(tmp_path):
    """The records' rule evaluates after every productive stage, even a search stage that
    accepted nothing; `eval_between: changed_agent` evaluates only an agent that changed, and
    the final evaluation only to raise k. The stage decomposition reads the same changes."""
    from whalekit.report.run_summaries import load_run
    from whalekit.report.stage_effects import stage_effects

    budget = {"rollouts": 192}
    records = run_method(_config(tmp_path / "records", "harness_only", budget=budget, eval_k_intermediate=1),
                         policy=load_policy("tiny-random"))
    changed = run_method(_config(tmp_path / "changed", "harness_only", budget=budget, eval_k_intermediate=1,
                                 eval_between="changed_agent"), policy=load_policy("tiny-random"))
    old, new = _agents(records), _agents(changed)
    repeats = [b for a, b in zip(old, old[1:]) if a[:2] == b[:2] and a[2] == b[2]]
    assert repeats, "the records' rule re-evaluated no unchanged agent here: the comparison shows nothing"
    for before, after in zip(new, new[1:]):
        assert before[:2] != after[:2] or after[2] > before[2], (before, after)
    assert len(new) < len(old)
    # Same run otherwise: the same stages, the same accepted harnesses, the same rollouts.
    strip = lambda run: [(e["event"], e.get("rollouts")) for e in run.events() if e["event"] != "test_eval"]  # noqa: E731
    assert strip(records) == strip(changed)
    effects = stage_effects(load_run(changed.root))
    assert [e.evaluated for e in effects].count(False) >= len(repeats)  # the stages it did not re-evaluate
