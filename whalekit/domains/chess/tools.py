"""The chess toolbox: one environment tool, `move`, and nothing that judges a position.

The authors' harness sees only the runner's observation (side to move, FEN, board,
accepted moves, last reply, legal moves) and answers one move at a time. Here the same
observation arrives in the task inputs (`inputs["observation"]`) and, after each
correct move, in the `move` tool's result; there is no tool that shows a hypothetical
position (an empty legal-move list after a candidate move would mark mate), no grouping
of moves by kind and no check/mate status.

    box = chess_toolbox()
    box.run(ToolCall("move", {"move": "f3f7", "played": []}), task)   # the Task: the tool reads the line
"""

from __future__ import annotations

from typing import Any

from whalekit.domains.base import Toolbox
from whalekit.domains.chess.environment import check_notation, step
from whalekit.types import Task, ToolResult

TOOLS_DESCRIPTION = """\
Chess puzzles are played one solver move at a time through one environment tool:
- move(move="e2e4", played=[...]) -> plays `move` (UCI: from-square, to-square, promotion letter) after the solver's
  accepted moves `played` (UCI, in order; [] for the first move). ToolResult.meta["outcome"] is one of:
  "continue" (correct: the opponent's scripted reply was played; meta["reply"] is it in UCI and meta["observation"] is
  the next position), "solved" (correct and the puzzle is over), "failed" (a legal move that is not the puzzle's
  move, or `played` that is not the accepted line: the puzzle is lost, whatever comes after), "illegal" (not a legal
  move: nothing changes) or "unreadable" (not one UCI move: nothing changes). meta["terminal"] says whether the puzzle
  ended. The first step that ends the puzzle decides the reward, so trying moves costs the puzzle.
Task inputs: fen, side_to_move ("white"/"black"), moves_to_find (solver moves in the line), mate_in (or None),
last_move (the opponent's move that led to the position, SAN, or None) and observation: {side_to_move, fen, board
(8x8 diagram: ranks 8..1, files a..h, uppercase = White, '.' = empty), last_opponent_move (UCI or None),
accepted_moves (UCI), move_number, legal_moves: [{"uci", "san"}] sorted by UCI}. SAN carries no '+'/'#'. No tool
evaluates a move or shows the position after a move that was not played. Harness code cannot import python-chess;
whalekit.harness_helpers.chess_display draws boards and piece lists from a FEN."""


def chess_toolbox(notation: str = "plain") -> Toolbox:
    check_notation(notation)

    def move(task: Task, args: dict[str, Any]) -> ToolResult:
        return step(task, args, notation)

    return Toolbox({"move": move}, environment=("move",))
