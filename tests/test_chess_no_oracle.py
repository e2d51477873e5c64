"""Specification: nothing a chess harness can see marks check or mate, harness code
cannot import python-chess, and the random-legal-move floor is computed right.

The scan plays real puzzles (generated mates in 1 and 2, the Lichess fixtures, and the
developers' real Lichess sample when present) through h0, h1, the cpu preset's h0_cpu and every mechanism, with
correct, wrong and illegal replies, and reads every string a harness could show, offer
as a choice or receive: task inputs, tool outputs and metadata, prompts, choice lists."""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

import chess
import pytest

from whalekit.domains.chess import ChessDomain, generate_puzzles, load_lichess_csv
from whalekit.domains.chess.baselines import expected_random_score, random_legal_move_score
from whalekit.domains.chess.mechanisms import CATALOGUE, PROMPT_WORDINGS
from whalekit.domains.mechanisms import apply_mechanism
from whalekit.episode import EpisodeDriver, Finished, GenerateRequest, ToolRequest, load_harness
from whalekit.sandbox.isolation import ALLOWED_IMPORTS, validate_source
from whalekit.types import Task

FIXTURES = Path(__file__).parent / "fixtures" / "chess"
MARKER = re.compile(r"[#+]|mate|check", re.IGNORECASE)
PACKAGE = Path(__file__).resolve().parents[1] / "whalekit"


@functools.lru_cache(maxsize=2)
def _puzzles(realdata_dir: Path | None = None) -> list[Task]:
    puzzles = generate_puzzles(24, mate_in=1, seed=21) + generate_puzzles(8, mate_in=2, seed=21)
    puzzles += load_lichess_csv(FIXTURES / "puzzles.csv")
    if realdata_dir is not None:
        for path in sorted((realdata_dir / "lichess_puzzles").glob("*.csv"))[:1]:
            puzzles += load_lichess_csv(path, limit=150)
    return [p.to_task() for p in puzzles]


def _strings(value) -> list[str]:
    """Every string value inside `value` (dict keys are field names, not content)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def _seen(source: str, task: Task, replies: list[str]) -> list[str]:
    """Everything the harness is given in one episode, and every prompt and choice list it builds."""
    domain = ChessDomain()
    seen = _strings(task.view().inputs)
    driver = EpisodeDriver(load_harness(source), task.view())
    request = driver.begin()
    pending = list(replies)
    while not isinstance(request, Finished):
        if isinstance(request, ToolRequest):
            results = [domain.toolbox().run(c, task) for c in request.calls]
            for result in results:
                seen += [result.output, json.dumps(result.meta)]
            request = driver.after_tools(results)
        else:
            assert isinstance(request, GenerateRequest)
            seen += [m.content for m in request.messages] + list(request.settings.choices or [])
            seen.append(request.settings.prefill)
            request = driver.after_generation(pending.pop(0) if pending else "pass", request.settings.prefill)
    return seen


def _replies(task: Task) -> list[list[str]]:
    line = task.reference["solution"]
    board = chess.Board(task.reference["fen"])
    wrong = next(m.uci() for m in sorted(board.legal_moves, key=lambda m: m.uci()) if m.uci() != line[0])
    correct = [f"<move>{m}</move>" for m in line[::2]]
    return [correct, [f"<move>{wrong}</move>"], ["<move>a1a1</move>", "hmm", correct[0]]]


HARNESSES = {name: ChessDomain().harness_source(name) for name in ("h0", "h1", "h0_cpu")}
HARNESSES.update({m.name: apply_mechanism(HARNESSES["h0"], m) for m in CATALOGUE + PROMPT_WORDINGS})


@pytest.mark.parametrize("name", sorted(HARNESSES))
def test_no_harness_sees_a_check_or_mate_marker(name):
    for task in _puzzles():
        for replies in _replies(task):
            hits = [s for s in _seen(HARNESSES[name], task, replies) if MARKER.search(s)]
            assert not hits, (name, task.id, MARKER.search(hits[0]).group(0), hits[0][:300])


def test_no_marker_on_real_lichess_puzzles(realdata):
    for task in _puzzles(realdata)[-150:]:
        for replies in _replies(task):
            hits = [s for s in _seen(HARNESSES["h0"], task, replies) if MARKER.search(s)]
            assert not hits, (task.id, hits[0][:300])


def test_the_authors_notation_option_restores_san_with_suffixes():
    domain = ChessDomain(notation="san_suffixes")
    task = load_lichess_csv(FIXTURES / "puzzles.csv")[0].to_task(notation="san_suffixes")
    assert {"uci": "f3f7", "san": "Qxf7#"} in task.inputs["observation"]["legal_moves"]
    plain = load_lichess_csv(FIXTURES / "puzzles.csv")[0].to_task()
    assert {"uci": "f3f7", "san": "Qxf7"} in plain.inputs["observation"]["legal_moves"]
    splits = domain.load_splits(n_train=2, n_search=1, n_test=1, seed=0, source="lichess",
                                path=FIXTURES / "puzzles.csv")
    assert any("#" in m["san"] for t in splits.train + splits.search + splits.test
               for m in t.inputs["observation"]["legal_moves"])
    with pytest.raises(ValueError, match="notation"):
        ChessDomain(notation="fancy")


def test_no_shipped_harness_mechanism_or_helper_imports_python_chess():
    for name, source in HARNESSES.items():
        imported = {a.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)}
        assert not any(m == "chess" or m.startswith("chess.") for m in imported if m), name


def test_the_display_helpers_import_only_the_standard_library():
    import sys

    for path in (PACKAGE / "harness_helpers").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for module in names:
                top = module.split(".")[0]
                assert top in sys.stdlib_module_names or module in ("whalekit.types", "whalekit.harness"), \
                    (path.name, module)


def test_a_harness_importing_python_chess_is_refused():
    assert "chess" not in ALLOWED_IMPORTS
    source = HARNESSES["h0"].replace("import re\n", "import re\nimport chess\n", 1)
    assert validate_source(source) is not None
    assert validate_source(source.replace("import chess\n", "from chess import Board\n")) is not None


def test_the_display_helpers_are_allowed_in_harness_code():
    for name in ("piece_lists", "legal_moves_by_piece"):
        assert validate_source(HARNESSES[name]) is None, name


# --- the random-legal-move floor ----------------------------------------------------------

def test_random_player_scores_match_the_exact_expectation_and_are_seeded():
    tasks = _puzzles()[:16]
    floor = random_legal_move_score(tasks, k=64, seed=3)
    assert floor == random_legal_move_score(tasks, k=64, seed=3)
    assert floor.per_task != random_legal_move_score(tasks, k=64, seed=4).per_task
    assert 0 < floor.expected < 0.5 and abs(floor.mean_at_k - floor.expected) < 0.05
    assert set(floor.per_task) == {t.id for t in tasks}


def test_expected_random_score_by_hand():
    fixtures = {p.puzzle_id: p.to_task() for p in load_lichess_csv(FIXTURES / "puzzles.csv")}
    scholar = fixtures["wkSch"]  # one mate among the legal moves
    legal = chess.Board(scholar.reference["fen"]).legal_moves.count()
    assert expected_random_score(scholar) == pytest.approx(1 / legal)
    back_rank = fixtures["wkBck"]  # Re8+ Rxe8 Rxe8#: no mate at move 1, one move to find, then the mate
    board = chess.Board(back_rank.reference["fen"])
    first = board.legal_moves.count()
    board.push_uci("e2e8")
    board.push_uci("c8e8")
    mates = sum(1 for m in board.legal_moves if board.gives_check(m) and _mates(board, m))
    assert expected_random_score(back_rank) == pytest.approx(mates / (first * board.legal_moves.count()))


def _mates(board: chess.Board, move: chess.Move) -> bool:
    board.push(move)
    try:
        return board.is_checkmate()
    finally:
        board.pop()
