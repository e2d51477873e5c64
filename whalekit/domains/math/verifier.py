"""Answer checking with math-verify, so `1/2`, `0.5` and `\\frac{1}{2}` are one answer
and no LaTeX normaliser has to be written (or trusted) here.

The answer string is whatever the harness handed over. With a `\\boxed{}` in it,
math-verify reads the last one. Without, a bare answer (a harness's own extraction such
as `0.5`, `\\frac{1}{2}` or `x = 7`: short, no words) goes to math-verify whole, and prose
is read by its last number only: math-verify's own extraction of the last expression
would evaluate a restated question ("so 31 + 32 ...") and credit it with the sum.
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
WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")  # a word, not a LaTeX command or a variable
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?(?![\w])")
BARE_CHARS = 40


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


def unboxed_answer(text: str) -> str | None:
    """What an answer without a \\boxed{} says: a bare answer whole, prose by its last number."""
    text = text.strip()
    if len(text) <= BARE_CHARS and not WORD.search(text):
        return text
    numbers = NUMBER.findall(text)
    return f"${numbers[-1].replace(',', '')}$" if numbers else None


def _timeout() -> int | None:
    return 5 if threading.current_thread() is threading.main_thread() else None


def parse_answer(text: str) -> list[Any]:
    """math-verify's parse; [] for anything it cannot read (never raises)."""
    from math_verify import parse

    try:
        return list(parse(text, parsing_timeout=_timeout()))
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
    gold = parse_reference(str(reference))
    if not gold:
        raise ValueError(f"reference answer {reference!r} cannot be parsed by math-verify")
    read = answer if details["boxed"] else unboxed_answer(answer)
    predicted = parse_answer(read) if read else []
    if predicted:
        details["parsed"] = str(predicted[-1])
    try:
        correct = bool(predicted) and bool(verify(gold, predicted, timeout_seconds=_timeout()))
    except Exception:
        correct = False
    return Verdict(correct, float(correct), details)
