"""One form for data errors: every loader names a malformed file as `path:line: reason`
(1-based line), so an editor or a terminal can jump straight to it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from whalekit.domains.chess.data import PuzzleDataError, load_lichess_csv
from whalekit.domains.math.data import MathDataError, load_aime, load_dapo, load_gsm8k
from whalekit.domains.searchqa.data import DataFormatError, load_corpus_jsonl, load_hotpotqa, load_qa_jsonl
from whalekit.domains.searchqa.splits import load_qa_files
from whalekit.infra.errors import DataError
from whalekit.infra.runs import read_jsonl
from whalekit.presets import load_preset

FIXTURES = Path(__file__).parent / "fixtures"


def assert_names_line(exc: pytest.ExceptionInfo, path: Path, line: int, reason: str) -> None:
    message = str(exc.value)
    assert re.fullmatch(rf"{re.escape(str(path))}:{line}: \S.*", message, re.S), message
    assert reason in message, message


def write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_chess_csv(tmp_path):
    with pytest.raises(ValueError) as exc:
        load_lichess_csv(FIXTURES / "chess" / "malformed.csv")
    assert_names_line(exc, FIXTURES / "chess" / "malformed.csv", 3, "invalid FEN")
    other = write(tmp_path / "other.csv", "a,b,c", "1,2,3")
    with pytest.raises(ValueError) as exc:
        load_lichess_csv(other)
    assert_names_line(exc, other, 1, "missing columns")


def test_math_gsm8k(tmp_path):
    with pytest.raises(ValueError) as exc:
        load_gsm8k(FIXTURES / "math" / "gsm8k_bad.jsonl")
    assert_names_line(exc, FIXTURES / "math" / "gsm8k_bad.jsonl", 2, "####")


def test_math_aime(tmp_path):
    path = write(tmp_path / "aime24.jsonl", '{"problem": "1+1?", "answer": "2"}', "", '{"problem": "x"}')
    with pytest.raises(ValueError) as exc:
        load_aime(path)
    assert_names_line(exc, path, 3, "missing field 'answer'")


def test_math_dapo(tmp_path):
    path = write(tmp_path / "dapo.jsonl", '{"prompt": [{"role": "system", "content": "hi"}], "answer": "1"}')
    with pytest.raises(ValueError) as exc:
        load_dapo(path)
    assert_names_line(exc, path, 1, "no user message")
    broken = write(tmp_path / "broken.jsonl", '{"prompt": "a", "answer": "1"}', "[1, 2]")
    with pytest.raises(ValueError) as exc:
        load_dapo(broken)
    assert_names_line(exc, broken, 2, "expected a JSON object")


def test_searchqa_qa_jsonl(tmp_path):
    path = write(tmp_path / "qa.jsonl", '{"question": "a?", "answer": ["x"]}', '{"question": "b?", "answer": [}')
    with pytest.raises(ValueError) as exc:
        load_qa_jsonl(path)
    assert_names_line(exc, path, 2, "invalid JSON")


def test_searchqa_corpus(tmp_path):
    path = write(tmp_path / "corpus.jsonl", '{"id": "a", "text": "x"}', '{"id": "b"}')
    with pytest.raises(ValueError) as exc:
        load_corpus_jsonl(path)
    assert_names_line(exc, path, 2, "missing field 'text'")


def test_searchqa_hotpot_json_array_names_the_line_the_item_starts_on(tmp_path):
    good = {"_id": "q1", "question": "?", "answer": "x", "context": [["T", ["s."]]]}
    bad = {"_id": "q2", "question": "?", "answer": "x", "context": {"title": ["T"], "sentences": []}}
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps([good, bad], indent=1))  # `bad` starts on line 2 + the lines of `good`
    line = 2 + json.dumps(good, indent=1).count("\n") + 1
    with pytest.raises(ValueError) as exc:
        load_hotpotqa(path)
    assert_names_line(exc, path, line, "1 titles but 0 sentence lists")
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps([{"id": "q", "question": "?", "answer": "x", "context": {"sentences": []}}]))
    with pytest.raises(ValueError) as exc:
        load_hotpotqa(nested)
    assert_names_line(exc, nested, 1, "missing field 'context.title'")


def test_searchqa_pooled_files_name_a_repeated_question_id(tmp_path):
    path = write(tmp_path / "pool.jsonl", '{"id": "q", "question": "a?", "answer": "x"}',
                 '{"id": "q", "question": "b?", "answer": "y"}')
    from whalekit.domains.searchqa.splits import file_splits

    with pytest.raises(ValueError) as exc:
        file_splits(load_qa_files(path), (1, 1, 0), 0, str(path), corpus="c")
    assert_names_line(exc, path, 2, f"appears more than once (first at {path}:1)")


def test_preset_yaml(tmp_path):
    path = write(tmp_path / "mine.yaml", "budget: 96", "domains:", "  toy: {n_train: 8", "  math: {}")
    with pytest.raises(ValueError) as exc:
        load_preset(str(path))
    assert re.fullmatch(rf"{re.escape(str(path))}:\d+: malformed YAML \(.+\)", str(exc.value)), str(exc.value)


def test_one_jsonl_reader_leaves_out_a_torn_last_line_and_names_any_other_bad_line(tmp_path):
    path = write(tmp_path / "events.jsonl", '{"a": 1}', "", '{"b": 2}')
    path.write_text(path.read_text() + '{"c": ')  # a writer killed mid-line
    assert list(read_jsonl(path)) == [(1, {"a": 1}), (3, {"b": 2})]
    path.write_text('{"a": 1}\n{"b": 2}')  # a complete last line without its newline is kept
    assert [record for _, record in read_jsonl(path)] == [{"a": 1}, {"b": 2}]
    path.write_text('{"a": 1}\n{"c": \n{"b": 2}\n')
    with pytest.raises(DataError) as exc:
        list(read_jsonl(path))
    assert_names_line(exc, path, 2, "invalid JSON")


def test_a_users_data_file_cut_off_in_its_last_line_is_an_error_not_a_dropped_row(tmp_path):
    path = tmp_path / "dapo.jsonl"
    path.write_text('{"prompt": "1+1?", "answer": "2"}\n{"prompt": "2+2?", "ans')
    with pytest.raises(ValueError) as exc:
        load_dapo(path)
    assert_names_line(exc, path, 2, "invalid JSON")
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question": "a?", "answer": ["x"]}\n{"question": "b?", "ans')
    with pytest.raises(ValueError) as exc:
        load_qa_jsonl(qa)
    assert_names_line(exc, qa, 2, "invalid JSON")


def test_every_domain_data_error_is_one_data_error():
    assert all(issubclass(error, DataError) for error in (MathDataError, PuzzleDataError, DataFormatError))
