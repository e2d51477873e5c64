"""Reading a move the way a lenient human arbiter would, and no more leniently.

A small model writes "Qh7#", "qh7", "QH7+", "h5h7", "H5-H7" or "1... Qh7#" for the
same move; all of these are the move. Anything that is not move notation at all is a
*format* failure, and notation that names no legal move is an *illegal* move: the two
are different bottlenecks, so they raise different errors. Parsing is delegated to
python-chess (`Board.parse_san`, `Board.parse_uci`); this module only normalises
spelling before handing the text over.

    move = parse_move(chess.Board(fen), "qh7+")   # -> chess.Move.from_uci("h5h7")
    tokens = split_moves("1. Qh5 Kg8 2. Qh7#")    # -> ["Qh5", "Kg8", "Qh7#"]
"""

from __future__ import annotations

import re

import chess

# One move in SAN (with optional long-SAN origin square and suffixes) or UCI, any case.
_SAN = r"(?:[KQRBNP]?[A-H]?[1-8]?[X:]?[A-H][1-8](?:=?[QRBN])?)"
_UCI = r"(?:[A-H][1-8]-?[A-H][1-8](?:=?[QRBN])?)"
_CASTLE = r"(?:[O0]-[O0](?:-[O0])?)"
_SUFFIX = r"(?:[+#]{0,2}(?:E\.?P\.?)?[!?]{0,2})"
MOVE_PATTERN = re.compile(rf"(?:{_CASTLE}|{_UCI}|{_SAN}|(?:[KQRBN]-?[A-H][1-8])){_SUFFIX}", re.IGNORECASE)
# A move number such as "1." or "12..." that may precede a move.
_MOVE_NUMBER = re.compile(r"^\d+\.+")
_SEPARATORS = re.compile(r"[\s,;]+")


class MoveFormatError(ValueError):
    """The text is not move notation at all (a format failure)."""


class IllegalMoveError(ValueError):
    """The text is move notation but names no legal move in the position."""


def normalise(text: str) -> str:
    """Strip whitespace, a leading move number, trailing punctuation and annotations."""
    token = text.strip().strip("\"'`*().[]{}")
    token = _MOVE_NUMBER.sub("", token).strip()
    return token.rstrip(".")


def is_move_notation(text: str) -> bool:
    return bool(MOVE_PATTERN.fullmatch(normalise(text)))


def _variants(token: str) -> list[str]:
    """Spellings of one token to try as SAN, most literal first."""
    bare = re.sub(r"(?i)e\.?p\.?$", "", token.rstrip("!?")).rstrip("+#!?")
    bare = bare.replace(":", "x").replace("X", "x")
    if re.fullmatch(r"(?i)[o0]-[o0](-[o0])?", bare):
        return ["O-O-O" if bare.count("-") == 2 else "O-O"]
    lower = bare.lower()
    lower = re.sub(r"=?([qrbn])$", lambda m: "=" + m.group(1).upper(), lower) if re.search(r"[1-8]=?[qrbn]$", lower) \
        else lower
    if lower.startswith("p") and len(lower) > 2:
        lower = lower[1:]
    out = [bare, lower]
    if lower[:1] in "kqrbn":
        out.append(lower[0].upper() + lower[1:])
    return list(dict.fromkeys(out))


def parse_move(board: chess.Board, text: str) -> chess.Move:
    """The legal move `text` names in `board`; MoveFormatError or IllegalMoveError otherwise."""
    token = normalise(text)
    if not MOVE_PATTERN.fullmatch(token):
        raise MoveFormatError(f"not a chess move: {text!r}")
    compact = re.sub(r"[-=+#!?]", "", token).lower()
    if re.fullmatch(r"[a-h][1-8][a-h][1-8][qrbn]?", compact):
        try:
            return board.parse_uci(compact)
        except ValueError:
            pass  # e.g. "b1c3" is UCI, but "bc3"-like tokens fall through to SAN below
    for variant in _variants(token):
        try:
            return board.parse_san(variant)
        except ValueError:
            continue
    raise IllegalMoveError(f"{text!r} is not a legal move in {board.fen()}")


def split_moves(text: str) -> list[str]:
    """Cut a line such as "1. Qh5 Kg8 2. Qh7#" into move tokens, dropping move numbers.
    Tokens that are not moves are kept, so a caller can tell the answer was malformed."""
    tokens = []
    for raw in _SEPARATORS.split(text.strip()):
        token = normalise(raw)
        if token and not re.fullmatch(r"\d+\.*|\.+", token):
            tokens.append(token)
    return tokens


def find_moves(text: str) -> list[str]:
    """Every substring of free text that looks like a move, in order (for lenient harnesses)."""
    return [m.group(0) for m in re.finditer(rf"(?<![\w]){MOVE_PATTERN.pattern}(?![\w])", text, re.IGNORECASE)]


def move_to_san(board: chess.Board, move: chess.Move) -> str:
    return board.san(move)


def side_name(board: chess.Board) -> str:
    return "white" if board.turn == chess.WHITE else "black"
