"""Drawing a chess position from its FEN, for harness code that cannot import python-chess.

Display only: these functions read the piece placement and the side to move and never
decide whether a move is legal, good, a check or a mate (that would be an engine, which
the authors' rules forbid in a harness). Standard library only.

    ascii_board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1").splitlines()[0]   # '8 . . . . . . k .'
    piece_lists(fen)   # 'White: Kg1, Rd1, f2, g2, h2\\nBlack: Kg8, f7, g7, h7'
"""

from __future__ import annotations

FILES = "abcdefgh"
PIECE_ORDER = "KQRBNP"  # king first, pawns last, as a player would list them
_UNICODE = dict(zip("KQRBNPkqrbnp", "♔♕♖♗♘♙♚♛♜♝♞♟"))


def squares(fen: str) -> dict[str, str]:
    """Square name -> piece letter (uppercase White), from the FEN's placement field."""
    placement = fen.split()[0]
    ranks = placement.split("/")
    if len(ranks) != 8:
        raise ValueError(f"not a FEN placement: {placement!r}")
    out: dict[str, str] = {}
    for row, text in enumerate(ranks):
        file = 0
        for char in text:
            if char.isdigit():
                file += int(char)
            elif char.upper() in PIECE_ORDER and file < 8:
                out[f"{FILES[file]}{8 - row}"] = char
                file += 1
            else:
                raise ValueError(f"bad FEN rank {text!r}")
        if file != 8:
            raise ValueError(f"FEN rank {text!r} does not cover eight files")
    return out


def side_to_move(fen: str) -> str:
    parts = fen.split()
    return "black" if len(parts) > 1 and parts[1] == "b" else "white"


def ascii_board(fen: str, unicode: bool = False, flip: bool = False) -> str:
    """8x8 diagram, ranks 8..1 (1..8 when `flip`), labelled; '.' is an empty square."""
    board = squares(fen)
    ranks = range(1, 9) if flip else range(8, 0, -1)
    files = FILES[::-1] if flip else FILES
    rows = []
    for rank in ranks:
        cells = []
        for file in files:
            piece = board.get(f"{file}{rank}", ".")
            cells.append(_UNICODE.get(piece, piece) if unicode else piece)
        rows.append(f"{rank} " + " ".join(cells))
    return "\n".join(rows + ["  " + " ".join(files)])


def piece_lists(fen: str) -> str:
    """Each side's pieces by square: 'White: Kg1, Qd1, e4' (pawns without a letter)."""
    board = squares(fen)
    lines = []
    for label, white in (("White", True), ("Black", False)):
        names = []
        for letter in PIECE_ORDER:
            for square in sorted(board, key=lambda s: (s[1], s[0])):
                piece = board[square]
                if piece.upper() == letter and piece.isupper() == white:
                    names.append(("" if letter == "P" else letter) + square)
        lines.append(f"{label}: {', '.join(names)}")
    return "\n".join(lines)
