"""Grading a puzzle answer by Lichess's rule, without ever raising on model output.

Lichess accepts a solver move when it equals the stored move *or* delivers checkmate
(a puzzle may have several mates in one, and the database stores only one). Puzzles of
several moves are played out against the stored replies: the answer lists the solver's
moves in order ("Qh5 Qh7#"); the opponent's scripted replies may be echoed in between
("Qh5 Kg8 Qh7#") and are then skipped. An answer that is not move notation is a format
failure, notation that names no legal move is an illegal move: both are verdicts.

    verdict = verify_answer(fen, ["h5h7"], "Qh7#")
    verdict.correct, verdict.details["move_legal"]   # -> True, True
"""

from __future__ import annotations

from typing import Any

import chess

from whalekit.domains.base import Verdict
from whalekit.domains.chess.notation import IllegalMoveError, MoveFormatError, parse_move, split_moves

# Reasons a verdict can carry in details["reason"]; the domain's failure modes follow them.
REASONS = ("correct", "no_answer", "format_invalid", "illegal_move", "wrong_move", "incomplete_line", "bad_puzzle")


def _verdict(reason: str, *, format_valid: bool, move_legal: bool, solver_moves: int, matched: int,
             answer_moves: list[str]) -> Verdict:
    correct = reason == "correct"
    details: dict[str, Any] = {
        "reason": reason,
        "format_valid": format_valid,
        "move_legal": move_legal,
        "move_correct": correct,
        "solver_moves_expected": solver_moves,
        "solver_moves_correct": matched,
        "answer_moves": answer_moves,
    }
    return Verdict(correct, 1.0 if correct else 0.0, details)


def verify_answer(fen: str, solution: list[str], answer: str | None) -> Verdict:
    """Grade `answer` for the puzzle at `fen` whose line is `solution` (UCI; solver's moves
    at even indices, scripted replies at odd ones). Never raises."""
    solver_moves = (len(solution) + 1) // 2
    common = {"solver_moves": solver_moves}
    if answer is None or not str(answer).strip():
        return _verdict("no_answer", format_valid=False, move_legal=False, matched=0, answer_moves=[], **common)
    try:
        board = chess.Board(fen)
        expected = [chess.Move.from_uci(m) for m in solution]
    except (ValueError, TypeError):
        return _verdict("bad_puzzle", format_valid=False, move_legal=False, matched=0, answer_moves=[], **common)
    tokens = split_moves(str(answer))
    played: list[str] = []
    matched = 0
    index = 0  # position in `solution` of the next solver move
    position = 0  # position in `tokens`
    while position < len(tokens):
        token = tokens[position]
        if index >= len(expected):
            break  # moves after the puzzle is solved are ignored, as on Lichess
        try:
            move = parse_move(board, token)
        except MoveFormatError:
            return _verdict("format_invalid", format_valid=False, move_legal=False, matched=matched,
                            answer_moves=played, **common)
        except IllegalMoveError:
            if _is_echoed_reply(board, expected, index, token):
                position += 1
                continue
            return _verdict("illegal_move", format_valid=True, move_legal=False, matched=matched,
                            answer_moves=played, **common)
        played.append(move.uci())
        board.push(move)
        if board.is_checkmate():
            return _verdict("correct", format_valid=True, move_legal=True, matched=solver_moves,
                            answer_moves=played, **common)
        board.pop()
        if move != expected[index]:
            return _verdict("wrong_move", format_valid=True, move_legal=True, matched=matched,
                            answer_moves=played, **common)
        board.push(move)
        matched += 1
        if index + 1 >= len(expected):
            return _verdict("correct", format_valid=True, move_legal=True, matched=matched,
                            answer_moves=played, **common)
        board.push(expected[index + 1])  # the opponent's scripted reply
        index += 2
        position += 1
    if not played:  # only echoed replies or nothing usable
        return _verdict("format_invalid", format_valid=False, move_legal=False, matched=0, answer_moves=[], **common)
    return _verdict("incomplete_line", format_valid=True, move_legal=True, matched=matched, answer_moves=played,
                    **common)


def _is_echoed_reply(board: chess.Board, expected: list[chess.Move], index: int, token: str) -> bool:
    """Whether `token` is the scripted reply the answer repeated before its next move."""
    if index == 0:
        return False
    reply = expected[index - 1]
    before = board.copy(stack=True)
    before.pop()
    try:
        return parse_move(before, token) == reply
    except ValueError:
        return False
