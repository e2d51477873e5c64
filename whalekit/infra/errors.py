"""The one kind of data error: a file that cannot be read as what it should be, named
as `path:line: reason` (1-based line) so an editor or a terminal jumps straight to it.
Each domain's loader raises a subclass of it (`MathDataError`, `PuzzleDataError`,
searchqa's `DataFormatError`), so one `except DataError` catches them all.

    raise DataError.at(path, 3, "invalid JSON (Expecting value)")   # "data/x.jsonl:3: invalid JSON (...)"
"""

from __future__ import annotations

from pathlib import Path


class DataError(ValueError):
    """A malformed data or record file; the message starts with `path:line:`."""

    @classmethod
    def at(cls, path: str | Path, line: int | None, reason: str) -> DataError:
        """The error for `reason` at `line` of `path` (no line: the file as a whole)."""
        return cls(f"{path}:{line}: {reason}" if line is not None else f"{path}: {reason}")


__all__ = ["DataError"]
