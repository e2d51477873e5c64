"""Math takes separate test files (`test_paths`), as search QA does: train and search on one
source, test on another (the paper: DAPO for training, AIME 2024/2025 for testing), each
test file its own sub-dataset, and no test problem ever in training or search."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from whalekit.domains.math import MathDomain
from whalekit.domains.math.data import question_key, source_for

FIXTURES = Path(__file__).parent / "fixtures" / "math"
AIME = [str(FIXTURES / "aime24.jsonl"), str(FIXTURES / "aime25.jsonl")]


def test_test_files_are_the_test_split_each_its_own_subset():
    splits = MathDomain().load_splits(n_train=2, n_search=1, n_test=3, seed=0, source="gsm8k",
                                      path=str(FIXTURES / "gsm8k.jsonl"), test_paths=AIME)
    assert {t.subset for t in splits.test} == {"aime24", "aime25"}
    assert sum(t.subset == "aime24" for t in splits.test) == 1  # a smaller file is used whole
    assert sum(t.subset == "aime25" for t in splits.test) == 3  # n_test from each file
    assert {t.subset for t in splits.train + splits.search} == {"gsm8k"}
    assert len(splits.train) == 2 and len(splits.search) == 1


def test_without_test_paths_the_test_split_comes_from_the_same_source():
    splits = MathDomain().load_splits(n_train=1, n_search=1, n_test=1, seed=0, source="gsm8k",
                                      path=str(FIXTURES / "gsm8k.jsonl"))
    assert {t.subset for t in splits.train + splits.search + splits.test} == {"gsm8k"}


def test_a_problem_in_a_test_file_never_reaches_training_or_search(tmp_path):
    aime = [json.loads(line) for line in (FIXTURES / "aime25.jsonl").read_text().splitlines() if line.strip()]
    pool = tmp_path / "dapo.jsonl"  # the training file repeats a test problem (one the AIME loader needs not repair)
    rows = [{"prompt": [{"role": "user", "content": aime[0]["problem"]}], "reward_model": {"ground_truth": "70"}}]
    rows += [{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "reward_model": {"ground_truth": 2 * i}}
             for i in range(7)]
    pool.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    splits = MathDomain().load_splits(n_train=4, n_search=2, n_test=4, seed=1, source="dapo", path=str(pool),
                                      test_paths=[str(FIXTURES / "aime25.jsonl")])
    test_keys = {question_key(t.inputs["question"]) for t in splits.test}
    assert len(test_keys) == 4
    assert not test_keys & {question_key(t.inputs["question"]) for t in splits.train + splits.search}
    with pytest.raises(ValueError, match="need 8 distinct items"):  # 7 left once the test problem is out
        MathDomain().load_splits(n_train=6, n_search=2, n_test=4, seed=1, source="dapo", path=str(pool),
                                 test_paths=[str(FIXTURES / "aime25.jsonl")])


def test_generated_training_problems_with_real_test_files():
    splits = MathDomain().load_splits(n_train=8, n_search=4, n_test=2, seed=0, test_paths=AIME[1])
    assert len(splits.train) == 8 and len(splits.search) == 4
    assert [t.subset for t in splits.test] == ["aime25", "aime25"]


def test_the_test_file_format_comes_from_its_name_or_test_source(tmp_path):
    assert source_for("data/AIME_2024.jsonl") == "aime" and source_for("gsm8k/test.jsonl") == "gsm8k"
    odd = tmp_path / "held_out.jsonl"
    odd.write_text((FIXTURES / "aime25.jsonl").read_text())
    with pytest.raises(ValueError, match="set test_source"):
        MathDomain().load_splits(n_train=2, n_search=1, n_test=2, test_paths=[str(odd)])
    splits = MathDomain().load_splits(n_train=2, n_search=1, n_test=2, test_paths=[str(odd)], test_source="aime")
    assert len(splits.test) == 2
