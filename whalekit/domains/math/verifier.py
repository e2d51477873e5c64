"""Answer checking with math-verify, so `1/2`, `0.5` and `\\frac{1}{2}` are one answer
and no LaTeX normaliser has to be written (or trusted) here.

The answer string is whatever the harness handed over: math-verify takes the last
`\\boxed{}` when there is one and otherwise its own extraction of the last expression.
math-verify guards slow parses with `signal.alarm`, which only works in the main
thread, so elsewhere the guard is switched off (the inputs are short).

    check("1/2", "The answer is \\boxed{0.5}")   # Verdict(correct=True, ...)
"""

from __future__ import annotations

import re
import threading
from typing import Any

from whalekit.domains.base import Verdict

BOXED = re.compile(r"\\boxed\s*\{")


def last_boxed(text: str) -> str | None:
    """Contents of the last `\\boxed{...}`, braces balanced; None when there is none."""
    starts = [m.end() for m in BOXED.finditer(text or "")]
    if not starts:
        return None
    depth, start = 1, starts[-1]
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return text[start:]  # unclosed: a reply cut at the token cap


def has_boxed(text: str | None) -> bool:
    return bool(text) and BOXED.search(text) is not None  # type: ignore[arg-type]


def _timeout() -> int | None:
    return 5 if threading.current_thread() is threading.main_thread() else None


def parse_answer(text: str) -> list[Any]:
    """math-verify's parse; [] for anything it cannot read (never raises)."""
    from math_verify import parse

    try:
        return list(parse(text, parsing_timeout=_timeout()))  # type: ignore[arg-type]
    except Exception:
        return []


def parse_reference(reference: str) -> list[Any]:
    """References are bare answers ("204", "\\frac{3}{4}"); read them as LaTeX first."""
    parsed = parse_answer(f"${reference}$")
    return parsed or parse_answer(str(reference))


def check(reference: str, answer: str | None) -> Verdict:
    """Compare an answer with the reference; never raises on model garbage."""
    from math_verify import verify

    details: dict[str, Any] = {"boxed": has_boxed(answer), "parsed": None}
    if not answer or not answer.strip():
        return Verdict(False, 0.0, details)
    gold, predicted = parse_reference(str(reference)), parse_answer(answer)
    if not gold:
        raise ValueError(f"reference answer {reference!r} cannot be parsed by math-verify")
    if predicted:
        details["parsed"] = str(predicted[-1])
    try:
        correct = bool(predicted) and bool(verify(gold, predicted, timeout_seconds=_timeout()))
    except Exception:
        correct = False
    return Verdict(correct, float(correct), details)
