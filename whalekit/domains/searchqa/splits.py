"""Turning QA examples into disjoint weight-training, harness-search and test splits.

Generated world: the *people* are dealt to the three splits first (an organisation
follows its founder), then each split's questions are drawn by the family mix. So no
fact about a person seen in training or search is asked about at test time, and no
question text appears in two splits. Files: questions are deduplicated by normalised
text and cut with `split_disjoint`.

    train, search, test = generated_splits(world, (64, 32, 64), mix={"birthplace": 1.0}, seed=0)
    train, search, test = file_splits(examples, (0, 16, 64), seed=0, source="nq.jsonl")
    train, search, test = file_splits_with_test_sets(pool, load_test_sets(["nq.jsonl", "popqa.jsonl"]), ...)
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from whalekit.domains.base import split_disjoint
from whalekit.domains.searchqa.data import QAExample, load_qa_jsonl
from whalekit.domains.searchqa.verifier import normalize_answer
from whalekit.domains.searchqa.world import FAMILIES, World
from whalekit.types import Task

DOMAIN = "searchqa"


def to_task(example: QAExample, corpus: str) -> Task:
    """The harness sees only the question; answers and gold documents stay in the task."""
    meta = dict(example.meta, gold_doc_ids=list(example.gold_doc_ids), corpus=corpus)
    return Task(id=example.id, domain=DOMAIN, inputs={"question": example.question},
                reference=list(example.answers), subset=example.subset, meta=meta)


def family_quotas(n: int, mix: dict[str, float]) -> dict[str, int]:
    """Split n questions over families in proportion to `mix` (largest remainder)."""
    unknown = set(mix) - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown question families {sorted(unknown)}; known: {', '.join(FAMILIES)}")
    if any(w < 0 for w in mix.values()) or not any(w > 0 for w in mix.values()):
        raise ValueError("the family mix needs non-negative weights, at least one positive")
    total = sum(mix.values())
    exact = {f: n * w / total for f, w in mix.items()}
    quotas = {f: int(v) for f, v in exact.items()}
    by_remainder = sorted(exact, key=lambda f: (-(exact[f] - quotas[f]), FAMILIES.index(f)))
    for f in by_remainder[: n - sum(quotas.values())]:
        quotas[f] += 1
    return quotas


def generated_splits(world: World, sizes: tuple[int, int, int], mix: dict[str, float], seed: int,
                     corpus: str = "generated") -> tuple[list[Task], list[Task], list[Task]]:
    if any(s < 0 for s in sizes):
        raise ValueError(f"split sizes must be non-negative, got {sizes}")
    rng = random.Random(f"searchqa-splits-{seed}")
    people = list(world.people)
    rng.shuffle(people)
    total = sum(sizes) or 1
    bounds, start = [], 0
    for i, size in enumerate(sizes):
        end = len(people) if i == 2 else start + round(len(people) * size / total)
        bounds.append((start, end))
        start = end
    out = []
    for name, size, (lo, hi) in zip(("train", "search", "test"), sizes, bounds):
        members = people[lo:hi]
        pools = world.questions(members, world.orgs_of(members))
        chosen = []
        for family, quota in family_quotas(size, mix).items():
            pool = pools[family]
            if quota > len(pool):
                raise ValueError(f"generated world: the {name} split needs {quota} '{family}' questions but its "
                                 f"{len(members)} people give only {len(pool)}; raise n_people/n_orgs or lower "
                                 f"the split size")
            chosen.extend(rng.sample(pool, quota))
        rng.shuffle(chosen)
        out.append([to_task(e, corpus) for e in chosen])
    _check_disjoint(out)
    return out[0], out[1], out[2]


def file_splits(examples: list[QAExample], sizes: tuple[int, int, int], seed: int, source: str,
                corpus: str) -> tuple[list[Task], list[Task], list[Task]]:
    """Deduplicate by normalised question and cut three disjoint slices."""
    _check_unique_ids(examples, source)
    parts = split_disjoint(examples, lambda e: normalize_answer(e.question), sizes, seed, source)
    out = [[to_task(e, corpus) for e in part] for part in parts]
    _check_disjoint(out)
    return out[0], out[1], out[2]


def _file_name(path: str | Path) -> str:
    return Path(path).stem.split(".")[0].lower()


def _prefixed(examples: list[QAExample], name: str) -> list[QAExample]:
    return [dataclasses.replace(e, id=f"{name}/{e.id}") for e in examples]


def load_qa_files(paths: str | Path | list[str | Path], subset: str | None = None) -> list[QAExample]:
    """One QA jsonl file, or several pooled (e.g. HotpotQA + NQ training); when pooled, each
    id is prefixed by its file's name ("nq/train_0"), since files often number alike."""
    if isinstance(paths, (str, Path)):
        return load_qa_jsonl(paths, subset)
    return [e for p in paths for e in _prefixed(load_qa_jsonl(p, subset), _file_name(p))]


def load_test_sets(paths: list[str | Path]) -> dict[str, list[QAExample]]:
    """Test files, each one sub-dataset named by its file ("bamboogle.jsonl" -> "bamboogle",
    whatever the rows say), ids prefixed by that name."""
    sets: dict[str, list[QAExample]] = {}
    for path in paths:
        name = _file_name(path)
        if name in sets:
            raise ValueError(f"two test files are named {name!r} ({path}): a test file's name is its sub-dataset")
        sets[name] = _prefixed(load_qa_jsonl(path, subset=name), name)
    return sets


def file_splits_with_test_sets(pool: list[QAExample], test_sets: dict[str, list[QAExample]],
                               sizes: tuple[int, int, int], seed: int, source: str,
                               corpus: str) -> tuple[list[Task], list[Task], list[Task]]:
    """Training and search from `pool`; the test split from the named test sets, up to
    n_test questions from each (a smaller set is used whole), so every set is reported as
    its own sub-dataset. Pool questions that also occur in a test set are dropped first."""
    n_train, n_search, n_test = sizes
    key = lambda e: normalize_answer(e.question)
    test: list[QAExample] = []
    for name, examples in test_sets.items():
        available = len({key(e) for e in examples})
        test += split_disjoint(examples, key, (0, 0, min(n_test, available)), seed, f"test set {name}")[2]
    held_out = {key(e) for e in test}
    _check_unique_ids(pool, source)
    train, search, _ = split_disjoint([e for e in pool if key(e) not in held_out], key, (n_train, n_search, 0),
                                      seed, source)
    out = [[to_task(e, corpus) for e in part] for part in (train, search, test)]
    _check_disjoint(out)
    return out[0], out[1], out[2]


def _check_unique_ids(examples: list[QAExample], source: str) -> None:
    first: dict[str, QAExample] = {}
    for example in examples:
        if example.id in first:
            raise ValueError(f"{_where(example, source)}: question id {example.id!r} appears more than once "
                             f"(first at {_where(first[example.id], source)})")
        first[example.id] = example


def _where(example: QAExample, source: str) -> str:
    """'file:line' of an example read from a file; the source name otherwise."""
    meta = example.meta
    return f"{meta['file']}:{meta['line']}" if "file" in meta and "line" in meta else source


def _check_disjoint(parts: list[list[Task]]) -> None:
    seen: dict[str, int] = {}
    for index, part in enumerate(parts):
        for task in part:
            key = normalize_answer(task.inputs["question"])
            if seen.get(key, index) != index:
                raise AssertionError(f"question {task.inputs['question']!r} is in two splits")
            seen[key] = index
