"""Fresh mate puzzles without any download: seeded, lightly guided random games played
to the end, then searched backwards for a position with a forced mate, proved with
python-chess.

Random play with a mild preference for checks ends in checkmate in about a quarter of
games; walking back from the final mate over the mating side's positions finds mate-in-1
and mate-in-2 positions at a few per second (testing every ply is ten times slower). A
position becomes a puzzle when the side to move has a mate in exactly `mate_in` moves
(none shorter); for mate in 2 the first move must also be the only one that forces it,
as Lichess requires. Difficulty knobs: the mate length, how many distinct mating moves
a mate-in-1 must have (more = easier to stumble on), and a cap on the number of legal
moves (fewer = fewer ways to go wrong). Everything derives from the seed.

    puzzles = generate_puzzles(32, mate_in=1, seed=0, min_mating_moves=2)
    puzzles[0].fen, puzzles[0].solution   # ('6k1/...', ('d1d8',))
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import random
from dataclasses import dataclass
from pathlib import Path

import chess

from whalekit.domains.chess.data import Puzzle
from whalekit.infra.runs import atomic_write
from whalekit.samplers.model_files import cache_dir

_LOOK_BACK = 4  # positions of the mating side examined before a game's final mate


@dataclass(frozen=True)
class GeneratorConfig:
    mate_in: int = 1  # length of the forced mate: 1 or 2
    guidance: float = 0.2  # probability of playing a checking move when one exists
    min_plies: int = 8  # earliest ply a puzzle may be taken from (skips opening noise)
    max_plies: int = 300  # a game that has not ended by then is dropped
    min_mating_moves: int = 1  # mate in 1 only: at least this many distinct mating moves
    max_legal_moves: int | None = None  # skip positions offering more legal moves than this

    def __post_init__(self) -> None:
        if self.mate_in not in (1, 2):
            raise ValueError(f"mate_in must be 1 or 2, got {self.mate_in}")
        if not 0.0 <= self.guidance <= 1.0:
            raise ValueError(f"guidance must lie in [0, 1], got {self.guidance}")
        if self.min_mating_moves < 1 or self.min_plies < 0 or self.max_plies <= self.min_plies:
            raise ValueError("need min_mating_moves >= 1 and 0 <= min_plies < max_plies")


def mating_moves(board: chess.Board) -> list[chess.Move]:
    """Every move that checkmates at once (only checking moves can, so test those)."""
    found = []
    for move in board.legal_moves:
        if board.gives_check(move):
            board.push(move)
            if board.is_checkmate():
                found.append(move)
            board.pop()
    return found


def _forces_mate_in_one(board: chess.Board, move: chess.Move) -> chess.Move | None:
    """If every reply to `move` allows a mate in 1, the reply that allows fewest mates."""
    board.push(move)
    try:
        if board.is_game_over():
            return None
        stubborn, fewest = None, 1 << 30
        for reply in board.legal_moves:
            board.push(reply)
            mates = len(mating_moves(board))
            board.pop()
            if mates == 0:
                return None
            if mates < fewest:
                stubborn, fewest = reply, mates
        return stubborn
    finally:
        board.pop()


def mate_in_two_line(board: chess.Board) -> tuple[chess.Move, chess.Move, chess.Move] | None:
    """(first move, stubbornest reply, mate) when the side to move has exactly one first
    move forcing mate in 2 and no mate in 1; otherwise None."""
    if mating_moves(board):
        return None
    lines = []
    for move in board.legal_moves:
        reply = _forces_mate_in_one(board, move)
        if reply is not None:
            lines.append((move, reply))
            if len(lines) > 1:
                return None  # not unique: Lichess would not accept it as a puzzle
    if not lines:
        return None
    move, reply = lines[0]
    board.push(move)
    board.push(reply)
    mate = sorted(mating_moves(board), key=lambda m: m.uci())[0]
    board.pop()
    board.pop()
    return move, reply, mate


def _pick(board: chess.Board, rng: random.Random, guidance: float) -> chess.Move:
    moves = list(board.legal_moves)  # python-chess generates moves in a fixed order: seeds reproduce
    if rng.random() < guidance:
        rng.shuffle(moves)
        check = next((m for m in moves if board.gives_check(m)), None)  # lazy: gives_check is costly
        if check is not None:
            return check
    return rng.choice(moves)


def _play(rng: random.Random, config: GeneratorConfig) -> chess.Board:
    board = chess.Board()
    while board.ply() < config.max_plies and not board.is_game_over():
        board.push(_pick(board, rng, config.guidance))
    return board


def _puzzle_at(board: chess.Board, config: GeneratorConfig, seed: int, game: int, ply: int) -> Puzzle | None:
    if config.max_legal_moves is not None and board.legal_moves.count() > config.max_legal_moves:
        return None
    if config.mate_in == 1:
        mates = sorted(mating_moves(board), key=lambda m: m.uci())
        if len(mates) < config.min_mating_moves:
            return None
        solution: tuple[str, ...] = (mates[0].uci(),)
        extra = {"mating_moves": len(mates)}
    else:
        line = mate_in_two_line(board)
        if line is None:
            return None
        solution = tuple(m.uci() for m in line)
        extra = {}
    last = board.pop()
    last_san = board.san(last)
    board.push(last)
    key = " ".join(board.fen().split()[:4])
    puzzle_id = f"m{config.mate_in}-" + hashlib.sha1(key.encode()).hexdigest()[:12]
    meta = {"seed": seed, "game": game, "ply": ply, "legal_moves": board.legal_moves.count(), **extra}
    return Puzzle(puzzle_id=puzzle_id, fen=board.fen(), solution=solution, source="generated",
                  mate_in=config.mate_in, themes=(f"mateIn{config.mate_in}",), last_move=last_san, meta=meta)


def generate_puzzles(n: int, mate_in: int = 1, seed: int = 0, max_games: int | None = None, cache: bool = True,
                     **knobs: object) -> list[Puzzle]:
    """`n` distinct puzzles (by position), at most one per game, deterministic in `seed`.
    Raises when `max_games` (default 200 * n) games yield too few.

    Generated once per (arguments, generator code) and kept under the whalekit cache
    (`$WHALEKIT_CACHE/chess-puzzles/`): the puzzles are a pure function of their
    arguments, and mate-in-1 puzzles under a legal-move cap (the cpu preset's) take minutes
    per run to find. A cache file that does not read back is made again."""
    if not cache:
        return _generate(n, mate_in, seed, max_games, **knobs)
    inputs = json.dumps({"n": n, "mate_in": mate_in, "seed": seed, "max_games": max_games, "knobs": knobs},
                        sort_keys=True, default=str)
    code = b"".join(Path(module).read_bytes() for module in (__file__, inspect.getfile(Puzzle)))
    key = hashlib.sha256(inputs.encode() + b"\0" + code).hexdigest()[:20]
    path = cache_dir() / "chess-puzzles" / f"{key}.json"
    if path.exists():
        try:
            return [Puzzle(**{**p, "solution": tuple(p["solution"]), "themes": tuple(p["themes"])})
                    for p in json.loads(path.read_text(encoding="utf-8"))]
        except (ValueError, TypeError, KeyError):
            pass  # damaged or of another layout: made again below
    puzzles = _generate(n, mate_in, seed, max_games, **knobs)
    atomic_write(path, json.dumps([dataclasses.asdict(p) for p in puzzles]))
    return puzzles


def _generate(n: int, mate_in: int, seed: int, max_games: int | None, **knobs: object) -> list[Puzzle]:
    config = GeneratorConfig(mate_in=mate_in, **knobs)  # type: ignore[arg-type]
    budget = max_games if max_games is not None else 200 * max(n, 1)
    puzzles: list[Puzzle] = []
    seen: set[str] = set()
    for game in range(budget):
        if len(puzzles) >= n:
            break
        board = _play(random.Random(f"{seed}:{mate_in}:{game}"), config)
        if not board.is_checkmate():
            continue
        # Walk back over the mating side's positions; the first that qualifies is the puzzle.
        # Playing a whole game and looking back is ~10x cheaper than testing every ply.
        for back in range(2 * config.mate_in - 1, 2 * config.mate_in - 1 + 2 * _LOOK_BACK, 2):
            if back >= board.ply() - config.min_plies:
                break
            position = board.copy()
            for _ in range(back):
                position.pop()
            puzzle = _puzzle_at(position, config, seed, game, position.ply())
            if puzzle is not None:
                if puzzle.position_key not in seen:
                    seen.add(puzzle.position_key)
                    puzzles.append(puzzle)
                break
    if len(puzzles) < n:
        raise RuntimeError(f"generated only {len(puzzles)} of {n} mate-in-{mate_in} puzzles in {budget} games; "
                           f"loosen the knobs ({config})")
    return puzzles
