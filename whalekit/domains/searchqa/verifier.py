"""Answer scoring and behaviour metrics for search QA.

Scoring is the field's standard: normalised exact match (lower-case, strip punctuation
and the articles a/an/the, collapse spaces) against any reference answer, with token F1
reported alongside. The behaviour flags are those of the paper's Figure 3 (format
compliance, retrieval hit, answer correct given a hit, searches made), computed from
the trajectory's tool results, so they work for any harness.

    exact_match("The Eiffel Tower!", ["eiffel tower"])   # True
    token_f1("in Paris, France", ["Paris"])              # 0.5
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

from whalekit.types import Trajectory

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in str(text).lower() if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(answer: str | None, references: list[str]) -> bool:
    if answer is None:
        return False
    normalized = normalize_answer(answer)
    return any(normalized == normalize_answer(r) for r in references)


def token_f1(answer: str | None, references: list[str]) -> float:
    """Best token-overlap F1 over the references (SQuAD style)."""
    if answer is None:
        return 0.0
    predicted = normalize_answer(answer).split()
    best = 0.0
    for reference in references:
        gold = normalize_answer(reference).split()
        common = sum((Counter(predicted) & Counter(gold)).values())
        if common == 0:
            continue
        precision, recall = common / len(predicted), common / len(gold)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def contains_answer(text: str, references: list[str]) -> bool:
    """Whether a document holds a reference answer (normalised, on word boundaries)."""
    padded = f" {normalize_answer(text)} "
    return any(f" {normalize_answer(r)} " in padded for r in references if normalize_answer(r))


def search_results(trajectory: Trajectory) -> list[dict[str, Any]]:
    """Every search the episode ran, forced ones (before the first turn) included, as
    the tool result meta dicts: {"query", "k", "doc_ids", "scores"}."""
    results = [r.get("meta", {}) for r in trajectory.flags.get("initial_tool_results", [])
               if r.get("name") == "search"]
    for turn in trajectory.turns:
        results.extend(r.meta for r in turn.tool_results if r.name == "search")
    return results


def behaviour_flags(trajectory: Trajectory, references: list[str], documents: dict[str, str],
                    correct: bool) -> dict[str, Any]:
    """Figure 3 flags. `documents` maps doc id -> text, to decide retrieval hits.

    `correct_given_hit` is present only when there was a hit (a conditional mean: pandas'
    `mean()` skips the missing values); `hit_and_correct` is always present."""
    searches = search_results(trajectory)
    retrieved = [doc_id for s in searches for doc_id in s.get("doc_ids", [])]
    hit = any(contains_answer(documents.get(doc_id, ""), references) for doc_id in retrieved)
    feedback = sum(1 for m in trajectory.messages if m.kind == "feedback")
    forced = sum(1 for r in trajectory.flags.get("initial_tool_results", []) if r.get("name") == "search")
    flags: dict[str, Any] = {
        "format_valid": trajectory.final_answer is not None and feedback == 0,
        "format_errors": feedback,
        "searches": len(searches),
        "model_searches": len(searches) - forced,
        "documents_retrieved": len(retrieved),
        "retrieval_hit": hit,
        "hit_and_correct": hit and correct,
        "context_overflow": (trajectory.error or "").startswith("context_overflow"),
    }
    if hit:
        flags["correct_given_hit"] = correct
    return flags


FAILURE_MODES = ("context_overflow", "no_answer", "no_search", "retrieval_miss", "wrong_answer_given_hit")


def failure_mode(trajectory: Trajectory) -> str | None:
    """The main reason a verified trajectory failed, from its behaviour flags."""
    if trajectory.correct:
        return None
    flags = trajectory.flags
    if flags.get("context_overflow"):
        return "context_overflow"
    if trajectory.final_answer is None:
        return "no_answer"
    if not flags.get("searches"):
        return "no_search"
    if not flags.get("retrieval_hit"):
        return "retrieval_miss"
    return "wrong_answer_given_hit"
