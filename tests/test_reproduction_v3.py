"""Reproduction v3 (docs/reproduction-v3.md): its preset has the pre-registered sizes, its design
reads no test number, and an evaluation of one agent at one seed is one number."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from whalekit.domains.toy import ToyDomain
from whalekit.repro.calibration import (
    CalibratedOnTestError,
    add_arguments,
    check_calibration_splits,
    run_from_arguments,
)
from whalekit.rollouts.engine import InProcessHarness
from whalekit.run.config import resolve_config
from whalekit.run.evaluation import evaluate_test
from whalekit.samplers.base import SamplingParams
from whalekit.samplers.models import load_policy

ROOT = Path(__file__).resolve().parents[1]
H0 = "from whalekit.harness import Harness\n\n\nclass H(Harness):\n    max_new_tokens = 16\n"


@pytest.mark.parametrize("domain", ["math", "searchqa"])
def test_the_v3_preset_has_the_pre_registered_sizes(domain):
    config = resolve_config("cpu-v3", domain=domain, method="whale", check_data=False)
    assert config.schedule == (0.6, 6) and config.search.candidates_per_iteration == 2
    assert config.search.proposer_iterations(6) == 5  # the authors' I counting: the incoming harness is 1
    rsft_rollouts = round(0.6 * config.n_train) * config.rsft.samples_per_problem
    search_rollouts = config.n_search + 5 * 2 * config.n_search
    assert (rsft_rollouts, search_rollouts) == (576, 528)  # the weight stage at least the harness stage
    cycle = rsft_rollouts + search_rollouts
    assert config.budget.rollout_total == 3 * cycle  # three WHALE cycles
    epochs = config.budget.rollout_total / (config.n_train * config.rsft.samples_per_problem)
    assert epochs <= 5  # weight-only's budget in epochs
    assert config.eval_between == "changed_agent"


def test_v3_calibration_records_name_design_splits_only(tmp_path):
    committed = ROOT / "results" / "calibration" / "cpu-v3"
    check_calibration_splits(committed)  # whatever is committed passes
    (tmp_path / "math.json").write_text(json.dumps({"split": "search", "domain": "math"}))
    assert check_calibration_splits(tmp_path) == [tmp_path / "math.json"]
    (tmp_path / "searchqa.json").write_text(json.dumps({"split": "test", "domain": "searchqa"}))
    with pytest.raises(CalibratedOnTestError, match="searchqa.json"):
        check_calibration_splits(tmp_path)


def test_calibrating_the_v3_preset_on_the_test_split_is_refused_before_anything_loads():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--preset", "cpu-v3", "--split", "test"])
    with pytest.raises(CalibratedOnTestError, match="--split search"):
        run_from_arguments("math", args)
    assert parser.parse_args(["--preset", "cpu-v3"]).split is None  # resolved to search for cpu-v3, test for v2


def test_two_evaluations_of_the_same_agent_at_the_same_seed_agree():
    """On the transformers sampler an evaluation is a function of (weights, harness, tasks,
    seed); vLLM's continuous batching is not (docs/reproduction-v3.md, the initial evaluation),
    which is why v3 computes the initial evaluation once and shares it."""
    policy = load_policy("tiny-random")
    domain = ToyDomain()
    tasks = domain.load_splits(0, 0, 4, seed=0).test
    runs = [evaluate_test(domain, InProcessHarness(H0), policy.sampler, tasks, k=2, sampling=SamplingParams(),
                          seed=0, index=0) for _ in range(2)]
    assert [t.turns[0].completion_ids for t in runs[0]] == [t.turns[0].completion_ids for t in runs[1]]
    assert [t.correct for t in runs[0]] == [t.correct for t in runs[1]]
    other = evaluate_test(domain, InProcessHarness(H0), policy.sampler, tasks, k=2, sampling=SamplingParams(),
                          seed=1, index=0)
    assert [t.turns[0].completion_ids for t in other] != [t.turns[0].completion_ids for t in runs[0]]
