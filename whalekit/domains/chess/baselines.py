"""The floor every chess method must beat: a player that picks a uniformly random legal
move at each of its turns, under the puzzle rules the harnesses play by (scripted
replies, a legal wrong move ends the puzzle, any checkmate solves it).

`random_legal_move_score` samples it (mean@k, seeded per task and sample) and also
gives its exact expected score, so a table can print both next to every chess result.

    floor = random_legal_move_score(splits.test, k=8, seed=0)
    floor.mean_at_k, floor.expected   # e.g. 0.041, 0.043
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import chess

from whalekit.types import Task


@dataclass
class RandomBaseline:
    mean_at_k: float  # mean over tasks of the fraction of k random players that solved it
    expected: float  # the exact expectation of the same quantity (k -> infinity)
    k: int
    seed: int
    per_task: dict[str, float] = field(default_factory=dict)  # task id -> solved fraction of its k samples


def _line(task: Task) -> tuple[chess.Board, list[chess.Move]]:
    reference = task.reference if isinstance(task.reference, dict) else {}
    return chess.Board(str(reference["fen"])), [chess.Move.from_uci(m) for m in reference["solution"]]


def _solved_by_accident(board: chess.Board, move: chess.Move) -> bool:
    board.push(move)
    mated = board.is_checkmate()
    board.pop()
    return mated


def play_random(task: Task, rng: random.Random) -> bool:
    """One random player on one puzzle: True when it solves it."""
    board, line = _line(task)
    for index in range(0, len(line), 2):
        move = rng.choice(sorted(board.legal_moves, key=lambda m: m.uci()))
        if _solved_by_accident(board, move):
            return True
        if move != line[index]:
            return False
        board.push(move)
        if index + 1 >= len(line):
            return True
        board.push(line[index + 1])
    return True


def expected_random_score(task: Task) -> float:
    """P(a uniform random legal-move player solves the puzzle), exactly."""
    board, line = _line(task)
    reach, total = 1.0, 0.0  # reach: probability of still playing at this solver move
    for index in range(0, len(line), 2):
        legal = list(board.legal_moves)
        expected = line[index]
        last = index + 1 >= len(line)
        winning = {m for m in legal if _solved_by_accident(board, m)} | ({expected} if last else set())
        total += reach * len(winning) / len(legal)
        if last or expected in winning:
            break
        reach /= len(legal)
        board.push(expected)
        board.push(line[index + 1])
    return total


def random_legal_move_score(tasks: list[Task], k: int = 8, seed: int = 0) -> RandomBaseline:
    """mean@k of the uniform-random-legal-move player on `tasks`, seeded by (seed, task, sample)."""
    if k < 1 or not tasks:
        raise ValueError("need k >= 1 and at least one task")
    per_task = {}
    for task in tasks:
        wins = sum(play_random(task, random.Random(f"{seed}:{task.id}:{sample}")) for sample in range(k))
        per_task[task.id] = wins / k
    expected = sum(expected_random_score(t) for t in tasks) / len(tasks)
    return RandomBaseline(sum(per_task.values()) / len(tasks), expected, k, seed, per_task)
