"""The paper preset tests math on AIME 2024 + 2025, 60 problems, as the paper does: on the real
files (Qwen2.5-Math's evaluation/data/aime24/test.jsonl and math-evaluation-harness's
aime25/test.jsonl, with DAPO-Math-17k for training) laid out under $WHALEKIT_DATA as the preset
names them. Skips, saying why, where those files are not on this machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from whalekit.domains.base import get_domain
from whalekit.run.driver import resolve_config

REALDATA = Path(os.environ.get("WHALEKIT_REALDATA", "/work/shared/realdata"))
FILES = ("aime/aime24/test.jsonl", "aime/aime25/test.jsonl", "dapo_math_17k/dapo_math_17k.parquet")


@pytest.fixture
def real_data(tmp_path, monkeypatch):
    missing = [name for name in FILES if not (REALDATA / name).exists()]
    if missing:
        pytest.skip(f"the real AIME / DAPO files are not here ({REALDATA}: {', '.join(missing)} missing)")
    data = tmp_path / "data"
    for name in FILES:
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).symlink_to(REALDATA / name)
    monkeypatch.setenv("WHALEKIT_DATA", str(data))
    return data


def test_the_paper_presets_math_test_split_is_aime_2024_and_2025(real_data):
    config = resolve_config("paper", "math", "whale")
    options = config.split_options
    assert [Path(p).relative_to(real_data).as_posix() for p in options["test_paths"]] == list(FILES[:2])
    splits = get_domain("math").load_splits(n_train=config.n_train, n_search=config.n_search, n_test=config.n_test,
                                            seed=0, **options)
    assert len(splits.test) == 60
    assert sorted({t.subset for t in splits.test}) == ["aime24", "aime25"]
    assert sum(t.subset == "aime24" for t in splits.test) == 30
    assert all(str(t.reference).isdigit() and 0 <= int(str(t.reference)) <= 999 for t in splits.test)
    # upstream's bad escapes (form feeds, tabs in aime25) are repaired, and recorded
    assert not any(c in t.inputs["question"] for t in splits.test for c in "\f\t")
    assert any("repairs" in t.meta for t in splits.test if t.subset == "aime25")
    test_questions = {t.inputs["question"] for t in splits.test}
    assert len(splits.train) == config.n_train and len(splits.search) == config.n_search
    assert not test_questions & {t.inputs["question"] for t in splits.train + splits.search}
