"""Loaders for the real math data sets, in the formats they are published in, turned
into Tasks with stable ids and provenance (file, 1-based row) so any odd score can be
traced back to its source line.

* DAPO-Math-17k: parquet or JSONL in the verl layout (`prompt` = [{role, content}],
  `reward_model.ground_truth`), or flat `prompt`/`answer` rows; the upstream prompt
  template ("Solve the following math problem step by step...") is removed.
* AIME 2024/2025: JSONL with `problem` (or `question`) and `answer` (or `ref_answer`).
  Known upstream text defects are repaired and recorded in `meta["repairs"]`: control
  characters left by bad JSON escapes ("\\f" of `\\frac` read as form feed, "\\t" of
  `\\triangle` read as tab) and one stray trailing "$".
* GSM8K: JSONL with `question` and `answer` whose last line is `#### <number>`.

    tasks = load_file("gsm8k", "../shared/realdata/gsm8k/test.jsonl")
    tasks[0].inputs["question"], tasks[0].reference   # ('Janet’s ducks ...', '18')
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from whalekit.infra.errors import DataError
from whalekit.infra.runs import read_jsonl
from whalekit.types import Task

DOMAIN = "math"
SOURCES = ("dapo", "aime", "gsm8k")

DAPO_PREFIX = re.compile(r"^Solve the following math problem step by step\..*?\n\n", re.S)
DAPO_SUFFIX = re.compile(r"\n\nRemember to put your answer on its own line after \"Answer:\"\.?\s*$")
# A control character followed by the rest of a LaTeX command is that command with its
# backslash escape eaten by a JSON decoder: "\f"rac, "\t"riangle, "\b"inom, "\r"ight.
# Other tabs (Asymptote code, separators) are real and stay.
CONTROL_ESCAPES = {"\x0c": "f", "\t": "t", "\x08": "b", "\r": "r", "\x0b": "v", "\x07": "a"}
LATEX_COMMANDS = ("frac", "forall", "triangle", "text", "textbf", "textit", "times", "theta", "tau", "tan", "top",
                  "tilde", "to", "binom", "beta", "bar", "boxed", "bigg", "big", "bmod", "right", "rho", "rangle",
                  "rfloor", "rceil", "rm", "vec", "varphi", "vee", "vdots", "alpha", "approx", "angle", "ast")
_EATEN_ESCAPE = re.compile("([\x07\x08\t\x0b\x0c\r])(?=[A-Za-z])")


def _restore(match: re.Match[str]) -> str:
    letter = CONTROL_ESCAPES[match.group(1)]
    rest = match.string[match.end():match.end() + 12]
    word = letter + re.match(r"[A-Za-z]*", rest).group(0)  # type: ignore[union-attr]
    return "\\" + letter if word in LATEX_COMMANDS else match.group(1)


class MathDataError(DataError):
    """A data file that cannot be read as the format it claims to be (`path:line: reason`)."""


def question_key(text: str) -> str:
    """What makes two problems 'the same' for split disjointness: whitespace-insensitive text."""
    return " ".join(text.split()).lower()


def task_id(prefix: str, question: str) -> str:
    return f"{prefix}-{hashlib.sha1(question_key(question).encode()).hexdigest()[:12]}"


def make_task(question: str, answer: str, subset: str, meta: dict[str, Any]) -> Task:
    return Task(id=task_id(subset, question), domain=DOMAIN, inputs={"question": question}, reference=answer,
                subset=subset, meta=meta)


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based row number, record) for JSONL or parquet files."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for index, record in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield index, record
        return
    for line_number, record in read_jsonl(path, MathDataError, records=False):
        if not isinstance(record, dict):
            raise MathDataError(f"{path}:{line_number}: expected a JSON object, got {type(record).__name__}")
        yield line_number, record


def _field(record: dict[str, Any], names: tuple[str, ...], path: Path, row: int) -> Any:
    for name in names:
        if record.get(name) not in (None, ""):
            return record[name]
    raise MathDataError(f"{path}:{row}: missing field {' or '.join(repr(n) for n in names)}")


def repair_latex(text: str) -> tuple[str, list[str]]:
    """Undo eaten backslash escapes and a stray closing '$'; say what was changed."""
    repairs = []
    fixed = _EATEN_ESCAPE.sub(_restore, text)
    if fixed != text:
        repairs.append("control characters restored to LaTeX backslash escapes")
    dollars = len(re.findall(r"(?<!\\)\$", fixed))
    if dollars % 2 == 1 and fixed.rstrip().endswith("$"):
        fixed = fixed.rstrip()[:-1]
        repairs.append("stray trailing '$' removed")
    elif dollars % 2 == 1:
        repairs.append("unbalanced '$' left as is")
    return fixed, repairs


def load_gsm8k(path: str | Path) -> list[Task]:
    path = Path(path)
    tasks = []
    for row, record in _rows(path):
        question = str(_field(record, ("question",), path, row))
        solution = str(_field(record, ("answer",), path, row))
        if "####" not in solution:
            raise MathDataError(f"{path}:{row}: answer has no '#### <number>' final line")
        final = solution.rsplit("####", 1)[1].strip().replace(",", "")
        if not re.fullmatch(r"-?\d+(\.\d+)?", final):
            raise MathDataError(f"{path}:{row}: final answer {final!r} is not a number")
        tasks.append(make_task(question, final, "gsm8k", {"file": str(path), "row": row}))
    return _unique_ids(tasks)


def load_aime(path: str | Path, subset: str | None = None) -> list[Task]:
    path = Path(path)
    subset = subset or _aime_subset(path)
    tasks = []
    for row, record in _rows(path):
        question, repairs = repair_latex(str(_field(record, ("problem", "question"), path, row)))
        answer = str(_field(record, ("answer", "ref_answer"), path, row)).strip()
        answer = re.sub(r"\^\\circ$|\^\{\\circ\}$", "", answer)  # "336^\circ" is the integer 336
        meta: dict[str, Any] = {"file": str(path), "row": row}
        if repairs:
            meta["repairs"] = repairs
        if record.get("data_source"):
            meta["data_source"] = record["data_source"]
        tasks.append(make_task(question, answer, subset, meta))
    return _unique_ids(tasks)


def _aime_subset(path: Path) -> str:
    match = re.search(r"aime_?(20)?(24|25)", str(path).lower())
    return f"aime{match.group(2)}" if match else "aime"


def load_dapo(path: str | Path) -> list[Task]:
    path = Path(path)
    tasks = []
    for row, record in _rows(path):
        prompt = _field(record, ("prompt", "problem", "question"), path, row)
        if isinstance(prompt, list):
            users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
            if not users or not users[-1]:
                raise MathDataError(f"{path}:{row}: prompt has no user message")
            prompt = users[-1]
        question = DAPO_SUFFIX.sub("", DAPO_PREFIX.sub("", str(prompt))).strip()
        reward = record.get("reward_model")
        answer = reward.get("ground_truth") if isinstance(reward, dict) else None
        if answer in (None, ""):
            answer = _field(record, ("answer", "solution"), path, row)
        tasks.append(make_task(question, str(answer).strip(), "dapo", {"file": str(path), "row": row}))
    return _unique_ids(tasks)


def _unique_ids(tasks: list[Task]) -> list[Task]:
    """Repeated problem texts (DAPO has ~600) keep every row, with the row in the id."""
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            task.meta["repeat_of"] = task.id
            task.id = f"{task.id}-r{task.meta['row']}"
        seen.add(task.id)
    return tasks


def source_for(path: str | Path) -> str:
    """The source a file's path names ("aime_2024.jsonl", "gsm8k/test.jsonl"), for test files."""
    name = Path(path).as_posix().lower()
    for source in SOURCES:
        if source in name:
            return source
    raise ValueError(f"{path}: the file name names no math source ({', '.join(SOURCES)}); set test_source")


def load_file(source: str, path: str | Path) -> list[Task]:
    """Load a real data file by source name ("dapo", "aime", "gsm8k")."""
    loaders = {"dapo": load_dapo, "aime": load_aime, "gsm8k": load_gsm8k}
    if source not in loaders:
        raise ValueError(f"unknown math source {source!r}; known: generated, {', '.join(SOURCES)}")
    return loaders[source](path)
