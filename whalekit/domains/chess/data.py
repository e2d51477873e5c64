"""Chess puzzles as records, the Lichess puzzle-CSV loader, and puzzle -> Task.

The Lichess open puzzle database (CC0) stores each puzzle as the position *before* the
opponent's last move plus the full line in UCI: Moves[0] is the opponent's setup move,
and the solver plays Moves[1], Moves[3], ...; the other moves are scripted replies. We
apply the setup move once here, so a `Puzzle` holds the position the solver faces and
the solver's line. Every row is checked with python-chess; a bad row is an error that
names the file and its 1-based line, or (with `on_error="skip"`) a warning and a skip.

    puzzles = load_lichess_csv("lichess_db_puzzle.csv", themes=["mateIn1"], max_rating=1500)
    tasks = [p.to_task() for p in puzzles]
"""

from __future__ import annotations

import csv
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chess

from whalekit.domains.chess.environment import check_notation, observation
from whalekit.infra.errors import DataError
from whalekit.types import Task

LICHESS_COLUMNS = ("PuzzleId", "FEN", "Moves", "Rating", "RatingDeviation", "Popularity", "NbPlays", "Themes",
                   "GameUrl", "OpeningTags")
_MATE_THEME = re.compile(r"mateIn(\d+)")


class PuzzleDataError(DataError):
    """A malformed puzzle file or row; the message names the file and the 1-based line."""


@dataclass(frozen=True)
class Puzzle:
    puzzle_id: str
    fen: str  # the position the solver faces (after the opponent's setup move)
    solution: tuple[str, ...]  # UCI; solver's moves at even indices, scripted replies at odd ones
    source: str  # "lichess" or "generated"
    mate_in: int | None = None  # length of the forced mate, when the puzzle is one
    rating: int | None = None
    themes: tuple[str, ...] = ()
    last_move: str | None = None  # the opponent's move that led here, in SAN, when known
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def position_key(self) -> str:
        """The position without move counters: what makes two puzzles the same puzzle."""
        return " ".join(self.fen.split()[:4])

    @property
    def subset(self) -> str:
        kind = f"mate_in_{self.mate_in}" if self.mate_in else "tactic"
        return kind if self.source == "generated" else f"{self.source}_{kind}"

    def to_task(self, domain: str = "chess", notation: str = "plain") -> Task:
        """The task a harness sees: position, side to move, the opponent's last move, the
        number of moves to find and the environment's first observation (board, legal
        moves); the solution goes to `reference` only. In the default notation no SAN
        carries the '+'/'#' that would mark check or mate."""
        board = chess.Board(self.fen)
        last_move = self.last_move
        if last_move and check_notation(notation) == "plain":
            last_move = last_move.rstrip("+#")
        inputs = {
            "fen": self.fen,
            "side_to_move": "white" if board.turn == chess.WHITE else "black",
            "moves_to_find": (len(self.solution) + 1) // 2,
            "mate_in": self.mate_in,
            "last_move": last_move,
            "observation": observation(board, notation=notation),
        }
        meta = {"source": self.source, "rating": self.rating, "themes": list(self.themes), **self.meta}
        return Task(id=f"{self.source}-{self.puzzle_id}", domain=domain, inputs=inputs,
                    reference={"fen": self.fen, "solution": list(self.solution)}, subset=self.subset, meta=meta)


def mate_length(themes: Iterable[str], solver_moves: int) -> int | None:
    themes = list(themes)
    for theme in themes:
        match = _MATE_THEME.fullmatch(theme)
        if match:
            return int(match.group(1))
    return solver_moves if "mate" in themes else None


def parse_lichess_row(row: dict[str, str], where: str) -> Puzzle:
    """One CSV row -> Puzzle, checking the FEN and that every move of the line is legal."""
    missing = [c for c in ("PuzzleId", "FEN", "Moves") if not (row.get(c) or "").strip()]
    if missing:
        raise PuzzleDataError(f"{where}: empty {', '.join(missing)}")
    try:
        board = chess.Board(row["FEN"].strip())
    except ValueError as exc:
        raise PuzzleDataError(f"{where}: invalid FEN {row['FEN']!r}: {exc}") from None
    if not board.is_valid():
        raise PuzzleDataError(f"{where}: impossible position in FEN {row['FEN']!r} ({board.status()!r})")
    fen_before = board.fen()
    moves = row["Moves"].split()
    if len(moves) < 2 or len(moves) % 2:
        raise PuzzleDataError(f"{where}: Moves must hold a setup move plus solver/reply pairs, got {len(moves)} moves")
    for i, uci in enumerate(moves):
        try:
            move = chess.Move.from_uci(uci)
        except ValueError:
            raise PuzzleDataError(f"{where}: move {i + 1} {uci!r} is not UCI notation") from None
        if move not in board.legal_moves:
            raise PuzzleDataError(f"{where}: move {i + 1} {uci!r} is illegal in {board.fen()}")
        board.push(move)
    solver_fen = chess.Board(fen_before)
    setup_san = solver_fen.san(chess.Move.from_uci(moves[0]))
    solver_fen.push(chess.Move.from_uci(moves[0]))
    rating = _optional_int(row.get("Rating"), "Rating", where)
    themes = tuple((row.get("Themes") or "").split())
    return Puzzle(puzzle_id=row["PuzzleId"].strip(), fen=solver_fen.fen(), solution=tuple(moves[1:]),
                  source="lichess", mate_in=mate_length(themes, len(moves) // 2), rating=rating, themes=themes,
                  last_move=setup_san, meta={"fen_before": fen_before, "game_url": row.get("GameUrl") or "",
                                            "file": where.rsplit(":", 1)[0], "row": where.rsplit(":", 1)[1]})


def _optional_int(value: str | None, column: str, where: str) -> int | None:
    if value is None or not value.strip():
        return None
    try:
        return int(value)
    except ValueError:
        raise PuzzleDataError(f"{where}: {column} must be an integer, got {value!r}") from None


def load_lichess_csv(path: str | Path, themes: Iterable[str] | None = None, min_rating: int | None = None,
                     max_rating: int | None = None, limit: int | None = None,
                     on_error: str = "raise") -> list[Puzzle]:
    """Puzzles from a Lichess puzzle CSV (the official 10 columns; extra columns are
    ignored). `themes` keeps puzzles carrying any of them; ratings filter inclusively.
    on_error="raise" stops at the first bad row; "skip" warns and goes on."""
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    path = Path(path)
    wanted = set(themes or ())
    puzzles: list[Puzzle] = []
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        absent = [c for c in ("PuzzleId", "FEN", "Moves", "Rating", "Themes") if c not in header]
        if absent:
            raise PuzzleDataError(f"{path}:1: not a Lichess puzzle CSV, missing columns {', '.join(absent)}")
        for row in reader:
            where = f"{path}:{reader.line_num}"
            try:
                if None in row or any(row.get(c) is None for c in ("FEN", "Moves")):
                    raise PuzzleDataError(f"{where}: expected {len(header)} columns")
                puzzle = parse_lichess_row(row, where)
            except PuzzleDataError as exc:
                if on_error == "raise":
                    raise
                warnings.warn(f"skipping bad puzzle row: {exc}", stacklevel=2)
                continue
            if wanted and not wanted & set(puzzle.themes):
                continue
            if min_rating is not None and (puzzle.rating is None or puzzle.rating < min_rating):
                continue
            if max_rating is not None and (puzzle.rating is None or puzzle.rating > max_rating):
                continue
            puzzles.append(puzzle)
            if limit is not None and len(puzzles) >= limit:
                break
    return puzzles
