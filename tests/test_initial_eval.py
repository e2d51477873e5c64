"""Cheaper runs without weaker numbers: the initial evaluation is made once per (domain,
seed) and shared by every method; the evaluations between the first and the last may take
fewer samples per problem, the final one never does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import whalekit.run.driver as whale
import whalekit.run.evaluation as evaluation
from whalekit.infra.runs import without_timings
from whalekit.run.driver import resolve_config, run_method
from whalekit.run.initial_eval import STORE, InitialEvalStore
from whalekit.samplers.models import load_policy


def _config(root: Path, method: str, **overrides):
    return resolve_config("smoke", domain="toy", method=method, runs_root=str(root), **overrides)


@pytest.fixture
def evaluated(monkeypatch):
    """The evaluation indices each run computed (not copied), in order."""
    made: list[tuple[int, int]] = []
    real = evaluation.evaluate_test

    def counting(domain, harness, sampler, tasks, k, sampling, seed, index, *args, **kwargs):
        made.append((index, k))
        return real(domain, harness, sampler, tasks, k, sampling, seed, index, *args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate_test", counting)
    return made


def test_the_second_method_of_a_domain_and_seed_copies_the_initial_evaluation(tmp_path, evaluated):
    first = run_method(_config(tmp_path, "weight_only"))
    computed_by_first = [index for index, _ in evaluated]
    evaluated.clear()
    second = run_method(_config(tmp_path, "harness_only"))
    assert computed_by_first[0] == 0, "the first run makes the initial evaluation"
    assert 0 not in [index for index, _ in evaluated], "the second run must copy it, not sample it again"
    initial = Path("test") / "eval-000.jsonl"
    assert (second.root / initial).read_bytes() == (first.root / initial).read_bytes()
    a, b = first.events("test_eval")[0], second.events("test_eval")[0]
    assert without_timings([a]) == without_timings([b])
    assert len(list((tmp_path / STORE).iterdir())) == 1


def test_another_seed_or_starting_harness_is_another_initial_evaluation(tmp_path, evaluated):
    run_method(_config(tmp_path, "weight_only", seed=0))
    run_method(_config(tmp_path, "weight_only", seed=1))
    run_method(_config(tmp_path, "harness_only", seed=0, initial_harness="h0_faithful"))  # same source as h0
    assert len(list((tmp_path / STORE).iterdir())) == 2
    assert [index for index, _ in evaluated].count(0) == 2


def test_a_run_handed_a_policy_object_neither_reads_nor_writes_the_shared_store(tmp_path, evaluated):
    run_method(_config(tmp_path, "weight_only"), policy=load_policy("tiny-random"))
    run_method(_config(tmp_path, "harness_only"), policy=load_policy("tiny-random"))
    assert not (tmp_path / STORE).exists()
    assert [index for index, _ in evaluated].count(0) == 2


def test_a_set_s_committed_store_gives_every_tier_and_machine_one_initial_evaluation(tmp_path, evaluated,
                                                                                      monkeypatch):
    store = tmp_path / "results" / "initial-eval"
    first = run_method(_config(tmp_path / "main", "weight_only", initial_eval_store=str(store)))
    evaluated.clear()
    monkeypatch.setattr(evaluation, "cpu_kind", lambda: "another CPU kind")  # another machine, same set
    grid = run_method(_config(tmp_path / "grid", "harness_only", initial_eval_store=str(store)))
    assert 0 not in [index for index, _ in evaluated], "another tier on another machine reads the committed one"
    initial = Path("test") / "eval-000.jsonl"
    assert (grid.root / initial).read_bytes() == (first.root / initial).read_bytes()
    (folder,) = (store / "toy").iterdir()
    assert folder.name.startswith("s0-")  # one per (domain, seed), named by its seed
    made_by = json.loads((folder / "inputs.json").read_text())["made_by"]
    assert set(made_by) == {"source_sha256", "cpu_kind"} and made_by["cpu_kind"] != "another CPU kind"
    assert not (tmp_path / "main" / STORE).exists() and not (tmp_path / "grid" / STORE).exists()


def test_a_relative_store_is_the_repository_s_from_any_working_directory(tmp_path, monkeypatch):
    from whalekit.run.initial_eval import CHECKOUT, store_folder

    monkeypatch.chdir(tmp_path)  # a notebook kernel's notebooks/, say
    assert store_folder("results/cpu-v3/initial-eval") == CHECKOUT / "results" / "cpu-v3" / "initial-eval"
    assert store_folder(tmp_path / "mine") == tmp_path / "mine"  # an absolute one stays where it is
    config = _config(tmp_path, "weight_only", initial_eval_store="results/cpu-v3/initial-eval")
    assert resolve_config("cpu-v3", domain="math", method="whale", check_data=False).initial_eval_store \
        == "results/cpu-v3/initial-eval" == config.initial_eval_store  # the config keeps what was written


def test_a_store_cut_off_before_its_metrics_counts_as_absent(tmp_path):
    store = InitialEvalStore(tmp_path, "abc")
    store.folder.mkdir(parents=True)
    (store.folder / "test.jsonl").write_text('{"task_id": "t"}\n')
    assert store.load() is None


@pytest.mark.parametrize("method", ["whale", "weight_only", "harness_only"])
def test_intermediate_evaluations_take_fewer_samples_and_the_first_and_final_take_eval_k(tmp_path, method,
                                                                                        monkeypatch):
    # The tiny random model never solves a problem, so its stages rarely change the agent; here
    # every stage counts as a change, as with a model that learns.
    monkeypatch.setattr(whale._Driver, "changed_since_evaluation", lambda self, state: True)
    run = run_method(_config(tmp_path, method, eval_k=4, eval_k_intermediate=2, budget=160),
                     policy=load_policy("tiny-random"))
    evals = run.events("test_eval")
    assert [e["reason"] for e in evals][0] == "initial" and evals[-1]["reason"] == "final"
    assert evals[0]["k"] == 4 and evals[-1]["k"] == 4
    assert all(e["k"] == 2 for e in evals[1:-1]) and len(evals) >= 3
    assert evals[-1]["rollouts"] == run.events("run_end")[-1]["rollouts"]
    assert run.events("run_end")[-1]["final_mean_at_k"] == evals[-1]["mean_at_k"]
    lines = (run.root / "test" / f"eval-{evals[1]['index']:03d}.jsonl").read_text().splitlines()
    assert len(lines) == 2 * evals[1]["n_tasks"]
    # the last stage is evaluated once, by "final": no mean@2 evaluation at the final rollout count
    assert evals[-2]["rollouts"] < evals[-1]["rollouts"]


def test_without_eval_k_intermediate_every_evaluation_takes_eval_k(tmp_path):
    run = run_method(_config(tmp_path, "whale", eval_k=3), policy=load_policy("tiny-random"))
    assert {e["k"] for e in run.events("test_eval")} == {3}


def test_eval_k_intermediate_above_eval_k_is_refused(tmp_path):
    with pytest.raises(ValueError, match="eval_k_intermediate"):
        _config(tmp_path, "whale", eval_k=2, eval_k_intermediate=4)
