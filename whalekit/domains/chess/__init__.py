"""The chess-puzzle domain: play the winning move(s) of a mate puzzle.

Puzzles come from the seeded generator (mate in 1 and 2, no download) or from a Lichess
puzzle CSV. As in the authors' runner, a puzzle is played one solver move at a time
through the `move` environment tool against the scripted replies (environment.py); the
verdict is read from those steps (the first that ends the puzzle decides: the stored
move or, as on Lichess, any checkmate). Nothing a harness sees marks check or mate
(`notation="san_suffixes"` restores the authors' SAN with '+'/'#'). The behaviour flags
split failures into format, legality and choice, the bottlenecks a harness can move.
Constructor defaults (generated mate-in-1 only) are the provisional CPU preset for
SmolLM2-135M; bench/calibrate_chess.py measures it and records the numbers.

    domain = get_domain("chess")
    splits = domain.load_splits(n_train=64, n_search=32, n_test=64, seed=0)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from whalekit.domains.base import Domain, Splits, Toolbox, Verdict, split_disjoint
from whalekit.domains.chess.data import Puzzle, PuzzleDataError, load_lichess_csv
from whalekit.domains.chess.environment import check_notation, move_steps, verdict_from_steps
from whalekit.domains.chess.generator import generate_puzzles
from whalekit.domains.chess.tools import TOOLS_DESCRIPTION, chess_toolbox
from whalekit.domains.chess.verifier import verify_answer
from whalekit.types import Task, Trajectory

__all__ = ["ChessDomain", "Puzzle", "PuzzleDataError", "generate_puzzles", "load_lichess_csv", "verify_answer"]


class ChessDomain(Domain):
    name = "chess"
    tools_description = TOOLS_DESCRIPTION
    failure_modes = ("no_answer", "format_invalid", "illegal_move", "wrong_move", "incomplete_line")
    proposer_prototyping = False  # meta_harness_chess_puzzle.py: Read/Glob/Grep/Write/Edit, no shell

    def __init__(self, mate_in_2_fraction: float = 0.0, min_mating_moves: int = 1,
                 max_legal_moves: int | None = None, guidance: float = 0.2, notation: str = "plain"):
        if not 0.0 <= mate_in_2_fraction <= 1.0:
            raise ValueError(f"mate_in_2_fraction must lie in [0, 1], got {mate_in_2_fraction}")
        self.mate_in_2_fraction = mate_in_2_fraction  # share of generated puzzles that are mates in 2
        self.min_mating_moves = min_mating_moves  # mate-in-1 puzzles need at least this many mating moves
        self.max_legal_moves = max_legal_moves  # skip positions with more legal moves (None: no cap)
        self.guidance = guidance  # generator's preference for checking moves in its random games
        # SAN as shown to harnesses: "plain" (no '+'/'#': no oracle) or "san_suffixes" (the authors' observation)
        self.notation = check_notation(notation)

    def generate(self, n: int, seed: int) -> list[Puzzle]:
        """`n` generated puzzles in the domain's mix, deterministic in `seed`."""
        n_two = round(n * self.mate_in_2_fraction)
        knobs: dict[str, Any] = {"guidance": self.guidance, "max_legal_moves": self.max_legal_moves}
        puzzles = generate_puzzles(n - n_two, mate_in=1, seed=seed, min_mating_moves=self.min_mating_moves, **knobs)
        if n_two:
            puzzles += generate_puzzles(n_two, mate_in=2, seed=seed, **knobs)
        return puzzles

    def load_splits(self, n_train: int = 64, n_search: int = 32, n_test: int = 64, seed: int = 0,
                    source: str = "generated", path: str | Path | None = None, themes: list[str] | None = None,
                    min_rating: int | None = None, max_rating: int | None = None,
                    on_error: str = "skip", **_: Any) -> Splits:
        """Disjoint train/search/test tasks. source="generated" (default) or "lichess" with
        `path` to a puzzle CSV, filtered by `themes` and rating; bad CSV rows are skipped
        with a warning naming file and line (on_error="raise" stops instead)."""
        sizes = (n_train, n_search, n_test)
        if source == "generated":
            puzzles = self.generate(sum(sizes), seed)
            where = f"generated puzzles (seed {seed})"
        elif source == "lichess":
            if path is None:
                raise ValueError("source='lichess' needs path= to a Lichess puzzle CSV")
            puzzles = load_lichess_csv(path, themes=themes, min_rating=min_rating, max_rating=max_rating,
                                       on_error=on_error)
            where = str(path)
        else:
            raise ValueError(f"unknown chess source {source!r}; use 'generated' or 'lichess'")
        train, search, test = split_disjoint(puzzles, lambda p: p.position_key, sizes, seed, where)
        return Splits(*([p.to_task(self.name, self.notation) for p in part] for part in (train, search, test)))

    def toolbox(self) -> Toolbox:
        return chess_toolbox(self.notation)

    def verify(self, task: Task, answer: str | None) -> Verdict:
        """Grade a whole line given as one answer (a harness that never calls `move`)."""
        reference = task.reference if isinstance(task.reference, dict) else {}
        return verify_answer(str(reference.get("fen", "")), list(reference.get("solution", [])), answer)

    def verify_trajectory(self, task: Task, trajectory: Trajectory) -> Verdict:
        """The `move` tool's records decide; without any, the final answer is graded."""
        reference = task.reference if isinstance(task.reference, dict) else {}
        solver_moves = (len(reference.get("solution", [])) + 1) // 2
        verdict = verdict_from_steps(move_steps(trajectory), solver_moves)
        if verdict is not None:
            return verdict
        verdict = self.verify(task, trajectory.final_answer)
        if trajectory.final_answer is None and trajectory.turns:  # the model spoke, nothing usable came of it
            verdict.details["reason"] = "format_invalid"
        return verdict

    def behaviour(self, trajectory: Trajectory, task: Task, verdict: Verdict) -> dict[str, Any]:
        flags = super().behaviour(trajectory, task, verdict)
        details = verdict.details
        flags.update({
            "format_valid": bool(details.get("format_valid", False)),
            "move_legal": bool(details.get("move_legal", False)),
            "move_correct": bool(verdict.correct),
            "reason": str(details.get("reason", "")),
            "incomplete_line": details.get("reason") == "incomplete_line",
            "solver_moves_correct": int(details.get("solver_moves_correct", 0)),
            "tool_calls": sum(len(t.tool_calls) for t in trajectory.turns),
            "illegal_attempts": int(details.get("illegal_attempts", 0)),
            "unreadable_attempts": int(details.get("unreadable_attempts", 0)),
        })
        return flags

    def failure_mode(self, trajectory: Trajectory) -> str | None:
        if trajectory.correct:
            return None
        flags = trajectory.flags
        reason = flags.get("reason")
        if reason in self.failure_modes:
            return reason
        if trajectory.final_answer is None:
            return "no_answer"
        if not flags.get("format_valid", False):
            return "format_invalid"
        if not flags.get("move_legal", False):
            return "illegal_move"
        return "incomplete_line" if flags.get("incomplete_line") else "wrong_move"
