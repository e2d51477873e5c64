"""The paper preset, specified on CPU with small stand-in files: the GPU memory split between
vLLM and the trainer, the trainer's dtype, and search QA's seven test sets as sub-datasets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from whalekit.cli.config import parse_overrides
from whalekit.domains.searchqa import SearchQADomain
from whalekit.run.driver import _Driver, resolve_config

TEST_SETS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def paper_data(tmp_path, monkeypatch):
    """$WHALEKIT_DATA laid out as the paper preset expects, in FlashRAG's row format (ids
    numbered alike in every file). Bamboogle has a single question; one NQ test question
    also occurs in the NQ training file."""
    data = tmp_path / "data"
    monkeypatch.setenv("WHALEKIT_DATA", str(data))
    monkeypatch.setenv("WHALEKIT_CACHE", str(tmp_path / "cache"))
    for name in ("hotpotqa", "nq"):
        _jsonl(data / "searchqa" / "train" / f"{name}.jsonl",
               [{"id": f"train_{i}", "question": f"{name} training question {i}?", "golden_answers": [f"a{i}"]}
                for i in range(6)] + ([{"id": "train_6", "question": "Who wrote the test question?",
                                        "golden_answers": ["x"]}] if name == "nq" else []))
    for name in TEST_SETS:
        count = 1 if name == "bamboogle" else 3
        _jsonl(data / "searchqa" / "test" / f"{name}.jsonl",
               [{"id": f"test_{i}", "question": f"{name} test question {i}?", "golden_answers": ["y"]}
                for i in range(count)] + ([{"id": "test_9", "question": "Who wrote the test question?",
                                            "golden_answers": ["x"]}] if name == "nq" else []))
    _jsonl(data / "wiki" / "corpus.jsonl", [{"id": str(i), "title": f"T{i}", "text": f"text {i}"} for i in range(5)])
    return data


# --- the memory split and the trainer's dtype ----------------------------------------------


def test_paper_preset_gives_vllm_a_configurable_share_of_the_gpu(paper_data):
    config = resolve_config("paper", "searchqa", "whale")
    assert config.sampler == "vllm"
    assert config.vllm_options == {"gpu_memory_fraction": 0.35, "max_model_len": 16384}
    assert config.rsft.train_dtype == "auto"  # bf16 on CUDA
    raised = resolve_config("paper", "searchqa", "whale",
                            **parse_overrides(["vllm_options.gpu_memory_fraction=0.5", "rsft.train_dtype=float32"]))
    assert raised.vllm_options == {"gpu_memory_fraction": 0.5, "max_model_len": 16384}  # one key changed
    assert raised.rsft.train_dtype == "float32"
    assert raised.to_json()["vllm_options"]["gpu_memory_fraction"] == 0.5  # recorded in config.json


def test_paper_preset_samples_on_seven_gpus_and_keeps_the_eighth_for_the_trainer():
    for domain in ("searchqa", "math", "chess"):
        config = resolve_config("paper", domain, "whale", check_data=False)
        backend = config.backend  # a BackendConfig: its own checks ran
        assert (backend.kind, backend.address) == ("ray", "auto")  # joins the cluster started without GPU 0
        assert backend.num_workers * backend.gpus_per_worker + 1 == 8  # the authors' node of eight GPUs
        # a sampled RSFT batch goes out in one round of chunks, one per worker
        assert backend.num_workers * backend.worker_capacity >= \
            config.rsft.batch_problems * config.rsft.samples_per_problem
    one_gpu = resolve_config("paper", "math", "whale", check_data=False, **parse_overrides(["backend.kind=local"]))
    assert one_gpu.backend.kind == "local"


def test_the_driver_hands_vllm_options_to_load_policy(tmp_path, monkeypatch):
    import whalekit.samplers.models

    calls = []

    class Loaded(Exception):
        pass

    def fake_load_policy(spec, **kwargs):  # no engine is started: record the call and stop
        calls.append((spec, kwargs))
        raise Loaded

    monkeypatch.setattr(whalekit.samplers.models, "load_policy", fake_load_policy)
    config = resolve_config("smoke", "toy", "whale", sampler="vllm", runs_root=str(tmp_path),
                            vllm_options={"gpu_memory_fraction": 0.4})
    with pytest.raises(Loaded):
        _Driver(config)
    assert calls == [(config.model, {"sampler": "vllm", "vllm_options": {"gpu_memory_fraction": 0.4}})]


# --- search QA: HotpotQA + NQ training, seven test sets ----------------------------------------


def test_missing_paper_data_lists_every_missing_file(tmp_path, monkeypatch):
    monkeypatch.setenv("WHALEKIT_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError) as error:
        resolve_config("paper", "searchqa", "whale")
    message = str(error.value)
    for name in TEST_SETS:
        assert f"searchqa/test/{name}.jsonl" in message
    for name in ("searchqa/train/hotpotqa.jsonl", "searchqa/train/nq.jsonl", "wiki/corpus.jsonl"):
        assert name in message
    assert message.count(str(tmp_path / "nowhere")) == 10


def test_one_missing_test_set_is_named_alone(paper_data):
    (paper_data / "searchqa" / "test" / "musique.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=r"missing data files.*\n  .*musique\.jsonl$"):
        resolve_config("paper", "searchqa", "whale")


def test_the_seven_test_sets_are_reported_as_sub_datasets(paper_data):
    config = resolve_config("paper", "searchqa", "whale", n_train=6, n_search=3, n_test=2)
    splits = SearchQADomain().load_splits(n_train=config.n_train, n_search=config.n_search, n_test=config.n_test,
                                          seed=0, **config.split_options)
    by_subset: dict[str, int] = {}
    for task in splits.test:
        by_subset[task.subset] = by_subset.get(task.subset, 0) + 1
    # up to n_test questions from each set; a smaller set is used whole
    assert by_subset == {**{name: 2 for name in TEST_SETS}, "bamboogle": 1}
    # training and search come from HotpotQA + NQ train, never from a test set
    assert {t.subset for t in splits.train + splits.search} <= {"hotpotqa", "nq"}
    assert len(splits.train) == 6 and len(splits.search) == 3
    # files number their rows alike: ids are prefixed by the file's name and stay unique
    ids = [t.id for t in splits.train + splits.search + splits.test]
    assert len(set(ids)) == len(ids)
    assert all(t.id.startswith(t.subset + "/") for t in splits.test)


def test_a_test_question_is_never_trained_on_even_when_a_training_file_has_it(paper_data):
    for seed in range(4):
        splits = SearchQADomain().load_splits(
            n_train=8, n_search=4, n_test=4, seed=seed,
            **resolve_config("paper", "searchqa", "whale").split_options)
        questions = {t.inputs["question"] for t in splits.train + splits.search}
        assert "Who wrote the test question?" not in questions
        assert "Who wrote the test question?" in {t.inputs["question"] for t in splits.test}


def test_two_test_files_with_one_name_are_refused(paper_data):
    options = resolve_config("paper", "searchqa", "whale").split_options
    other = paper_data / "elsewhere" / "nq.jsonl"
    _jsonl(other, [{"question": "q?", "answer": ["a"]}])
    with pytest.raises(ValueError, match="two test files are named 'nq'"):
        SearchQADomain().load_splits(n_train=2, n_search=1, n_test=1, seed=0,
                                     **{**options, "test_paths": options["test_paths"] + [str(other)]})
