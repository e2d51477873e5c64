"""The chess puzzle environment: what the solver sees at each move, the `move` step that
plays its move against the puzzle's line, and the verdict read from those steps.

A puzzle is played one solver move at a time, as in the authors' runner: the harness
sends a UCI move to the `move` tool (driver side, python-chess); a correct move is
played, followed by the scripted reply, and the next observation comes back; a legal
but wrong move ends the puzzle as failed; an illegal or unreadable move changes
nothing and may be retried. The tool is stateless (the harness passes the moves it has
had accepted), so the verdict is not taken from the harness's final answer but from the
tool's own records in the trajectory: the first step that ends the puzzle decides. A
harness that probes moves therefore loses the puzzle on its first wrong probe.

Nothing here marks check or mate: moves are UCI, and SAN is given without '+'/'#'
unless the domain's `notation="san_suffixes"` (the authors' exact observation) is set.

    obs = observation(chess.Board(fen), notation="plain")   # fen, board, legal_moves, ...
    result = step(task, {"move": "f3f7", "played": []}, notation="plain")
"""

from __future__ import annotations

import re
from typing import Any

import chess

from whalekit.domains.base import Verdict
from whalekit.types import Task, ToolResult, Trajectory

NOTATIONS = ("plain", "san_suffixes")  # SAN without check/mate marks (default), or the authors' SAN
UCI = re.compile(r"[a-h][1-8][a-h][1-8][qrbn]?")
OUTCOMES = ("continue", "solved", "failed", "illegal", "unreadable")
TERMINAL = ("solved", "failed")


def check_notation(notation: str) -> str:
    if notation not in NOTATIONS:
        raise ValueError(f"notation must be one of {', '.join(NOTATIONS)}; got {notation!r}")
    return notation


def san(board: chess.Board, move: chess.Move, notation: str = "plain") -> str:
    """SAN of `move`; in the default notation without the '+'/'#' that would mark check or mate."""
    text = board.san(move)
    return text if notation == "san_suffixes" else text.rstrip("+#")


def ascii_board(board: chess.Board) -> str:
    """Ranks 8..1 top to bottom, files a..h, uppercase White, '.' empty, labelled."""
    rows = []
    for rank in range(7, -1, -1):
        cells = [board.piece_at(chess.square(file, rank)) for file in range(8)]
        rows.append(f"{rank + 1} " + " ".join(p.symbol() if p else "." for p in cells))
    return "\n".join(rows + ["  a b c d e f g h"])


def observation(board: chess.Board, played: list[str] | None = None, last_reply: str | None = None,
                notation: str = "plain") -> dict[str, Any]:
    """What the solver may see of the current position: plain data, no judgement of any move."""
    legal = sorted(board.legal_moves, key=lambda m: m.uci())
    return {
        "side_to_move": "white" if board.turn == chess.WHITE else "black",
        "fen": board.fen(),
        "board": ascii_board(board),
        "last_opponent_move": last_reply,  # UCI; None before the first scripted reply, as in the authors' runner
        "accepted_moves": list(played or []),  # the solver's accepted moves so far, UCI
        "move_number": len(played or []) + 1,
        "legal_moves": [{"uci": m.uci(), "san": san(board, m, notation)} for m in legal],
    }


def _result(outcome: str, text: str, **meta: Any) -> ToolResult:
    return ToolResult("move", text, meta={"outcome": outcome, "terminal": outcome in TERMINAL, **meta})


def step(task: Task, args: dict[str, Any], notation: str = "plain") -> ToolResult:
    """Play `args["move"]` (UCI) after the solver moves `args["played"]` (UCI, each of which
    must be the line's move: a harness that claims otherwise fails the puzzle)."""
    reference = task.reference if isinstance(task.reference, dict) else {}
    board = chess.Board(str(reference.get("fen") or task.inputs["fen"]))
    line = [str(m) for m in reference.get("solution", [])]
    played = args.get("played") or []
    if isinstance(played, str):
        played = played.split()
    if not isinstance(played, list):
        return _result("failed", "Puzzle failed: 'played' must list the accepted moves.", solver_moves_correct=0)
    for i, text in enumerate(played):
        if 2 * i >= len(line) or str(text).strip().lower() != line[2 * i]:
            return _result("failed", "Puzzle failed: the moves played so far are not the puzzle's line.",
                           solver_moves_correct=i)
        board.push(chess.Move.from_uci(line[2 * i]))
        board.push(chess.Move.from_uci(line[2 * i + 1]))
    index = 2 * len(played)
    if index >= len(line):
        return _result("failed", "Puzzle failed: the puzzle was already over.", solver_moves_correct=len(played))
    text = str(args.get("move", "")).strip().lower()
    if not UCI.fullmatch(text):
        return _result("unreadable", f"Could not read one UCI move from {str(args.get('move', ''))[:40]!r}.",
                       solver_moves_correct=len(played))
    move = chess.Move.from_uci(text)
    if move not in board.legal_moves:
        return _result("illegal", f"The move {text} is not legal in the current position.", move=text,
                       solver_moves_correct=len(played))
    expected = chess.Move.from_uci(line[index])
    board.push(move)
    mated = board.is_checkmate()  # Lichess accepts any mate, not only the stored move
    if move != expected and not mated:
        return _result("failed", "Puzzle failed: the legal move did not match the puzzle continuation.",
                       move=text, solver_moves_correct=len(played))
    accepted = [*played, text]
    if mated or index + 1 >= len(line):
        return _result("solved", "Correct. Puzzle solved.", move=text, solver_moves_correct=len(accepted))
    reply = chess.Move.from_uci(line[index + 1])
    reply_san = san(board, reply, notation)
    board.push(reply)
    return _result("continue", f"Correct. Opponent replied {reply.uci()} ({reply_san}). Continue with the next move.",
                   move=text, reply=reply.uci(), solver_moves_correct=len(accepted),
                   observation=observation(board, accepted, reply.uci(), notation))


def move_steps(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The `move` tool's own records (ToolResult.meta) in the order they ran, forced
    calls before the first turn included."""
    steps = [r.get("meta", {}) for r in trajectory.flags.get("initial_tool_results", []) if r.get("name") == "move"]
    for turn in trajectory.turns:
        steps.extend(r.meta for r in turn.tool_results if r.name == "move")
    return [s for s in steps if s.get("outcome") in OUTCOMES]


def verdict_from_steps(steps: list[dict[str, Any]], solver_moves: int) -> Verdict | None:
    """The first step that ended the puzzle decides; None when no step was taken."""
    if not steps:
        return None
    decided = next((s for s in steps if s["outcome"] in TERMINAL), None)
    outcomes = [s["outcome"] for s in steps]
    if decided is not None:
        reason = "correct" if decided["outcome"] == "solved" else "wrong_move"
        matched = int(decided.get("solver_moves_correct", 0))
    elif "continue" in outcomes:
        reason, matched = "incomplete_line", max(int(s.get("solver_moves_correct", 0)) for s in steps)
    else:
        reason = "illegal_move" if "illegal" in outcomes else "format_invalid"
        matched = 0
    correct = reason == "correct"
    legal = any(o in ("continue", "solved", "failed") for o in outcomes)
    details = {"reason": reason, "format_valid": any(o != "unreadable" for o in outcomes), "move_legal": legal,
               "move_correct": correct, "solver_moves_expected": solver_moves, "solver_moves_correct": matched,
               "illegal_attempts": outcomes.count("illegal"), "unreadable_attempts": outcomes.count("unreadable"),
               "steps": len(steps)}
    return Verdict(correct, 1.0 if correct else 0.0, details)
